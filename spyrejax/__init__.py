"""spyrejax: a JAX front-end for IBM Spyre's stick-tiled tensor layouts.

The layout core (:class:`SpyreTensorLayout`, bound to a host shape as a
:class:`HostMapping`; :class:`DataFormats`), the DMA descriptors
that move tensors between host and device (:func:`generate_dci`) and the DMA engine that
executes them (:func:`dma_h2d`, :func:`dma_d2h`); Spyre arrays (:class:`SpyreArray`,
whose abstract value :class:`SpyreType` carries the layout) and the Spyre primitives
that compute on their device images (:func:`to_device`, :func:`matmul`, ...).
"""

from . import lowering, primitives
from ._errors import (
    LayoutError,
    SpyreError,
    SpyreInternalError,
    SpyreTypeError,
    SpyreUnsupportedError,
)
from .dma._dci import DCI, Descriptor, LoopNest, generate_dci
from .dma._dma import dma_d2h, dma_h2d
from .layout._dtypes import (
    BYTES_PER_STICK,
    SUPPORTED_DTYPES,
    DataFormats,
    fits_format,
    format_for_dtype,
    host_format,
    poison_value,
)
from .layout._layout import HostMapping, SpyreTensorLayout
from .lowering import Compiled, Lowered, Report, SpyreJit, Traced, explain, jit, with_layout
from .primitives import ELEMENTWISE as _ELEMENTWISE
from .primitives import REDUCTIONS as _REDUCTIONS
from .primitives import (
    astype,
    broadcast_to,
    compact,
    expand_dims,
    image,
    matmul,
    reshape,
    restickify,
    restickify_cost,
    squeeze,
    to_device,
    to_host,
    transpose,
)
from .primitives._array import PadFill, SpyreArray, SpyreType

# One function per elementwise op and reduction, derived from its record in the op tables.
_DERIVED = [*(op.name for op in _ELEMENTWISE if op.public), *_REDUCTIONS]
globals().update({name: getattr(primitives, name) for name in _DERIVED})


__all__ = [
    "BYTES_PER_STICK",
    "DCI",
    "SUPPORTED_DTYPES",
    "Compiled",
    "DataFormats",
    "Descriptor",
    "HostMapping",
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
    "poison_value",
    "primitives",
    "reshape",
    "restickify",
    "restickify_cost",
    "squeeze",
    "to_device",
    "to_host",
    "transpose",
    "with_layout",
]
__all__ += _DERIVED

__version__ = "0.1.0"
