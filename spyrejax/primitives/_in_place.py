"""Results written in place: a value produced straight into a window of a larger buffer.

A layout with gaps (``SpyreTensorLayout.with_gap``) places a tensor inside a larger
device buffer. :func:`window_layout` gives, for a piece of a destination tensor (a
part of a ``concatenate``, the update of a ``dynamic_update_slice``, the operand of a
``pad``), the gapped layout whose image *is* the destination's buffer: the piece's
elements sit exactly where the destination's layout puts them. A producer planned in
that layout writes its result there (its kernel's output descriptors carry the gaps:
SuperDSC ``frontGap_``/``backGap_``), so joining the pieces moves nothing:

- :class:`Place` is that write: the producer's result, seen in the window (a view:
  on the device the producer wrote there in the first place);
- :class:`Assemble` is the destination made of its pieces (and, for an update in
  place, of the buffer it updates): a view of the buffer the pieces were written into;
- :class:`FillAround` is a ``pad`` whose operand was written into its window: only the
  border is written (with the fill);
- :class:`SliceView` is a static slice seen in its window of the operand's buffer (the
  halves of RoPE's rotate-half: ``x[..., :D/2]``, ``x[..., D/2:]``): a view whose start
  offset is the window's front gaps, read in place by the kernels that take gaps;
- :class:`UpdateAt` is an update in place at start indices known only at run time
  (a KV cache grown at a traced position): the update's producer writes it at the
  window those indices select (its output descriptors offset at launch, from the
  indices the host reads as it reads a loop's predicate).

The emulator's images are values, so the kernels put each window into one image; the
device moves nothing, which is what their ``view`` role tells the cost model. Under
``emulate="cores"`` :class:`Place` and :class:`Assemble` run per core as the stores they
stand for (:mod:`spyrejax.primitives._writes`); :class:`SliceView` stores nothing and
stays whole.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreInternalError, SpyreTypeError
from ..dma._dma import from_bits
from ..layout._devdims import DevDim, device_dims
from ..layout._layout import SpyreTensorLayout
from ..layout._segments import row_major_strides
from ._array import PadFill, SpyreArray, SpyreType
from ._base import SpyrePrim
from ._masks import poison
from ._values import logical_values
from ._writes import JoinedBits, ProducerWrite, bits_of, from_bits_of

__all__ = [
    "Assemble",
    "FillAround",
    "Place",
    "SliceView",
    "UpdateAt",
    "assemble",
    "fill_around",
    "place",
    "slice_view",
    "ungapped",
    "update_at",
    "update_dims",
    "valid_image",
    "window_layout",
    "without_gaps",
]


def without_gaps(layout: SpyreTensorLayout) -> SpyreTensorLayout:
    """``layout`` with its gaps removed: the layout of the window alone."""
    if not layout.has_gaps:
        return layout
    return SpyreTensorLayout.from_stride_map(
        layout.valid_size, layout.stride_map, layout.device_dtype
    )


def _tags(layout: SpyreTensorLayout, shape: tuple[int, ...]) -> tuple[DevDim, ...]:
    return device_dims(layout, shape, shape, row_major_strides(shape))


def window_layout(
    dest: SpyreTensorLayout,
    dest_shape: Sequence[int],
    piece_shape: Sequence[int],
    offsets: Sequence[int],
) -> SpyreTensorLayout:
    """The layout of a piece of ``dest`` at ``offsets``: a window of ``dest``'s buffer.

    The piece gets the default layout of its shape in ``dest``'s dim order, with gaps
    around it on the device dims that walk the dims where it is smaller than the
    destination, so every element of the piece lands where ``dest`` puts element
    ``index + offsets``. That needs ``dest`` to be a default layout, and on each such
    dim the piece to start on a whole step of its outer device dim (a stick boundary
    along the stick dim) and to fill whole steps unless it ends the dim.

    Raises:
        LayoutError: naming why the piece is no window of ``dest``'s buffer.
    """
    shape, piece, offs = tuple(dest_shape), tuple(piece_shape), tuple(offsets)
    if len(piece) != len(shape) or len(offs) != len(shape):
        raise LayoutError(
            f"window: piece {list(piece)} at {list(offs)} is not of rank {len(shape)}"
        )
    if any(o < 0 or o + p > n for o, p, n in zip(offs, piece, shape, strict=True)):
        raise LayoutError(f"window: piece {list(piece)} at {list(offs)} leaves {list(shape)}")
    if dest.has_gaps:
        raise LayoutError(f"window: {dest} is itself a window")
    order = dest.for_host(shape).dim_order()
    if order is None:
        raise LayoutError(f"window: {dest} is no default layout of {list(shape)}")
    layout = SpyreTensorLayout(piece, dest.device_dtype, list(order) or None)
    have, want = _tags(layout, piece), _tags(dest, shape)
    if len(have) != len(want):
        raise LayoutError(f"window: {layout} and {dest} differ in device dims")
    gaps: dict[int, tuple[int, int]] = {}
    for h, (o, p, n) in enumerate(zip(offs, piece, shape, strict=True)):
        if (o, p) != (0, n):
            gaps.update(_dim_gap(h, o, p, n, have, want))
    for k, (a, b) in enumerate(zip(have, want, strict=True)):
        single = k in gaps and a.size == 1  # a device dim of one step walks nothing
        if ((a.dims, a.ratio) != (b.dims, b.ratio) and not single) or (
            k not in gaps and a.size != b.size
        ):
            raise LayoutError(f"window: device dim {k} of {layout} is not that of {dest}")
    for k, (front, back) in sorted(gaps.items()):
        layout = layout.with_gap(k, front, back)
    if layout.device_size != dest.device_size:
        raise LayoutError(f"window: {layout} does not fill {dest}'s buffer")
    return layout


def _dim_gap(
    h: int, o: int, p: int, n: int, have: tuple[DevDim, ...], want: tuple[DevDim, ...]
) -> dict[int, tuple[int, int]]:
    """The gap on the outer device dim walking host dim ``h`` (piece ``p`` at ``o`` of ``n``)."""
    walkers = [k for k, t in enumerate(want) if h in t.dims]
    if not walkers or any(len(want[k].dims) > 1 for k in walkers):
        raise LayoutError(f"window: host dim {h} is folded with another on the device")
    outer = max(walkers, key=lambda k: want[k].ratio)
    if outer == len(want) - 1:
        raise LayoutError(f"window: host dim {h} is walked by the stick dim alone (no gap there)")
    step = want[outer].ratio
    if o % step or (p % step and o + p != n):
        raise LayoutError(
            f"window: a piece of {p} at {o} of host dim {h} does not fill whole steps of "
            f"{step} elements"
        )
    if any(have[k].size != want[k].size for k in walkers if k != outer):
        raise LayoutError(f"window: the inner device dims of host dim {h} differ")
    front = o // step
    back = want[outer].size - front - have[outer].size
    if back < 0:
        raise LayoutError(f"window: a piece of {p} at {o} of host dim {h} overruns the buffer")
    return {outer: (front, back)}


class Place(ProducerWrite):
    """A fresh result seen in a window of a larger buffer (its producer wrote it there).

    Per core (``emulate="cores"``), each core stores its box into the window.
    """

    role = "view"
    write_name = "place"
    takes_gaps = True
    layout: SpyreTensorLayout

    def __init__(self, aval: SpyreType, *, layout: SpyreTensorLayout) -> None:
        if aval.is_view or aval.layout.has_gaps or without_gaps(layout) != aval.layout:
            raise LayoutError(
                f"place: {aval.str_short()} is not the window of {layout} (a fresh array "
                "in its layout without the gaps)"
            )
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(aval.shape, aval.dtype, layout, aval.pad)
        self.params = {"layout": layout}
        super().__init__()

    def kernel(self, img: jax.Array, exact: bool = True) -> jax.Array:
        zero = self.in_avals[0].pad is PadFill.ZERO
        fill = np.zeros((), img.dtype) if zero else poison(img.dtype)
        x = bits_of(img, exact)
        widths = [(f, b, 0) for f, b in self.layout.device_gaps]
        out = from_bits_of(jax.lax.pad(x, _like(fill, x), widths), img.dtype, exact)
        if exact:
            _remember_piece(out, x)
        return out

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return self.kernel(img, exact=False)


class SliceView(SpyrePrim):
    """A static slice (unit strides) seen in its window of the operand's buffer.

    The result is a fresh-looking array of the piece's shape whose layout is the
    piece's :func:`window_layout` in the operand's buffer: its start offset is the
    window's front gaps (device positions), so the index map, both DMA engines,
    pictures and export read it through the gap rules. Nothing moves. The operand must
    be a plain array (no view, no gaps) in a default layout, and the piece a window of
    it (:func:`window_layout`'s conditions: whole device steps on every cut dim).
    """

    role = "view"
    takes_gaps = True
    start: tuple[int, ...]
    limit: tuple[int, ...]

    def __init__(self, aval: SpyreType, *, start: tuple[int, ...], limit: tuple[int, ...]) -> None:
        if aval.is_view or aval.layout.has_gaps:
            raise LayoutError(
                f"slice view: {aval.str_short()} is a view or a window itself; its slices "
                "are copies"
            )
        piece = tuple(b - a for a, b in zip(start, limit, strict=True))
        layout = window_layout(aval.layout, aval.shape, piece, start)
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(piece, aval.dtype, layout, aval.pad)
        self.params = {"start": start, "limit": limit}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        return img  # the window is the operand's buffer itself


def slice_view(x: SpyreArray, start: Sequence[int], limit: Sequence[int]) -> SpyreArray:
    """``x[start:limit]`` (unit strides) as a view: its window of ``x``'s buffer.

    Raises:
        LayoutError: if ``x`` is a view or a window, or the slice is no window of its
            buffer (it cuts a device step, or the stick dim off a stick boundary).
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"slice_view: needs a SpyreArray, got {aval}")
    start_, limit_ = tuple(int(i) for i in start), tuple(int(i) for i in limit)
    if (
        len(start_) != aval.ndim
        or len(limit_) != aval.ndim
        or any(not 0 <= a < b <= n for a, b, n in zip(start_, limit_, aval.shape, strict=True))
    ):
        raise LayoutError(f"slice_view: [{start_}, {limit_}) is outside {aval.shape} or empty")
    return SliceView(aval, start=start_, limit=limit_)(x)


