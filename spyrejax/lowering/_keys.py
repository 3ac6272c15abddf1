"""PRNG keys as their data: ``jax.random`` inside ``spyrejax.jit``.

A typed key array (``key<fry>[...]``, from ``jax.random.key``, ``split``, ``fold_in``)
is represented by its key data, a ``uint32[..., 2]`` array (the key's shape with the
implementation's ``key_shape`` appended), from the moment the graph is built:

- ``random_wrap`` and ``random_unwrap`` are identities on the data;
- ``random_seed``, ``random_split``, ``random_fold_in`` and ``random_bits`` are
  replaced by JAX's own implementation of them on key data (the functions its
  lowering to XLA traces), so the numbers are bit-identical to ``jax.jit``;
- ``threefry2x32`` is replaced by its 20 rounds of uint32 adds, rotates and xors
  (``lax``'s unrolled lowering), elementwise on the device;
- ``iota_2x32_shape`` (the counters of ``random_bits``) by the flat index of each
  element (high word 0: arrays below 2**32 elements);
- shape ops on key arrays (``slice``, ``squeeze``, ``unstack``, ...) by the same op
  on the data, the trailing key dim kept whole.

At the boundary of ``spyrejax.jit``, key arguments are passed as their data and
wrapped again inside the traced function; keys the function returns come back as
their key data (``jax.random.wrap_key_data`` makes keys of them again).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SpyreUnsupportedError
from .._jax import (
    ClosedJaxpr,
    key_impl,
    random_bits_impl_base,
    random_fold_in_impl_base,
    random_seed_impl_base,
    random_split_impl_base,
    threefry2x32_rounds,
)

__all__ = ["expand", "is_key", "needs_expansion", "unwrap_keys", "wrap_keys"]

_IDENTITIES = {"random_wrap", "random_unwrap"}


def is_key(aval: Any) -> bool:
    """Whether an abstract value (or array) has a PRNG key dtype."""
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def needs_expansion(eqn: Any) -> bool:
    """Whether an equation is a PRNG primitive or moves key arrays."""
    name = eqn.primitive.name
    if name in _IDENTITIES or name in _IMPLS:
        return True
    return any(is_key(v.aval) for v in (*eqn.invars, *eqn.outvars))


def _physical(aval: Any) -> jax.ShapeDtypeStruct:
    if is_key(aval):
        impl = key_impl(aval.dtype)
        return jax.ShapeDtypeStruct((*aval.shape, *impl.key_shape), np.dtype(np.uint32))
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


def expand(eqn: Any, source: str) -> ClosedJaxpr | None:
    """The equation on key data, as a closed jaxpr to inline; None for an identity.

    Raises:
        SpyreUnsupportedError: for an op on key arrays spyrejax cannot rewrite.
    """
    name = eqn.primitive.name
    if name in _IDENTITIES:
        return None
    ins = [v.aval for v in eqn.invars]
    if name in _IMPLS:
        fn = _IMPLS[name](ins, dict(eqn.params))
    elif name in _SHAPE_OPS:
        params = _SHAPE_OPS[name](dict(eqn.params), ins, [v.aval for v in eqn.outvars])
        fn = functools.partial(_bind, eqn.primitive, params)
    else:
        raise SpyreUnsupportedError(
            f"{name} on PRNG key arrays at {source}: spyrejax.jit moves key arrays through "
            f"{', '.join(sorted(_SHAPE_OPS))} only (use jax.random.key_data to work on the data)"
        )
    return jax.make_jaxpr(fn)(*[_physical(a) for a in ins])


def _bind(primitive: Any, params: dict[str, Any], *xs: Any) -> Any:
    return primitive.bind(*xs, **params)


# --- JAX's implementations on key data ------------------------------------------------


def _seed(ins: list[Any], params: dict[str, Any]) -> Callable[..., Any]:
    return functools.partial(random_seed_impl_base, impl=params["impl"])


def _split(ins: list[Any], params: dict[str, Any]) -> Callable[..., Any]:
    (keys,) = ins
    impl = key_impl(keys.dtype)
    return lambda k: random_split_impl_base(impl, k, keys.ndim, shape=params["shape"])


def _fold_in(ins: list[Any], params: dict[str, Any]) -> Callable[..., Any]:
    keys, _ = ins
    impl = key_impl(keys.dtype)
    return lambda k, m: random_fold_in_impl_base(impl, k, m, keys.shape)


def _bits(ins: list[Any], params: dict[str, Any]) -> Callable[..., Any]:
    (keys,) = ins
    impl = key_impl(keys.dtype)
    width, shape = params["bit_width"], params["shape"]
    return lambda k: random_bits_impl_base(impl, k, keys.ndim, bit_width=width, shape=shape)


def _threefry(ins: list[Any], params: dict[str, Any]) -> Callable[..., Any]:
    """The unrolled rounds: ~120 uint32 elementwise ops, none of them a loop."""
    return functools.partial(threefry2x32_rounds, use_rolled_loops=False)


def _iota_2x32(ins: list[Any], params: dict[str, Any]) -> Callable[..., Any]:
    """A 64-bit row-major counter as (high, low) words: the flat index and 0."""
    shape = tuple(params["shape"])
    if math.prod(shape) >= 2**32:
        raise SpyreUnsupportedError(
            f"random numbers for {math.prod(shape)} elements: spyrejax counts them in 32 bits"
        )
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]

    def counters() -> tuple[jax.Array, jax.Array]:
        lo = None
        for d, stride in enumerate(strides):
            step = jax.lax.broadcasted_iota(np.uint32, shape, d)
            step = step if stride == 1 else step * np.uint32(stride)
            lo = step if lo is None else lo + step
        return jnp.zeros(shape, np.uint32), lo

    return counters


_IMPLS: dict[str, Callable[[list[Any], dict[str, Any]], Callable[..., Any]]] = {
    "random_seed": _seed,
    "random_split": _split,
    "random_fold_in": _fold_in,
    "random_bits": _bits,
    "threefry2x32": _threefry,
    "iota_2x32_shape": _iota_2x32,
}


# --- shape ops on key arrays: the same op on the data, the key dim appended -----------


def _key_dims(avals: list[Any]) -> int:
    return next(len(key_impl(a.dtype).key_shape) for a in avals if is_key(a))


def _slice(params: dict[str, Any], ins: list[Any], outs: list[Any]) -> dict[str, Any]:
    size = key_impl(ins[0].dtype).key_shape
    n = len(size)
    strides = params.get("strides")
    return {
        **params,
        "start_indices": (*params["start_indices"], *[0] * n),
        "limit_indices": (*params["limit_indices"], *size),
        "strides": None if strides is None else (*strides, *[1] * n),
    }


def _same(params: dict[str, Any], ins: list[Any], outs: list[Any]) -> dict[str, Any]:
    return params


def _reshape(params: dict[str, Any], ins: list[Any], outs: list[Any]) -> dict[str, Any]:
    if params.get("dimensions") is not None:
        raise SpyreUnsupportedError("reshape with dimensions of PRNG key arrays")
    size = key_impl(ins[0].dtype).key_shape
    return {**params, "new_sizes": (*params["new_sizes"], *size)}


def _broadcast(params: dict[str, Any], ins: list[Any], outs: list[Any]) -> dict[str, Any]:
    size = key_impl(ins[0].dtype).key_shape
    rank = len(params["shape"])
    kept = tuple(range(rank, rank + len(size)))
    return {
        **params,
        "shape": (*params["shape"], *size),
        "broadcast_dimensions": (*params["broadcast_dimensions"], *kept),
        "sharding": None,
    }


def _transpose(params: dict[str, Any], ins: list[Any], outs: list[Any]) -> dict[str, Any]:
    rank = ins[0].ndim
    n = _key_dims(ins)
    return {**params, "permutation": (*params["permutation"], *range(rank, rank + n))}


_SHAPE_OPS: dict[str, Callable[..., dict[str, Any]]] = {
    "slice": _slice,
    "squeeze": _same,
    "expand_dims": _same,
    "unstack": _same,
    "split": _same,
    "concatenate": _same,
    "stack": _same,
    "reshape": _reshape,
    "broadcast_in_dim": _broadcast,
    "transpose": _transpose,
}


# --- the boundary of spyrejax.jit ----------------------------------------------------------


def unwrap_keys(leaves: list[Any]) -> tuple[list[Any], tuple[tuple[int, Any], ...]]:
    """Key arguments replaced by their data, and ``(position, impl)`` of each key."""
    keys = tuple((i, jax.random.key_impl(x)) for i, x in enumerate(leaves) if is_key(x))
    if not keys:
        return leaves, ()
    out = list(leaves)
    for i, _ in keys:
        out[i] = jax.random.key_data(out[i])
    return out, keys


def wrap_keys(leaves: list[Any], keys: tuple[tuple[int, Any], ...]) -> list[Any]:
    """The inverse of :func:`unwrap_keys`, inside the traced function."""
    out = list(leaves)
    for i, impl in keys:
        out[i] = jax.random.wrap_key_data(out[i], impl=impl)
    return out


def key_data_outputs(outs: Any) -> Any:
    """Keys among a function's outputs replaced by their key data."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, outs)
