"""``spyrejax.filter_jit``: equinox's ``filter_jit`` on the Spyre emulator.

As with ``eqx.filter_jit``, every array leaf of the function and its arguments (JAX
and NumPy arrays and scalars, and here :class:`SpyreArray` values) is traced, and
every other leaf (Python bools, ints and floats, functions, strings...) is static:
hashed and compared by equality, so a new value compiles anew. A whole ``eqx.Module``
(an ``eqx.nn.MLP`` with its activation functions) or an optax state passes as it is.
Static leaves are compared with their types too (``1`` and ``1.0`` compile apart,
where ``eqx.filter_jit`` would share one trace between them).

Array leaves of the output come back as SpyreArrays; every other leaf is returned as
the function gave it when it was traced. ``trace``/``lower``/``compile`` stage it as
``jax.jit``'s do, and :func:`staged` is what ``explain`` and ``export`` plan: a
``filter_jit`` function, an equinox module, or a function given modules all with these
semantics (a module's Python bool and float fields static).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

from .._errors import LayoutError, SpyreTypeError
from .._jax import fun_signature
from ..primitives._array import SpyreArray
from ._arguments import Call, check_formats, leaf_aval
from ._jit import Compiled, Lowered, SpyreJit, Traced

__all__ = ["FilterJit", "filter_jit", "is_array", "staged"]

_DONATE = ("none", "all", "all-except-first", "warn", "warn-except-first")


def is_array(x: Any) -> bool:
    """Whether ``filter_jit`` traces a leaf: a JAX or NumPy array or scalar, a SpyreArray."""
    return isinstance(x, SpyreArray) or eqx.is_array(x)


def _traced(x: Any) -> bool:
    """An array leaf, or a ``jax.ShapeDtypeStruct`` standing for one (``explain``)."""
    return is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def _partition(tree: Any) -> tuple[tuple[Any, ...], tuple[tuple[Any, ...], Any]]:
    """Array leaves (None elsewhere), and the rest: ``(type, value)`` leaves and treedef."""
    leaves, treedef = jax.tree.flatten(tree)
    dynamic = tuple(x if _traced(x) else None for x in leaves)
    static = tuple(None if _traced(x) else (type(x), x) for x in leaves)
    return dynamic, (static, treedef)


def _combine(dynamic: tuple[Any, ...], static: tuple[tuple[Any, ...], Any]) -> Any:
    leaves, treedef = static
    return jax.tree.unflatten(
        treedef, [d if s is None else s[1] for d, s in zip(dynamic, leaves, strict=True)]
    )


class _Static:
    """A pytree node with no leaves holding a value: the output's static part."""

    def __init__(self, value: Any) -> None:
        self.value = value


jax.tree_util.register_pytree_node(_Static, lambda s: ((), s.value), lambda v, _: _Static(v))

_SELF = "<the function itself>"  # its static part, when the function is a leaf


