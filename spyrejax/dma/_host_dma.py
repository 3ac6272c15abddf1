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

A descriptor whose stick runs down a host column is an *element transpose*: one loop is
contiguous in the source, another in the destination. NumPy copies those an element at
a time (about 1 ns each) and XLA's CPU transpose is not much faster, so the engine hands
them to a small C kernel, :mod:`spyrejax.dma._transpose`, which moves square tiles through
SIMD registers (16 bytes per tile row) at a good fraction of ``memcpy`` speed.

When that extension is built, descriptors that move runs go to its ``copy_runs`` too,
walked **source-sequential** (outer loops by decreasing source stride) and, for
destinations of at least :data:`STREAM_BYTES`, written with **non-temporal stores**.
Such a transfer writes one stream per device tile (host -> device) or per host row
(device -> host), so it touches every page of its fresh destination at once: the
kernel zeroes each (2 MiB) page on that first touch, and by the time the page's last
run arrives its zeroed lines have left the caches, so ordinary stores would read them
back before writing. Streaming stores write each line once. (Walking the destination
in order instead keeps the zeroed lines hot, but reads the source a stick per host row,
which measured slower still on the 2-core x86 VM.)

Small transfers, *stick-granular* ones (the innermost loops move contiguous runs of, on
average, at least :data:`MIN_RUN_BYTES` on both sides) and, when the kernel is built,
element transposes take this path (:func:`host_engine_suits`). The kernel is an
optional extension: built without a C compiler, spyrejax runs large element-granular
transfers in XLA instead (:data:`NATIVE_TRANSPOSE` says which).

Every descriptor is validated by :func:`spyrejax.dma._boxes.box_plan` before any view is built,
so no view can reach outside its buffer.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from .._counts import count
from .._errors import LayoutError
from ._dci import Descriptor

try:
    from . import _transpose as _native
except ImportError:  # built without a C compiler: element transposes run in XLA
    _native = None

