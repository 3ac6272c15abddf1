"""DMA descriptors (DCI) for host <-> device transfers (spec sections 6 and 10.1).

A transfer is a list of descriptors; each is a loop nest over the device dims with
sizes, source and destination strides and offsets, **innermost loop first**. Host dims
that do not fill their device dims evenly (a partial last stick, any padded dim) get a
*remainder* descriptor, and every remainder doubles the list. A tile whose own steps do
not divide it (rows of 120 in sticks of 64) is covered the same way, once per tile
size: its full sticks, then its partial one. A loop of range 1 still carries the host
stride of the dim it stands for, never -1 (spyre-device spec section 5).

Pure Python: no JAX import. The descriptors generated here are what the DMA engine in
``_dma`` executes, so they are the single source of truth for every transfer.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .._errors import LayoutError
from ..layout._arrangements import GROUP
from ..layout._dtypes import DataFormats, DTypeLike, fits_format, host_format
from ..layout._gaps import valid_size
from ..layout._host_mapping import HostMapping
from ..layout._lanes import LanedLayout
from ..layout._layout import SpyreTensorLayout

__all__ = ["DCI", "Descriptor", "LoopNest", "generate_dci"]


class LoopNest(NamedTuple):
    """A descriptor in the seed documents' notation: outermost loop first.

    Loops are in decreasing device-stride order (the device dims' order).
    """

    ranges: tuple[int, ...]
    host_strides: tuple[int, ...]
    device_strides: tuple[int, ...]
    host_offset: int
    device_offset: int

    def pseudocode(self, host: str = "host", device: str = "device", h2d: bool = True) -> str:
        """The loop nest as readable Python-like code, one loop per line."""
        lines = []
        names = [f"i{k}" for k in range(len(self.ranges))]
        for depth, (name, n) in enumerate(zip(names, self.ranges, strict=True)):
            lines.append("  " * depth + f"for {name} in range({n}):")
        host_idx = _affine(names, self.host_strides, self.host_offset, self.ranges)
        dev_idx = _affine(names, self.device_strides, self.device_offset, self.ranges)
        dst, src = (f"{device}[{dev_idx}]", f"{host}[{host_idx}]")
        if not h2d:
            dst, src = f"{host}[{host_idx}]", f"{device}[{dev_idx}]"
        lines.append("  " * len(names) + f"{dst} = {src}")
        return "\n".join(lines)


def _affine(names: list[str], strides: Sequence[int], offset: int, ranges: Sequence[int]) -> str:
    terms = [str(offset)] if offset else []
    for name, stride, n in zip(names, strides, ranges, strict=True):
        if n == 1 or stride == 0:
            continue
        terms.append(name if stride == 1 else f"{name}*{stride}")
    return " + ".join(terms) or "0"


@dataclass(frozen=True)
class Descriptor:
    """One DMA loop nest, innermost loop first (torch-spyre's ``dcsi_`` entry).

    Element ``k`` of ``size`` is the trip count of loop ``k``; the transfer copies
    ``src[offset_src + dot(i, stride_src)]`` to ``dst[offset_dst + dot(i, stride_dst)]``
    for every loop index ``i``. Units are elements.

    Attributes:
        size: loop trip counts, innermost first.
        stride_src: source strides, innermost first.
        stride_dst: destination strides, innermost first.
        offset_src: source offset of the first element.
        offset_dst: destination offset of the first element.
        host_to_device: True when the source is host memory.
    """

    size: tuple[int, ...]
    stride_src: tuple[int, ...]
    stride_dst: tuple[int, ...]
    offset_src: int
    offset_dst: int
    host_to_device: bool = True

    @property
    def num_elements(self) -> int:
        """Elements this descriptor copies."""
        n = 1
        for s in self.size:
            n *= s
        return n

    def loop_nest(self) -> LoopNest:
        """The seed-style loop nest: ranges, host and device strides, outermost first."""
        host, dev = self.stride_src, self.stride_dst
        host_off, dev_off = self.offset_src, self.offset_dst
        if not self.host_to_device:
            host, dev, host_off, dev_off = dev, host, dev_off, host_off
        return LoopNest(self.size[::-1], host[::-1], dev[::-1], host_off, dev_off)

    def to_dict(self) -> dict[str, Any]:
        """torch-spyre's ``dcsi_`` entry."""
        return {
            "size_": list(self.size),
            "stride_src_": list(self.stride_src),
            "stride_dst_": list(self.stride_dst),
            "offset_src_": self.offset_src,
            "offset_dst_": self.offset_dst,
        }


@dataclass(frozen=True)
class DCI(Sequence[Descriptor]):
    """A whole transfer: the descriptor list plus what torch-spyre's DCI JSON records.

    Behaves as a sequence of :class:`Descriptor`.

    Attributes:
        descriptors: the loop nests; together they copy every host element once.
        host_to_device: direction (``isHostToSen_``).
        dataformat: the device data format.
        host_shape: host sizes.
        device_shape: the layout's ``device_size``.
        name: ``dsName_``.
        host_dataformat: the host array's format as torch-spyre names it
            (:func:`~spyrejax.host_format`: ``IEEE_FP16`` for float16); defaults to
            that of the device format's canonical host dtype.
    """

    descriptors: tuple[Descriptor, ...]
    host_to_device: bool
    dataformat: DataFormats
    host_shape: tuple[int, ...]
    device_shape: tuple[int, ...]
    name: str = ""
    host_dataformat: DataFormats | None = None
    device_gaps: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.host_dataformat is None:
            object.__setattr__(self, "host_dataformat", host_format(self.dataformat))

    def __len__(self) -> int:
        return len(self.descriptors)

    def __iter__(self) -> Iterator[Descriptor]:
        return iter(self.descriptors)

    def __getitem__(self, i: Any) -> Any:
        return self.descriptors[i]

    def loop_nests(self) -> list[LoopNest]:
        """Every descriptor in the seed-style notation."""
        return [d.loop_nest() for d in self.descriptors]

    def pseudocode(self) -> str:
        """All descriptors as Python-like loop nests."""
        parts = []
        for k, d in enumerate(self.descriptors):
            parts.append(f"# descriptor {k}: {d.num_elements} elements")
            parts.append(d.loop_nest().pseudocode(h2d=self.host_to_device))
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """torch-spyre's DCI JSON object (shapes innermost first).

        ``dataformat_src_`` and ``dataformat_dst_`` are the formats of the source and
        destination: the host format and the device format on the way in, swapped on
        the way out. A layout with gaps adds ``validGap_``: per device dim, innermost
        first, ``[valid, gap]``: the range the descriptors iterate and the gap positions
        around it (the front gap is also in the device offsets).
        """
        src, dst = self.host_shape, self.device_shape
        src_fmt, dst_fmt = self.host_dataformat, self.dataformat
        if not self.host_to_device:
            src, dst, src_fmt, dst_fmt = dst, src, dst_fmt, src_fmt
        out = {
            "dsName_": self.name,
            "isHostToSen_": int(self.host_to_device),
            "dataformat_src_": int(src_fmt),
            "dataformat_dst_": int(dst_fmt),
            "dcsi_": [d.to_dict() for d in self.descriptors],
            "input_shape_": list(src)[::-1],
            "output_shape_": list(dst)[::-1],
        }
        if self.device_gaps is not None:
            valid = valid_size(self.device_shape, self.device_gaps)
            pairs = zip(valid, self.device_gaps, strict=True)
            out["validGap_"] = [[n, f + b] for n, (f, b) in pairs][::-1]
        return out

    def to_json(self, **kwargs: Any) -> str:
        """The DCI as a JSON string with torch-spyre's field names."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DCI:
        """Read a DCI from torch-spyre's JSON object.

        Raises:
            LayoutError: if a field is missing or malformed.
        """
        try:
            h2d = bool(data["isHostToSen_"])
            src = tuple(int(n) for n in data["input_shape_"])[::-1]
            dst = tuple(int(n) for n in data["output_shape_"])[::-1]
            src_fmt = DataFormats(int(data["dataformat_src_"]))
            dst_fmt = DataFormats(int(data["dataformat_dst_"]))
            descs = tuple(
                Descriptor(
                    size=tuple(int(v) for v in e["size_"]),
                    stride_src=tuple(int(v) for v in e["stride_src_"]),
                    stride_dst=tuple(int(v) for v in e["stride_dst_"]),
                    offset_src=int(e["offset_src_"]),
                    offset_dst=int(e["offset_dst_"]),
                    host_to_device=h2d,
                )
                for e in data["dcsi_"]
            )
            name = str(data.get("dsName_", ""))
            gaps = data.get("validGap_")
            gaps = None if gaps is None else [(int(g), 0) for _, g in gaps][::-1]
        except (KeyError, TypeError, ValueError) as err:
            raise LayoutError(f"not a DCI JSON object ({err!r}): {data!r:.200}") from err
        host, dev = (src, dst) if h2d else (dst, src)
        host_fmt, dev_fmt = (src_fmt, dst_fmt) if h2d else (dst_fmt, src_fmt)
        if gaps is not None and len(gaps) != len(dev):
            raise LayoutError(f"validGap_ {data['validGap_']} does not match output_shape_")
        return cls(descs, h2d, dev_fmt, host, dev, name, host_fmt, _front_gaps(descs, gaps, dev))

    @classmethod
    def from_json(cls, text: str) -> DCI:
        """Read a DCI from a JSON string (see :meth:`from_dict`)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise LayoutError(f"not valid JSON: {err}") from err
        return cls.from_dict(data)


def _front_gaps(
    descs: Sequence[Descriptor], gaps: list[tuple[int, int]] | None, device: Sequence[int]
) -> tuple[tuple[int, int], ...] | None:
    """``(front, back)`` gaps from ``validGap_``'s totals and the first descriptor.

    The first descriptor (the main one) starts at the valid range's origin, so its
    device offset, read as a coordinate, is the front gap of each dim.
    """
    if gaps is None:
        return None
    d = descs[0] if descs else None
    offset = 0 if d is None else (d.offset_dst if d.host_to_device else d.offset_src)
    out = []
    for n, (total, _) in zip(reversed(device), reversed(gaps), strict=True):
        offset, front = divmod(offset, n) if n else (offset, 0)
        if front > total:
            raise LayoutError(f"validGap_ gap {total} is shorter than the front offset {front}")
        out.append((front, total - front))
    return tuple(out[::-1])


class _Piece(NamedTuple):
    """Part of one host segment: per device dim ``(trip count, first coordinate)``."""

    loops: dict[Hashable, tuple[int, int]]
    offset: int  # in segment elements


def _cover(n: int, axes: Sequence[tuple[Hashable, int]]) -> list[_Piece]:
    """Pieces that cover ``n`` segment elements with nested device dims ``axes``.

    The outermost dim gets the floor count of whole tiles, each covered like one tile
    of ``r_top`` elements by the inner dims (one piece when they divide it evenly, a
    piece per part otherwise); a leftover gets more pieces (trip count 1 on the outer
    dim) whose inner dims cover the rest.
    """
    if not axes:
        return [_Piece({}, 0)] if n == 1 else []
    (top, r_top), inner = axes[0], axes[1:]
    full, rest = divmod(n, r_top)
    pieces = []
    for sub in _cover(r_top, inner) if full else []:
        pieces.append(_Piece({top: (full, 0), **sub.loops}, sub.offset))
    for sub in _cover(rest, inner) if rest else []:
        pieces.append(_Piece({top: (1, full), **sub.loops}, full * r_top + sub.offset))
    return pieces


def generate_dci(
    shape: Sequence[int],
    layout: SpyreTensorLayout,
    *,
    host_dtype: DTypeLike = None,
    host_strides: Sequence[int] | None = None,
    host_to_device: bool = True,
    name: str = "",
) -> DCI:
    """The DMA descriptors that move a host tensor of ``shape`` to or from ``layout``.

    The same as ``layout.for_host(shape, host_strides).dci(...)``.

    Args:
        shape: host sizes (an empty tensor gets no descriptors).
        layout: the device layout.
        host_dtype: the host array's dtype, recorded as the host side's format
            (``dataformat_src_`` on the way in: ``IEEE_FP16`` for float16, ``BFLOAT16``
            for bfloat16); defaults to the canonical host dtype of the layout's format
            (float16 for ``SEN169_FP16``). It does not change the descriptors.
        host_strides: host strides in elements; defaults to row-major.
        host_to_device: direction; D2H swaps source and destination and reads one
            copy of every broadcast device dim.
        name: stored as ``dsName_``.

    Returns:
        The :class:`DCI`. Descriptors come main first, then remainders; the
        remainders of inner host dims vary fastest (spec section 6).

    Raises:
        LayoutError: if the layout cannot hold a host tensor of this shape, or
            ``host_dtype`` has no Spyre format or does not fit the layout's.
    """
    mapping = layout.for_host(shape, host_strides)
    return _mapping_dci(mapping, host_to_device, host_dtype, name)


def _mapping_dci(
    mapping: HostMapping,
    host_to_device: bool = True,
    host_dtype: DTypeLike = None,
    name: str = "",
) -> DCI:
    """The DMA descriptors that move ``mapping``'s host tensor to or from its layout.

    Attached to :class:`HostMapping` as its ``dci`` method; arguments as
    :func:`generate_dci`'s.
    """
    fmt = mapping.layout.device_dtype
    if host_dtype is None:
        host_fmt = host_format(fmt)
    elif fits_format(host_dtype, fmt):
        host_fmt = host_format(host_dtype)
    else:
        raise LayoutError(
            f"host dtype {np.dtype(host_dtype)} does not fit the layout's device format {fmt!r}"
        )
    h2d = bool(host_to_device)
    descs = _descriptors(mapping, h2d)
    layout = mapping.layout
    gaps = layout.device_gaps if layout.has_gaps else None
    return DCI(descs, h2d, fmt, mapping.shape, layout.device_size, name, host_fmt, gaps)


# The mapping owns its descriptors; they are built here, one layer above the layout core.
HostMapping.dci = _mapping_dci  # type: ignore[misc]


class _Loop(NamedTuple):
    """One loop of a descriptor: its key in the covers, host and device strides."""

    key: Hashable  # a device dim, or a digit of an arranged group (see _arranged_loops)
    host: int
    device: int


@functools.lru_cache(maxsize=4096)
def _descriptors(mapping: HostMapping, h2d: bool) -> tuple[Descriptor, ...]:
    layout = mapping.layout
    if mapping.size == 0:
        return ()  # an empty tensor: nothing to move
    hstrides = _host_strides(mapping)
    dstrides = list(layout.device_strides)
    base = 0
    if isinstance(layout, LanedLayout):  # the valid range's lane k is device lane offset + step*k
        offset, step = layout.lanes
        base, dstrides[-1] = offset * dstrides[-1], step * dstrides[-1]
        if layout.tile is not None:  # a tile window: its stick tile's start
            base += layout.tile[1] * dstrides[layout.tile[0]]
    covers: list[tuple[tuple[Hashable, int], ...]] = [s.axes for s in mapping.segmentation.segments]
    loops = {j: [_Loop(j, hstrides[j], dstrides[j])] for j in range(layout.device_rank)}
    if layout.is_arranged:
        _arranged_loops(mapping, covers, loops, dstrides)
    out = []
    for combo in itertools.product(
        *(_cover(s.size, c) for s, c in zip(mapping.segmentation.segments, covers, strict=True))
    ):
        walked: dict[Hashable, tuple[int, int]] = {}
        host_off = 0
        for seg, piece in zip(mapping.segmentation.segments, combo, strict=True):
            walked.update(piece.loops)
            host_off += piece.offset * seg.stride
        size, host, dev = [], [], []
        dev_off = base
        for j in reversed(range(layout.device_rank)):
            dev_off += layout.device_gaps[j][0] * layout.device_strides[j]
            for loop in loops[j]:
                if loop.key in walked:
                    count, first = walked[loop.key]
                elif layout.stride_map[j] == 0 and h2d:
                    count, first = layout.valid_size[j], 0
                else:
                    count, first = 1, 0
                size.append(count)
                host.append(loop.host)
                dev.append(loop.device)
                dev_off += first * loop.device
        src, dst, src_off, dst_off = host, dev, host_off, dev_off
        if not h2d:
            src, dst, src_off, dst_off = dev, host, dev_off, host_off
        out.append(Descriptor(tuple(size), tuple(src), tuple(dst), src_off, dst_off, h2d))
    return tuple(out)


def _arranged_loops(
    mapping: HostMapping,
    covers: list[tuple[tuple[Hashable, int], ...]],
    loops: dict[int, list[_Loop]],
    dstrides: Sequence[int],
) -> None:
    """Replace the loops of an arranged group by loops over its index's digits (in place).

    An arrangement moves digit ``k`` of an element's index in its group (radix
    ``r_k``) by ``stride_k`` positions, a position ``p`` being lane ``p % lanes`` of
    stick ``p // lanes`` of the group (``lanes`` 64 for a 16-bit group of one stick,
    32 for a 32-bit one of two: tiles ``2g, 2g + 1`` of the pair dim). No digit's move
    carries across a stick, so each digit is a loop of its own: host stride ``r_k``
    elements of the lanes' segment, device stride its move. The lane loop becomes the
    digit loops; a 32-bit pair dim's loop steps whole groups (two tiles).

    The lanes and the pair have no gap (the layout refuses them).

    Raises:
        LayoutError: if an outer axis of the lanes' segment splits a group.
    """
    layout, pair = mapping.layout, mapping.pair
    last = layout.device_rank - 1
    lanes = GROUP if pair is None else GROUP // 2
    g = next(k for k, c in enumerate(covers) if (last, 1) in c)
    seg = mapping.segmentation.segments[g]
    mine = {last} | ({pair} if pair is not None else set())
    rest = [(a, r) for a, r in covers[g] if a not in mine]
    if any(r % GROUP for _, r in rest):  # (a layout holding the tensor has none such)
        raise LayoutError(
            f"{layout} for host shape {list(mapping.shape)}: a dim outside its lanes splits "
            "an arrangement group, so no descriptor moves the group whole"
        )
    shape, stride = layout.arrangement.digits
    digits, radix = [], 1
    for k, (n, s) in enumerate(zip(shape, stride, strict=True)):
        moved = s % lanes * dstrides[last]
        if s >= lanes and pair is not None:  # (16-bit: every move stays in the stick)
            moved += s // lanes * dstrides[pair]
        digits.append((_Loop(("digit", k), radix * seg.stride, moved), radix))
        radix *= n
    loops[last] = [loop for loop, _ in digits]
    group = [] if pair is None else [(("group",), GROUP)]
    if pair is not None:
        loops[pair] = [_Loop(("group",), GROUP * seg.stride, 2 * dstrides[pair])]
    inner = [(loop.key, r) for loop, r in reversed(digits)]
    covers[g] = (*rest, *group, *inner)


def _host_strides(mapping: HostMapping) -> tuple[int, ...]:
    """The host stride of each device dim's loop: its ``stride_map`` entry, never -1.

    A ``-1`` dim (a size-1 host dim's place, or a synthetic dim) only ever runs one
    iteration, but its loop carries the real host stride of the dim it stands for
    (spyre-device spec section 5). In a default layout
    (:meth:`HostMapping.dim_order`) each place is known: a size-1 host dim's
    stride, or for a size-1 stick dim ``s`` its tile and stick strides (``hs[s] * eps``
    and ``hs[s]``). Synthetic dims stand for no host dim: they take the stride of a new
    outermost dim, the host tensor's extent.
    """
    layout, shape, strides = mapping.layout, mapping.shape, mapping.strides
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides, strict=True) if n > 0)
    out = [extent if m == -1 else m for m in layout.stride_map]
    order = mapping.dim_order() if -1 in layout.stride_map else None
    if order:
        k = len(order)
        places = {} if k == 1 else {k - 1: order[0]} | {i - 1: order[i] for i in range(1, k - 1)}
        stick = order[-1]
        if stick >= 0:
            eps = layout.elems_per_stick
            out[k - 2 if k > 1 else 0] = strides[stick] * eps
            out[k] = strides[stick]
        for j, d in places.items():
            out[j] = strides[d]
    return tuple(out)
