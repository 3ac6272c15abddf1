"""The DMA engine: executes DCI descriptors between host arrays and device images.

Each descriptor is a strided loop nest over a flat buffer; the elements it touches form
a box, read and written by slices and transposes (:mod:`._boxes`). Reading and writing
boxes needs no index arrays and no per-element or per-stick Python loops, and runs the
same eagerly and under ``jax.jit``.

Transfers only move data (slices, transposes, concatenations, box updates), never
compute on it, and they are bit-exact: subnormals, NaN payloads, -0.0 and infinities
survive, eagerly and inside ``jax.jit``. XLA may alter some floats it only moves (its
CPU backend flushes bfloat16 subnormals in fused selects, and emulates float8 through
wider types), so those formats enter the engine as unsigned integers of the same width
(:func:`as_bits`) and leave it as floats again (:func:`from_bits`, fenced where the move
selects); float16, float32 and integer moves are never altered. Kernels that go on
moving the values (restickify, copies) take them as bits (:func:`d2h_bits`,
:func:`h2d_bits`), so they stay integers from end to end.

Eager transfers between concrete arrays run the same descriptors on the host engine
(:mod:`spyrejax.dma._host_dma`: blocked NumPy strided copies, and a C kernel for element
transposes) when they are small, stick-granular or transposes the kernel takes; traced
transfers, and any others, run as above in XLA; each says which (:data:`DMA_EVENT`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from .._errors import LayoutError
from ..layout._arrangements import ElementArrangement, arrange_image
from ..layout._dtypes import format_for_dtype, host_dtype, poison_value
from ..layout._host_mapping import HostMapping
from ..layout._lanes import LanedLayout, lane_positions, parent_layout, parent_shape
from ..layout._layout import SpyreTensorLayout
from ._boxes import box_plan, execute
from ._dci import Descriptor
from ._ffi import d2h_tiles, h2d_tiles, handler_active
from ._host_dma import aligned_empty, host_engine_suits, run_on_host
from ._permute import transposed
from ._tiling import Tiling, tiling

__all__ = [
    "as_bits",
    "bits_dtype",
    "d2h_bits",
    "d2h_values",
    "dma_d2h",
    "dma_h2d",
    "from_bits",
    "h2d_bits",
    "h2d_values",
    "relayout_bits",
]

DMA_EVENT = "/spyrejax/dma/transfer"
"""The ``jax.monitoring`` event of each transfer; keywords ``direction`` (h2d, d2h),
``engine`` (host, xla, traced), ``source`` (numpy: a NumPy array as is; jax)."""


def _record(direction: str, engine: str, x: Any) -> None:
    source = "numpy" if isinstance(x, np.ndarray) else "jax"
    jax.monitoring.record_event(DMA_EVENT, direction=direction, engine=engine, source=source)


def _dtype_of(x: Any) -> np.dtype:
    """The dtype the caller gave, before ``jnp.asarray`` could narrow it (float64)."""
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def _check_format(dtype: Any, layout: SpyreTensorLayout, what: str) -> np.dtype:
    dt = host_dtype(dtype)
    # Predicates (bool) may follow the layout of the values they were computed from.
    if dt != np.bool_ and format_for_dtype(dt) != layout.device_dtype:
        raise LayoutError(
            f"{what} has dtype {dt} (format {format_for_dtype(dt)!r}) but the layout's "
            f"device_dtype is {layout.device_dtype!r}"
        )
    return dt


def h2d_values(x: jax.Array, layout: SpyreTensorLayout, fill: Any = 0) -> jax.Array:
    """Host -> device without validation (the body of :func:`dma_h2d`; also for tangents)."""
    if isinstance(layout, LanedLayout):
        return h2d_values(_spread_lanes(x, layout, fill), parent_layout(layout), fill)
    return _h2d_values(x, layout.for_host(x.shape), fill)


def d2h_values(image: jax.Array, shape: tuple[int, ...], layout: SpyreTensorLayout) -> jax.Array:
    """Device -> host without validation (the body of :func:`dma_d2h`; also for tangents)."""
    if isinstance(layout, LanedLayout):
        layout.for_host(shape)  # validates the binding
        whole = d2h_values(image, parent_shape(layout, tuple(shape)), parent_layout(layout))
        return _gather_lanes(whole, layout, shape)
    return _d2h_values(image, layout.for_host(shape))


def _spread_lanes(x: Any, layout: LanedLayout, fill: Any) -> Any:
    """``x`` on its lanes of the parent's host tensor (:func:`parent_shape`), ``fill`` between.

    A laned layout's map is its parent's at host index ``[..., step * j + offset]``
    (:mod:`spyrejax.layout._lanes`): both engines move the spread tensor through the
    parent, and the other lanes get the fill, as padding does.
    """
    layout.for_host(np.shape(x))  # validates the binding
    shape = parent_shape(layout, tuple(np.shape(x)))
    at = lane_positions(layout, np.shape(x)[-1])
    if isinstance(x, np.ndarray):
        out = np.full(shape, np.asarray(fill).astype(x.dtype), x.dtype)
        out[..., at] = x
        return out
    bits = bits_dtype(x.dtype)  # XLA moves bits: it may alter the floats it only moves
    fill_bits = as_bits(jnp.asarray(fill).astype(x.dtype))
    out = jnp.full(shape, fill_bits, bits).at[..., at].set(as_bits(x))
    return from_bits(out, x.dtype, fence=True)


def _gather_lanes(whole: Any, layout: LanedLayout, shape: Sequence[int]) -> Any:
    """The piece of ``shape`` on its lanes of the parent's host tensor (:func:`_spread_lanes`)."""
    return from_bits(as_bits(whole)[..., lane_positions(layout, shape[-1])], whole.dtype)


