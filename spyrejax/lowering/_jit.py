"""``spyrejax.jit``: run a plain JAX function on the Spyre emulator.

Per input signature (pytree structure, shapes, dtypes, layouts, static arguments) it
traces the function to a jaxpr, flattens it into a graph, plans a stick for every
value, and jit-compiles the interpreter that runs the plan with Spyre primitives. The
compiled computation is reused on later calls with the same signature.

Calls with concrete arguments run a second ``jax.jit`` of the same interpreter whose
inputs and outputs are device images, so they take JAX's C++ dispatch path (a call
with Spyre-typed arguments goes through hijax's Python path, about 150 us a call).
Traced arguments (under an outer ``jit``, ``grad`` or ``vmap``) use the Spyre-typed
one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .._array import SpyreArray, SpyreType
from .._dtypes import host_dtype
from .._errors import SpyreTypeError
from .._jax import ClosedJaxpr
from ..primitives import image, wrap
from ._graph import Graph, build_graph
from ._interpret import Interpreter
from ._planner import Plan, host_input_type, plan_graph

__all__ = ["Lowered", "SpyreJit", "jit"]


@dataclass
class Lowered:
    """Everything spyrejax.jit built for one input signature.

    Attributes:
        jaxpr: the user's function traced with plain JAX.
        graph: its flattened graph.
        plan: the planner's decisions.
        interpreter: runs the plan with Spyre primitives.
        compiled: ``jax.jit`` of the interpreter (Spyre arrays in and out).
        out_tree: the output pytree structure.
        on_images: ``jax.jit`` of the interpreter on device images (see
            :meth:`run_on_images`).
        out_types: the outputs' Spyre types, as planned.
    """

    jaxpr: ClosedJaxpr
    graph: Graph
    plan: Plan
    interpreter: Interpreter
    compiled: Callable[..., Any]
    out_tree: Any
    on_images: Callable[..., Any]
    out_types: list[SpyreType]

    def run_on_images(self, leaves: Sequence[Any]) -> list[SpyreArray]:
        """Run on concrete leaves: images in, images out, wrapped back into SpyreArrays."""
        lo = [x.image if isinstance(x, SpyreArray) else x for x in leaves]
        outs = self.on_images(*lo)
        return [SpyreArray(o, t) for o, t in zip(outs, self.out_types, strict=True)]


def _leaf_aval(x: Any) -> Any:
    """The abstract value a leaf is traced with: Spyre types keep their layout."""
    if isinstance(x, SpyreArray):
        return x.type
    if isinstance(x, jax.core.Tracer):  # under an outer jit, grad or vmap
        aval = jax.typeof(x)
        return aval if isinstance(aval, SpyreType) else jax.ShapeDtypeStruct(aval.shape, aval.dtype)
    if isinstance(x, jax.Array | np.ndarray | np.generic | int | float | bool):
        arr = x if hasattr(x, "dtype") else np.asarray(x, dtype=jax.numpy.asarray(x).dtype)
        return jax.ShapeDtypeStruct(np.shape(arr), host_dtype(arr.dtype))
    raise SpyreTypeError(
        f"spyrejax.jit: argument leaf {type(x).__name__} is not an array; mark it static "
        "(static_argnums/static_argnames)"
    )


def _input_type(aval: Any) -> SpyreType:
    """The type an input arrives in: its own, or a host array's default layout."""
    if isinstance(aval, SpyreType):
        return aval
    return host_input_type(tuple(aval.shape), aval.dtype)


def _out_types(plan: Plan, graph: Graph) -> list[SpyreType]:
    """The planned output types (a scalar result is a fresh 0-d array)."""
    return [
        host_input_type((), o.dtype) if t is None else t
        for o, t in zip(graph.outputs, plan.outputs, strict=True)
    ]


