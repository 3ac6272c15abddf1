"""How ``spyrejax.jit`` reads a call's arguments: as ``jax.jit`` does.

- :class:`ArgNums`: ``static_argnums``/``static_argnames`` and ``donate_argnums``/
  ``donate_argnames``, filled in from each other with the function's signature and
  validated by ``jax.jit``'s own rules (an index out of range, a name the function does
  not take, a static argument also donated: the same ``ValueError``).
- :func:`split_call`: a call's static arguments (hashable, compared with their types as
  ``jax.jit`` does, so ``1`` and ``1.0`` differ) and its dynamic pytree.
- :func:`leaf_aval`: the abstract value ``jax.jit`` would trace a leaf with: canonical
  dtypes (with x64 off NumPy's float64 is float32, int64 int32), weak types for Python
  scalars, and the Spyre type of a :class:`SpyreArray`.

Errors name the argument's path in the call, ``args[1]['w']`` or ``kwargs['scale']``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding

from .._errors import LayoutError, SpyreTypeError
from .._jax import fun_signature, name_tracing, resolve_argnums
from ..layout._dtypes import host_dtype
from ..primitives._array import SpyreArray, SpyreType

__all__ = [
    "ArgNums",
    "Call",
    "HostAval",
    "check_formats",
    "donations",
    "in_user_terms",
    "leaf_aval",
    "split_call",
]


@dataclass(frozen=True)
class ArgNums:
    """Which arguments are static and which donated, resolved as ``jax.jit`` does.

    Attributes:
        static_argnums: static positional arguments (negative ones resolved where the
            function takes a fixed number of positional arguments).
        static_argnames: static keyword arguments (also those named by
            ``static_argnums``).
        donate_argnums: donated positional arguments.
        donate_argnames: donated keyword arguments.
        params: the names of the function's positional parameters (for error messages).
    """

    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    params: tuple[str, ...] = ()

    @classmethod
    def resolve(
        cls,
        fun: Callable[..., Any],
        static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Sequence[str] | None = None,
        donate_argnums: int | Sequence[int] | None = None,
        donate_argnames: str | Sequence[str] | None = None,
    ) -> ArgNums:
        """Fill in and validate the argument numbers and names for ``fun``.

        Raises:
            ValueError: as ``jax.jit`` does: an index out of range for the function's
                positional parameters, a name it does not take, a positional-only name,
                or an argument both static and donated.
        """
        sig = fun_signature(fun)
        donums, donames, stnums, stnames = resolve_argnums(
            fun, sig, donate_argnums, donate_argnames, static_argnums, static_argnames
        )
        positional = (
            ()
            if sig is None
            else tuple(
                name
                for name, p in sig.parameters.items()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            )
        )
        return cls(tuple(stnums), tuple(stnames), tuple(donums), tuple(donames), positional)


@dataclass(frozen=True)
class Call:
    """A call's arguments, split into static and dynamic ones.

    Attributes:
        args: the positional arguments.
        kwargs: the keyword arguments.
        positions: the index in ``args`` of each dynamic positional argument.
        static_names: the static keyword arguments.
        params: the function's positional parameter names (for error messages).
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    positions: tuple[int, ...]
    static_names: frozenset[str]
    params: tuple[str, ...]

    def dynamic(self) -> tuple[list[Any], dict[str, Any]]:
        """The dynamic arguments, ``(args, kwargs)``: the pytree whose leaves are traced."""
        dyn_kwargs = {k: v for k, v in self.kwargs.items() if k not in self.static_names}
        return [self.args[i] for i in self.positions], dyn_kwargs

    def path(self, leaf: int) -> str:
        """The path of a dynamic leaf in the call: ``args[1]['w']`` or ``kwargs['s']``."""
        return self.paths()[leaf]

    def paths(self) -> list[str]:
        """The path of every dynamic leaf, in flat order (one flattening for them all)."""
        flat, _ = jax.tree_util.tree_flatten_with_path(self.dynamic())
        return [self._path(keys) for keys, _ in flat]

    def _path(self, keys: tuple[Any, ...]) -> str:
        head, rest = keys[0].idx, keys[2:]
        if head == 0:
            pos = self.positions[keys[1].idx]
            name = f" (parameter {self.params[pos]!r})" if pos < len(self.params) else ""
            return f"args[{pos}]{jax.tree_util.keystr(rest)}{name}"
        return f"kwargs[{keys[1].key!r}]{jax.tree_util.keystr(rest)}"


