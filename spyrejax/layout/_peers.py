"""Exact conversions between Spyre layouts and Morello / tt-mlir layouts (issue 26, item 5).

Both are index maps ``host coordinate -> device offset`` like a bound Spyre layout (see
:mod:`._convert`), converted through the common form of device dims
``(host dim, ratio, size)`` (:func:`~._convert.pieces`); a layout the other side cannot
state is refused with :class:`~spyrejax.LayoutConversionError` naming why.

- **Morello** ``Layout``: physical dims outermost first, each ``(logical dim, kind)``:
  ``Dynamic`` (what is left of the dim), ``Packed(n)`` (its inner ``n``) or
  ``OddEven(n)`` (its inner ``n`` with even indices first, then odd: CuTe
  ``(2, n/2):(n/2, 1)``). Morello layouts hold no padding: every dim must divide.
- **tt-mlir** ``metal_layout`` (the model spyrejax takes of it): each logical dim is
  padded to a multiple of its ``dim_alignments`` entry, ``collapsed_intervals`` collapse
  runs of dims row-major into physical dims, a ``grid`` shards each physical dim into
  equal parts, and a ``tile`` (optional) tiles the last two physical dims of a shard.
  The device buffer is ``grid x shard`` row-major (``tensor<G0xG1xS0xS1x!tile<HxW>>``).
  A Spyre layout is one memory space, so it converts to a grid of ones.

Pure Python: no JAX.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import LayoutConversionError
from ._convert import Piece, from_pieces, pieces, places_as
from ._convert import normal_pieces as _normal
from ._dtypes import DTypeLike
from ._host_mapping import HostMapping
from ._layout import SpyreTensorLayout

__all__ = ["MetalLayout", "MorelloLayout"]

_KINDS = ("Dynamic", "Packed", "OddEven")


@dataclass(frozen=True)
class MorelloLayout:
    """A Morello layout: ``((logical dim, kind, size), ...)``, outermost physical dim first.

    ``kind`` is ``"Dynamic"`` (size ignored: 0), ``"Packed"`` or ``"OddEven"``.

    Example:
        >>> str(MorelloLayout(((0, "Dynamic", 0), (1, "OddEven", 64))))
        '[(0, Dynamic), (1, OddEven(64))]'
    """

    dims: tuple[tuple[int, str, int], ...]

    def __post_init__(self) -> None:
        for d, kind, n in self.dims:
            if kind not in _KINDS or (kind != "Dynamic" and n < 1):
                raise LayoutConversionError(f"not a Morello physical dim: {(d, kind, n)}")

    def __str__(self) -> str:
        def one(d: int, kind: str, n: int) -> str:
            return f"({d}, {kind})" if kind == "Dynamic" else f"({d}, {kind}({n}))"

        return "[" + ", ".join(one(*x) for x in self.dims) + "]"

    def pieces(self, shape: Sequence[int]) -> tuple[Piece, ...]:
        """Device dims ``(host dim, ratio, size)``, size-1 ones left out.

        Raises:
            LayoutConversionError: if the layout does not apply to ``shape`` (a dim
                not divided evenly or not covered, an ``OddEven`` not innermost in its
                dim or of odd size).
        """
        what = f"Morello layout {self} on shape {list(shape)}"
        rest = [int(n) for n in shape]
        packed = [1] * len(shape)
        for d, kind, n in self.dims:
            if not 0 <= d < len(shape):
                raise LayoutConversionError(f"{what}: names dim {d}")
            if kind != "Dynamic":
                packed[d] *= n
        out: list[Piece] = []
        for d, kind, n in self.dims:
            size = rest[d] // packed[d] if kind == "Dynamic" else n
            if kind != "Dynamic":
                packed[d] //= n
            if size < 1 or rest[d] % size:
                raise LayoutConversionError(f"{what}: dim {d} of {shape[d]} does not divide")
            rest[d] //= size
            if kind == "OddEven":
                if rest[d] != 1 or n % 2:
                    raise LayoutConversionError(
                        f"{what}: OddEven({n}) must be the innermost of dim {d}, of even size"
                    )
                out += [(d, 1, 2), (d, 2, n // 2)]
            else:
                out.append((d, rest[d], size))
        if any(r != 1 for r in rest):
            raise LayoutConversionError(f"{what}: does not cover every dim")
        return _normal(out)

    def to_spyre(
        self, shape: Sequence[int], dtype: DTypeLike, host_strides: Sequence[int] | None = None
    ) -> SpyreTensorLayout:
        """The Spyre layout with this index map on ``shape``.

        Raises:
            LayoutConversionError: if it does not apply to ``shape`` or its innermost
                physical dim is not whole sticks.
        """
        what = f"Morello layout {self} on host shape {list(shape)}"
        return from_pieces(self.pieces(shape), shape, dtype, host_strides, what)

    @classmethod
    def from_spyre(cls, mapping: HostMapping) -> MorelloLayout:
        """The Morello layout of a mapping (exact), or a named refusal.

        Raises:
            LayoutConversionError: for padding, broadcast, synthetic or folded dims, or
                dims of one host dim out of decreasing step order (other than odd-even).
        """
        want = pieces(mapping, "Morello")
        where = f"Morello cannot express {mapping.layout} for host shape {list(mapping.shape)}"
        if math.prod(n for _, _, n in want) != mapping.size:
            raise LayoutConversionError(f"{where}: it has padding, which Morello layouts lack")
        dims: list[tuple[int, str, int]] = []
        seen: set[int] = set()
        i = 0
        while i < len(want):
            d, r, n = want[i]
            nxt = want[i + 1] if i + 1 < len(want) else None
            if (r, n) == (1, 2) and nxt is not None and nxt[:2] == (d, 2):
                dims.append((d, "OddEven", 2 * nxt[2]))
                i += 2
            else:
                dims.append((d, "Packed", n) if d in seen else (d, "Dynamic", 0))
                i += 1
            seen.add(d)
        candidate = cls(tuple(dims))
        if not places_as(lambda: candidate.pieces(mapping.shape), want):
            raise LayoutConversionError(
                f"{where}: the closest Morello layout, {candidate}, places elements differently"
            )
        return candidate


@dataclass(frozen=True)
class MetalLayout:
    """tt-mlir's ``metal_layout`` with its grid and tile (the device tensor type).

    Attributes:
        logical_shape: host sizes (rank >= 2, as tt-mlir asks).
        dim_alignments: each dim is padded to a multiple of its entry.
        collapsed_intervals: ``[start, stop)`` runs of dims, in order, covering all.
        grid: shards per physical dim (one per interval).
        tile: ``(rows, cols)`` of a tile over the last two physical dims, or None.
        memory_space: printed only (``"dram"``, ``"l1"``).
    """

    logical_shape: tuple[int, ...]
    dim_alignments: tuple[int, ...]
    collapsed_intervals: tuple[tuple[int, int], ...]
    grid: tuple[int, ...]
    tile: tuple[int, int] | None = None
    memory_space: str = "dram"

    def __str__(self) -> str:
        x = "x".join
        intervals = ", ".join(f"[{a}, {b}]" for a, b in self.collapsed_intervals)
        return (
            f"#ttcore.metal_layout<logical_shape = {x(map(str, self.logical_shape))}, "
            f"dim_alignments = {x(map(str, self.dim_alignments))}, collapsed_intervals = "
            f"dense<[{intervals}]> : tensor<{len(self.collapsed_intervals)}x2xi64>, undef, "
            f"{self.memory_space}>"
        )

    def tensor_type(self, element: str) -> str:
        """The device tensor type, e.g. ``tensor<1x1x4x4x!ttcore.tile<32x32, f32>, #layout>``."""
        shard = list(self._shard())
        if self.tile is not None:
            shard[-2] //= self.tile[0]
            shard[-1] //= self.tile[1]
            element = f"!ttcore.tile<{self.tile[0]}x{self.tile[1]}, {element}>"
        dims = "x".join(map(str, [*self.grid, *shard]))
        return f"tensor<{dims}x{element}, #layout>"

    def _aligned(self) -> list[int]:
        return [
            -(-n // a) * a for n, a in zip(self.logical_shape, self.dim_alignments, strict=True)
        ]

    def _physical(self) -> list[int]:
        aligned = self._aligned()
        return [math.prod(aligned[a:b]) for a, b in self.collapsed_intervals]

    def _shard(self) -> list[int]:
        return [p // g for p, g in zip(self._physical(), self.grid, strict=True)]

    def _check(self) -> None:
        shape, what = self.logical_shape, f"metal layout {self}"
        rank = len(shape)
        if rank < 2 or len(self.dim_alignments) != rank or min(self.dim_alignments) < 1:
            raise LayoutConversionError(f"{what}: needs rank >= 2 and one alignment >= 1 per dim")
        bounds = [b for iv in self.collapsed_intervals for b in iv]
        if (
            bounds[:1] != [0]
            or bounds[-1:] != [rank]
            or any(a >= b for a, b in self.collapsed_intervals)
            or any(b != a for (_, b), (a, _) in itertools.pairwise(self.collapsed_intervals))
        ):
            raise LayoutConversionError(f"{what}: intervals must cover the dims in order")
        physical = self._physical()
        if len(self.grid) != len(physical) or any(
            g < 1 or p % g for p, g in zip(physical, self.grid, strict=True)
        ):
            raise LayoutConversionError(f"{what}: grid {self.grid} does not divide {physical}")
        if self.tile is not None:
            shard = self._shard()
            if len(shard) < 2 or shard[-2] % self.tile[0] or shard[-1] % self.tile[1]:
                raise LayoutConversionError(f"{what}: tile {self.tile} does not divide {shard}")

    def pieces(self) -> tuple[Piece, ...]:
        """Device dims ``(host dim, ratio, size)``: grid, shard (tiles), then tile.

        Raises:
            LayoutConversionError: if the layout is malformed, or a grid, shard or tile
                boundary cuts a collapsed interval inside a dim (the digit would mix dims).
        """
        self._check()
        aligned, shard = self._aligned(), self._shard()
        last = len(shard) - 1
        flat: list[tuple[int, int, int]] = [
            (p, s, g) for p, (s, g) in enumerate(zip(shard, self.grid, strict=True))
        ]
        if self.tile is None:
            flat += [(p, 1, s) for p, s in enumerate(shard)]
        else:
            th, tw = self.tile
            step = {last - 1: th, last: tw}
            flat += [(p, step.get(p, 1), s // step.get(p, 1)) for p, s in enumerate(shard)]
            flat += [(last - 1, 1, th), (last, 1, tw)]
        out: list[Piece] = []
        for p, ratio, size in flat:
            out += self._split(p, ratio, size, aligned)
        return _normal(out)

    def _split(self, p: int, ratio: int, size: int, aligned: list[int]) -> list[Piece]:
        """A digit ``(ratio, size)`` of physical dim ``p`` as device dims of its logical dims."""
        a, b = self.collapsed_intervals[p]
        out = []
        weight = math.prod(aligned[a:b])
        lo_all, hi_all = ratio, ratio * size
        for d in range(a, b):
            weight //= aligned[d]  # the weight of dim d's digit in the physical index
            lo, hi = max(lo_all, weight), min(hi_all, weight * aligned[d])
            if lo >= hi:
                continue
            if lo % weight or hi % lo or (weight > lo_all and weight % lo_all):
                raise LayoutConversionError(
                    f"metal layout {self}: a step of {ratio} over {size} in physical dim {p} "
                    f"cuts logical dim {d} (aligned to {aligned[d]}) unevenly"
                )
            out.append((d, lo // weight, hi // lo))
        return out

    def to_spyre(
        self, dtype: DTypeLike, host_strides: Sequence[int] | None = None
    ) -> SpyreTensorLayout:
        """The Spyre layout with this index map on ``logical_shape``.

        Raises:
            LayoutConversionError: if malformed or a tile row is not whole sticks.
        """
        what = f"metal layout {self}"
        return from_pieces(self.pieces(), self.logical_shape, dtype, host_strides, what)

    @classmethod
    def from_spyre(cls, mapping: HostMapping) -> MetalLayout:
        """The metal layout (grid of ones) of a mapping (exact), or a named refusal.

        Tried tiled first: the last two device dims are the tile (rows of one host dim,
        a stick of the last), the dims above are the tile counts, one per host dim in
        host order; else row-major over padded dims.

        Raises:
            LayoutConversionError: for rank < 2, broadcast, synthetic or folded dims, or
                device dims out of host order (tiles column-major, a permutation).
        """
        shape = mapping.shape
        where = (
            f"tt-mlir's metal_layout cannot express {mapping.layout} for host shape {list(shape)}"
        )
        if len(shape) < 2:
            raise LayoutConversionError(f"{where}: metal layouts have rank >= 2")
        want = pieces(mapping, "tt-mlir's metal_layout")
        eps = mapping.layout.elems_per_stick
        candidates = [c for c in (_tiled(want, shape, eps), _row_major(want, shape)) if c]
        for candidate in candidates:
            if places_as(candidate.pieces, want):
                return candidate
        raise LayoutConversionError(
            f"{where}: its device dims are not grid, tile counts in host order, then a tile"
        )


def _alignment(n: int, size: int, unit: int) -> int | None:
    """The first of 1, ``unit``, ``size`` that pads ``n`` to ``size`` (None if none does)."""
    return next((a for a in (1, unit, size) if -(-n // a) * a == size), None)


def _extents(found: Sequence[Piece], rank: int) -> list[int]:
    """Per host dim, the product of its pieces' sizes (its padded extent)."""
    out = [1] * rank
    for d, _, n in found:
        out[d] *= n
    return out


def _tiled(want: Sequence[Piece], shape: Sequence[int], eps: int) -> MetalLayout | None:
    if len(want) < 2 or want[-1][1:] != (1, eps) or want[-2][1] != 1:
        return None
    (dr, _, th), (dc, _, tw) = want[-2], want[-1]
    if not dr < dc or any(n > 1 for n in shape[dc + 1 :]):
        return None
    unit = {dr: th, dc: tw}
    extents = _extents(want, len(shape))
    align = [
        _alignment(n, a, unit.get(d, 1))
        for d, (n, a) in enumerate(zip(shape, extents, strict=True))
    ]
    if None in align:
        return None
    intervals = ((0, dr + 1), (dr + 1, len(shape)))
    return MetalLayout(tuple(shape), tuple(align), intervals, (1, 1), (th, tw))  # type: ignore[arg-type]


def _row_major(want: Sequence[Piece], shape: Sequence[int]) -> MetalLayout | None:
    extents = _extents(want, len(shape))
    align = [_alignment(n, a, a) for n, a in zip(shape, extents, strict=True)]
    if None in align:
        return None
    rank = len(shape)
    return MetalLayout(tuple(shape), tuple(align), ((0, rank - 1), (rank - 1, rank)), (1, 1))  # type: ignore[arg-type]
