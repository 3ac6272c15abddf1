"""Per-core index maps: every core's descriptors and LX box, composed into index arrays.

The per-core executor (``emulate="cores"``) moves each core's box of an operand from the
DDR image into LX by that core's descriptors (:func:`~spyrejax.device.core_dci`), reads
the LX box in the order of the op's iteration space, and stores its result back by the
store descriptors. Every one of those steps is an index map fixed by the division, so
this module walks them once in NumPy, at trace time, and composes them:

- :func:`load_sources`: for each core and local iteration point, the DDR element it
  reads (through its LX box), or -1 where the descriptors left that LX position unread;
- :func:`store_runs`: per store descriptor, the DDR element each core's run writes and
  the (core, point) of the result that LX position holds, or -1 (never written: poison).

An executor then gathers and scatters once per operand (per store descriptor) instead of
building each descriptor's and the LX box's indices out of ``iota`` arithmetic in the
program, which XLA had to compile (and fold) op by op. :class:`CoreMap` keeps such an
array as ``rows[c] + cols[p]`` when every core's map is core 0's moved by an offset (the
usual case: constants of one core's size), else whole.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .._errors import SpyreInternalError
from ..layout._arrangements import arranged_coords
from ..layout._lanes import LanedLayout
from ..layout._segments import axis_coord, row_major_strides
from ._division import WorkDivision
from ._percore import box_dci, box_start

__all__ = [
    "CoreMap",
    "Strided",
    "load_sources",
    "local_shape",
    "lx_index",
    "lx_map",
    "lx_sources",
    "starts",
    "store_runs",
    "valid_points",
]


@dataclass(frozen=True)
class CoreMap:
    """A ``[cores, points]`` array of flat indices (-1: none), kept factored if it can be.

    Attributes:
        rows: ``[cores]`` per-core offsets, or None when :attr:`full` holds the array.
        cols: ``[points]`` core 0's indices (-1: none on any core), or None.
        full: the whole ``[cores, points]`` array when it does not factor, else None.
        complete: no entry is -1.
        unique: complete and strictly ascending (so no index appears twice).
        ascending: the flattened array is sorted (and complete).
    """

    rows: np.ndarray | None
    cols: np.ndarray | None
    full: np.ndarray | None
    complete: bool = False
    unique: bool = False
    ascending: bool = False

    @staticmethod
    def of(a: np.ndarray) -> CoreMap:
        """``a`` factored as ``rows[:, None] + cols[None, :]`` where it is, else whole.

        Also says whether every entry is an index (``complete``), whether the indices
        are distinct (``unique``) and whether the flattened array is ``ascending``: the
        hints XLA's gathers and scatters take, checked here rather than assumed.
        """
        valid = a >= 0
        complete = bool(valid.all())
        steps = np.diff(a.reshape(-1))
        facts = {  # linear checks (a sort per map cost minutes of tracing on large models)
            "complete": complete,
            "unique": complete and bool((steps > 0).all()),
            "ascending": complete and bool((steps >= 0).all()),
        }
        if (valid == valid[0]).all():
            if not valid[0].any():
                return CoreMap(np.zeros(len(a), np.int64), a[0], None, **facts)
            j = int(np.argmax(valid[0]))
            rows = a[:, j] - a[0, j]
            if (a[:, valid[0]] == rows[:, None] + a[0, valid[0]]).all():
                return CoreMap(rows, a[0], None, **facts)
        return CoreMap(None, None, a, **facts)

    @staticmethod
    def factored(rows: np.ndarray, cols: np.ndarray) -> CoreMap:
        """The map ``rows[:, None] + cols[None, :]`` (``-1`` in ``cols``: none on any core).

        What :meth:`of` gives for that array, from ``cores + points`` entries: ``rows``
        counted from core 0 (``rows[0] == 0``), the facts checked on the two factors.
        """
        assert rows.size == 0 or rows[0] == 0
        complete = bool((cols >= 0).all())
        steps, gaps = np.diff(cols), np.diff(rows)
        seam = gaps + (cols[0] - cols[-1]) if cols.size else gaps  # row c's last -> c+1's first
        facts = {
            "complete": complete,
            "unique": complete and bool((steps > 0).all() and (seam > 0).all()),
            "ascending": complete and bool((steps >= 0).all() and (seam >= 0).all()),
        }
        return CoreMap(rows, cols, None, **facts)

    @property
    def shape(self) -> tuple[int, int]:
        """``(cores, points)``."""
        if self.full is not None:
            return (int(self.full.shape[0]), int(self.full.shape[1]))
        assert self.rows is not None and self.cols is not None
        return (len(self.rows), len(self.cols))

    @cached_property
    def strided(self) -> Strided | None:
        """The map as a strided view of the flat image (:class:`Strided`), or None.

        Only a complete map can be one; computed once per map (maps are memoised with
        their division).
        """
        if not self.complete:
            return None
        a = self.full
        if a is None:
            assert self.rows is not None and self.cols is not None
            outer, inner = Strided.of(self.rows), Strided.of(self.cols)
            if outer is not None and inner is not None:
                nest = Strided.nest(outer.offset + inner.offset, outer.dims + inner.dims)
                if nest is not None:
                    return nest
            a = self.rows[:, None] + self.cols[None, :]
        return Strided.of(a.reshape(-1))

    def indices(self, size: int) -> tuple[np.ndarray, np.ndarray | None]:
        """``(a, b)`` whose broadcast sum is the array, ``-1`` entries mapped past ``size``.

        ``b`` is None when ``a`` is the whole array. Every entry stays within int32.
        """
        if self.full is not None:
            return np.where(self.full < 0, size, self.full).astype(np.int32), None
        assert self.rows is not None and self.cols is not None
        past = size - min(0, int(self.rows.min()))  # any row + past >= size
        cols = np.where(self.cols < 0, past, self.cols)
        return self.rows.astype(np.int32)[:, None], cols.astype(np.int32)[None, :]


@dataclass(frozen=True)
class Strided:
    """A flat index array that is ``offset + sum_k i_k * stride_k`` over a loop nest.

    Such a map reads (or writes) the image as a view: a slice, a reshape into nested
    blocks and a transpose, instead of an index per element. Only nests whose strides,
    largest first, each divide the one before and whose blocks do not overlap
    (``size * stride <= `` the next larger stride) are kept: exactly the views a
    reshape and slice can take. A stride of 0 repeats (a broadcast).

    Attributes:
        offset: the first index.
        dims: ``(size, stride)`` per loop, outermost first (the array's order).
    """

    offset: int
    dims: tuple[tuple[int, int], ...]

    @staticmethod
    def of(flat: np.ndarray) -> Strided | None:
        """``flat`` (int, no -1) as a strided nest, or None if it is not one.

        Peels the innermost loop off repeatedly: the first run of one step is that
        loop's size (a run that crosses a loop boundary merges two loops that are one),
        and every other row must repeat it from its own start.
        """
        dims: list[tuple[int, int]] = []
        cur = flat.astype(np.int64, copy=False)
        while cur.size > 1:
            step = int(cur[1] - cur[0])
            off = np.flatnonzero(np.diff(cur) != step)
            n = int(off[0]) + 1 if off.size else cur.size
            if cur.size % n or step < 0:
                return None
            rows = cur.reshape(-1, n)
            if n > 1 and not (rows == rows[:, :1] + step * np.arange(n)).all():
                return None
            dims.append((n, step))
            cur = rows[:, 0]
        return Strided.nest(int(cur[0]) if cur.size else 0, tuple(reversed(dims)))

    @staticmethod
    def nest(offset: int, dims: tuple[tuple[int, int], ...]) -> Strided | None:
        """The nest ``dims`` from ``offset``, if a reshape and slice can take it (see above)."""
        moving = sorted((t, n) for n, t in dims if t > 0 and n > 1)
        for (t, n), (t_out, _) in itertools.pairwise(moving):
            if t_out % t or n * t > t_out:
                return None
        return Strided(offset, dims)


def _affine(sizes: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """``dot(i, strides)`` over the loop nest ``sizes`` (innermost first), flattened."""
    shape = tuple(reversed(sizes))
    idx = np.zeros(shape, np.int64)
    for k, st in enumerate(strides):
        idx = idx + _iota(shape, len(sizes) - 1 - k) * st
    return idx.reshape(-1)


def _iota(shape: tuple[int, ...], axis: int) -> np.ndarray:
    return np.arange(shape[axis], dtype=np.int64).reshape(
        tuple(-1 if a == axis else 1 for a in range(len(shape)))
    )


def _runs(div: WorkDivision, operand: int, load: bool) -> list[tuple[Any, np.ndarray, Any]]:
    """Per descriptor of core 0: the descriptor, every core's DDR offset, which points run.

    The third item is None when every core runs core 0's whole loop nest, else a
    ``[cores, points]`` bool (a smaller last slice runs fewer iterations).

    Raises:
        SpyreInternalError: if some core's loop nest walks DDR otherwise than core 0's
            (other strides, more descriptors or iterations).
    """
    dcis = _core_dcis(div, operand, load)
    out = []
    for i, d0 in enumerate(dcis[0][0]):
        offs, counts = [], []
        for dci, start in dcis:
            d = dci[i] if len(dci) == len(dcis[0][0]) else None
            if (
                d is None
                or (d.stride_src if load else d.stride_dst)
                != (d0.stride_src if load else d0.stride_dst)
                or len(d.size) != len(d0.size)
                or any(n > n0 for n, n0 in zip(d.size, d0.size, strict=True))
            ):
                raise SpyreInternalError(
                    f"internal error: the per-core loop nests of {div.space.opfunc} differ "
                    "in more than their DDR offset and last slice; please report it"
                )
            offs.append(start + (d.offset_src if load else d.offset_dst))
            counts.append(d.size)
        sizes = np.asarray(counts, np.int64)
        inside = None
        if not (sizes == np.asarray(d0.size)).all():
            shape = tuple(reversed(d0.size))
            inside = np.ones((len(sizes), math.prod(d0.size)), bool)
            for k in range(len(d0.size)):
                i_k = np.broadcast_to(_iota(shape, len(d0.size) - 1 - k), shape).reshape(1, -1)
                inside &= i_k < sizes[:, k : k + 1]
        out.append((d0, np.asarray(offs, np.int64), inside))
    return out


def _core_dcis(div: WorkDivision, operand: int, load: bool) -> list[tuple[Any, int]]:
    """Each core's descriptors and the DDR offset of its box.

    :func:`~spyrejax.device.core_dci` without building the same descriptors once per
    core: those of a box's shape (from the image's first element) are shared.
    """
    by_shape: dict[tuple[int, ...], Any] = {}
    out = []
    for c in range(div.cores_used):
        box = div.box(operand, c)
        shape = tuple(b - a for a, b in box)
        if shape not in by_shape:
            by_shape[shape] = box_dci(div, operand, shape, load=load)
        out.append((by_shape[shape], box_start(div, operand, box)))
    return out


def lx_sources(div: WorkDivision, operand: int) -> np.ndarray:
    """``[cores, box elements]``: the DDR element each core's LX position holds, or -1.

    The load descriptors run in order (a later one overwrites an earlier one).
    """
    n = math.prod(div.box_shape(operand, 0))
    out = np.full((div.cores_used, n), -1, np.int64)
    for d, ddr, inside in _runs(div, operand, load=True):
        src = ddr[:, None] + _affine(d.size, d.stride_src)[None, :]
        dst = d.offset_dst + _affine(d.size, d.stride_dst)
        if inside is None:
            out[:, dst] = src
        else:
            rows, cols = np.nonzero(inside)
            out[rows, dst[cols]] = src[rows, cols]
    return out


def lx_map(div: WorkDivision, operand: int) -> CoreMap:
    """:func:`lx_sources` as a :class:`CoreMap`, built factored where it factors.

    When every core runs core 0's whole loop nests, each moved by one offset for all of
    its descriptors, core ``c``'s LX holds core 0's sources plus that offset: only core
    0's row is built (the usual case; the whole array costs ``cores`` times as much).
    """
    return _memo(div, ("lx_map", operand), lambda: _lx_map(div, operand))


def _lx_map(div: WorkDivision, operand: int) -> CoreMap:
    runs = _runs(div, operand, load=True)
    shift = _common_shift(runs)
    if shift is None:
        return CoreMap.of(lx_sources(div, operand))
    row = np.full(math.prod(div.box_shape(operand, 0)), -1, np.int64)
    for d, ddr, _ in runs:
        row[d.offset_dst + _affine(d.size, d.stride_dst)] = ddr[0] + _affine(d.size, d.stride_src)
    return CoreMap.factored(shift, row)


def _common_shift(runs: list[tuple[Any, np.ndarray, Any]]) -> np.ndarray | None:
    """Each core's DDR offset from core 0's, if one for every descriptor and all run whole."""
    if not runs or any(inside is not None for *_, inside in runs):
        return None
    shift = runs[0][1] - runs[0][1][0]
    if any(((ddr - ddr[0]) != shift).any() for _, ddr, _ in runs[1:]):
        return None
    return shift


def _walked(div: WorkDivision, operand: int) -> list[str]:
    """The variables an operand walks (by a device dim of its own or folded), in order."""
    op = div.space.operands[operand]
    names = {w[0] for w in op.walks if w is not None}
    for j in range(len(op.walks)):
        fold = op.fold(j)
        if fold is not None:
            names.update(v for v in fold.vars if v is not None)
    return [n for n in div.space.names if n in names]


def local_shape(div: WorkDivision, operand: int) -> tuple[int, ...]:
    """The operand's axes over the iteration space: a variable's chunk, 1 if not walked."""
    walked = _walked(div, operand)
    return tuple(div.chunk(n) if n in walked else 1 for n in div.space.names)


def lx_index(div: WorkDivision, operand: int) -> np.ndarray:
    """For each local iteration point, its position in the core's LX box (same on every core).

    A device dim walking variable ``v`` with ratio ``r`` holds the point at its
    coordinate by the radix rule (:func:`~spyrejax.layout._segments.axis_coord`: ``v``'s
    remainder by the ratios of the dims walking ``v`` outside it, divided by ``r``),
    counted from the box: boxes start on whole slices, so local counts work. A device
    dim folding several logical dims (its variables never split, so local counts are
    global) holds it at the coordinate its :class:`~spyrejax.device.Fold` gives. A lane
    view's (``lanes=k::s``) lane ``c`` of its stick is the box's lane ``k + s * c``. Points
    outside the extents wrap into the box (they are never stored). An element
    arrangement then moves each point inside its group (``layout._arrangements``), as
    the layout's index map does.
    """
    op = div.space.operands[operand]
    shape = local_shape(div, operand)
    box = div.box_shape(operand, 0)
    strides = row_major_strides(box)

    def iota(var: str | None) -> Any:
        return 0 if var is None else _iota(shape, div.space.names.index(var))

    coords: list[Any] = [0] * len(op.walks)
    for j, w in enumerate(op.walks):
        fold = op.fold(j)
        if w is not None:
            var, ratio = w
            outer = sorted(
                (u[1] for u in op.walks if u is not None and u[0] == var and u[1] > ratio),
                reverse=True,
            )
            c = axis_coord([iota(var)], [1], ratio, outer)
            if j == len(op.walks) - 1 and isinstance(op.tensor.layout, LanedLayout):
                offset, step = op.tensor.layout.lanes  # a lane view's lane, spread out
                c = offset + step * c
        elif fold is not None:
            c = fold.index.coord([iota(v) for v in fold.vars])
        else:
            continue
        coords[j] = c
    layout = op.tensor.layout
    if layout.is_arranged:  # boxes hold whole groups (``_space._unit``): moved inside them
        pair = layout.for_host(op.tensor.base_shape or op.tensor.shape).pair
        coords = arranged_coords(coords, pair, layout.arrangement)
    idx = np.zeros(shape, np.int64)
    for j, c in enumerate(coords):
        idx = idx + c % box[j] * strides[j]
    return idx


def starts(div: WorkDivision) -> dict[str, np.ndarray]:
    """Per variable, each core's first (global) index: ``[cores]`` small ints."""
    slices = [div.core_to_slice(c) for c in range(div.cores_used)]
    return {n: np.asarray([s[n] * div.chunk(n) for s in slices], np.int32) for n in div.space.names}


