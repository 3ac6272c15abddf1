"""Spyre device data formats and their mapping from host dtypes (spec section 1).

Pure NumPy: no JAX import. ``ml_dtypes`` (a NumPy extension that JAX depends on)
supplies bfloat16 and the float8 types.
"""

from __future__ import annotations

import enum
from typing import Any

import ml_dtypes
import numpy as np

from .._errors import LayoutError

__all__ = [
    "BYTES_PER_STICK",
    "DTypeLike",
    "DataFormats",
    "fits_format",
    "format_for_dtype",
    "has_infinity",
    "host_dtype",
    "host_format",
    "narrow_int64",
    "poison_value",
    "stick_elems",
]

BYTES_PER_STICK = 128
"""Bytes in one stick: the unit of all Spyre memory traffic and compute."""

DTypeLike = Any
"""Anything :func:`numpy.dtype` accepts (including ``jnp.bfloat16``) or a DataFormats member."""


class DataFormats(enum.IntEnum):
    """Spyre device data formats, with torch-spyre's enum values.

    spyrejax stores IEEE float16/bfloat16 values for ``SEN169_FP16`` (the real
    device uses a 1-6-9 bit format); numerics are those of the host dtype.
    """

    SEN169_FP16 = 0
    IEEE_FP32 = 1
    INVALID = 2
    SEN143_FP8 = 3
    SEN152_FP8 = 4
    SEN153_FP9 = 5
    SENINT2 = 6
    SENINT4 = 7
    SENINT8 = 8
    SENINT16 = 9
    SENINT24 = 10
    IEEE_INT64 = 11
    IEEE_INT32 = 12
    SENUINT32 = 13
    SENUINT2 = 14
    IEEE_FP16 = 15
    BOOL = 16
    BFLOAT16 = 17
    SEN18F_FP24 = 18

    @property
    def bits(self) -> int:
        """Storage bits of one element in this format."""
        if self is DataFormats.INVALID:
            raise LayoutError("DataFormats.INVALID has no element size")
        return _BITS[self]

    def elems_per_stick(self) -> int:
        """Elements in one 128-byte stick ("eps"): ``128 / element bytes``.

        Raises:
            LayoutError: for a format with no device stick geometry in torch-spyre
                (``INVALID``, ``SEN153_FP9``, ``SENINT24``, ``SEN18F_FP24``).
        """
        if self in _NO_STICK_GEOMETRY:
            raise LayoutError(
                f"{self!r} has no device stick geometry (torch-spyre gives it no elements "
                "per stick), so no layout can use it"
            )
        return BYTES_PER_STICK * 8 // self.bits

    def __repr__(self) -> str:
        return f"DataFormats.{self.name}"

    __str__ = __repr__


_BITS: dict[DataFormats, int] = {
    DataFormats.SEN169_FP16: 16,
    DataFormats.IEEE_FP32: 32,
    DataFormats.SEN143_FP8: 8,
    DataFormats.SEN152_FP8: 8,
    # FP9 values are stored in 16-bit containers on the device.
    DataFormats.SEN153_FP9: 16,
    DataFormats.SENINT2: 2,
    DataFormats.SENINT4: 4,
    DataFormats.SENINT8: 8,
    DataFormats.SENINT16: 16,
    # INT24 and FP24 are stored in 32-bit containers on the device.
    DataFormats.SENINT24: 32,
    DataFormats.IEEE_INT64: 64,
    DataFormats.IEEE_INT32: 32,
    DataFormats.SENUINT32: 32,
    DataFormats.SENUINT2: 2,
    DataFormats.IEEE_FP16: 16,
    DataFormats.BOOL: 8,
    DataFormats.BFLOAT16: 16,
    DataFormats.SEN18F_FP24: 32,
}

# Formats torch-spyre stores in containers but gives no stick size: no layout uses them.
_NO_STICK_GEOMETRY = frozenset(
    {
        DataFormats.INVALID,
        DataFormats.SEN153_FP9,
        DataFormats.SENINT24,
        DataFormats.SEN18F_FP24,
    }
)

