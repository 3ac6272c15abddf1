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

As with ``jax.jit``, the stages can be taken one by one: ``trace`` gives a
:class:`Traced` (the plain JAX jaxpr), its ``lower()`` a :class:`Lowered` (the plan and
the Spyre-level jaxpr), and that one's ``compile()`` a :class:`Compiled`, called with
the same arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .._errors import SpyreTypeError
from .._jax import ClosedJaxpr
from ..layout._dtypes import host_dtype
from ..primitives import abstract, image, to_host, wrap
from ..primitives._array import SpyreArray, SpyreType
from ._graph import Graph, build_graph
from ._interpret import Interpreter
from ._outer_ad import vjp_function, with_own_derivatives
from ._planner import Plan, host_input_type, plan_graph

__all__ = ["Compiled", "Lowered", "Lowering", "SpyreJit", "Traced", "jit"]


@dataclass
class Lowering:
    """Everything spyrejax.jit built for one input signature (cached per signature).

    Attributes:
        jaxpr: the user's function traced with plain JAX.
        graph: its flattened graph.
        plan: the planner's decisions.
        interpreter: runs the plan with Spyre primitives.
        compiled: ``jax.jit`` of the interpreter (Spyre arrays in and out).
        in_tree: the input pytree structure (``(args, kwargs)``, static arguments left out).
        in_avals: the flat inputs' abstract values (Spyre types, or host shapes and dtypes).
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
    in_tree: Any
    in_avals: tuple[Any, ...]
    out_tree: Any
    on_images: Callable[..., Any]
    out_types: list[SpyreType]

    def run_on_images(
        self, leaves: Sequence[Any], run: Callable[..., Any] | None = None
    ) -> list[SpyreArray]:
        """Run on concrete leaves: images in, images out, wrapped back into SpyreArrays.

        ``run`` replaces :attr:`on_images` (an ahead-of-time compiled executable of it).
        """
        lo = [x.image if isinstance(x, SpyreArray) else x for x in leaves]
        outs = (run or self.on_images)(*lo)
        return [SpyreArray(o, t) for o, t in zip(outs, self.out_types, strict=True)]

    def call(self, leaves: Sequence[Any]) -> Any:
        """The outputs for flat inputs, in the output structure.

        Traced, a function with its own derivative rules (``custom_jvp``,
        ``custom_vjp``, ``stop_gradient``) runs under a ``jax.custom_vjp`` whose backward
        pass is ``spyrejax.jit`` of ``jax.vjp`` of the plain function (see
        ``_outer_ad``): ``jax.grad`` may be outside any other transformation
        (``jax.grad(jax.vmap(sj.jit(f)))``), so every traced call keeps the rules.
        """
        if self.graph.derivative_rules and any(isinstance(x, jax.core.Tracer) for x in leaves):
            outs = with_own_derivatives(
                self._flat_call, self.backward, leaves, self.in_avals, self.jaxpr.out_avals
            )
        else:
            outs = self._flat_call(leaves)
        return jax.tree.unflatten(self.out_tree, outs)

    def _flat_call(self, leaves: Sequence[Any]) -> list[Any]:
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self.compiled(*leaves)
        return self.run_on_images(leaves)

    @functools.cached_property
    def _vjp(self) -> SpyreJit:
        return SpyreJit(vjp_function(self.jaxpr))

    def backward(self, primals: list[Any], cotangents: list[Any]) -> Any:
        """``spyrejax.jit`` of the plain function's VJP, with host results."""
        lowering, leaves = self._vjp._lowering(primals, cotangents)
        return jax.tree.unflatten(lowering.out_tree, lowering.on_host(*leaves))

    @functools.cached_property
    def on_host(self) -> Callable[..., list[jax.Array]]:
        """``jax.jit`` of the interpreter with its results moved to the host.

        Under ``jax.vmap`` a host result is batched as any array, where a Spyre
        result must have the batch dim outermost on the device.
        """
        return jax.jit(lambda *leaves: [to_host(o) for o in self.interpreter.run(*leaves)])

    @functools.cached_property
    def spyre_jaxpr(self) -> ClosedJaxpr:
        """The interpreter traced on the input types: a layout on every value."""
        return jax.make_jaxpr(self.interpreter.run)(*(abstract(a) for a in self.in_avals))


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


@dataclass(frozen=True)
class _Signature:
    """What one compiled computation is specialised to: the key of the cache."""

    static_pos: tuple[tuple[int, Any], ...]
    static_kw: tuple[tuple[str, Any], ...]
    in_tree: Any
    in_avals: tuple[Any, ...]


# --- stages, as in jax.stages: Traced -> Lowered -> Compiled ----------------------------