class SpyreJit:
    """A function compiled for the Spyre emulator (see :func:`jit`)."""

    def __init__(
        self,
        fun: Callable[..., Any],
        static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Sequence[str] | None = None,
    ) -> None:
        if not callable(fun):
            raise SpyreTypeError(f"spyrejax.jit needs a callable, got {fun!r}")
        self.fun = fun
        self.static_argnums = _as_tuple(static_argnums)
        self.static_argnames = _as_tuple(static_argnames)
        self._cache: dict[Any, Lowered] = {}
        # Name and docstring only: ``updated=()`` keeps ``fun.__dict__`` (``jax.grad``
        # sets a ``fun`` attribute there) from overwriting this object's own fields.
        functools.update_wrapper(self, fun, updated=())

    def _split(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        n = len(args)
        nums = tuple(i % n if n else i for i in self.static_argnums)
        for i in nums:
            if not 0 <= i < n:
                raise SpyreTypeError(
                    f"static_argnums {self.static_argnums} out of range for {n} args"
                )
        static_pos = tuple((i, args[i]) for i in nums)
        static_kw = tuple(sorted((k, v) for k, v in kwargs.items() if k in self.static_argnames))
        dyn_args = [a for i, a in enumerate(args) if i not in nums]
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        leaves, treedef = jax.tree.flatten((dyn_args, dyn_kwargs))
        return static_pos, static_kw, leaves, treedef

    def lower(self, *args: Any, **kwargs: Any) -> tuple[Lowered, list[Any]]:
        """The lowering for these arguments (cached per signature) and the flat inputs."""
        static_pos, static_kw, leaves, treedef = self._split(args, kwargs)
        avals = tuple(_leaf_aval(x) for x in leaves)
        key = (static_pos, static_kw, treedef, avals)
        try:
            lowered = self._cache.get(key)
        except TypeError as err:
            raise SpyreTypeError(
                f"spyrejax.jit: static arguments must be hashable ({err})"
            ) from None
        if lowered is None:
            lowered = self._build(static_pos, static_kw, treedef, avals)
            self._cache[key] = lowered
        return lowered, leaves

    def _build(
        self, static_pos: Any, static_kw: Any, treedef: Any, avals: tuple[Any, ...]
    ) -> Lowered:
        def flat_fun(*leaves: Any) -> Any:
            dyn_args, dyn_kwargs = jax.tree.unflatten(treedef, leaves)
            full = list(dyn_args)
            for i, v in sorted(static_pos):
                full.insert(i, v)
            return self.fun(*full, **dyn_kwargs, **dict(static_kw))

        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
        closed, out_shape = jax.make_jaxpr(flat_fun, return_shape=True)(*structs)
        out_tree = jax.tree.structure(out_shape)
        graph = build_graph(closed)
        types = {v: _input_type(a) for v, a in zip(graph.inputs, avals, strict=True)}
        plan = plan_graph(graph, types)
        interpreter = Interpreter(graph, plan)
        compiled = jax.jit(interpreter.run)
        out_types = _out_types(plan, graph)
        in_types = [a if isinstance(a, SpyreType) else None for a in avals]

        def run_images(*lo: Any) -> list[jax.Array]:
            hi = [x if t is None else wrap(x, t) for x, t in zip(lo, in_types, strict=True)]
            return [image(o) for o in interpreter.run(*hi)]

        return Lowered(
            closed, graph, plan, interpreter, compiled, out_tree, jax.jit(run_images), out_types
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lowered, leaves = self.lower(*args, **kwargs)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            outs = lowered.compiled(*leaves)
        else:
            outs = lowered.run_on_images(leaves)
        return jax.tree.unflatten(lowered.out_tree, outs)


def _as_tuple(x: Any) -> tuple[Any, ...]:
    if x is None:
        return ()
    if isinstance(x, int | str):
        return (x,)
    return tuple(x)


def jit(
    fun: Callable[..., Any],
    *,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
) -> SpyreJit:
    """Compile a plain JAX function for the Spyre emulator.

    The function is written with ``jnp``, ``jax.nn``, ``lax`` or equinox as usual.
    spyrejax traces it, chooses a layout for every value (inserting restickifies only
    where the layout rules need them, at the least total cost it finds), rewrites each
    JAX primitive into Spyre primitives and runs the result under ``jax.jit``: one
    compiled computation per input signature (shapes, dtypes, layouts), reused later.
    The compiled function may itself be called under ``jax.jit``, ``jax.grad`` or
    ``jax.vmap``.

    Args:
        fun: the function; its array arguments may be pytrees.
        static_argnums: positional arguments that are static (hashable) values.
        static_argnames: keyword arguments that are static values.

    Returns:
        A callable taking pytrees of host arrays (moved to the device with default
        layouts) and :class:`SpyreArray` values, and returning SpyreArrays in the
        function's output structure.

    Raises:
        SpyreUnsupportedError: (when called) for a JAX primitive spyrejax cannot
            lower, naming it and the source line.

    Example:
        >>> import jax.numpy as jnp
        >>> f = jit(lambda a, b: jnp.tanh(a @ b).sum(0))
    """
    return SpyreJit(fun, static_argnums, static_argnames)