_HOST_TO_FORMAT: dict[np.dtype, DataFormats] = {
    np.dtype(np.float16): DataFormats.SEN169_FP16,
    np.dtype(ml_dtypes.bfloat16): DataFormats.SEN169_FP16,
    # torch-spyre stores bool tensors in the fp16 format.
    np.dtype(np.bool_): DataFormats.SEN169_FP16,
    np.dtype(np.float32): DataFormats.IEEE_FP32,
    np.dtype(ml_dtypes.float8_e4m3fn): DataFormats.SEN143_FP8,
    np.dtype(ml_dtypes.float8_e5m2): DataFormats.SEN152_FP8,
    np.dtype(np.int8): DataFormats.SENINT8,
    np.dtype(np.int32): DataFormats.IEEE_INT32,
    # Spyre computes on no unsigned 32-bit format; SENUINT32 sticks (32 per stick, as
    # int32) hold a uint32's raw bits, so PRNG keys and threefry's bit ops round-trip
    # exactly. Arithmetic on them wraps modulo 2**32, as on the host.
    # (JAX's float32 erf derivative masks float32 bits through uint32, too.)
    np.dtype(np.uint32): DataFormats.SENUINT32,
    # Likewise the narrower random bits of float16/bfloat16 samplers: a uint16's raw
    # bits in 16-bit SENINT16 sticks (64 per stick), a uint8's in SENINT8 ones (128).
    np.dtype(np.uint16): DataFormats.SENINT16,
    np.dtype(np.uint8): DataFormats.SENINT8,
}

SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(_HOST_TO_FORMAT)
"""Host dtypes that have a Spyre data format."""

# How torch-spyre names the host side of a transfer (``dataformat_src_`` of a DCI on the
# way in): the format of the host array itself, where it differs from the device format
# (every other host dtype is named by its device format).
_HOST_SIDE_FORMAT: dict[np.dtype, DataFormats] = {
    np.dtype(np.float16): DataFormats.IEEE_FP16,
    np.dtype(ml_dtypes.bfloat16): DataFormats.BFLOAT16,
    # torch-spyre names a (1-byte) bool host tensor SENINT8.
    np.dtype(np.bool_): DataFormats.SENINT8,
}


def has_infinity(dtype: Any) -> bool:
    """Whether a type has infinities.

    float8_e4m3fn and the *fnuz types do not: an infinity cast to them is NaN, so -inf
    is no identity of their max.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.isinf(np.asarray(np.inf, np.float32).astype(np.dtype(dtype))))


def has_spyre_format(dtype: Any) -> bool:
    """Whether a host dtype has a Spyre data format (PRNG keys, float64... do not)."""
    try:
        return np.dtype(dtype) in _HOST_TO_FORMAT
    except TypeError:  # not a NumPy dtype at all
        return False


def stick_elems(dtype: Any) -> int:
    """Elements of ``dtype`` in one device stick: its format's (bool is 16-bit: 64).

    A dtype with no Spyre format (one a program narrows or keeps on the host) counts
    by its host bytes.
    """
    if has_spyre_format(dtype):
        return format_for_dtype(dtype).elems_per_stick()
    return max(BYTES_PER_STICK // np.dtype(dtype).itemsize, 1)


_HINTS = {
    "int64": " (cast it to int32: torch-spyre narrows int64 to int32)",
    "float64": (
        " (cast it to float32, x.astype(np.float32), or compute float64 in float32: "
        "jax.config.update('spyrejax_float64', 'float32'))"
    ),
    "c": " (keep complex values on the host, or move their .real and .imag)",
}
"""What to do about a host dtype with no format, by dtype name (complex: by kind)."""


def host_dtype(dtype: DTypeLike) -> np.dtype:
    """Normalise a host dtype-like to a :class:`numpy.dtype` that has a Spyre format.

    Raises:
        LayoutError: if ``dtype`` is not a dtype or has no Spyre data format.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError as err:
        raise LayoutError(f"{dtype!r} is not a dtype") from err
    if dt not in _HOST_TO_FORMAT:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        hint = _HINTS.get(dt.kind if dt.kind == "c" else dt.name, "")
        raise LayoutError(f"host dtype {dt} has no Spyre data format{hint}; supported: {names}")
    return dt