def valid_points(div: WorkDivision, names: list[str], shape: tuple[int, ...]) -> np.ndarray | None:
    """``[cores, *shape]`` bool: the points whose variables in ``names`` are inside their extent.

    None when every point is (one point per core, or no padding).
    """
    first = starts(div)
    ok = None
    for n in names:
        axis = div.space.names.index(n)
        extent = div.space.dim(n).extent
        if shape[axis] == 1 or extent == div.chunk(n) * div.splits[n]:
            continue
        local = np.broadcast_to(_iota(shape, axis), shape)[None]
        start = first[n].reshape((-1,) + (1,) * len(shape))
        inside = local + start < extent
        ok = inside if ok is None else ok & inside
    return ok


def _memo(div: WorkDivision, key: tuple[Any, ...], make: Any) -> Any:
    """``make()``, kept with the division (shared by every op of its geometry)."""
    cache = div._cache  # the division's own cache (per geometry)
    if key not in cache:
        cache[key] = make()
    return cache[key]


def load_sources(div: WorkDivision, operand: int) -> CoreMap:
    """``[cores, local points]``: the DDR element each core reads at each iteration point.

    The load descriptors into LX, then the LX box read in iteration order
    (:func:`lx_index`), composed; -1 where the LX position was not loaded (poison).
    """
    return _memo(div, ("load_sources", operand), lambda: _load_sources(div, operand))


