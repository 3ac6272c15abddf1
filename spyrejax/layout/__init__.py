"""The layout core: data formats, ``SpyreTensorLayout``, its index map, device-dim tags.

Pure Python/NumPy; imports nothing above it (no JAX).
"""

from ._dtypes import (
    BYTES_PER_STICK,
    SUPPORTED_DTYPES,
    DataFormats,
    fits_format,
    format_for_dtype,
    host_format,
    poison_value,
)
from ._layout import HostMapping, SpyreTensorLayout
from ._residency import Residency

__all__ = [
    "BYTES_PER_STICK",
    "SUPPORTED_DTYPES",
    "DataFormats",
    "HostMapping",
    "Residency",
    "SpyreTensorLayout",
    "fits_format",
    "format_for_dtype",
    "host_format",
    "poison_value",
]
