"""Exact conversions between Spyre layouts and CuTe / XLA layouts (issue 26, item 5).

A Spyre layout bound to a host shape (a :class:`HostMapping`) is an index map: host
element -> device coordinate, and the device image is row-major, so it is the function
``host coordinate -> device offset`` (in elements). Every notation here states such a
function; a conversion returns the layout with the same function on the host shape, and
raises :class:`~spyrejax.LayoutConversionError` naming what the target lacks where it
cannot state it. Broadcast device dims (one host element at many places) are not a
function of the host coordinate and are refused by every converter.

- **CuTe** ``shape:stride`` (:func:`to_cute`, :func:`from_cute`): one top-level mode per
  host dim, its leaves the device dims that walk it (fastest first), strides the device
  strides. A padded host dim has a mode larger than the dim (CuTe's predicated tile):
  the host shape says which coordinates hold data.
- **XLA** tiled layouts ``{1,0:T(8,128)(2,1)}`` (:class:`XlaLayout`): minor-to-major order,
  then tiles applied to the minor dims, each padding its dims to whole tiles.

Morello and tt-mlir layouts are in :mod:`._peers`. All share :func:`pieces`, the common
form: device dims outermost first as ``(host dim, ratio, size)``.

Pure Python: no JAX.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._errors import LayoutConversionError
from ._algebra import CuteLayout, coalesce, composition, flatten, make_layout
from ._dtypes import DTypeLike, format_for_dtype
from ._host_mapping import HostMapping
from ._layout import SpyreTensorLayout
from ._segments import row_major_strides

__all__ = [
    "Piece",
    "XlaLayout",
    "from_cute",
    "from_pieces",
    "normal_pieces",
    "pieces",
    "places_as",
    "to_cute",
]

# A device dim that walks one host dim: (host dim, ratio, size). Its coordinate is the
# host coordinate's quotient by ``ratio``, after the remainders of the outer ratios.
Piece = tuple[int, int, int]


def _refuse_unmappable(mapping: HostMapping, target: str) -> None:
    """Refuse, by name, what no converter's index map holds.

    An element arrangement (its groups permute lanes inside a stick), a broadcast dim,
    an empty tensor.
    """
    if mapping.layout.is_arranged:
        raise LayoutConversionError(
            f"{target} cannot express {mapping.layout} for host shape {list(mapping.shape)}: "
            f"its {mapping.layout.arrangement.name} arrangement permutes the elements of "
            "each group of sticks, which a converted layout's strides cannot state"
        )
    for j, (n, s) in enumerate(
        zip(mapping.layout.device_size, mapping.layout.stride_map, strict=True)
    ):
        if s == 0 and n > 1:
            raise LayoutConversionError(
                f"{target} cannot express {mapping.layout} for host shape "
                f"{list(mapping.shape)}: device dim {j} broadcasts (stride 0), so one host "
                "element sits at many device places"
            )
    if mapping.size == 0:
        raise LayoutConversionError(f"{target} cannot express an empty host tensor")


def pieces(mapping: HostMapping, target: str) -> tuple[Piece, ...]:
    """The device dims of a mapping as ``(host dim, ratio, size)``, outermost first.

    Normal form: size-1 dims are left out, and a dim that continues the one before it
    on the same host dim (``ratio_a == ratio_b * size_b``) is merged into it, so a tile
    count and its stick (no padding between) are one piece. A synthetic or tied dim
    larger than 1 becomes the padded piece of a size-1 host dim (its coordinate is
    always 0), the innermost such dims first.

    Raises:
        LayoutConversionError: naming ``target`` where the mapping has a broadcast dim,
            more synthetic or tied dims than size-1 host dims, or host dims folded into
            one device dim.
    """
    _refuse_unmappable(mapping, target)
    layout, seg = mapping.layout, mapping.segmentation
    where = f"{target} cannot express {layout} for host shape {list(mapping.shape)}"
    # Device dims walking no host dim only ever hold coordinate 0: each can be the
    # (padded) piece of a size-1 host dim, the innermost first.
    spare = [d for d, n in enumerate(mapping.shape) if n == 1]
    idle = [j for j, n in enumerate(layout.device_size) if n > 1 and seg.segment_of(j) is None]
    if len(idle) > len(spare):
        raise LayoutConversionError(
            f"{where}: device dim {idle[0]} (size {layout.device_size[idle[0]]}) walks no "
            "host dim (a synthetic or sparse stick) and no size-1 host dim is left to pad"
        )
    owner = dict(zip(reversed(idle), reversed(spare), strict=False))
    out: list[Piece] = []
    for j, n in enumerate(layout.device_size):
        found = seg.segment_of(j)
        if found is None:
            if j in owner:
                out.append((owner[j], 1, n))
            continue
        segment = seg.segments[found[0]]
        if len(segment.host_dims) > 1:
            raise LayoutConversionError(
                f"{where}: device dim {j} walks host dims {segment.host_dims} folded together"
            )
        out.append((segment.host_dims[0], found[1], n))
    return normal_pieces(out)


def normal_pieces(found: Sequence[Piece]) -> tuple[Piece, ...]:
    """Pieces in :func:`pieces`' normal form: no size-1 piece, continuations merged."""
    merged: list[Piece] = []
    for d, r, n in found:
        if n == 1:
            continue
        if merged and merged[-1][0] == d and merged[-1][1] == r * n:
            merged[-1] = (d, r, merged[-1][2] * n)
        else:
            merged.append((d, r, n))
    return tuple(merged)


