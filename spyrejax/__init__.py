"""spyrejax: a JAX front-end for IBM Spyre's stick-tiled tensor layouts.

The layout core (:class:`SpyreTensorLayout`, :class:`DataFormats`), the DMA descriptors
that move tensors between host and device (:func:`generate_dci`) and the DMA engine that
executes them (:func:`dma_h2d`, :func:`dma_d2h`); Spyre arrays (:class:`SpyreArray`,
whose abstract value :class:`SpyreType` carries the layout) and the Spyre primitives
that compute on their device images (:func:`to_device`, :func:`matmul`, ...).
"""

from . import lowering, primitives
from ._array import PadFill, SpyreArray, SpyreType
from ._dci import DCI, Descriptor, LoopNest, generate_dci
from ._dma import dma_d2h, dma_h2d
from ._dtypes import (
    BYTES_PER_STICK,
    SUPPORTED_DTYPES,
    DataFormats,
    fits_format,
    format_for_dtype,
    host_format,
    poison_value,
)
from ._errors import (
    LayoutError,
    SpyreError,
    SpyreInternalError,
    SpyreTypeError,
    SpyreUnsupportedError,
)
from ._layout import SpyreTensorLayout
from .lowering import Compiled, Lowered, Report, SpyreJit, Traced, explain, jit, with_layout
from .primitives import ELEMENTWISE as _ELEMENTWISE
from .primitives import (
    astype,
    broadcast_to,
    compact,
    expand_dims,
    image,
    matmul,
    max,
    mean,
    min,
    reshape,
    restickify,
    restickify_cost,
    squeeze,
    sum,
    to_device,
    to_host,
    transpose,
)

# One function per elementwise op, derived from its record in the op table.
globals().update({op.name: getattr(primitives, op.name) for op in _ELEMENTWISE if op.public})


__all__ = [
    "BYTES_PER_STICK",
    "DCI",
    "SUPPORTED_DTYPES",
    "Compiled",
    "DataFormats",
    "Descriptor",
    "LayoutError",
    "LoopNest",
    "Lowered",
    "PadFill",
    "Report",
    "SpyreArray",
    "SpyreError",
    "SpyreInternalError",
    "SpyreJit",
    "SpyreTensorLayout",
    "SpyreType",
    "SpyreTypeError",
    "SpyreUnsupportedError",
    "Traced",
    "astype",
    "broadcast_to",
    "compact",
    "dma_d2h",
    "dma_h2d",
    "expand_dims",
    "explain",
    "fits_format",
    "format_for_dtype",
    "generate_dci",
    "host_format",
    "image",
    "jit",
    "lowering",
    "matmul",
    "max",
    "mean",
    "min",
    "poison_value",
    "primitives",
    "reshape",
    "restickify",
    "restickify_cost",
    "squeeze",
    "sum",
    "to_device",
    "to_host",
    "transpose",
    "with_layout",
]
__all__ += [op.name for op in _ELEMENTWISE if op.public]

__version__ = "0.1.0"