def _standard(mapping: HostMapping) -> HostMapping:
    """The mapping of the same layout in the standard arrangement.

    An arranged image is the standard image with each group permuted
    (:func:`~spyrejax.layout._arrangements.arrange_image`): both engines move the
    standard image and permute it on the device side.
    """
    if not mapping.layout.is_arranged:
        return mapping
    plain = mapping.layout.with_arrangement(ElementArrangement.STANDARD)
    return plain.for_host(mapping.shape, mapping.strides)


def _arranged(image: Any, mapping: HostMapping, *, inverse: bool = False) -> Any:
    """``image`` (standard) in ``mapping``'s arrangement, or back (``inverse``)."""
    if mapping.size == 0:
        return image  # all padding: nothing to place
    return arrange_image(image, mapping.pair, mapping.layout.arrangement, inverse=inverse)


def _h2d_values(x: jax.Array, mapping: HostMapping, fill: Any, by_tiles: bool = False) -> jax.Array:
    """``by_tiles``: a transfer of its own, which may run tile by tile (:func:`_stick_tile_dim`)."""
    if mapping.layout.is_arranged:
        return _arranged(_h2d_values(x, _standard(mapping), fill, by_tiles), mapping)
    tiles = tiling(mapping)
    if tiles is not None:
        tile_dim = _stick_tile_dim(tiles) if by_tiles else None
        if tile_dim is not None:
            fill = jnp.asarray(fill, x.dtype)
            width = tiles.sizes[-1]
            return h2d_tiles(x, fill, tiles.device_size, tile_dim, width, _tiled_by(tiles))
        return _h2d_tiled(x, tiles, fill)
    image = jnp.full(mapping.layout.device_size, fill, dtype=x.dtype)
    return execute(x, image, mapping.dci(host_to_device=True))


def _d2h_values(image: jax.Array, mapping: HostMapping, by_tiles: bool = False) -> jax.Array:
    """``by_tiles``: a transfer of its own, which may run tile by tile (:func:`_stick_tile_dim`)."""
    if mapping.layout.is_arranged:
        return _d2h_values(_arranged(image, mapping, inverse=True), _standard(mapping), by_tiles)
    tiles = tiling(mapping)
    if tiles is not None:
        return _d2h_tiled(image, tiles, by_tiles)
    dst = jnp.zeros(mapping.shape, image.dtype)
    return execute(image, dst, mapping.dci(host_to_device=False))