class Assemble(JoinedBits):
    """A tensor made of pieces written into windows of its buffer (and the buffer itself).

    The operands are the pieces in their :func:`window_layout` at ``offsets``; with
    ``base``, the first operand is the buffer they update in place (of the result's
    type), and the pieces overwrite their windows of it. Without it the windows tile
    the buffer. Nothing moves: every piece is already in place.
    """

    takes_gaps = True
    write_name = "assemble"
    layout: SpyreTensorLayout
    shape: tuple[int, ...]
    offsets: tuple[tuple[int, ...], ...]
    base: bool

    def __init__(
        self,
        *avals: SpyreType,
        layout: SpyreTensorLayout,
        shape: tuple[int, ...],
        offsets: tuple[tuple[int, ...], ...],
        base: bool = False,
    ) -> None:
        pieces = avals[1:] if base else avals
        if any(a.dtype != avals[0].dtype for a in avals) or len(pieces) != len(offsets):
            raise SpyreTypeError("assemble: operands need one dtype and one offset per piece")
        out = SpyreType.contiguous(shape, avals[0].dtype, layout)
        if base and (avals[0].is_view or avals[0].layout != layout):
            raise LayoutError(f"assemble: the buffer {avals[0].str_short()} is not {layout}")
        for a, off in zip(pieces, offsets, strict=True):
            if a.is_view or a.layout != window_layout(layout, shape, a.shape, off):
                raise LayoutError(f"assemble: {a.str_short()} is not the window at {list(off)}")
        if not base and sum(math.prod(a.layout.valid_size) for a in pieces) != math.prod(
            layout.device_size
        ):
            raise LayoutError(f"assemble: the pieces do not tile {layout}'s buffer")
        zero = all(a.pad is PadFill.ZERO for a in avals)
        self.in_avals = tuple(avals)
        self.out_aval = SpyreType.contiguous(
            shape, out.dtype, layout, PadFill.ZERO if zero else out.pad
        )
        self.params = {"layout": layout, "shape": shape, "offsets": offsets, "base": base}
        super().__init__()

    def kernel(self, *imgs: jax.Array) -> jax.Array:
        axis = self._axis()
        if axis is None:
            return super().kernel(*imgs)
        pieces = [_piece_bits(m, a.layout) for m, a in zip(imgs, self.in_avals, strict=True)]
        # A concatenate selects nothing: the bits leave unfenced (``dma._dma.from_bits``).
        return from_bits(self._concatenated(pieces, axis), imgs[0].dtype)

    def _owner(self, at: list[np.ndarray]) -> Any:
        """The buffer (operand 0 with ``base``) outside the pieces, else the piece's window."""
        owner: Any = 0
        first = int(self.base)
        pieces = zip(self.in_avals[first:], self.offsets, strict=True)
        for k, (a, off) in enumerate(pieces, first):
            inside = np.ones((), bool)
            for pos, o, n in zip(at, off, a.shape, strict=True):
                inside = inside & (pos >= o) & (pos < o + n)
            owner = np.where(inside, k, owner)
        return owner

    def _axis(self) -> int | None:
        return None if self.base else _tiling_axis([a.layout for a in self.in_avals])

    def _concatenated(self, pieces: Sequence[jax.Array], axis: int) -> jax.Array:
        """The pieces' valid images, in their windows' order along ``axis``, joined."""
        order = sorted(range(len(pieces)), key=lambda i: self.in_avals[i].layout.gap_offsets)
        return jax.lax.concatenate([pieces[i] for i in order], axis)

    def _join(self, parts: tuple[jax.Array, ...]) -> jax.Array:
        axis = self._axis()
        if axis is not None:
            valid = [valid_image(p, a.layout) for p, a in zip(parts, self.in_avals, strict=True)]
            return self._concatenated(valid, axis)
        out = parts[0]
        pairs = zip(parts, self.in_avals, strict=True)
        for part, aval in list(pairs)[1:]:  # the first is the buffer (or is in its window)
            out = _window_into(out, part, aval.layout)
        return out