def split_call(
    argnums: ArgNums, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], Call]:
    """A call's static key and its :class:`Call` (the dynamic arguments).

    Positional argument ``i`` is static if ``i`` is in ``static_argnums`` (a negative
    index counts from the end of this call's arguments; one past them is ignored, as
    ``jax.jit`` does), a keyword argument if its name is in ``static_argnames``.

    Raises:
        SpyreTypeError: naming a static argument that is not hashable.
    """
    n = len(args)
    nums = {i % n if i < 0 and n else i for i in argnums.static_argnums}
    static: list[tuple[Any, ...]] = []
    for i in sorted(nums):
        if 0 <= i < n:
            static.append((i, type(args[i]), _hashable(args[i], f"args[{i}]")))
    names = frozenset(k for k in kwargs if k in argnums.static_argnames)
    for k in sorted(names):
        static.append((k, type(kwargs[k]), _hashable(kwargs[k], f"kwargs[{k!r}]")))
    positions = tuple(i for i in range(n) if i not in nums)
    return tuple(static), Call(args, kwargs, positions, names, argnums.params)


def donations[T](argnums: ArgNums, sig: Any, leaves: Sequence[T]) -> frozenset[T]:
    """The flat leaves of a call's donated arguments (their buffers may be reused).

    Args:
        argnums: the resolved static and donated arguments.
        sig: the call's signature: its ``static`` key (:func:`split_call`: which
            positions are static) and ``in_tree``, the dynamic arguments' structure.
        leaves: one item per flat dynamic leaf (the graph's inputs).
    """
    if not (argnums.donate_argnums or argnums.donate_argnames):
        return frozenset()
    args, kwargs = jax.tree.unflatten(sig.in_tree, range(sig.in_tree.num_leaves))
    fixed = {k for k, *_ in sig.static if isinstance(k, int)}
    positions = [i for i in range(len(args) + len(fixed)) if i not in fixed]
    out: set[int] = set()
    for pos, sub in zip(positions, args, strict=False):
        if pos in argnums.donate_argnums:
            out.update(jax.tree.leaves(sub))
    for name, sub in kwargs.items():
        if name in argnums.donate_argnames:
            out.update(jax.tree.leaves(sub))
    return frozenset(leaves[i] for i in out)


def _hashable(value: Any, where: str) -> Any:
    try:
        hash(value)
    except TypeError as err:
        raise SpyreTypeError(
            f"spyrejax.jit: static argument {where} is a {type(value).__name__}, which is "
            f"not hashable ({err}); static arguments are compared by hash and equality, so "
            "pass a hashable value (a tuple for a list, a frozenset for a set) or make it "
            "a dynamic (array) argument"
        ) from None
    return value