def _d2h_tiled(image: jax.Array, tiles: Tiling, by_tiles: bool = False) -> jax.Array:
    """The host tensor in a tiled image (the inverse of :func:`_h2d_tiled`).

    Inside a kernel the transpose stays one op XLA can fuse with what reads the values
    (a restickify's write, a copy); a transfer of its own (``by_tiles``) may instead
    run tile by tile.
    """
    tile_dim = _stick_tile_dim(tiles) if by_tiles else None
    if tile_dim is not None:
        return _d2h_by_tiles(image, tiles, tile_dim)
    return jax.lax.reshape(_d2h_sizes(image, tiles), tiles.shape)


def _d2h_sizes(image: jax.Array, tiles: Tiling) -> jax.Array:
    """The host tensor in a tiled image, shaped ``tiles.sizes`` (or as tiled, if equal)."""
    x = jax.lax.transpose(image, tiles.order)
    x = _cut(x, x.shape[: x.ndim - tiles.unwalked] + (1,) * tiles.unwalked)
    if tiles.extents == tiles.sizes:  # no cut: a reshape to either is the same
        return x
    return _cut(jax.lax.reshape(x, tiles.extents), tiles.sizes)


def _stick_tile_dim(tiles: Tiling) -> int | None:
    """The image dim of the last segment's tiles, when a transfer runs tile by tile.

    That is when the last host segment is exactly a tile dim and the image's last dim
    (its sticks), its last tile partly filled, and every other device dim is already in
    host order and whole. The one transpose, reshape and slice would then fuse into a
    loop XLA's CPU backend runs element by element (the slice's partial rows defeat its
    vectorised transpose): 47 ms of CPU for a ``[4096, 4000]`` float16 read where a
    copy takes 3 ms. Copying each tile's ``[rows, lanes]`` block into its column range
    of the result (one box update per tile, in a loop) moves whole sticks: 8-10 ms.
    With a full last tile the transpose needs no slice and is as fast as the loop.
    """
    order, n = tiles.order, len(tiles.order)
    if tiles.unwalked or n < 2 or order[-1] != n - 1 or tiles.extents[:-1] != tiles.sizes[:-1]:
        return None
    tile_dim, size = order[-2], tiles.device_size
    rest = [j for j in order if j != tile_dim]
    if size[tile_dim] < 2 or rest != sorted(rest) or tiles.extents[-1] == tiles.sizes[-1]:
        return None
    full = tiles.extents[-1] == size[tile_dim] * size[-1]
    # Only the last tile holds padding (a layout may pad whole tiles more: a pair of them).
    return tile_dim if full and tiles.sizes[-1] > (size[tile_dim] - 1) * size[-1] else None


def _d2h_by_tiles(image: jax.Array, tiles: Tiling, tile_dim: int) -> jax.Array:
    """:func:`_d2h_tiled` tile by tile (see above).

    On the CPU backend the FFI handler of :mod:`._ffi` copies the sticks; elsewhere a
    loop makes one box update per tile of the last segment. Each tile's block, the
    image at one index of ``tile_dim``, holds the rows of the result in host order and
    one stick of each; tile ``t`` fills columns ``[t * lanes, (t + 1) * lanes)``, the
    last tile only its valid lanes.
    """
    count, lanes = image.shape[tile_dim], image.shape[-1]
    width = tiles.sizes[-1]
    rows = math.prod(tiles.sizes[:-1])

    def block(image: jax.Array, t: Any, valid: int = lanes) -> jax.Array:
        piece = jax.lax.dynamic_index_in_dim(image, t, tile_dim, keepdims=False)
        return jax.lax.slice_in_dim(piece.reshape(rows, lanes), 0, valid, axis=1)

    def loop(image: jax.Array) -> jax.Array:
        def put(t: Any, out: jax.Array) -> jax.Array:
            return jax.lax.dynamic_update_slice(out, block(image, t), (0, t * lanes))

        out = jax.lax.fori_loop(0, count - 1, put, jnp.zeros((rows, width), image.dtype))
        last = block(image, count - 1, width - (count - 1) * lanes)
        out = jax.lax.dynamic_update_slice(out, last, (0, (count - 1) * lanes))
        return jax.lax.reshape(out, tiles.shape)

    return d2h_tiles(image, tile_dim, width, tiles.shape, loop)