def _load_sources(div: WorkDivision, operand: int) -> CoreMap:
    lx, idx = lx_map(div, operand), lx_index(div, operand).reshape(-1)
    if lx.full is None:
        assert lx.rows is not None and lx.cols is not None
        return CoreMap.factored(lx.rows, lx.cols[idx])
    return CoreMap.of(lx.full[:, idx])


def store_runs(div: WorkDivision, operand: int) -> tuple[tuple[CoreMap, CoreMap], ...]:
    """Per store descriptor: where each core's run writes in DDR, and what it writes.

    The first map is the DDR element (-1: the core does not run that point); the second
    the result's flat ``core * points + point`` that the LX position read holds, or -1
    where no point was written there (the LX box starts as poison). Only points inside
    the logical extents are written into LX (padding points would wrap onto data
    positions of a narrower-stick operand).
    """
    return _memo(div, ("store_runs", operand), lambda: _store_runs(div, operand))


def _store_runs(div: WorkDivision, operand: int) -> tuple[tuple[CoreMap, CoreMap], ...]:
    cores = div.cores_used
    shape = local_shape(div, operand)
    points = math.prod(shape)
    n = math.prod(div.box_shape(operand, 0))
    idx = lx_index(div, operand).reshape(-1)
    ok = valid_points(div, _walked(div, operand), shape)
    if ok is None:  # every core writes its whole box: core c holds core 0's points + c * points
        first = np.full(n, -1, np.int64)
        first[idx] = np.arange(points)
        held = CoreMap.factored(np.arange(cores, dtype=np.int64) * points, first)
    else:
        whole = np.full((cores, n), -1, np.int64)
        rows, cols = np.nonzero(ok.reshape(cores, points))
        whole[rows, idx[cols]] = rows * points + cols
        held = CoreMap.of(whole)
    out = []
    for d, ddr, inside in _runs(div, operand, load=False):
        src = d.offset_src + _affine(d.size, d.stride_src)
        dst = _affine(d.size, d.stride_dst)
        if inside is None:
            dst_map = CoreMap.factored(ddr - ddr[0], ddr[0] + dst)
        else:
            dst_map = CoreMap.of(np.where(inside, ddr[:, None] + dst[None, :], -1))
        out.append((dst_map, _columns(held, src)))
    return tuple(out)


def _columns(m: CoreMap, cols: np.ndarray) -> CoreMap:
    """``m`` read at the columns ``cols`` (of every core)."""
    if m.full is None:
        assert m.rows is not None and m.cols is not None
        return CoreMap.factored(m.rows, m.cols[cols])
    return CoreMap.of(m.full[:, cols])