class HostAval(NamedTuple):
    """A host leaf's abstract value: what ``jax.jit`` would trace it with.

    A ``NamedTuple``: cheap to build and hash on every call (a ``ShapeDtypeStruct`` is
    built for the stages' ``in_avals`` only). ``sharding`` is the type's sharding of
    an array on a mesh with Explicit axes (``jax.make_mesh``'s default), which is part
    of its type for ``jax.jit`` (a ``shard_map`` checks its in specs against it);
    None for others.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    weak_type: bool = False
    sharding: Any = None

    def struct(self) -> jax.ShapeDtypeStruct:
        """As a ``jax.ShapeDtypeStruct``."""
        return jax.ShapeDtypeStruct(
            self.shape, self.dtype, weak_type=self.weak_type, sharding=self.sharding
        )


def explicit_sharding(aval: Any) -> Any:
    """An abstract value's sharding if its mesh has Explicit axes, else None."""
    sharding = getattr(aval, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    return sharding if getattr(mesh, "explicit_axes", ()) else None


def leaf_aval(x: Any) -> SpyreType | HostAval:
    """The abstract value a dynamic leaf is traced with (as ``jax.jit`` would).

    Spyre arrays (and tracers of them) keep their Spyre type; other leaves get
    ``jax.jit``'s canonical dtype and weak type.

    Raises:
        TypeError: (from ``jax.typeof``) if the leaf is not an array.
    """
    if isinstance(x, SpyreArray):
        return x.type
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        explicit = explicit_sharding(x.aval) if isinstance(x.sharding, NamedSharding) else None
        return HostAval(x.shape, x.dtype, x.weak_type, explicit)
    if isinstance(x, jax.ShapeDtypeStruct):  # plan and cost without data (explain, export)
        dtype = jax.dtypes.canonicalize_dtype(x.dtype)
        return HostAval(tuple(x.shape), np.dtype(dtype), bool(x.weak_type))
    aval = jax.typeof(x)
    if isinstance(aval, SpyreType):
        return aval
    return HostAval(aval.shape, np.dtype(aval.dtype), aval.weak_type, explicit_sharding(aval))


def leaf_avals(leaves: Sequence[Any], call: Call) -> tuple[SpyreType | HostAval, ...]:
    """Every leaf's abstract value.

    Raises:
        SpyreTypeError: naming the path of a leaf that is not an array.
    """
    avals = []
    for i, x in enumerate(leaves):
        try:
            avals.append(leaf_aval(x))
        except TypeError:
            raise SpyreTypeError(
                f"spyrejax.jit: argument {call.path(i)} is a {type(x).__name__}, not an "
                "array; mark it static (static_argnums/static_argnames), or use "
                "spyrejax.filter_jit, which holds every non-array leaf static"
            ) from None
    return tuple(avals)


def check_formats(
    avals: Sequence[SpyreType | HostAval],
    path: Callable[[int], str],
    who: str = "spyrejax.jit",
) -> None:
    """Check every host leaf's dtype has a Spyre data format.

    Args:
        avals: the leaves' abstract values.
        path: the path of leaf ``i`` in the call (:meth:`Call.path`).
        who: the function named in the error.

    Raises:
        LayoutError: naming the leaf's path, its dtype and what to do.
    """
    for i, aval in enumerate(avals):
        if isinstance(aval, SpyreType):
            continue
        try:
            host_dtype(aval.dtype)
        except LayoutError as err:
            raise LayoutError(
                f"{who}: argument {path(i)} is {aval.dtype}{list(aval.shape)}: "
                f"{err}. Cast it before the call (x.astype(jnp.float32), or "
                "x.astype(jnp.int32) for integers)"
            ) from None


def describe_fun(fun: Any) -> str:
    """A function (or callable object) as the user wrote it: ``name at file:line``."""
    name = getattr(fun, "__qualname__", None) or type(fun).__name__
    target = fun if inspect.isfunction(fun) or inspect.ismethod(fun) else type(fun).__call__
    code = getattr(inspect.unwrap(target), "__code__", None)
    return f"{name} at {code.co_filename}:{code.co_firstlineno}" if code else name


def in_user_terms(flat_fun: Callable[..., Any], fun: Any, paths: Sequence[str]) -> None:
    """Have JAX's tracing errors in ``flat_fun`` speak of the user's function.

    ``flat_fun`` traces ``fun`` on the call's flat leaves: JAX's errors (a traced bool
    in an ``if``, a value needed concretely) name ``fun`` with its file and line, and
    each leaf by its path in the call (``args[0]['flag'] (parameter 'p')``), not
    spyrejax's wrapper and its ``leaves[i]``.
    """
    name_tracing(flat_fun, "spyrejax.jit", describe_fun(fun), paths)
