"""Spyre primitives: JAX primitives whose abstract values carry Spyre layouts.

Each module holds one primitive family: its rule (the constructor), public wrapper,
emulator kernel and transformation rules.
"""

from typing import Any

from .._array import SpyreArray
from .._stick import restickify_cost
from ._base import SpyrePrim, abstract, abstract_eval, image, target_layout, wrap
from ._elementwise import ELEMENTWISE_OPS, ElementwiseOp, elementwise
from ._elementwise import OPS as ELEMENTWISE
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

globals().update(_EW)  # one function per elementwise op, from its record


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
    "ELEMENTWISE",
    "ELEMENTWISE_OPS",
    "REDUCTIONS",
    "ElementwiseOp",
    "SpyrePrim",
    "abstract",
    "abstract_eval",
    "astype",
    "broadcast_to",
    "compact",
    "concatenate",
    "elementwise",
    "expand_dims",
    "full",
    "image",
    "iota",
    "matmul",
    "max",
    "mean",
    "min",
    "pad",
    "reduce",
    "reshape",
    "reshape_copy",
    "restickify",
    "restickify_cost",
    "slice_copy",
    "squeeze",
    "sum",
    "target_layout",
    "to_device",
    "to_host",
    "transpose",
    "wrap",
]
__all__ += list(_EW)