def _tiled_by(tiles: Tiling) -> Callable[[jax.Array, Any], jax.Array]:
    """:func:`_h2d_tiled` of ``tiles``, as a function of the host tensor and the fill."""
    return lambda x, fill: _h2d_tiled(x, tiles, fill)


def _h2d_tiled(x: jax.Array, tiles: Tiling, fill: Any) -> jax.Array:
    """The tiled image of host tensor ``x``, its padding ``fill``."""
    fill = jnp.asarray(fill, x.dtype)
    shape = tuple(tiles.device_size[j] for j in tiles.order)
    walked = shape[: len(shape) - tiles.unwalked] + (1,) * tiles.unwalked
    if tiles.extents != tiles.sizes:
        x = _grow(jax.lax.reshape(x, tiles.sizes), tiles.extents, fill)
    x = jax.lax.reshape(x, walked)
    x = _grow(x, shape, fill)
    return jax.lax.transpose(x, tuple(int(i) for i in np.argsort(tiles.order)))


def _cut(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The leading ``shape`` corner of ``x``."""
    return x if x.shape == shape else jax.lax.slice(x, (0,) * x.ndim, shape)


def _grow(x: jax.Array, shape: tuple[int, ...], fill: jax.Array) -> jax.Array:
    """``x`` extended at the end of each dim to ``shape`` with ``fill``."""
    if x.shape == shape:
        return x
    return jax.lax.pad(x, fill, [(0, n - m, 0) for n, m in zip(shape, x.shape, strict=True)])


# The formats XLA's CPU backend may alter when it only moves them: it emulates float8
# through wider types (canonicalising NaN payloads), and on CPUs with AVX512-BF16 LLVM
# moves bfloat16 through float32 (flushing subnormals). float16 and float32 values,
# integers and bools it moves exactly, and moving them as themselves keeps XLA's
# in-place box updates (a bitcast back would fuse them into one kernel).
_MOVED_AS_BITS = (
    np.dtype(jnp.bfloat16),
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e5m2),
)


def bits_dtype(dtype: Any) -> np.dtype:
    """The dtype values of ``dtype`` move as inside XLA.

    bfloat16 and the float8 formats, which XLA may alter, move as the unsigned integer
    of their width; every other dtype moves as itself.
    """
    dt = np.dtype(dtype)
    return np.dtype(f"uint{8 * dt.itemsize}") if dt in _MOVED_AS_BITS else dt


def _bitcast(x: Any, dtype: np.dtype) -> jax.Array:
    """``x``'s bits as ``dtype`` (of the same width): traced, XLA's bitcast; eager, a view.

    An eager ``bitcast_convert_type`` compiles a program of its own per shape and dtype
    (tens of milliseconds of XLA for a free reinterpretation); a concrete array is
    reinterpreted as a NumPy view instead (the same bits), on the array's own devices
    when it was placed on them.
    """
    if isinstance(x, jax.core.Tracer):
        return jax.lax.bitcast_convert_type(x, dtype)
    view = np.asarray(x).view(dtype)  # (jnp.asarray of a NumPy array compiles a copy)
    committed = isinstance(x, jax.Array) and x.committed
    return jax.device_put(view, x.sharding if committed else None)


def as_bits(x: jax.Array) -> jax.Array:
    """``x`` reinterpreted as :func:`bits_dtype` (a free bitcast; no value changes)."""
    bits = bits_dtype(x.dtype)
    return x if bits == x.dtype else _bitcast(x, bits)


# XLA writes a padded image by box updates into a filled one, which it lowers to selects
# (a pad). LLVM folds the bitcasts around such a select into a select of bfloat16
# values, and on CPUs with AVX512-BF16 it moves those through float32 and back with
# vcvtneps2bf16, which flushes subnormals. So after a move that selects (``fence``),
# the bitcast back to bfloat16 sits behind an optimization barrier: a kernel of its
# own, one more pass over the data. After other moves (slices, transposes,
# concatenations) it stays fused, as it does for float8, whose values LLVM moves as
# integers.
_FENCED = (np.dtype(jnp.bfloat16),)


def from_bits(x: jax.Array, dtype: Any, *, fence: bool = False, then: Any = None) -> jax.Array:
    """The inverse of :func:`as_bits`: bits reinterpreted as ``dtype``.

    Args:
        x: the bits.
        dtype: the dtype they hold.
        fence: whether the move that made ``x`` selects (a pad or a box update into a
            filled buffer); bfloat16 then leaves through an optimization barrier.
        then: a move of the bits after the barrier (an arrangement, which XLA cancels).
    """
    dt = np.dtype(dtype)
    if fence and dt in _FENCED and x.dtype != dt and isinstance(x, jax.core.Tracer):
        x = jax.lax.optimization_barrier(x)  # (a concrete x went through no fused select)
    x = x if then is None else then(x)
    return x if x.dtype == dt else _bitcast(x, dt)


def _has_padding(shape: Sequence[int], layout: SpyreTensorLayout) -> bool:
    """Whether an image of ``shape`` in ``layout`` is written by box updates (selects).

    Images the host array fills exactly are assembled from its boxes instead.
    """
    return math.prod(shape) != math.prod(layout.device_size)


def _fill(value: Any, dtype: np.dtype) -> jax.Array:
    """The fill scalar of a traced transfer, as the bits it moves as."""
    return jnp.asarray(np.asarray(value, dtype=dtype).view(bits_dtype(dtype)))


def _h2d_traced(x: jax.Array, fill: jax.Array, mapping: HostMapping) -> jax.Array:
    # A transfer of its own runs tile by tile through the FFI handler (it moves bytes);
    # a kernel's write (an astype's, inside ``without_handler``) stays XLA's to fuse.
    # (The image is arranged after the fence.)
    image = _h2d_values(as_bits(x), _standard(mapping), fill, by_tiles=handler_active())
    fence = _has_padding(x.shape, mapping.layout)
    return from_bits(image, x.dtype, fence=fence, then=lambda b: _arranged(b, mapping))


def _d2h_traced(image: jax.Array, mapping: HostMapping) -> jax.Array:
    # A transfer of its own runs tile by tile: through the FFI handler in every format (it
    # moves bytes), else in XLA's loop only in formats XLA moves as themselves (the
    # bitcasts of the others would each be a pass of their own around the loop; on a
    # backend other than the CPU, where the handler does not run, they pay that).
    by_tiles = handler_active() or bits_dtype(image.dtype) == image.dtype
    return from_bits(_d2h_values(as_bits(image), mapping, by_tiles=by_tiles), image.dtype)


# Eager XLA transfers compile once per mapping (layout and host shape); traced ones
# inline the bodies above (a nested jit would only add compile time to the caller's
# program).
_h2d = jax.jit(_h2d_traced, static_argnames=("mapping",))
_d2h = jax.jit(_d2h_traced, static_argnames=("mapping",))


def _validate(descriptors: Sequence[Descriptor], src_shape: Any, dst_shape: Any) -> None:
    """Check every descriptor addresses a box inside both buffers (raises LayoutError)."""
    for d in descriptors:
        box_plan(tuple(src_shape), d.size[::-1], d.stride_src[::-1], d.offset_src)
        box_plan(tuple(dst_shape), d.size[::-1], d.stride_dst[::-1], d.offset_dst)


def _on_host(x: Any, descriptors: Sequence[Descriptor], dtype: np.dtype) -> bool:
    """Whether an eager transfer of ``x`` takes the host engine."""
    return not isinstance(x, jax.core.Tracer) and host_engine_suits(descriptors, dtype.itemsize)


def _h2d_on_host(
    x: Any, descriptors: Sequence[Descriptor], mapping: HostMapping, fill: Any
) -> jax.Array:
    if mapping.layout.is_arranged:
        image = np.asarray(_h2d_on_host(x, descriptors, _standard(mapping), fill))
        return jax.device_put(np.ascontiguousarray(_arranged(image, mapping)))
    src = np.ascontiguousarray(np.asarray(x))
    device_size = mapping.layout.device_size
    _validate(descriptors, src.shape, device_size)
    image = aligned_empty(device_size, src.dtype)
    bits = f"u{image.itemsize}"
    fill_bits = np.asarray(fill, src.dtype).view(bits)
    # Poison the slabs that hold the padding (data written there next overwrites it).
    for dim, start, stop in mapping.padding_slabs():
        index = [slice(None)] * image.ndim
        index[dim] = slice(start, stop)
        image.view(bits)[tuple(index)] = fill_bits
    return jax.device_put(run_on_host(src, image, descriptors, host_is_src=True))


def _d2h_on_host(image: Any, descriptors: Sequence[Descriptor], mapping: HostMapping) -> jax.Array:
    shape = mapping.shape
    src = np.ascontiguousarray(_arranged(np.asarray(image), mapping, inverse=True))
    _validate(descriptors, src.shape, shape)
    out = aligned_empty(shape, src.dtype)
    return jax.device_put(run_on_host(src, out, descriptors, host_is_src=False))


def _to_jax(x: Any, dtype: np.dtype) -> jax.Array:
    """``x`` as a JAX array; NumPy arrays go through an aligned copy the CPU can adopt."""
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        staged = aligned_empty(x.shape, dtype)
        np.copyto(staged, x)
        return jax.device_put(staged)
    return jnp.asarray(x, dtype)


def dma_h2d(x: Any, layout: SpyreTensorLayout, *, pad_value: Any = None) -> jax.Array:
    """Host -> device: the device image of ``x`` in ``layout``.

    Runs the descriptors of ``generate_dci(x.shape, layout)``. Padding is never
    written: it keeps the fill of the fresh image, a poison value (NaN for float
    formats, the most negative integer for integer formats) unless ``pad_value`` is
    given. Works eagerly and under ``jax.jit`` (with ``layout`` static); eager
    transfers that are small or stick-granular run on the host engine.

    Args:
        x: a host array (NumPy or JAX) whose dtype maps to ``layout.device_dtype``.
        layout: the device layout.
        pad_value: fill of the padding positions; defaults to the poison value.

    Returns:
        A JAX array of shape ``layout.device_size`` and the dtype of ``x``.

    Raises:
        LayoutError: if the dtype does not match the layout's format or the layout
            cannot hold an array of this shape.
    """
    if not isinstance(layout, SpyreTensorLayout):
        raise LayoutError(f"layout must be a SpyreTensorLayout, got {layout!r}")
    dt = _check_format(_dtype_of(x), layout, f"host array of shape {np.shape(x)}")
    fill = poison_value(dt) if pad_value is None else pad_value
    if isinstance(layout, LanedLayout):
        x = x if isinstance(x, np.ndarray | jax.Array) else np.asarray(x, dt)
        return dma_h2d(_spread_lanes(x, layout, fill), parent_layout(layout), pad_value=fill)
    mapping = layout.for_host(np.shape(x))
    dci = _standard(mapping).dci(host_to_device=True)  # an arrangement moves no stick
    if _on_host(x, dci, dt):
        _record("h2d", "host", x)
        return _h2d_on_host(x, dci, mapping, fill)
    if isinstance(x, jax.core.Tracer):
        _record("h2d", "traced", x)
        return _h2d_traced(x, _fill(fill, dt), mapping)
    _record("h2d", "xla", x)
    return _h2d(_to_jax(x, dt), _fill(fill, dt), mapping=mapping)


def dma_d2h(image: Any, shape: Sequence[int], layout: SpyreTensorLayout) -> jax.Array:
    """Device -> host: the host array of ``shape`` held in a device image.

    Runs the descriptors of ``generate_dci(shape, layout, host_to_device=False)``;
    padding is never read, and broadcast device dims are read once. Works eagerly and
    under ``jax.jit``; eager transfers that are small or stick-granular run on the host
    engine.

    Args:
        image: the device image, of shape ``layout.device_size``.
        shape: host sizes.
        layout: the device layout.

    Returns:
        A JAX array of ``shape`` and the image's dtype.

    Raises:
        LayoutError: if the image's shape or dtype does not match the layout, or the
            layout cannot hold an array of this shape.
    """
    if not isinstance(layout, SpyreTensorLayout):
        raise LayoutError(f"layout must be a SpyreTensorLayout, got {layout!r}")
    dt = _check_format(_dtype_of(image), layout, "device image")
    if tuple(np.shape(image)) != layout.device_size:
        raise LayoutError(
            f"device image has shape {tuple(np.shape(image))}, expected the layout's "
            f"device_size {layout.device_size}"
        )
    if isinstance(layout, LanedLayout):
        layout.for_host(shape)  # validates the binding
        whole = dma_d2h(image, parent_shape(layout, tuple(shape)), parent_layout(layout))
        return _gather_lanes(whole, layout, shape)
    mapping = layout.for_host(shape)
    dci = _standard(mapping).dci(host_to_device=False)  # an arrangement moves no stick
    if _on_host(image, dci, dt):
        _record("d2h", "host", image)
        return _d2h_on_host(image, dci, mapping)
    if isinstance(image, jax.core.Tracer):
        _record("d2h", "traced", image)
        return _d2h_traced(image, mapping)
    _record("d2h", "xla", image)
    return _d2h(_to_jax(image, dt), mapping=mapping)


def d2h_bits(image: jax.Array, shape: Sequence[int], layout: SpyreTensorLayout) -> jax.Array:
    """:func:`dma_d2h` as :func:`as_bits`, for kernels that go on moving the values.

    Traced, the bits never become floats on the way (and so need no :func:`from_bits`
    fence); eager, this is :func:`dma_d2h` (the host engine) reinterpreted.
    """
    if isinstance(image, jax.core.Tracer):
        return d2h_values(as_bits(image), tuple(shape), layout)
    return as_bits(dma_d2h(image, shape, layout))


def relayout_bits(
    image: jax.Array,
    dtype: Any,
    shape: Sequence[int],
    src: SpyreTensorLayout,
    dst: SpyreTensorLayout,
) -> jax.Array:
    """``h2d_bits(d2h_bits(...))``: traced between tilings, one reshape, sizes to sizes."""
    dt, shape = np.dtype(dtype), tuple(shape)
    plain = not any(isinstance(x, LanedLayout) or x.is_arranged for x in (src, dst))
    a, b = (tiling(x.for_host(shape)) for x in (src, dst)) if plain else (None, None)
    if not isinstance(image, jax.core.Tracer) or a is None or b is None:
        return h2d_bits(d2h_bits(image, shape, src), dt, dst)
    moved = transposed(as_bits(image), a, b)  # exact tilings: one transpose
    if moved is None:
        moved = _h2d_tiled(_d2h_sizes(as_bits(image), a), b, _fill(poison_value(dt), dt))
    return from_bits(moved, dt, fence=_has_padding(shape, dst))


def h2d_bits(
    bits: jax.Array, dtype: Any, layout: SpyreTensorLayout, *, selected: bool = False
) -> jax.Array:
    """:func:`dma_h2d` of the values of ``dtype`` whose bits are ``bits`` (see :func:`d2h_bits`).

    ``selected`` says the bits went through a select on the way (a pad), which the
    bitcast back must be fenced from (see :func:`from_bits`), as from the box updates
    of a padded image. Returns the device image in ``dtype``, its padding poisoned.
    """
    dt = np.dtype(dtype)
    if isinstance(bits, jax.core.Tracer):
        image = h2d_values(bits, layout, _fill(poison_value(dt), dt))
        return from_bits(image, dt, fence=selected or _has_padding(bits.shape, layout))
    return dma_h2d(from_bits(bits, dt), layout)