class Traced:
    """A function traced for one input signature, ready to lower (``jax.stages.Traced``).

    Attributes:
        jaxpr: the function traced with plain JAX (a ``ClosedJaxpr``), before layouts.
        fun_name: the function's name.
        in_tree: the pytree structure of ``(args, kwargs)``, static arguments left out.
        out_tree: the output pytree structure.
    """

    def __init__(
        self,
        jaxpr: ClosedJaxpr,
        fun_name: str,
        signature: _Signature,
        out_tree: Any,
        lower: Callable[[], Lowering],
    ) -> None:
        self.jaxpr = jaxpr
        self.fun_name = fun_name
        self.in_tree = signature.in_tree
        self.out_tree = out_tree
        self._in_avals = signature.in_avals
        self._lower = lower

    @property
    def in_avals(self) -> Any:
        """The inputs' abstract values in the ``(args, kwargs)`` structure."""
        return jax.tree.unflatten(self.in_tree, self._in_avals)

    @property
    def out_avals(self) -> Any:
        """The outputs' abstract values (shapes and dtypes) in the output structure."""
        return jax.tree.unflatten(self.out_tree, self.jaxpr.out_avals)

    def lower(self) -> Lowered:
        """Plan the layouts: a :class:`Lowered` (cached per signature)."""
        return Lowered(self._lower())


class Lowered:
    """A function planned for the Spyre emulator for one input signature.

    The counterpart of ``jax.stages.Lowered``: :meth:`as_text` is the Spyre-level
    jaxpr (a layout on every value) and :meth:`compile` compiles it ahead of time.

    Attributes:
        plan: the planner's decisions (``plan.cost``: elements its restickifies and
            copies move).
        graph: the function's flattened graph, as planned.
        out_types: the outputs' Spyre types, flat.
        in_tree: the pytree structure of ``(args, kwargs)``, static arguments left out.
        out_tree: the output pytree structure.
    """

    def __init__(self, lowering: Lowering) -> None:
        self._lowering = lowering
        self.plan = lowering.plan
        self.graph = lowering.graph
        self.out_types = lowering.out_types
        self.in_tree = lowering.in_tree
        self.out_tree = lowering.out_tree

    @property
    def in_avals(self) -> Any:
        """The inputs' abstract values in the ``(args, kwargs)`` structure.

        Spyre types for Spyre arrays; shapes and dtypes for host arrays, which are
        moved to the device with default layouts.
        """
        return jax.tree.unflatten(self.in_tree, self._lowering.in_avals)

    @property
    def out_info(self) -> Any:
        """The outputs' Spyre types in the output structure."""
        return jax.tree.unflatten(self.out_tree, self.out_types)

    def as_text(self) -> str:
        """The Spyre-level jaxpr: every Spyre primitive, the layout of every value."""
        return str(self._lowering.spyre_jaxpr)

    def compile(self) -> Compiled:
        """Compile ahead of time: a :class:`Compiled`, called with the same arguments."""
        lo = [
            jax.ShapeDtypeStruct(a.layout.device_size, a.dtype) if isinstance(a, SpyreType) else a
            for a in self._lowering.in_avals
        ]
        return Compiled(self._lowering, self._lowering.on_images.lower(*lo).compile())


class Compiled:
    """A function compiled for one input signature (``jax.stages.Compiled``).

    Called with the arguments it was lowered for, static arguments left out (as with
    ``jax.jit(f).lower(...).compile()``), on concrete arrays only: under ``jax.jit``,
    ``jax.grad`` or ``jax.vmap``, call the :func:`spyrejax.jit` function itself.

    Attributes:
        out_types: the outputs' Spyre types, flat.
        in_tree: the pytree structure of ``(args, kwargs)`` it takes.
        out_tree: the output pytree structure.
    """

    def __init__(self, lowering: Lowering, executable: Any) -> None:
        self._lowering = lowering
        self._executable = executable
        self.out_types = lowering.out_types
        self.in_tree = lowering.in_tree
        self.out_tree = lowering.out_tree

    def as_text(self) -> str:
        """The XLA program it runs on the device images (``jax.stages.Compiled.as_text``)."""
        return self._executable.as_text()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree.flatten((list(args), kwargs))
        if tree != self.in_tree:
            raise SpyreTypeError(
                f"Compiled: called with arguments {tree}, but compiled for {self.in_tree} "
                "(static arguments are left out)"
            )
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            raise SpyreTypeError(
                "Compiled: cannot run under a JAX transformation (got a tracer); call the "
                "spyrejax.jit function itself under jax.jit, jax.grad or jax.vmap"
            )
        want = self._lowering.in_avals
        for i, (x, aval) in enumerate(zip(leaves, want, strict=True)):
            got = _leaf_aval(x)
            if got != aval:
                raise SpyreTypeError(
                    f"Compiled: argument leaf {i} is {_describe(got)}, but it was compiled "
                    f"for {_describe(aval)}"
                )
        outs = self._lowering.run_on_images(leaves, self._executable)
        return jax.tree.unflatten(self.out_tree, outs)


def _describe(aval: Any) -> str:
    if isinstance(aval, SpyreType):
        return aval.str_short()
    return f"a host array {np.dtype(aval.dtype).name}{list(aval.shape)}"


# --- the jitted function ------------------------------------------------------------------


