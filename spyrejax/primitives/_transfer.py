"""Transfers: ``to_device`` (DMA host -> device) and ``to_host`` (DMA device -> host)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SpyreTypeError
from .._jax import ShapedArray, float64_mode
from ..dma._dma import (
    _dtype_of,
    dma_h2d,
    h2d_values,
)
from ..layout._dtypes import NARROWED, host_dtype, narrow_int64
from ..layout._layout import SpyreTensorLayout
from ._arguments import target_layout
from ._array import PadFill, SpyreArray, SpyreType, batched_layout
from ._base import SpyrePrim
from ._values import logical_values

__all__ = ["ToDevice", "ToHost", "to_device", "to_host"]

# --- to_device ------------------------------------------------------------------------


def _pad_fill(pad_value: Any) -> PadFill:
    """What the type may promise of padding the DMA fills with ``pad_value``."""
    if pad_value is None:
        return PadFill.POISON
    if pad_value == 0:
        return PadFill.ZERO
    return PadFill.NEG_INF if pad_value == -np.inf else PadFill.POISON


class ToDevice(SpyrePrim):
    """DMA a host array into a fresh device image."""

    eager_jit = False  # eagerly, the host DMA engine moves the data (no compile)

    takes_gaps = True  # a DMA: any window of a buffer
    takes_lanes = True  # the DMA engines move lanes
    takes_arrangements = True

    layout: SpyreTensorLayout
    pad_value: Any

    def __init__(
        self, aval: ShapedArray, *, layout: SpyreTensorLayout, pad_value: Any = None
    ) -> None:
        layout.for_host(aval.shape)
        pad = _pad_fill(pad_value)
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(aval.shape, aval.dtype, layout, pad)
        self.params = {"layout": layout, "pad_value": pad_value}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {} if self.pad_value is None else {"pad_value": self.pad_value}

    def kernel(self, x: jax.Array) -> jax.Array:
        return dma_h2d(x, self.layout, pad_value=self.pad_value)

    def tangent_kernel(self, x: jax.Array) -> jax.Array:
        return h2d_values(x, self.layout)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        shape = self.in_avals[0].shape
        return {"layout": batched_layout(self.layout, shape, size), "pad_value": self.pad_value}


def _canonical(x: Any, wide: np.dtype) -> Any:
    """A concrete host array in the dtype ``jax.device_put`` would give it, range-checked.

    64-bit integers are held in 32 bits (as torch-spyre holds them; in x64 mode
    ``to_host`` gives them back as 64-bit), every value checked to fit. float64 (a NumPy
    array, a list, a Python float) becomes float32 with x64 off, as ``jax.device_put``
    and ``spyrejax.jit``'s arguments make it, or with ``spyrejax_float64="float32"``;
    in x64 mode otherwise it stays float64, which :func:`host_dtype` refuses.
    """
    if wide in NARROWED:
        return narrow_int64(np.asarray(x), "to_device's array")
    if wide == np.float64 and (not jax.config.jax_enable_x64 or float64_mode.value == "float32"):
        return np.asarray(x, np.float32)
    return x


def to_device(
    x: Any,
    layout: SpyreTensorLayout | None = None,
    *,
    dim_order: Any = None,
    pad_value: Any = None,
) -> SpyreArray:
    """Move a host array to (emulated) Spyre device memory.

    Args:
        x: a host array (NumPy or JAX, traced or not, or a nested list or scalar) of
            a supported dtype. A concrete int64 (uint64) array is held as int32
            (uint32), as torch-spyre holds it (in x64 mode ``to_host`` gives it back
            as int64); float64 is held as float32 with x64 off, as ``jax.device_put``
            holds it.
        layout: the device layout; defaults to the default layout of ``x.shape``.
        dim_order: with no ``layout``, the dim order of the default layout (the last
            entry is the stick dim; a trailing -1 makes it sparse).
        pad_value: fill of the padding; defaults to poison. ``0`` records in the type
            that the padding is zero (``pad=0``), which a matmul and a sum can rely on;
            ``-inf`` (float arrays) that it is minus infinity (``pad=-inf``), which a
            max and a softmax can rely on.

    Returns:
        A :class:`SpyreArray` whose image was written by the layout's DMA descriptors.

    Raises:
        LayoutError: if the layout cannot hold ``x`` or its format does not match,
            a value of an int64 ``x`` does not fit in int32, or ``x`` is float64 in
            x64 mode (unless ``spyrejax_float64`` is ``"float32"``).
        SpyreTypeError: if ``x`` is already a Spyre array.
    """
    if isinstance(x, SpyreArray | jax.core.Tracer) and isinstance(jax.typeof(x), SpyreType):
        raise SpyreTypeError(
            "to_device got an array already on the device; use spyrejax.restickify to "
            "change its layout"
        )
    wide = np.dtype(_dtype_of(x))
    if not isinstance(x, jax.core.Tracer):
        x = _canonical(x, wide)
    dtype = host_dtype(_dtype_of(x))  # before asarray could narrow float64 in x64 mode
    if not isinstance(x, jax.Array) and not (isinstance(x, np.ndarray) and x.dtype == dtype):
        x = jnp.asarray(x, dtype=dtype)  # NumPy arrays of the right dtype go to the DMA as is
    layout = target_layout("to_device", x.shape, dtype, layout, dim_order)
    if pad_value is not None:
        pad_value = np.asarray(pad_value, dtype=dtype).item()
    out = ToDevice(jax.typeof(x), layout=layout, pad_value=pad_value)(x)
    if wide in NARROWED and dtype != wide and jax.config.jax_enable_x64:
        return SpyreArray.of_checked(out.image, replace(out.type, x64_dtype=wide))
    return out


# --- to_host --------------------------------------------------------------------------


class ToHost(SpyrePrim):
    """DMA a device image back to a host array (and apply the array's view)."""

    eager_jit = False  # eagerly, the host DMA engine moves the data (no compile)

    takes_gaps = True
    takes_lanes = True
    takes_arrangements = True

    def __init__(self, aval: SpyreType) -> None:
        self.in_avals = (aval,)
        self.out_aval = ShapedArray(aval.shape, aval.dtype)
        self.params = {}
        super().__init__()

    def kernel(self, image: jax.Array) -> jax.Array:
        return logical_values(image, self.in_avals[0])

    def tangent_kernel(self, image: jax.Array) -> jax.Array:
        return logical_values(image, self.in_avals[0], exact=False)


def to_host(a: SpyreArray | jax.Array) -> jax.Array:
    """Move a Spyre array back to a host array of its logical shape (DMA device -> host).

    A host array is already there and is returned as it is: under ``jax.grad`` a
    ``spyrejax.jit`` function gives its 0-d results as host scalars (``jax.grad``
    needs one), so ``sj.to_host(jitted(x))`` reads the same either way.

    Raises:
        SpyreTypeError: if ``a`` is not an array.
    """
    try:
        aval = jax.typeof(a)
    except TypeError:
        raise SpyreTypeError(f"to_host needs a SpyreArray, got {type(a).__name__}") from None
    if isinstance(aval, ShapedArray):
        return a
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"to_host needs a SpyreArray, got {aval}")
    out = ToHost(aval)(a)
    if aval.x64_dtype is not None and jax.config.jax_enable_x64:
        return out.astype(aval.x64_dtype)  # int64 held as int32: jax.jit's dtype back
    return out
