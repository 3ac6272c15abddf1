"""The DMA engine on host memory: descriptors executed as blocked NumPy strided copies.

A transfer between concrete arrays (an eager ``to_device`` / ``to_host``) does not need
XLA: each descriptor is a strided loop nest over a flat buffer, which is exactly a NumPy
strided view of that buffer, so one ``np.copyto`` between the source and destination
views executes it. Two things make that fast:

- **Cache blocking.** The descriptor is cut along the loop with the largest host stride
  into blocks of about :data:`BLOCK_BYTES` (:data:`D2H_BLOCK_BYTES` device -> host),
  so each block reads (or writes) one contiguous slab of host memory while its other
  side touches a few long runs of sticks. Without blocking, one side walks the whole
  buffer once per tile, at a page per stick.
- **Runs as elements.** When a descriptor's innermost loop is contiguous on both sides,
  each run (a stick, or its remainder) is viewed as one ``V<bytes>`` element, so NumPy
  copies it with one ``memcpy`` instead of looping over its lanes.
- **No extra copies.** Destinations are allocated 64-byte aligned, which lets
  ``jax.device_put`` adopt the buffer on the CPU instead of copying it, and device
  images are read through ``np.asarray`` views.

Small transfers and *stick-granular* ones take this path (:func:`host_engine_suits`):
the innermost loops move contiguous runs of, on average, at least :data:`MIN_RUN_BYTES`
on both sides. Large element-granular transfers (a stick that runs down a host column)
are element transposes, which XLA's tiled transpose does several times faster than a
NumPy strided copy.

Every descriptor is validated by :func:`spyrejax._dma.box_plan` before any view is built,
so no view can reach outside its buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._dci import Descriptor
from ._errors import LayoutError

__all__ = [
    "BLOCK_BYTES",
    "D2H_BLOCK_BYTES",
    "MIN_RUN_BYTES",
    "SMALL_ELEMENTS",
    "aligned_empty",
    "host_engine_suits",
    "run_on_host",
]

#: Host bytes per block of a blocked copy (measured best on 2-core x86: 32-128 KiB).
BLOCK_BYTES = 64 * 1024
#: The same for device -> host, which gathers into the host side (measured: 256 KiB-1 MiB).
D2H_BLOCK_BYTES = 1024 * 1024
#: Shortest innermost run, in bytes, that the host engine moves (half a stick).
MIN_RUN_BYTES = 64
#: Transfers up to this many elements take the host engine whatever their granularity:
#: a strided NumPy copy of them is faster than dispatching a compiled transfer.
SMALL_ELEMENTS = 1 << 16
_ALIGN = 64  # what the CPU client needs to adopt a NumPy buffer without a copy


def host_engine_suits(descriptors: Sequence[Descriptor], itemsize: int) -> bool:
    """Whether the host engine should run these descriptors (else XLA's transposes).

    True for transfers of at most :data:`SMALL_ELEMENTS` elements, and for
    stick-granular ones: every descriptor's innermost loop is contiguous on both sides,
    and the runs it moves average at least :data:`MIN_RUN_BYTES` (a short remainder
    stick does not change the verdict of the sticks around it).
    """
    elements = sum(math.prod(d.size) for d in descriptors)
    if elements <= SMALL_ELEMENTS:
        return True
    if any(d.stride_src[0] != 1 or d.stride_dst[0] != 1 for d in descriptors):
        return False
    runs = sum(math.prod(d.size[1:]) for d in descriptors)
    return elements * itemsize >= MIN_RUN_BYTES * runs


def aligned_empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data is 64-byte aligned."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _view(
    raw: np.ndarray,
    dtype: np.dtype,
    sizes: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
    item: int,
) -> np.ndarray:
    """A strided view of a byte buffer; ``strides`` and ``offset`` count host elements."""
    return np.ndarray(sizes, dtype, raw, offset * item, tuple(s * item for s in strides))


def run_on_host(
    src: np.ndarray,
    dst: np.ndarray,
    descriptors: Sequence[Descriptor],
    *,
    host_is_src: bool,
) -> np.ndarray:
    """Execute validated descriptors from ``src`` into ``dst`` (both C-contiguous).

    Args:
        src: the source buffer, read only.
        dst: the destination buffer, written in place.
        descriptors: descriptors already checked against both buffers' shapes.
        host_is_src: whether the host array is the source (host -> device); blocks are
            cut along the loop with the largest host stride.

    Returns:
        ``dst``.

    Raises:
        LayoutError: if a buffer is not C-contiguous or the dtypes' widths differ.
    """
    for name, buf in (("source", src), ("destination", dst)):
        if not buf.flags.c_contiguous:
            raise LayoutError(f"host DMA: the {name} buffer must be C-contiguous")
    if src.itemsize != dst.itemsize:
        raise LayoutError(
            f"host DMA: element widths differ ({src.dtype} -> {dst.dtype}); DMA moves bits"
        )
    item = src.itemsize
    src_bytes, dst_bytes = src.reshape(-1).view(np.uint8), dst.reshape(-1).view(np.uint8)
    for d in descriptors:
        sizes, s_src, s_dst = d.size[::-1], d.stride_src[::-1], d.stride_dst[::-1]
        run = 1
        if sizes and s_src[-1] == 1 and s_dst[-1] == 1:  # contiguous runs: one element each
            run, sizes, s_src, s_dst = sizes[-1], sizes[:-1], s_src[:-1], s_dst[:-1]
        dtype = np.dtype(f"V{run * item}") if run > 1 else np.dtype(f"u{item}")
        from_view = _view(src_bytes, dtype, sizes, s_src, d.offset_src, item)
        to_view = _view(dst_bytes, dtype, sizes, s_dst, d.offset_dst, item)
        if not sizes:
            np.copyto(to_view, from_view)
            continue
        host_strides = s_src if host_is_src else s_dst
        k = max(range(len(sizes)), key=lambda i: (host_strides[i], -i))
        per_index = math.prod(sizes) // max(sizes[k], 1) * dtype.itemsize
        block_bytes = BLOCK_BYTES if host_is_src else D2H_BLOCK_BYTES
        step = max(1, block_bytes // max(per_index, 1))
        lead = (slice(None),) * k
        for a in range(0, sizes[k], step):
            block = (*lead, slice(a, a + step))
            np.copyto(to_view[block], from_view[block])
    return dst
