"""``spyrejax.jit``: run a plain JAX function on the Spyre emulator.

Per input signature (pytree structure, shapes, dtypes, layouts, static arguments, JAX's
trace context) it traces the function to a jaxpr, flattens it into a graph, plans a
stick for every value, and jit-compiles the interpreter that runs the plan with Spyre
primitives. The compiled computation is reused on later calls with the same signature,
by every ``spyrejax.jit`` of the same function (``_cache``). Arguments are read as
``jax.jit`` reads them (``_arguments``).

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

import contextlib
import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

import jax

from .._errors import SpyreTypeError
from .._jax import ClosedJaxpr, name_like, trace_context
from ..lowering._graph import Graph, build_graph
from ..lowering._keys import key_data_outputs, unwrap_keys, wrap_keys
from ..lowering._planner import FALLBACKS, Plan, host_input_type, plan_graph
from ..lowering._regions import host_regions
from ..lowering.program._cores import core_check
from ..lowering.program._interpret import Interpreter, check_emulate
from ..primitives import image, wrap
from ..primitives._array import PadFill, SpyreType
from . import _x64
from ._arguments import (
    ArgNums,
    Call,
    HostAval,
    check_formats,
    donations,
    in_user_terms,
    leaf_avals,
    split_call,
)
from ._cache import MAX_SIGNATURES, Lru, signature_cache
from ._dispatch import (
    HostArraysMoved,
    as_called,
    fast_key,
    host_arrays_moved,
    host_arrays_to_move,
)
from ._gc import gc_paused
from ._lowering import Lowering, Signature
from ._place import place_arguments
from ._stages import Compiled, Lowered, Traced

__all__ = ["Compiled", "Lowered", "Lowering", "SpyreJit", "Traced", "jit"]


def _input_type(aval: Any) -> SpyreType:
    """The type an input arrives in: its own, or a host array's default layout."""
    if isinstance(aval, SpyreType):
        return aval
    return host_input_type(tuple(aval.shape), aval.dtype)


def _out_types(plan: Plan, graph: Graph) -> list[SpyreType]:
    """The planned output types (a scalar result is a fresh 0-d array).

    A result whose padding the plan knows to be zero is returned without that promise
    (the weaker one holds): it then has the type a host argument of its shape gets, so
    a program fed its own results meets the signature it was compiled for.
    """
    return [
        host_input_type((), o.dtype) if t is None else _unpromised(t)
        for o, t in zip(graph.outputs, plan.outputs, strict=True)
    ]


def _as_type(x: Any, t: SpyreType) -> Any:
    """Result ``x`` with type ``t``: its own, or the same image without a padding promise."""
    return x if jax.typeof(x) == t else wrap(image(x), t)


def _unpromised(t: SpyreType) -> SpyreType:
    """``t`` without a promise about its padding (the same image)."""
    return t if t.pad is PadFill.POISON or t.is_view else replace(t, pad=PadFill.POISON)


# --- the jitted function ------------------------------------------------------------------