__all__ = [
    "BLOCK_BYTES",
    "D2H_BLOCK_BYTES",
    "MIN_RUN_BYTES",
    "NATIVE_TRANSPOSE",
    "SMALL_ELEMENTS",
    "STREAM_BYTES",
    "aligned_empty",
    "host_engine_suits",
    "run_on_host",
    "without_host_engine",
    "without_kernel",
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
#: Destinations of at least this many bytes are written with non-temporal stores when the
#: C kernel copies their runs (the size of a 2-core x86 VM's L2; from 4 MiB up they
#: measured 1.5-2x faster than ordinary stores).
STREAM_BYTES = 1 << 20
_ALIGN = 64  # what the CPU client needs to adopt a NumPy buffer without a copy
_KERNEL_WIDTHS = (1, 2, 4, 8)  # element widths the transpose kernel moves
#: Whether the element-transpose kernel (:mod:`spyrejax.dma._transpose`) was built.
NATIVE_TRANSPOSE = _native is not None
_WITHOUT_KERNEL: ContextVar[bool] = ContextVar("spyrejax_without_kernel", default=False)


@contextlib.contextmanager
def without_kernel() -> Iterator[None]:
    """Host DMA inside the block runs as if built without a C compiler (tests).

    The NumPy engine moves runs, and element transposes go to XLA, as they do where the
    kernel (:mod:`spyrejax.dma._transpose`) could not be built.
    """
    token = _WITHOUT_KERNEL.set(True)
    try:
        yield
    finally:
        _WITHOUT_KERNEL.reset(token)


_WITHOUT_HOST: ContextVar[bool] = ContextVar("spyrejax_without_host_engine", default=False)


@contextlib.contextmanager
def without_host_engine() -> Iterator[None]:
    """Eager DMA inside the block runs on the XLA engine whatever its size (tests).

    :func:`host_engine_suits` says False inside: a test compares the two engines on one
    transfer, or runs the XLA engine's path on a transfer the host engine would take.
    """
    token = _WITHOUT_HOST.set(True)
    try:
        yield
    finally:
        _WITHOUT_HOST.reset(token)


def _kernel() -> Any:
    """The C kernel's module, or None: not built, or off (:func:`without_kernel`)."""
    return None if _WITHOUT_KERNEL.get() else _native


def host_engine_suits(descriptors: Sequence[Descriptor], itemsize: int) -> bool:
    """Whether the host engine should run these descriptors (else XLA).

    True for transfers of at most :data:`SMALL_ELEMENTS` elements; for stick-granular
    ones: every descriptor's innermost loop is contiguous on both sides, and the runs it
    moves average at least :data:`MIN_RUN_BYTES` (a short remainder stick does not
    change the verdict of the sticks around it); and, when :data:`NATIVE_TRANSPOSE`,
    for transfers whose other descriptors are all element transposes. False inside
    :func:`without_host_engine`.
    """
    if _WITHOUT_HOST.get():
        return False
    elements = sum(math.prod(d.size) for d in descriptors)
    if elements <= SMALL_ELEMENTS:
        return True
    if not all(_moves_runs(d) or _kernel_runs(d, itemsize) for d in descriptors):
        return False
    runs = [d for d in descriptors if _moves_runs(d)]
    run_elements = sum(math.prod(d.size) for d in runs)
    run_count = sum(math.prod(d.size[1:]) for d in runs)
    return run_elements * itemsize >= MIN_RUN_BYTES * run_count


def _moves_runs(d: Descriptor) -> bool:
    """Whether the innermost loop is contiguous on both sides (it moves runs)."""
    return d.stride_src[0] == 1 and d.stride_dst[0] == 1


def _transpose_dims(
    sizes: Sequence[int], s_src: Sequence[int], s_dst: Sequence[int]
) -> tuple[int, int] | None:
    """The loops contiguous in the source and (another) in the destination, if any.

    Loops are innermost first, as in a :class:`~spyrejax.dma._dci.Descriptor`. Returns the
    innermost such loops of size > 1, as the kernel picks them; ``None`` when the
    descriptor is not an element transpose (no such pair, or both sides contiguous
    along the same loop).
    """
    a = next((k for k in range(len(sizes)) if sizes[k] > 1 and s_src[k] == 1), None)
    if a is None:
        return None
    b = next((k for k in range(len(sizes)) if k != a and sizes[k] > 1 and s_dst[k] == 1), None)
    return None if b is None else (a, b)


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
    return np.ndarray(sizes, dtype, raw, offset * item, _in_bytes(strides, item))


def _in_bytes(strides: Sequence[int], item: int) -> tuple[int, ...]:
    """Strides counted in ``item``-byte elements, in bytes."""
    return tuple(s * item for s in strides)


def _kernel_runs(d: Descriptor, itemsize: int) -> bool:
    """Whether the transpose kernel is built and takes this descriptor."""
    native = _kernel()
    return (
        native is not None
        and itemsize in _KERNEL_WIDTHS
        and len(d.size) <= native.MAX_DIMS
        and _transpose_dims(d.size, d.stride_src, d.stride_dst) is not None
    )


def _copy_runs(
    dst_bytes: np.ndarray, src_bytes: np.ndarray, d: Descriptor, item: int, stream: bool
) -> None:
    """One descriptor that moves runs, on the C kernel: outer loops source-sequential."""
    loops = sorted(
        (
            (n, s * item, t * item)
            for n, s, t in zip(d.size[1:], d.stride_src[1:], d.stride_dst[1:], strict=True)
            if n > 1
        ),
        key=lambda loop: -loop[1],
    )
    sizes, s_src, s_dst = (tuple(col) for col in zip(*loops, strict=True)) if loops else ((),) * 3
    _native.copy_runs(
        dst_bytes,
        d.offset_dst * item,
        s_dst,
        src_bytes,
        d.offset_src * item,
        s_src,
        sizes,
        d.size[0] * item,
        stream,
    )


def run_on_host(
    src: np.ndarray,
    dst: np.ndarray,
    descriptors: Sequence[Descriptor],
    *,
    host_is_src: bool,
) -> np.ndarray:
    """Execute validated descriptors from ``src`` into ``dst`` (both C-contiguous).

    When the C kernel is built, it runs every descriptor (element transposes, and runs
    source-sequential); without it, descriptors that move runs are blocked NumPy
    strided copies.

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
    stream = dst.nbytes >= STREAM_BYTES
    native = _kernel()
    for d in descriptors:
        sizes, s_src, s_dst = d.size[::-1], d.stride_src[::-1], d.stride_dst[::-1]
        run = 1
        if native is not None and sizes and _moves_runs(d) and len(sizes) <= native.MAX_DIMS:
            _copy_runs(dst_bytes, src_bytes, d, item, stream)
            continue
        if sizes and _moves_runs(d):  # contiguous runs: one element each
            run, sizes, s_src, s_dst = sizes[-1], sizes[:-1], s_src[:-1], s_dst[:-1]
        elif _kernel_runs(d, item):  # an element transpose: the C kernel, in bytes
            count("dma.kernel_transpose")
            _native.transpose(
                dst_bytes,
                d.offset_dst * item,
                _in_bytes(s_dst, item),
                src_bytes,
                d.offset_src * item,
                _in_bytes(s_src, item),
                sizes,
                item,
            )
            continue
        dtype = np.dtype(f"V{run * item}") if run > 1 else np.dtype(f"u{item}")
        from_view = _view(src_bytes, dtype, sizes, s_src, d.offset_src, item)
        to_view = _view(dst_bytes, dtype, sizes, s_dst, d.offset_dst, item)
        if not sizes:
            np.copyto(to_view, from_view)
            continue
        host_strides = s_src if host_is_src else s_dst
        # Block along the walking loop of largest host stride (a range-1 loop's stride,
        # however large, moves nothing).
        k = max(range(len(sizes)), key=lambda i: (sizes[i] > 1, host_strides[i], -i))
        per_index = math.prod(sizes) // max(sizes[k], 1) * dtype.itemsize
        block_bytes = BLOCK_BYTES if host_is_src else D2H_BLOCK_BYTES
        step = max(1, block_bytes // max(per_index, 1))
        lead = (slice(None),) * k
        for a in range(0, sizes[k], step):
            block = (*lead, slice(a, a + step))
            np.copyto(to_view[block], from_view[block])
    return dst