class FillAround(SpyrePrim):
    """A constant ``pad`` of an operand written into its window: the border is filled.

    The operand is in its :func:`window_layout` at ``offsets`` of the result's buffer;
    the kernel writes the fill everywhere else. It moves (writes) the border's device
    positions, never the operand.
    """

    role = "copy"
    takes_gaps = True
    layout: SpyreTensorLayout
    shape: tuple[int, ...]
    offsets: tuple[int, ...]
    value: Any

    def __init__(
        self,
        aval: SpyreType,
        *,
        layout: SpyreTensorLayout,
        shape: tuple[int, ...],
        offsets: tuple[int, ...],
        value: Any,
    ) -> None:
        if aval.is_view or aval.layout != window_layout(layout, shape, aval.shape, offsets):
            raise LayoutError(f"pad in place: {aval.str_short()} is not the window at {offsets}")
        zero = aval.pad is PadFill.ZERO and value == 0
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(
            shape, aval.dtype, layout, PadFill.ZERO if zero else PadFill.POISON
        )
        self.params = {"layout": layout, "shape": shape, "offsets": offsets, "value": value}
        super().__init__()

    @property
    def moves(self) -> int:
        """The border's device positions: the buffer less the operand's window."""
        return math.prod(self.layout.device_size) - math.prod(self.in_avals[0].layout.valid_size)

    def kernel(self, img: jax.Array, exact: bool = True) -> jax.Array:
        x = bits_of(img, exact)
        fill = _like(np.asarray(self.value, self.in_avals[0].dtype).astype(img.dtype), x)
        out = jax.numpy.full(x.shape, fill, x.dtype)
        return from_bits_of(_window_into(out, x, self.in_avals[0].layout), img.dtype, exact)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return self.kernel(img, exact=False)