class SpyreJit:
    """A function compiled for the Spyre emulator (see :func:`jit`).

    Call it, or stage it explicitly as ``jax.jit`` allows: ``trace(*args)`` gives a
    :class:`Traced`, ``lower(*args)`` (``trace(*args).lower()``) a :class:`Lowered`,
    and its ``compile()`` a :class:`Compiled`.

    Its lowerings are shared with every other SpyreJit of the same ``cache_key``: by
    default ``(fun, its static and donated arguments)``; a wrapper (``filter_jit``)
    passes the user's function.
    """

    def __init__(
        self,
        fun: Callable[..., Any],
        static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Sequence[str] | None = None,
        fallback: str = "warn",
        emulate: str | None = None,
        donate_argnums: int | Sequence[int] | None = None,
        donate_argnames: str | Sequence[str] | None = None,
        *,
        cache_key: tuple[Callable[..., Any], Hashable] | None = None,
        user_fun: Any = None,
        leaf_paths: Callable[[Call], Sequence[str]] | None = None,
    ) -> None:
        if not callable(fun):
            raise SpyreTypeError(f"spyrejax.jit needs a callable, got {fun!r}")
        if fallback not in FALLBACKS:
            raise SpyreTypeError(
                f"spyrejax.jit: fallback={fallback!r}; expected one of {', '.join(FALLBACKS)}"
            )
        self.fallback = fallback
        self.fun = fun
        # Errors name the user's function and argument paths (a wrapper gives its own).
        self.user_fun = fun if user_fun is None else user_fun
        self._leaf_paths = leaf_paths or Call.paths
        self.argnums = ArgNums.resolve(
            fun, static_argnums, static_argnames, donate_argnums, donate_argnames
        )
        self.static_argnums = self.argnums.static_argnums
        self.static_argnames = self.argnums.static_argnames
        self.donate_argnums = self.argnums.donate_argnums
        self.donate_argnames = self.argnums.donate_argnames
        self.emulate = check_emulate(emulate)  # None, or "cores": ops run per core
        # Shared by every SpyreJit of this function object (as jax.jit shares its traces).
        owner, config = cache_key or (fun, (self.argnums, fallback, self.emulate))
        self._cache: Lru[Signature, Lowering] = signature_cache(owner, config)
        # x64 mode: results' dtypes per signature, bounded as the signatures are.
        self._x64_dtypes: Lru[Hashable, tuple[Any, ...]] = Lru(MAX_SIGNATURES)
        # Name and docstring only: ``updated=()`` keeps ``fun.__dict__`` (``jax.grad``
        # sets a ``fun`` attribute there) from overwriting this object's own fields.
        functools.update_wrapper(self, fun, updated=())

    def _signature(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], narrow: bool = False
    ) -> tuple[Signature, list[Any], Call]:
        """The signature of a call, its flat dynamic inputs and the call itself.

        With ``narrow`` (x64 mode), 64-bit leaves are first held in 32 bits (``_x64``).
        """
        static, call = split_call(self.argnums, args, kwargs)
        leaves, treedef = jax.tree.flatten(call.dynamic())
        leaves, keys = unwrap_keys(leaves)  # PRNG keys travel as their key data
        if narrow:
            leaves = _x64.narrow_leaves(leaves, call.path)
        avals = leaf_avals(leaves, call)
        sig = Signature(static, treedef, avals, trace_context(), keys, core_check())
        return sig, leaves, call

    def _cached(self, sig: Signature) -> Lowering | None:
        try:
            return self._cache.get(sig)
        except TypeError as err:  # static arguments are checked: a pytree node's aux data
            raise SpyreTypeError(
                f"spyrejax.jit: the arguments' pytree structure is not hashable ({err}): "
                "a pytree node's static data must be hashable"
            ) from None

    def _lowering(self, *args: Any, **kwargs: Any) -> tuple[Lowering, list[Any]]:
        """The lowering for these arguments (cached per signature) and the flat inputs."""
        if _x64.active():
            lowering, leaves, _ = self._x64_lowering(args, kwargs, moved=None)
            return lowering, leaves
        sig, leaves, call = self._signature(args, kwargs)
        lowering = self._cached(sig)
        if lowering is None:
            lowering = self._lower(sig, *self._trace(sig, call))
        return lowering, leaves

    def _call_lowering(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Lowering, tuple[int, ...]]:
        """The lowering a concrete call with these arguments runs, and its moved leaves.

        Host arrays (or ``jax.ShapeDtypeStruct`` values standing for them) are planned
        in the default layouts of their shapes, as a call moves them first
        (:func:`_host_arrays`), without moving any data: ``explain`` and ``export``
        share the call's plan (and its fallback warnings, given once).
        """
        moved: list[int] = []
        if _x64.active():
            return self._x64_lowering(args, kwargs, moved=moved)[0], tuple(moved)
        sig, leaves, call = self._signature(args, kwargs)
        sig = as_called(sig, leaves, call, moved)
        lowering = self._cached(sig)
        if lowering is None:
            lowering = self._lower(sig, *self._trace(sig, call))
        return lowering, tuple(moved)

    def _x64_lowering(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], moved: list[int] | None
    ) -> tuple[Lowering, list[Any], tuple[Any, ...]]:
        """x64 mode: the 32-bit lowering, narrowed inputs and results' x64 dtypes (_x64).

        ``jax.jit``'s own x64 trace (once per signature) gives the results' dtypes and
        shows where the function computes float64. With ``moved``, the lowering of a
        call (the indices of its host arrays appended there), its leaves unmoved.
        """
        sig64, _, call64 = self._signature(args, kwargs)
        with _x64.off():
            sig, leaves, call = self._signature(args, kwargs, narrow=True)
            if moved is None:
                sig, leaves, _ = host_arrays_moved(sig, leaves, call)
            else:
                sig = as_called(sig, leaves, call, moved)
            lowering = self._cached(sig)
            if lowering is None:
                lowering = self._lower(sig, *self._trace(sig, call))
        # The Spyre arrays' x64 dtypes are no part of type equality: key on them too.
        key = (sig64, tuple(getattr(a, "x64_dtype", None) for a in sig64.in_avals))
        wide = self._x64_dtypes.get(key)
        if wide is None:
            wide = _x64.out_dtypes(self._make_jaxpr(sig64, call64, x64=True)[0])
            self._x64_dtypes.put(key, wide)
        return lowering, leaves, wide

    def _trace(self, sig: Signature, call: Call) -> tuple[ClosedJaxpr, Any]:
        """The function traced with plain JAX on the signature's shapes, and its out tree.

        Raises:
            LayoutError: naming an argument whose dtype has no Spyre data format.
        """
        check_formats(sig.in_avals, call.path)
        return self._make_jaxpr(sig, call)

    def _make_jaxpr(self, sig: Signature, call: Call, x64: bool = False) -> tuple[ClosedJaxpr, Any]:
        """``jax.make_jaxpr`` on the signature's shapes (``x64``: Spyre arrays' x64 dtypes)."""
        positional = sorted((k, v) for k, _, v in sig.static if isinstance(k, int))
        keywords = {k: v for k, _, v in sig.static if isinstance(k, str)}

        def flat_fun(*leaves: Any) -> Any:
            dyn_args, dyn_kwargs = jax.tree.unflatten(sig.in_tree, wrap_keys(leaves, sig.keys))
            full = list(dyn_args)
            for i, v in positional:
                full.insert(i, v)
            return key_data_outputs(self.fun(*full, **dyn_kwargs, **keywords))

        structs = [
            a.struct()
            if isinstance(a, HostAval)
            else jax.ShapeDtypeStruct(a.shape, (x64 and a.x64_dtype) or a.dtype)
            for a in sig.in_avals
        ]
        in_user_terms(flat_fun, self.user_fun, self._leaf_paths(call))
        closed, out_shape = jax.make_jaxpr(flat_fun, return_shape=True)(*structs)
        return closed, jax.tree.structure(out_shape)

    @gc_paused
    def _lower(self, sig: Signature, closed: ClosedJaxpr, out_tree: Any) -> Lowering:
        """Plan a traced signature and jit its interpreter (once per signature)."""
        lowering = self._cached(sig)
        if lowering is not None:
            return lowering
        graph = host_regions(build_graph(closed))
        types = {v: _input_type(a) for v, a in zip(graph.inputs, sig.in_avals, strict=True)}
        donated = donations(self.argnums, sig, graph.inputs)
        plan = plan_graph(graph, types, self.fallback, donated, default_results=True)
        interpreter = Interpreter(graph, plan, self.emulate, check=sig.check)
        in_types = [a if isinstance(a, SpyreType) else None for a in sig.in_avals]
        out_types = _out_types(plan, graph)

        def run(*args: Any) -> list[Any]:
            outs = interpreter.run(*args)
            return [_as_type(o, t) for o, t in zip(outs, out_types, strict=True)]

        def run_images(*lo: Any) -> list[jax.Array]:
            hi = [x if t is None else wrap(x, t) for x, t in zip(lo, in_types, strict=True)]
            return [image(o) for o in run(*hi)]

        name_like(run, closed)
        name_like(run_images, closed)

        lowering = Lowering(
            closed,
            graph,
            plan,
            interpreter,
            jax.jit(run),
            sig.in_tree,
            sig.in_avals,
            out_tree,
            jax.jit(run_images),
            out_types,
            SpyreJit,
        )
        self._cache.put(sig, lowering)
        return lowering

    @gc_paused
    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        """Trace for these arguments, as ``jax.jit(f).trace``: a :class:`Traced`.

        Its ``jaxpr`` is the function in plain JAX; its ``lower()`` plans the layouts.
        """
        x64 = _x64.active()  # traced and planned with x64 off, as calls are (see _x64)
        with _x64.off() if x64 else contextlib.nullcontext():
            sig, _, call = self._signature(args, kwargs, narrow=x64)
            lowering = self._cached(sig)
            if lowering is not None:
                closed, out_tree = lowering.jaxpr, lowering.out_tree
            else:
                closed, out_tree = self._trace(sig, call)
        name = getattr(self.fun, "__name__", type(self.fun).__name__)

        def lower() -> Lowering:
            with _x64.off() if x64 else contextlib.nullcontext():
                return self._lower(sig, closed, out_tree)

        return Traced(closed, name, sig.in_tree, sig.in_avals, out_tree, lower)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace and plan for these arguments, as ``jax.jit(f).lower``: a :class:`Lowered`.

        Short for ``self.trace(*args, **kwargs).lower()``. The planned computation is
        cached per signature and shared with calls.
        """
        return self.trace(*args, **kwargs).lower()

    def place(self, *args: Any) -> tuple[Any, ...]:
        """The arguments with each weight laid out as this function's products read it.

        An argument that only matrix products read, as the ``w`` of ``x @ w`` (a weight
        ``[..., k, n]``), comes back on the device in ``SpyreTensorLayout.row_major``
        with zero padding: the matrix XLA's dot reads in place. In the default layout,
        ``[T(n), k, S(n)]``, the product copies the whole weight on every call. The ``w``
        of ``h @ w.T`` comes back in its transpose's order, the ``W`` of ``W @ h`` (``h``
        computed: equinox's ``Linear`` under ``vmap``) row-major. Every
        float argument that max reductions read (a softmax's input; elementwise ops
        besides) comes back in its layout with ``-inf`` padding (``pad=-inf``), which
        the reductions read unmasked. Every
        other argument comes back as it is. Call it once, before the calls (a weight
        already placed is returned as it is; a relayout moves it through the host)::

            params, x = f.place(params, x)

        Args:
            *args: the function's positional arguments, as it is called with them.

        Returns:
            The arguments, in the same structure, weights placed.
        """
        return place_arguments(self, args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _x64.active():
            return self._x64_call(args, kwargs)
        fast = None if kwargs or self.static_argnums else fast_key(args)
        if fast is not None:
            key, leaves = fast
            try:
                lowering = self._cache.get(key)
            except TypeError:  # unhashable pytree aux data: the full path says so
                lowering, fast = None, None
            if lowering is not None:
                return lowering.call_concrete(leaves)
        return self._call(args, kwargs, fast)

    @gc_paused
    def _x64_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call in x64 mode: run with x64 off, results with ``jax.jit``'s dtypes."""
        lowering, leaves, wide = self._x64_lowering(args, kwargs, moved=None)
        with _x64.off():
            outs = lowering.call(leaves)
        flat = _x64.widen(lowering.out_tree.flatten_up_to(outs), wide)
        return jax.tree.unflatten(lowering.out_tree, flat)

    @gc_paused  # the first call traces, plans, lowers and compiles
    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any], fast: Any) -> Any:
        sig, leaves, call = self._signature(args, kwargs)
        sig, moved = host_arrays_to_move(sig, leaves, call)
        lowering = self._cached(sig)
        if lowering is None:
            lowering = self._lower(sig, *self._trace(sig, call))
        runner = HostArraysMoved(lowering, moved) if moved else None
        if fast is not None:
            self._cache.put(fast[0], runner or lowering)
        if runner is not None:  # concrete: host arrays are moved only then
            return runner.call_concrete(leaves)
        return lowering.call(leaves)


