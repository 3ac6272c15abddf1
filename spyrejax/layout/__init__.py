"""The layout core: data formats, ``SpyreTensorLayout``, its index map, device-dim tags.

Also the layout algebra (``spyrejax.algebra``: CuTe's composition, complement,
logical divide and product), exact converters to CuTe, XLA, Morello and tt-mlir layouts,
and torch-spyre's element arrangements.

Pure Python/NumPy; imports nothing above it (no JAX).
"""

from . import _algebra as algebra
from ._algebra import CuteLayout
from ._arrangements import ElementArrangement
from ._convert import XlaLayout, from_cute, to_cute
from ._dtypes import (
    BYTES_PER_STICK,
    SUPPORTED_DTYPES,
    DataFormats,
    fits_format,
    format_for_dtype,
    host_format,
    poison_value,
)
from ._host_mapping import HostMapping
from ._layout import SpyreTensorLayout
from ._peers import MetalLayout, MorelloLayout
from ._residency import Residency

__all__ = [
    "BYTES_PER_STICK",
    "SUPPORTED_DTYPES",
    "CuteLayout",
    "DataFormats",
    "ElementArrangement",
    "HostMapping",
    "MetalLayout",
    "MorelloLayout",
    "Residency",
    "SpyreTensorLayout",
    "XlaLayout",
    "algebra",
    "fits_format",
    "format_for_dtype",
    "from_cute",
    "host_format",
    "poison_value",
    "to_cute",
]