def fill_around(
    x: SpyreArray, value: Any, layout: SpyreTensorLayout, shape: Sequence[int], offsets: Any
) -> SpyreArray:
    """``x`` (in its window at ``offsets``) padded with ``value`` to ``shape`` in ``layout``."""
    prim = FillAround(
        jax.typeof(x),
        layout=layout,
        shape=tuple(int(n) for n in shape),
        offsets=tuple(int(o) for o in offsets),
        value=np.asarray(value).item(),
    )
    return prim(x)


def place(x: SpyreArray, layout: SpyreTensorLayout) -> SpyreArray:
    """``x`` (a fresh array) seen in ``layout``, a window of a larger buffer."""
    return Place(jax.typeof(x), layout=layout)(x)


def assemble(
    pieces: Sequence[SpyreArray],
    layout: SpyreTensorLayout,
    shape: Sequence[int],
    offsets: Sequence[Sequence[int]],
    base: SpyreArray | None = None,
) -> SpyreArray:
    """The tensor of ``shape`` in ``layout`` made of ``pieces`` placed at ``offsets``.

    Each piece must be in its :func:`window_layout`; ``base`` is the buffer they update
    (of the result's type), else the pieces tile the buffer.
    """
    args: list[Any] = ([] if base is None else [base]) + list(pieces)
    prim = Assemble(
        *[jax.typeof(a) for a in args],
        layout=layout,
        shape=tuple(int(n) for n in shape),
        offsets=tuple(tuple(int(i) for i in o) for o in offsets),
        base=base is not None,
    )
    return prim(*args)


