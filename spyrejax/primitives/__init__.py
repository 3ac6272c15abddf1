"""Spyre primitives: JAX primitives whose abstract values carry Spyre layouts.

Each module holds one primitive family: its rule (the constructor), public wrapper,
emulator kernel and transformation rules.
"""

from typing import Any

from .._array import SpyreArray
from .._stick import restickify_cost
from ._base import SpyrePrim, abstract, abstract_eval, image, wrap
from ._elementwise import ELEMENTWISE_OPS, elementwise
from ._elementwise import PUBLIC as _EW
from ._iota import full, iota
from ._matmul import matmul
from ._operators import install as _install
from ._reduce import REDUCTIONS, reduce
from ._restickify import (
    astype,
    compact,
    concatenate,
    pad,
    reshape_copy,
    restickify,
    slice_copy,
)
from ._transfer import to_device, to_host
from ._views import broadcast_to, expand_dims, reshape, squeeze, transpose

_install()

neg = _EW["neg"]
abs = _EW["abs"]
exp = _EW["exp"]
log = _EW["log"]
sqrt = _EW["sqrt"]
rsqrt = _EW["rsqrt"]
reciprocal = _EW["reciprocal"]
square = _EW["square"]
tanh = _EW["tanh"]
sigmoid = _EW["sigmoid"]
relu = _EW["relu"]
gelu = _EW["gelu"]
gelu_erf = _EW["gelu_erf"]
silu = _EW["silu"]
add = _EW["add"]
sub = _EW["sub"]
mul = _EW["mul"]
div = _EW["div"]
maximum = _EW["maximum"]
minimum = _EW["minimum"]
pow = _EW["pow"]
lt = _EW["lt"]
le = _EW["le"]
gt = _EW["gt"]
ge = _EW["ge"]
eq = _EW["eq"]
ne = _EW["ne"]
where = _EW["where"]
erf = _EW["erf"]
erfc = _EW["erfc"]
log1p = _EW["log1p"]
expm1 = _EW["expm1"]
sign = _EW["sign"]


def sum(x: SpyreArray, axis: Any = None, keepdims: bool = False) -> SpyreArray:
    """Sum over ``axis``; reducing the stick dim gives a sparse result."""
    return reduce("sum", x, axis, keepdims)


def max(x: SpyreArray, axis: Any = None, keepdims: bool = False) -> SpyreArray:
    """Maximum over ``axis``; padding never takes part."""
    return reduce("max", x, axis, keepdims)


def min(x: SpyreArray, axis: Any = None, keepdims: bool = False) -> SpyreArray:
    """Minimum over ``axis``; padding never takes part."""
    return reduce("min", x, axis, keepdims)


def mean(x: SpyreArray, axis: Any = None, keepdims: bool = False) -> SpyreArray:
    """Mean over ``axis`` (float arrays)."""
    return reduce("mean", x, axis, keepdims)


__all__ = [
    "ELEMENTWISE_OPS",
    "REDUCTIONS",
    "SpyrePrim",
    "abs",
    "abstract",
    "abstract_eval",
    "add",
    "astype",
    "broadcast_to",
    "compact",
    "concatenate",
    "div",
    "elementwise",
    "eq",
    "erf",
    "erfc",
    "exp",
    "expand_dims",
    "expm1",
    "full",
    "ge",
    "gelu",
    "gelu_erf",
    "gt",
    "image",
    "iota",
    "le",
    "log",
    "log1p",
    "lt",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mul",
    "ne",
    "neg",
    "pad",
    "pow",
    "reciprocal",
    "reduce",
    "relu",
    "reshape",
    "reshape_copy",
    "restickify",
    "restickify_cost",
    "rsqrt",
    "sigmoid",
    "sign",
    "silu",
    "slice_copy",
    "sqrt",
    "square",
    "squeeze",
    "sub",
    "sum",
    "tanh",
    "to_device",
    "to_host",
    "transpose",
    "where",
    "wrap",
]
