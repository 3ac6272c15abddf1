"""spyrejax: a JAX front-end for IBM Spyre's stick-tiled tensor layouts.

The layout core (:class:`SpyreTensorLayout`, bound to a host shape as a
:class:`HostMapping`; :class:`DataFormats`), the DMA descriptors
that move tensors between host and device (:func:`generate_dci`) and the DMA engine that
executes them (:func:`dma_h2d`, :func:`dma_d2h`); Spyre arrays (:class:`SpyreArray`,
whose abstract value :class:`SpyreType` carries the layout) and the Spyre primitives
that compute on their device images (:func:`to_device`, :func:`matmul`, ...).
"""

from . import device, dma, layout, lowering, primitives
from ._errors import (
    DeviceError,
    LayoutConversionError,
    LayoutError,
    SpyreAttributeError,
    SpyreError,
    SpyreFallbackWarning,
    SpyreInternalError,
    SpyrePlacementWarning,
    SpyreTypeError,
    SpyreUnsupportedError,
)
from ._jax import float64_mode, poison_padding
from .device import Machine
from .dma import *  # noqa: F403  (each layer's package lists its public names)
from .frontend import Compiled, FilterJit, Lowered, SpyreJit, Traced, filter_jit, jit
from .layout import *  # noqa: F403
from .lowering import with_division, with_layout
from .primitives import (
    P,
    _public,
    all_gather,
    all_to_all,
    astype,
    broadcast_to,
    compact,
    device_put,
    expand_dims,
    image,
    matmul,
    ppermute,
    psum,
    psum_scatter,
    pvary,
    reshape,
    restickify,
    restickify_cost,
    squeeze,
    to_device,
    to_host,
    transpose,
)
from .primitives._array import PadFill, SpyreArray, SpyreType
from .primitives._public import *  # noqa: F403  (one function per elementwise op and reduction)
from .report import Export, Report, explain, export

__all__ = [
    "Compiled",
    "DeviceError",
    "Export",
    "FilterJit",
    "LayoutConversionError",
    "LayoutError",
    "Lowered",
    "Machine",
    "P",
    "PadFill",
    "Report",
    "SpyreArray",
    "SpyreAttributeError",
    "SpyreError",
    "SpyreFallbackWarning",
    "SpyreInternalError",
    "SpyreJit",
    "SpyrePlacementWarning",
    "SpyreType",
    "SpyreTypeError",
    "SpyreUnsupportedError",
    "Traced",
    "all_gather",
    "all_to_all",
    "astype",
    "broadcast_to",
    "compact",
    "device",
    "device_put",
    "dma",
    "expand_dims",
    "explain",
    "export",
    "filter_jit",
    "float64_mode",
    "image",
    "jit",
    "layout",
    "lowering",
    "matmul",
    "poison_padding",
    "ppermute",
    "primitives",
    "psum",
    "psum_scatter",
    "pvary",
    "reshape",
    "restickify",
    "restickify_cost",
    "squeeze",
    "to_device",
    "to_host",
    "transpose",
    "with_division",
    "with_layout",
]
__all__ += layout.__all__
__all__ += dma.__all__
__all__ += _public.__all__

__version__ = "0.1.0"