def update_dims(
    dest: SpyreTensorLayout, dest_shape: Sequence[int], piece_shape: Sequence[int]
) -> tuple[int | None, ...]:
    """Per host dim, the device dim a run-time start index moves a piece along.

    None where the piece spans the dim. A piece can start anywhere along a dim only if
    one device dim walks it in steps of one element (not the stick dim).

    Raises:
        LayoutError: if the piece is no window of ``dest``'s buffer at some start.
    """
    zero = [0] * len(dest_shape)
    base = window_layout(dest, dest_shape, piece_shape, zero)
    out: list[int | None] = []
    for h, (p, n) in enumerate(zip(piece_shape, dest_shape, strict=True)):
        if p == n:
            out.append(None)
            continue
        one = window_layout(dest, dest_shape, piece_shape, [int(k == h) for k in range(len(zero))])
        moved = [
            j
            for j, (a, b) in enumerate(zip(base.device_gaps, one.device_gaps, strict=True))
            if a != b
        ]
        if len(moved) != 1 or one.device_gaps[moved[0]][0] != base.device_gaps[moved[0]][0] + 1:
            raise LayoutError(f"update: host dim {h} does not move one device dim by one")
        out.append(moved[0])
    return tuple(out)


class UpdateAt(SpyrePrim):
    """``dynamic_update_slice`` in place at traced start indices: nothing moves.

    The first operand is the buffer (of the result's type, overwritten), the second the
    update in its window's layout without the gaps (written by its producer where the
    start indices say), the rest the 0-d start indices. A start is clamped as
    ``lax.dynamic_update_slice`` clamps it.
    """

    role = "view"
    dims: tuple[int | None, ...]

    def __init__(self, base: SpyreType, update: Any, *starts: Any) -> None:
        dims = update_dims(base.layout, base.shape, update.shape)
        window = window_layout(base.layout, base.shape, update.shape, [0] * len(base.shape))
        if base.is_view or update.is_view or update.layout != without_gaps(window):
            raise LayoutError(
                f"update in place: {update.str_short()} is not a window of {base.str_short()}"
            )
        if len(starts) != base.ndim or any(getattr(s, "shape", ()) != () for s in starts):
            raise LayoutError(f"update in place: needs {base.ndim} scalar start indices")
        self.in_avals = (base, update, *starts)
        zero = base.pad is PadFill.ZERO and update.pad is PadFill.ZERO
        self.out_aval = replace(base, pad=PadFill.ZERO if zero else PadFill.POISON)
        self.params = {"dims": dims}
        super().__init__()

    def kernel(self, img: jax.Array, upd: jax.Array, *starts: Any) -> jax.Array:
        return self._update(img, upd, starts, exact=True)

    def tangent_kernel(self, img: jax.Array, upd: jax.Array, *starts: Any) -> jax.Array:
        return self._update(img, upd, starts, exact=False)

    def _update(self, img: jax.Array, upd: jax.Array, starts: Any, exact: bool) -> jax.Array:
        base, update = self.in_avals[0], self.in_avals[1]
        at = [jax.numpy.zeros((), np.int32)] * img.ndim
        for h, j in enumerate(self.dims):
            if j is None:
                continue
            s = _scalar(starts[h], self.in_avals[2 + h])
            at[j] = jax.numpy.clip(s, 0, base.shape[h] - update.shape[h]).astype(np.int32)
        out = jax.lax.dynamic_update_slice(bits_of(img, exact), bits_of(upd, exact), at)
        return from_bits_of(out, img.dtype, exact)


