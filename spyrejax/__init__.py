"""spyrejax: a JAX front-end for IBM Spyre's stick-tiled tensor layouts.

The layout core (:class:`SpyreTensorLayout`, :class:`DataFormats`), the DMA descriptors
that move tensors between host and device (:func:`generate_dci`) and the DMA engine that
executes them (:func:`dma_h2d`, :func:`dma_d2h`).
"""

from ._dci import DCI, Descriptor, LoopNest, generate_dci
from ._dma import dma_d2h, dma_h2d
from ._dtypes import (
    BYTES_PER_STICK,
    SUPPORTED_DTYPES,
    DataFormats,
    format_for_dtype,
    poison_value,
)
from ._errors import LayoutError, SpyreError, SpyreUnsupportedError
from ._layout import SpyreTensorLayout

__all__ = [
    "BYTES_PER_STICK",
    "DCI",
    "SUPPORTED_DTYPES",
    "DataFormats",
    "Descriptor",
    "LayoutError",
    "LoopNest",
    "SpyreError",
    "SpyreTensorLayout",
    "SpyreUnsupportedError",
    "dma_d2h",
    "dma_h2d",
    "format_for_dtype",
    "generate_dci",
    "poison_value",
]

__version__ = "0.1.0"