class FilterJit:
    """A function compiled for the Spyre emulator with ``eqx.filter_jit``'s semantics.

    Attributes:
        fun: the function.
        donate: the ``donate`` mode it was given (accepted; buffers are not reused).
    """

    def __init__(
        self,
        fun: Callable[..., Any],
        donate: str = "none",
        fallback: str = "warn",
        emulate: str | None = None,
    ) -> None:
        if not callable(fun):
            raise SpyreTypeError(f"spyrejax.filter_jit needs a callable, got {fun!r}")
        if donate not in _DONATE:
            raise ValueError(f"filter_jit: donate must be one of {_DONATE}, got {donate!r}")
        self.fun = fun
        self.donate = donate
        self._signature = fun_signature(fun)
        fun_dynamic, fun_static = _partition(fun)
        leaves = jax.tree.leaves(fun)
        # A plain function is a leaf: the cache is keyed (weakly) by it, not held in it.
        self._fun_static = _SELF if len(leaves) == 1 and leaves[0] is fun else fun_static
        self._fun_dynamic = fun_dynamic
        self._jit = SpyreJit(
            self._call,
            static_argnums=1,
            fallback=fallback,
            emulate=emulate,
            cache_key=(fun, ("filter_jit", fallback, emulate)),
            user_fun=fun,
            leaf_paths=self._leaf_paths,
        )
        self.fallback, self.emulate = fallback, self._jit.emulate
        functools.update_wrapper(self, fun, updated=())

    def _call(self, dynamic: Any, static: Any) -> Any:
        fun_dynamic, args_dynamic = dynamic
        fun = self.fun if static[0] is _SELF else _combine(fun_dynamic, static[0])
        args, kwargs = _combine(args_dynamic, static[1])
        out = fun(*args, **kwargs)
        out_dynamic, out_static = _partition(out)
        return out_dynamic, _Static(out_static)

    def _leaf_paths(self, inner: Call) -> list[str]:
        """The user's path of each of the inner call's leaves (``args[0].lin.weight``).

        The inner call is ``((function leaves, argument leaves), static key)``; each
        tree is flattened once (a path per leaf from one flattening, not one each).
        """
        flat, _ = jax.tree_util.tree_flatten_with_path(inner.dynamic())
        whose = [(keys[2].idx, keys[3].idx) for keys, _ in flat]
        fun_paths: list[str] = []
        if any(which == 0 for which, _ in whose):
            name = type(self.fun).__name__
            fun_flat, _ = jax.tree_util.tree_flatten_with_path(self.fun)
            fun_paths = [f"{name}{jax.tree_util.keystr(path)}" for path, _ in fun_flat]
        _, treedef = inner.args[1][1]
        arg_paths = [p for p, _ in _paths(jax.tree.unflatten(treedef, range(treedef.num_leaves)))]
        return [fun_paths[j] if which == 0 else arg_paths[j] for which, j in whose]

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._signature is None:
            return args, kwargs
        bound = self._signature.bind(*args, **kwargs)
        return bound.args, bound.kwargs

    def _split(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """``(call, dynamic part, static key)``: what the inner SpyreJit is called with."""
        call = self._bind(args, kwargs)
        dynamic, static = _partition(call)
        static_key = (self._fun_static, static)
        try:
            hash(static_key)
        except TypeError:
            raise _unhashable(call) from None
        return call, (self._fun_dynamic, dynamic), static_key

    def _staging(self, stage: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        call, dynamic, static_key = self._split(args, kwargs)
        try:
            return stage(dynamic, static_key)
        except LayoutError:
            _check_dtypes(call)  # name the argument in the user's terms
            raise

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out_dynamic, out_static = self._staging(self._jit, args, kwargs)
        return _combine(out_dynamic, out_static.value)

    def _call_lowering(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The inner call's lowering and moved leaves (what ``explain`` and ``export`` read)."""
        return self._staging(lambda *a: self._jit._call_lowering(a, {}), args, kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> FilterTraced:
        """Trace for these arguments, as ``eqx.filter_jit``'s ``jax.jit`` would."""
        return FilterTraced(self._staging(self._jit.trace, args, kwargs), self)

    def lower(self, *args: Any, **kwargs: Any) -> FilterLowered:
        """Trace and plan for these arguments: ``self.trace(...).lower()``."""
        return self.trace(*args, **kwargs).lower()

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """As a method: the instance is the first argument (traced where it has arrays)."""
        return self if instance is None else functools.partial(self, instance)


class _FilterStage:
    """A stage of the inner :class:`SpyreJit`, read through (its jaxpr, plan, types)."""

    def __init__(self, inner: Any, jitted: FilterJit) -> None:
        self._inner = inner
        self._jitted = jitted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class FilterTraced(_FilterStage):
    """A :class:`Traced` of a ``filter_jit`` function; its ``lower()`` plans it."""

    _inner: Traced

    def lower(self) -> FilterLowered:
        """Plan the layouts: a :class:`FilterLowered`."""
        return FilterLowered(self._inner.lower(), self._jitted)


class FilterLowered(_FilterStage):
    """A :class:`Lowered` of a ``filter_jit`` function (``as_text``, ``plan``...)."""

    _inner: Lowered

    def compile(self) -> FilterCompiled:
        """Compile ahead of time: called with the same arguments as the function."""
        return FilterCompiled(self._inner.compile(), self._jitted)


class FilterCompiled(_FilterStage):
    """A :class:`Compiled` of a ``filter_jit`` function, called as the function is."""

    _inner: Compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _, dynamic, _ = self._jitted._split(args, kwargs)
        out_dynamic, out_static = self._inner(dynamic)
        return _combine(out_dynamic, out_static.value)


def staged(fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpyreJit | FilterJit:
    """What ``explain`` and ``export`` plan for ``fun`` on these arguments.

    A :class:`SpyreJit` or :class:`FilterJit` as it is; an equinox module, or a function
    given equinox modules among its arguments, as :func:`filter_jit` runs it (a
    module's Python bool and float fields static, as ``eqx.filter_jit`` has them);
    any other function as :func:`spyrejax.jit` runs it.
    """
    if isinstance(fun, SpyreJit | FilterJit):
        return fun
    modules = jax.tree.leaves((args, kwargs), is_leaf=lambda x: isinstance(x, eqx.Module))
    if isinstance(fun, eqx.Module) or any(isinstance(x, eqx.Module) for x in modules):
        return FilterJit(fun)
    return SpyreJit(fun)


def _paths(call: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` of every leaf of ``(args, kwargs)``: ``args[0].layers[1].weight``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(call)
    out = []
    for keys, leaf in flat:
        head = "args" if keys[0].idx == 0 else "kwargs"
        out.append((head + jax.tree_util.keystr(keys[1:]), leaf))
    return out


def _unhashable(call: Any) -> SpyreTypeError:
    for path, leaf in _paths(call):
        if not is_array(leaf):
            try:
                hash(leaf)
            except TypeError as err:
                return SpyreTypeError(
                    f"spyrejax.filter_jit: {path} is a {type(leaf).__name__}, which is not "
                    f"an array, so it is static, and static leaves must be hashable ({err}); "
                    "pass it as an array or a hashable value"
                )
    return SpyreTypeError(
        "spyrejax.filter_jit: the arguments' pytree structure is not hashable: a pytree "
        "node's static data must be"
    )


def _check_dtypes(call: Any) -> None:
    """Raise naming the first array leaf with no Spyre data format, if there is one."""
    arrays = [(path, leaf) for path, leaf in _paths(call) if is_array(leaf)]
    avals = [leaf_aval(leaf) for _, leaf in arrays]
    check_formats(avals, lambda i: arrays[i][0], "spyrejax.filter_jit")


def filter_jit(
    fun: Callable[..., Any] | None = None,
    *,
    donate: str = "none",
    fallback: str = "warn",
    emulate: str | None = None,
) -> Any:
    """Compile a function for the Spyre emulator, tracing its array leaves only.

    ``eqx.filter_jit``'s semantics: every JAX or NumPy array (or scalar) and every
    :class:`SpyreArray` among the function's and its arguments' leaves is traced;
    everything else is static, hashed and compared by equality (and type), so a new
    value compiles anew. Non-array output leaves are returned as they are. Lowerings
    are cached per function object and static parts, as :func:`spyrejax.jit`'s are.

    Args:
        fun: the function (may be an ``eqx.Module``; its array leaves are traced too).
            Without it, ``filter_jit(donate=...)`` is a decorator.
        donate: as ``eqx.filter_jit``'s (``"none"``, ``"all"``,
            ``"all-except-first"``, ``"warn"``, ``"warn-except-first"``); accepted and
            validated, but the emulator does not reuse the donated buffers.
        fallback: as :func:`spyrejax.jit`'s (``"warn"`` or ``"error"``).
        emulate: as :func:`spyrejax.jit`'s (None, or ``"cores"``: ops run per core).

    Returns:
        A :class:`FilterJit`, called like ``fun``; its ``trace``, ``lower`` and
        ``lower(...).compile()`` stage it, and ``spyrejax.explain`` and
        ``spyrejax.export`` take it.

    Raises:
        SpyreTypeError: (when called) naming a static leaf that is not hashable.
        LayoutError: (when called) naming an array leaf whose dtype has no Spyre format.

    Example:
        >>> import equinox as eqx
        >>> import jax
        >>> model = eqx.nn.MLP(4, 2, 8, 2, key=jax.random.key(0))
        >>> out = filter_jit(lambda m, x: jax.vmap(m)(x))
    """
    if fun is None:
        return functools.partial(filter_jit, donate=donate, fallback=fallback, emulate=emulate)
    return FilterJit(fun, donate, fallback, emulate)