def jit(
    fun: Callable[..., Any],
    *,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    fallback: str = "warn",
    emulate: str | None = None,
) -> SpyreJit:
    """Compile a plain JAX function for the Spyre emulator.

    The function is written with ``jnp``, ``jax.nn``, ``lax`` or equinox as usual.
    spyrejax traces it, chooses a layout for every value (inserting restickifies only
    where the layout rules need them, at the least total cost it finds), rewrites each
    JAX primitive into Spyre primitives and runs the result under ``jax.jit``: one
    compiled computation per input signature (shapes, dtypes, layouts), reused later.
    The compiled function may itself be called under ``jax.jit``, ``jax.grad`` or
    ``jax.vmap``.

    Arguments are read as ``jax.jit`` reads them: NumPy arrays and Python scalars get
    its canonical dtypes (float64 is float32 with x64 off) and Python scalars its weak
    types. Lowerings are cached per function object, as ``jax.jit``'s traces are: a new
    ``jit(f)`` of the same ``f`` reuses them.

    Args:
        fun: the function; its array arguments may be pytrees.
        static_argnums: positional arguments that are static (hashable) values.
        static_argnames: keyword arguments that are static values. Either is filled in
            from the other with ``fun``'s signature and validated, as ``jax.jit`` does.
        donate_argnums: positional arguments the caller donates, as for ``jax.jit``;
            accepted and validated, but the emulator does not reuse their buffers.
        donate_argnames: keyword arguments the caller donates (likewise).
        fallback: what a primitive without a Spyre device rule does: ``"warn"`` runs it
            on the host (operands moved device -> host through the DMA, the result
            back in its default layout) with a :class:`SpyreFallbackWarning` once per
            primitive and source line, when the function is planned; ``"error"``
            raises :class:`SpyreUnsupportedError`. ``explain`` lists every fallback.
        emulate: None (default): each op runs as one whole-image kernel. ``"cores"``:
            each op the device model divides (elementwise, ``astype``, reductions,
            matmuls) runs as the cores would: every core's slice loaded from the DDR
            image by its descriptors into LX, the kernel on it, the result stored back
            (vectorised over cores), each op divided as ``explain`` shows it
            (``with_division`` hints included). Same bits as the default for ops that
            do not reassociate; sums and matmuls equal within rounding. Other ops
            (views, copies, restickifies, ``iota``, host fallbacks) run as by default.

    Returns:
        A :class:`SpyreJit`: a callable taking pytrees of host arrays (moved to the
        device with default layouts) and :class:`SpyreArray` values, and returning
        SpyreArrays in the function's output structure. Its ``trace``, ``lower`` and
        ``lower(...).compile()`` stage it ahead of time, as ``jax.jit``'s do.

    Raises:
        ValueError: as ``jax.jit``: a static or donated index out of range for ``fun``'s
            positional parameters, a name it does not take, an argument both static
            and donated.
        SpyreTypeError: for a ``fallback`` other than ``"warn"`` or ``"error"``.
        SpyreUnsupportedError: (when called) with ``fallback="error"``, for a JAX
            primitive spyrejax cannot lower, naming it and the source line.
        SpyreTypeError: (when called) naming an argument that is not an array and not
            static, or a static one that is not hashable.
        LayoutError: (when called) naming an argument whose dtype has no Spyre format.

    Example:
        >>> import jax.numpy as jnp
        >>> f = jit(lambda a, b: jnp.tanh(a @ b).sum(0))
    """
    return SpyreJit(
        fun,
        static_argnums,
        static_argnames,
        fallback,
        emulate,
        donate_argnums,
        donate_argnames,
    )