NARROWED = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32)}
"""64-bit integer dtypes (JAX's in x64 mode) and the 32-bit dtype the device holds them in."""


def narrow_int64(x: np.ndarray, what: str) -> np.ndarray:
    """A 64-bit integer host array as the 32-bit one the device holds, as torch-spyre does.

    Args:
        x: an int64 or uint64 host array.
        what: the value, for the error (``"argument args[0] (parameter 'i')"``).

    Raises:
        LayoutError: naming ``what`` and the first value that 32 bits cannot hold.
    """
    x = np.asarray(x)
    narrow = NARROWED[x.dtype]
    info = np.iinfo(narrow)
    bad = (x < info.min) | (x > info.max)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise LayoutError(
            f"{what} is {x.dtype}{list(x.shape)}, held as {narrow} on the device (Spyre has "
            f"no 64-bit integer format), but its value {x[where]} at {list(where)} does not "
            f"fit in {narrow} [{info.min}, {info.max}]"
        )
    return x.astype(narrow)


def format_for_dtype(dtype: DTypeLike) -> DataFormats:
    """The Spyre data format of a host dtype, or ``dtype`` itself if it is a format.

    Args:
        dtype: a host dtype (``np.float16``, ``jnp.bfloat16``, ``"float32"``...) or a
            :class:`DataFormats` member.

    Raises:
        LayoutError: if the dtype has no Spyre data format (float64, complex, ...).
    """
    if isinstance(dtype, DataFormats):
        if dtype is DataFormats.INVALID:
            raise LayoutError("DataFormats.INVALID is not a usable device format")
        return dtype
    return _HOST_TO_FORMAT[host_dtype(dtype)]


def host_format(dtype: DTypeLike) -> DataFormats:
    """The format torch-spyre records for a host array of ``dtype`` in a DCI.

    ``IEEE_FP16`` for float16, ``BFLOAT16`` for bfloat16, ``SENINT8`` for bool and
    int8, and the device format otherwise. A :class:`DataFormats` member stands for
    the canonical host dtype of that device format (float16 for ``SEN169_FP16``);
    a device format no host dtype maps to is its own host format.

    Raises:
        LayoutError: if ``dtype`` has no Spyre data format.
    """
    if isinstance(dtype, DataFormats):
        canonical = next((dt for dt, f in _HOST_TO_FORMAT.items() if f is dtype), None)
        return dtype if canonical is None else _host_side(canonical)
    return _host_side(host_dtype(dtype))


def _host_side(dt: np.dtype) -> DataFormats:
    return _HOST_SIDE_FORMAT.get(dt, _HOST_TO_FORMAT[dt])


def fits_format(dtype: DTypeLike, fmt: DataFormats) -> bool:
    """Whether a host array of ``dtype`` can live in (or come from) format ``fmt``.

    Its own format always fits; bool fits any format, since predicates follow the
    layout of the values they were computed from.
    """
    dt = host_dtype(dtype)
    return dt == np.bool_ or _HOST_TO_FORMAT[dt] == fmt


def poison_value(dtype: DTypeLike) -> np.generic:
    """The fill of a fresh device image: a value no kernel may let leak into a result.

    NaN for float formats, the most negative value for signed integer formats, the
    largest for unsigned ones (all bits set: zero would hide in sums and ors), ``True``
    for bool.
    """
    dt = host_dtype(dtype)
    if dt == np.bool_:
        return np.bool_(True)
    if np.issubdtype(dt, np.unsignedinteger):
        return dt.type(np.iinfo(dt).max)
    if np.issubdtype(dt, np.integer):
        return dt.type(np.iinfo(dt).min)
    return dt.type(np.nan)