def _like(value: np.ndarray, x: jax.Array) -> jax.Array:
    """A scalar of the image's dtype, as ``x`` holds it (its bits, or itself)."""
    return jax.numpy.asarray(np.asarray(value).view(x.dtype))


def valid_image(img: jax.Array, window: SpyreTensorLayout) -> jax.Array:
    """The valid range of ``img`` (in layout ``window``): an image in ``without_gaps(window)``."""
    if not window.has_gaps:
        return img
    stop = [n - b for n, (_, b) in zip(img.shape, window.device_gaps, strict=True)]
    return jax.lax.slice(img, window.gap_offsets, stop)


def ungapped(t: SpyreType) -> SpyreType:
    """The type of ``t``'s valid range alone (:func:`valid_image` of its image)."""
    return replace(t, layout=without_gaps(t.layout)) if t.layout.has_gaps else t


# Pieces :class:`Place` padded while a program is traced: the padded image's id -> (a
# weak reference to it, the piece's bits unpadded). An entry leaves with its image.
_PLACED: dict[int, tuple[weakref.ref[Any], jax.Array]] = {}


def _remember_piece(out: jax.Array, bits: jax.Array) -> None:
    """Note that traced image ``out`` is ``bits`` padded into its window (see :class:`Place`).

    Its padding selects, so a bfloat16 image leaves it behind an optimization barrier
    (``dma._dma.from_bits``), which keeps XLA from folding the slice of it a join takes
    back to the piece: :class:`Assemble` reads the piece's bits from here instead, and
    the padded image, unread, leaves the program. Concrete arrays are not noted.
    """
    if isinstance(out, jax.core.Tracer):
        key = id(out)
        _PLACED[key] = (weakref.ref(out, lambda _: _PLACED.pop(key, None)), bits)


def _piece_bits(img: jax.Array, window: SpyreTensorLayout) -> jax.Array:
    """The bits of ``img``'s valid range: the piece :class:`Place` padded, or a slice.

    The piece is trusted by the image's identity alone, so its shape is checked against
    ``window``'s valid range: a mismatch raises rather than join wrong bits.
    """
    entry = _PLACED.get(id(img))
    if entry is not None and entry[0]() is img:
        bits = entry[1]
        if tuple(bits.shape) != tuple(window.valid_size):
            raise SpyreInternalError(
                f"the piece padded into this image has shape {tuple(bits.shape)}, "
                f"its window's valid range {tuple(window.valid_size)}"
            )
        return bits
    return valid_image(bits_of(img, True), window)


def _tiling_axis(windows: Sequence[SpyreTensorLayout]) -> int | None:
    """The device dim along which ``windows`` follow each other and tile their buffer.

    RoPE's halves, say. Joined as one concatenate along it, the join fuses with the
    pieces' producers; None: each piece is written over the first (a pass of its own).
    """
    cut = {k for w in windows for k, gap in enumerate(w.device_gaps) if gap != (0, 0)}
    if len(cut) != 1:
        return None
    (axis,) = cut
    spans = sorted((w.gap_offsets[axis], w.valid_size[axis]) for w in windows)
    size = windows[0].device_size[axis]
    ends = [front + length for front, length in spans]
    if spans[0][0] != 0 or ends[-1] != size:
        return None
    follows = all(end == front for end, (front, _) in zip(ends[:-1], spans[1:], strict=True))
    return axis if follows else None


def _window_into(out: jax.Array, img: jax.Array, window: SpyreTensorLayout) -> jax.Array:
    """``out`` with the valid range of ``img`` (in layout ``window``) written over it."""
    return jax.lax.dynamic_update_slice(out, valid_image(img, window), window.gap_offsets)


def _scalar(x: Any, t: Any) -> jax.Array:
    """The value of a start index: a 0-d Spyre image read through its layout, or a scalar."""
    return logical_values(x, t) if isinstance(t, SpyreType) else jax.numpy.asarray(x)


def update_at(base: SpyreArray, update: SpyreArray, starts: Sequence[Any]) -> SpyreArray:
    """``lax.dynamic_update_slice(base, update, starts)`` in place (see :class:`UpdateAt`)."""
    types = [jax.typeof(a) for a in (base, update, *starts)]
    return UpdateAt(*types)(base, update, *starts)