class SpyreJit:
    """A function compiled for the Spyre emulator (see :func:`jit`).

    Call it, or stage it explicitly as ``jax.jit`` allows: ``trace(*args)`` gives a
    :class:`Traced`, ``lower(*args)`` (``trace(*args).lower()``) a :class:`Lowered`,
    and its ``compile()`` a :class:`Compiled`.
    """

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
        self._cache: dict[_Signature, Lowering] = {}
        # Name and docstring only: ``updated=()`` keeps ``fun.__dict__`` (``jax.grad``
        # sets a ``fun`` attribute there) from overwriting this object's own fields.
        functools.update_wrapper(self, fun, updated=())

    def _signature(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Signature, list[Any]]:
        """The signature of a call, and its flat dynamic inputs."""
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
        avals = tuple(_leaf_aval(x) for x in leaves)
        return _Signature(static_pos, static_kw, treedef, avals), leaves

    def _cached(self, sig: _Signature) -> Lowering | None:
        try:
            return self._cache.get(sig)
        except TypeError as err:
            raise SpyreTypeError(
                f"spyrejax.jit: static arguments must be hashable ({err})"
            ) from None

    def _lowering(self, *args: Any, **kwargs: Any) -> tuple[Lowering, list[Any]]:
        """The lowering for these arguments (cached per signature) and the flat inputs."""
        sig, leaves = self._signature(args, kwargs)
        lowering = self._cached(sig)
        if lowering is None:
            lowering = self._lower(sig, *self._trace(sig))
        return lowering, leaves

    def _trace(self, sig: _Signature) -> tuple[ClosedJaxpr, Any]:
        """The function traced with plain JAX on the signature's shapes, and its out tree."""

        def flat_fun(*leaves: Any) -> Any:
            dyn_args, dyn_kwargs = jax.tree.unflatten(sig.in_tree, leaves)
            full = list(dyn_args)
            for i, v in sorted(sig.static_pos):
                full.insert(i, v)
            return self.fun(*full, **dyn_kwargs, **dict(sig.static_kw))

        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in sig.in_avals]
        closed, out_shape = jax.make_jaxpr(flat_fun, return_shape=True)(*structs)
        return closed, jax.tree.structure(out_shape)

    def _lower(self, sig: _Signature, closed: ClosedJaxpr, out_tree: Any) -> Lowering:
        """Plan a traced signature and jit its interpreter (once per signature)."""
        lowering = self._cached(sig)
        if lowering is not None:
            return lowering
        graph = build_graph(closed)
        types = {v: _input_type(a) for v, a in zip(graph.inputs, sig.in_avals, strict=True)}
        plan = plan_graph(graph, types)
        interpreter = Interpreter(graph, plan)
        in_types = [a if isinstance(a, SpyreType) else None for a in sig.in_avals]

        def run_images(*lo: Any) -> list[jax.Array]:
            hi = [x if t is None else wrap(x, t) for x, t in zip(lo, in_types, strict=True)]
            return [image(o) for o in interpreter.run(*hi)]

        lowering = Lowering(
            closed,
            graph,
            plan,
            interpreter,
            jax.jit(interpreter.run),
            sig.in_tree,
            sig.in_avals,
            out_tree,
            jax.jit(run_images),
            _out_types(plan, graph),
        )
        self._cache[sig] = lowering
        return lowering

    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        """Trace for these arguments, as ``jax.jit(f).trace``: a :class:`Traced`.

        Its ``jaxpr`` is the function in plain JAX; its ``lower()`` plans the layouts.
        """
        sig, _ = self._signature(args, kwargs)
        lowering = self._cached(sig)
        if lowering is not None:
            closed, out_tree = lowering.jaxpr, lowering.out_tree
        else:
            closed, out_tree = self._trace(sig)
        name = getattr(self.fun, "__name__", type(self.fun).__name__)
        lower = functools.partial(self._lower, sig, closed, out_tree)
        return Traced(closed, name, sig, out_tree, lower)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace and plan for these arguments, as ``jax.jit(f).lower``: a :class:`Lowered`.

        Short for ``self.trace(*args, **kwargs).lower()``. The planned computation is
        cached per signature and shared with calls.
        """
        return self.trace(*args, **kwargs).lower()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lowering, leaves = self._lowering(*args, **kwargs)
        return lowering.call(leaves)


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
        A :class:`SpyreJit`: a callable taking pytrees of host arrays (moved to the
        device with default layouts) and :class:`SpyreArray` values, and returning
        SpyreArrays in the function's output structure. Its ``trace``, ``lower`` and
        ``lower(...).compile()`` stage it ahead of time, as ``jax.jit``'s do.

    Raises:
        SpyreUnsupportedError: (when called) for a JAX primitive spyrejax cannot
            lower, naming it and the source line.

    Example:
        >>> import jax.numpy as jnp
        >>> f = jit(lambda a, b: jnp.tanh(a @ b).sum(0))
    """
    return SpyreJit(fun, static_argnums, static_argnames)