def from_pieces(
    found: Sequence[Piece],
    shape: Sequence[int],
    dtype: DTypeLike,
    host_strides: Sequence[int] | None,
    what: str,
) -> SpyreTensorLayout:
    """The Spyre layout whose device dims are ``found`` (outermost first), then validated.

    The innermost piece becomes the stick: it must be ``eps`` long or whole sticks
    (split into a count and a stick), and a piece of ratio 1 on its host dim.

    Raises:
        LayoutConversionError: if the innermost piece is not whole sticks.
    """
    fmt = format_for_dtype(dtype)
    eps = fmt.elems_per_stick()
    hs = tuple(host_strides) if host_strides is not None else row_major_strides(shape)
    live = [p for p in found if p[2] > 1]
    if not live:
        return SpyreTensorLayout(tuple(shape), fmt, host_strides=hs)
    # A piece stepping past its host dim only ever holds coordinate 0: synthetic padding.
    dims = [(n, hs[d] * r if r < shape[d] else -1) for d, r, n in live]
    d, r, n = live[-1]
    if n % eps:
        raise LayoutConversionError(
            f"{what}: the innermost run of {n} elements of host dim {d} is not whole "
            f"sticks of {eps} ({fmt!r}); a Spyre stick is the last device dim"
        )
    if n > eps:
        outer = hs[d] * r * eps if r * eps < shape[d] else -1
        dims[-1:] = [(n // eps, outer), (eps, dims[-1][1])]
    layout = SpyreTensorLayout.from_stride_map([n for n, _ in dims], [s for _, s in dims], fmt)
    layout.for_host(shape, hs)  # validates: every element has its own place
    return layout


# -- CuTe ------------------------------------------------------------------------------


def to_cute(mapping: HostMapping) -> CuteLayout:
    """The CuTe layout ``host coordinate -> device offset`` of a mapping.

    One top-level mode per host dim. A host dim's leaves are the device dims that walk
    it, fastest first, with the device strides (coalesced); its steps must nest (each a multiple
    of the one below, as CuTe's colexicographic digits are); the top leaf is as long as
    the dim needs (padding past it is not part of the map). Host dims folded into
    device dims get their modes by :func:`composition` of the fold's layout.

    Example:
        >>> import numpy as np
        >>> m = SpyreTensorLayout((1024, 256), np.float16).for_host((1024, 256))
        >>> str(to_cute(m))
        '(1024,(64,4)):(64,(1,65536))'

    Raises:
        LayoutConversionError: for a broadcast dim, steps that do not nest (padded
            sticks inside larger tiles) or a fold CuTe's composition cannot state.
    """
    _refuse_unmappable(mapping, "CuTe")
    layout, dstrides = mapping.layout, mapping.layout.device_strides
    modes = [CuteLayout(1, 0) for _ in mapping.shape]
    for segment in mapping.segmentation.segments:
        axes = sorted(segment.axes, key=lambda t: t[1])  # fastest first
        leaves = []
        for k, (j, r) in enumerate(axes):
            if k + 1 < len(axes):
                outer = axes[k + 1][1]
                if outer % r:
                    raise LayoutConversionError(
                        f"CuTe cannot express {layout} for host shape {list(mapping.shape)}: "
                        f"device dims {axes[k + 1][0]} and {j} step host dims "
                        f"{segment.host_dims} by {outer} and {r}, which do not nest"
                    )
                leaves.append((outer // r, dstrides[j]))
            else:
                leaves.append((-(-segment.size // r), dstrides[j]))  # as long as needed
        fold = CuteLayout(tuple(n for n, _ in leaves), tuple(s for _, s in leaves))
        if len(segment.host_dims) == 1:
            d = segment.host_dims[0]
            modes[d] = _trim(fold, mapping.shape[d])
            continue
        inner = 1
        for d in reversed(segment.host_dims):
            n = mapping.shape[d]
            if d == segment.host_dims[0]:  # the outermost takes the fold's padding
                n = fold.size // inner
            modes[d] = _trim(composition(coalesce(fold), CuteLayout(n, inner)), mapping.shape[d])
            inner *= mapping.shape[d]
    return make_layout(*modes)


def _trim(mode: CuteLayout, n: int) -> CuteLayout:
    """A mode in normal form: coalesced, without leaves past ``n``, its top no longer than needed.

    The normal form makes a conversion out and back a fixpoint.
    """
    kept, w = [], 1
    for size, step in mode.leaves:
        if w < n:
            kept.append((size, step))
        w *= size
    if not kept:
        return CuteLayout(1, 0)
    leaves = list(coalesce(CuteLayout(tuple(s for s, _ in kept), tuple(d for _, d in kept))).leaves)
    below = math.prod(s for s, _ in leaves[:-1])
    leaves[-1] = (min(leaves[-1][0], -(-n // below)), leaves[-1][1])  # no longer than needed
    return coalesce(CuteLayout(tuple(s for s, _ in leaves), tuple(d for _, d in leaves)))


def from_cute(
    cute: CuteLayout,
    shape: Sequence[int],
    dtype: DTypeLike,
    host_strides: Sequence[int] | None = None,
) -> SpyreTensorLayout:
    """The Spyre layout whose index map on ``shape`` is the CuTe layout ``cute``.

    ``cute`` maps host coordinates to device offsets, one top-level mode per host dim
    (as :func:`to_cute` makes). Its leaves become device dims, ordered by device
    stride; leaves contiguous both in the host and on the device merge (a fold); gaps
    in the device strides become padding of the dim above; device offsets never
    reached below the innermost leaf become a synthetic stick.

    Raises:
        LayoutConversionError: if a mode does not cover its host dim, two leaves
            overlap or do not nest on the device, a leaf broadcasts, or the innermost
            device run is not whole sticks.
    """
    shape_t = tuple(int(n) for n in shape)
    fmt = format_for_dtype(dtype)
    eps = fmt.elems_per_stick()
    hs = tuple(host_strides) if host_strides is not None else row_major_strides(shape_t)
    what = f"CuTe layout {cute} on host shape {list(shape_t)}"
    if isinstance(cute.shape, int) or len(cute.shape) != len(shape_t):
        raise LayoutConversionError(f"{what}: needs one top-level mode per host dim")
    leaves = []  # (device stride, size, host stride, coordinates reached, whole, lowest)
    for d, n in enumerate(shape_t):
        mode = cute.mode(d)
        if mode.size < n:
            raise LayoutConversionError(f"{what}: mode {d} covers {mode.size} of {n} elements")
        mine, w = [], 1
        for size, step in zip(flatten(mode.shape), flatten(mode.stride), strict=True):
            if size > 1 and w < n:
                if step <= 0:
                    raise LayoutConversionError(f"{what}: leaf {size}:{step} is not injective")
                mine.append((step, size, hs[d] * w, min(size, -(-n // w))))
            w *= size
        # Whole: the dim's only leaf; lowest: its first (it may fold with the dim inside).
        leaves += [(*leaf, len(mine) == 1, k == 0) for k, leaf in enumerate(mine)]
    leaves.sort(reverse=True)
    # Two whole host dims contiguous both in the host and on the device fold into one.
    merged: list[tuple[int, int, int, int, bool]] = []
    lowest: list[bool] = []
    for e, n, h, reach, whole, low in leaves:
        contiguous = merged and merged[-1][0] == e * n and merged[-1][2] == h * n
        if contiguous and whole and lowest[-1]:
            merged[-1] = (e, merged[-1][1] * n, h, (merged[-1][3] - 1) * n + reach, merged[-1][4])
        else:
            merged.append((e, n, h, reach, whole))
            lowest.append(low)
    if not merged:  # every host dim has size 1: the default layout
        return SpyreTensorLayout(shape_t, fmt, host_strides=hs)
    return SpyreTensorLayout.from_stride_map(*_device_dims(merged, eps, what), fmt)


def _device_dims(
    leaves: list[tuple[int, int, int, int, bool]], eps: int, what: str
) -> tuple[list[int], list[int]]:
    """Device sizes and stride_map of leaves sorted by device stride, outermost first.

    A leaf is ``(device stride, size, host stride, coordinates its host dims reach, whole)``.
    """
    sizes, smap = [], []
    for k, (e, n, h, _, _) in enumerate(leaves):
        span = leaves[k - 1][0] if k else e * n
        if span % e or span < e * n:
            raise LayoutConversionError(
                f"{what}: device strides {leaves[k - 1][0]} and {e} (size {n}) overlap or "
                "do not nest"
            )
        sizes.append(span // e)
        smap.append(h)
    below = leaves[-1][0] if leaves else 1
    if below > 1:  # offsets below the innermost leaf: a synthetic stick
        if below % eps:
            raise LayoutConversionError(
                f"{what}: the innermost leaf steps the device by {below}, not whole sticks of {eps}"
            )
        sizes += [below // eps, eps] if below > eps else [eps]
        smap += [-1, -1] if below > eps else [-1]
    elif sizes[-1] != eps:
        n, h = sizes[-1], smap[-1]
        if n % eps and len(sizes) > 1:
            raise LayoutConversionError(
                f"{what}: the innermost device run of {n} elements is not whole sticks of {eps}"
            )
        sizes[-1:] = [-(-n // eps), eps]
        smap[-1:] = [h * eps if leaves[-1][3] > eps else -1, h]  # -1: only coordinate 0
    return sizes, smap


# -- XLA ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class XlaLayout:
    """An XLA tiled layout: ``minor_to_major`` and tiles, printed ``{1,0:T(8,128)(2,1)}``.

    The shape, read major to minor, is tiled by the first tile on its minor dims (each
    padded to whole tiles, the tile counts kept in place and the tile dims appended),
    then the result by the next tile, and so on; elements are row-major in the final
    shape.

    Attributes:
        minor_to_major: host dims, most minor first.
        tiles: tile sizes, each applied to the minor-most dims of the shape before it.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def parse(cls, text: str) -> XlaLayout:
        """An XLA layout from its printed form (``{1,0}``, ``{1,0:T(8,128)(2,1)}``).

        Raises:
            LayoutConversionError: on other text, or parts this model does not take (a
                combined ``*`` tile dim, element sizes, memory spaces).
        """
        m = re.fullmatch(r"\{([\d,\s]*)(?::T((?:\([\d,\s]+\))+))?\}", text.strip())
        if m is None:
            raise LayoutConversionError(
                f"not an XLA tiled layout this model takes (minor_to_major and T(...) tiles "
                f"of positive sizes only): {text!r}"
            )
        order = tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
        tiles = tuple(
            tuple(int(x) for x in t.split(",")) for t in re.findall(r"\(([\d,\s]+)\)", m[2] or "")
        )
        return cls(order, tiles)

    def __str__(self) -> str:
        tiles = "".join("(" + ",".join(map(str, t)) + ")" for t in self.tiles)
        order = ",".join(map(str, self.minor_to_major))
        return "{" + order + (":T" + tiles if tiles else "") + "}"

    def pieces(self, shape: Sequence[int]) -> tuple[Piece, ...]:
        """Device dims ``(host dim, ratio, size)`` of the tiled shape, size-1 ones left out.

        Raises:
            LayoutConversionError: if the order is not a permutation of the host dims or
                a tile is longer than the shape it tiles or has a size < 1.
        """
        if sorted(self.minor_to_major) != list(range(len(shape))):
            raise LayoutConversionError(
                f"XLA layout {self}: minor_to_major must order the {len(shape)} host dims"
            )
        # (host dim, ratio, size, period): a piece's coordinate is (x mod period) // ratio.
        out = [(d, 1, shape[d], shape[d]) for d in reversed(self.minor_to_major)]
        for tile in self.tiles:
            k = len(tile)
            if k > len(out) or min(tile, default=1) < 1:
                raise LayoutConversionError(f"XLA layout {self}: tile {tile} does not fit")
            minor = out[len(out) - k :]
            pairs = list(zip(minor, tile, strict=True))
            counts = [(d, r * t, -(-n // t), p) for (d, r, n, p), t in pairs]
            inner = [(d, r, t, min(p, r * t)) for (d, r, _, p), t in pairs]
            out = out[: len(out) - k] + counts + inner
        # A count stepping past its period only ever holds 0 (padding of a tile in a
        # smaller tile): a ratio past the host dim says so (a synthetic dim).
        flat = [(d, r if r < p else r * max(shape[d], 1), n) for d, r, n, p in out]
        return normal_pieces(flat)

    def to_spyre(
        self, shape: Sequence[int], dtype: DTypeLike, host_strides: Sequence[int] | None = None
    ) -> SpyreTensorLayout:
        """The Spyre layout with this index map on ``shape``.

        Raises:
            LayoutConversionError: if the innermost tiled dim is not whole sticks.
        """
        what = f"XLA layout {self} on host shape {list(shape)}"
        return from_pieces(self.pieces(shape), shape, dtype, host_strides, what)

    @classmethod
    def from_spyre(cls, mapping: HostMapping) -> XlaLayout:
        """The XLA tiled layout of a mapping (exact), or a named refusal.

        The first device dim of each host dim gives the major-to-minor order; the rest
        are read as tiles, level by level (a run of dims in order); the candidate is
        accepted only if it places every element where the mapping does.

        Example:
            >>> import numpy as np
            >>> m = SpyreTensorLayout((1024, 256), np.float16).for_host((1024, 256))
            >>> str(XlaLayout.from_spyre(m))
            '{0,1:T(64,1)}'

        Raises:
            LayoutConversionError: for broadcast, synthetic, folded or extra-padded dims,
                or an order of device dims XLA's tiling cannot produce.
        """
        want = pieces(mapping, "XLA")
        where = f"XLA cannot express {mapping.layout} for host shape {list(mapping.shape)}"
        top, rest = _top_level(want, mapping.shape)
        candidate = cls(_order(top, mapping.shape), _tiles(top, rest))
        if not places_as(lambda: candidate.pieces(mapping.shape), want):
            raise LayoutConversionError(
                f"{where}: the closest tiling, {candidate}, places elements differently"
            )
        return candidate


def places_as(candidate_pieces: Callable[[], tuple[Piece, ...]], want: Sequence[Piece]) -> bool:
    """Whether a candidate layout's pieces are ``want`` (one it cannot build: not)."""
    try:
        return candidate_pieces() == want
    except LayoutConversionError:
        return False


def _padded(piece: Piece, extent: int) -> bool:
    """Whether a piece has more places than the extent it divides (XLA pads only in tiles)."""
    _, r, n = piece
    return n > -(-extent // r)


def _top_level(want: Sequence[Piece], shape: Sequence[int]) -> tuple[list[Piece], list[Piece]]:
    """The untiled level (one piece per live host dim, in order) and the pieces below it.

    The leading pieces of distinct, unpadded host dims are the top level; a host dim
    not among them gets a size-1 top piece (a tile covering the whole dim).
    """
    top: list[Piece] = []
    i = 0
    while i < len(want) and want[i][0] not in {d for d, _, _ in top}:
        if _padded(want[i], shape[want[i][0]]):
            break
        top.append(want[i])
        i += 1
    rest = list(want[i:])
    for d, r, n in rest:
        if d not in {t[0] for t in top}:
            top.append((d, r * n, 1))
    return top, rest


def _order(top: Sequence[Piece], shape: Sequence[int]) -> tuple[int, ...]:
    placed = {d for d, _, _ in top}
    ones = [d for d, n in enumerate(shape) if n == 1 and d not in placed]
    return tuple(d for d, _, _ in reversed(top)) + tuple(reversed(ones))


def _tiles(top: Sequence[Piece], rest: Sequence[Piece]) -> tuple[tuple[int, ...], ...]:
    """Tiles read off the device dims below the top ones: a run of dims in order per level.

    A level's tile size for a dim is the step of its piece one level up; a run whose
    pieces all exceed their tile is a tile nested in a tile of one (the level between
    holds only size-1 pieces).
    """
    order = [d for d, _, _ in top]
    ratio = {d: r for d, r, _ in top}
    tiles = []
    i = 0
    while i < len(rest) and len(tiles) < 2 * len(rest) + 2:
        run = [rest[i]]
        if run[0][0] not in order:
            break
        while i + len(run) < len(rest):
            nxt = rest[i + len(run)][0]
            if nxt not in order or order.index(nxt) <= order.index(run[-1][0]):
                break
            run.append(rest[i + len(run)])
        suffix = order[order.index(run[0][0]) :]
        tiles.append(tuple(ratio[d] for d in suffix))
        order = suffix
        if all(r * n > ratio[d] for d, r, n in run):  # nested: consume nothing yet
            ratio = {**ratio, **{d: r * n for d, r, n in run}}
            continue
        level = {d: r for d, r, _ in run}
        ratio = {d: level.get(d, ratio[d]) for d in suffix}
        i += len(run)
    return tuple(tiles)
