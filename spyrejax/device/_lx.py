"""Scratchpad (LX) planning (spyre-device spec section 3).

Each intermediate value gets a per-core buffer (its device bytes / the cores of its
op) with a lifetime ``[first use, last use]`` over the op order. The placers put
buffers at 128-byte aligned addresses inside the usable LX budget; a buffer that does
not fit stays in DDR. An in-place op (``exp``, ``sub``, ``add``, ``rsqrt``) may reuse its
input's space when the input dies there.

- ``greedy`` walks the time points: frees the buffers that died, then places each new
  buffer at its in-place parent, else at address 0 if it fits below the lowest live
  block, else above the high-water mark, else in the first gap;
- ``first_fit`` and ``best_fit`` place all buffers sorted by priority (span minus 0.25
  per in-place relation, divided by the number of uses, +0.5 if the first use is a
  write): at the lowest address, or in the smallest gap, free over their lifetime.

Pure Python.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import DeviceError
from ._machine import Machine

__all__ = ["Buffer", "LXPlan", "Stream", "place", "stream"]

STRATEGIES = ("greedy", "first_fit", "best_fit")


@dataclass(frozen=True)
class Buffer:
    """A per-core buffer wanting LX space.

    Attributes:
        name: the value's name.
        size: bytes per core.
        first: index of the op that writes it.
        last: index of the last op that reads it.
        parent: the buffer whose space an in-place op may reuse (it must die at
            ``first``), or None.
        uses: how many ops read it.
        first_is_write: whether its first use writes it (always, for op results).
    """

    name: str
    size: int
    first: int
    last: int
    parent: str | None = None
    uses: int = 1
    first_is_write: bool = True

    def priority(self, relations: int) -> float:
        """The first-fit/best-fit priority (higher is placed first)."""
        span = self.last - self.first
        return (span - 0.25 * relations) / max(self.uses, 1) + (0.5 if self.first_is_write else 0)


@dataclass(frozen=True)
class LXPlan:
    """Where each buffer lives.

    Attributes:
        address: per buffer name, its LX byte address, or None (stays in DDR).
        sizes: per buffer name, its aligned size.
        lifetimes: per buffer name, ``(first, last)``.
        strategy: the placer used.
        budget: usable LX bytes.
    """

    address: dict[str, int | None]
    sizes: dict[str, int]
    lifetimes: dict[str, tuple[int, int]]
    strategy: str
    budget: int

    def in_lx(self, name: str) -> bool:
        """Whether buffer ``name`` was placed in LX."""
        return self.address.get(name) is not None

    @property
    def peak(self) -> int:
        """The highest LX byte used by any placed buffer."""
        ends = [a + self.sizes[n] for n, a in self.address.items() if a is not None]
        return max(ends, default=0)

    def live_at(self, t: int) -> list[str]:
        """Buffers in LX at time point ``t``."""
        return [n for n, a in self.address.items() if a is not None and self._alive(n, t)]

    def _alive(self, name: str, t: int) -> bool:
        first, last = self.lifetimes[name]
        return first <= t <= last

    def live_bytes(self, steps: int) -> list[int]:
        """LX bytes in use at each time point ``0..steps-1``.

        The bytes of the buffers live at ``t`` (:meth:`live_at`), an in-place handover
        counted once: where a buffer takes its parent's space at the op that last reads
        the parent, the two share those bytes (a placed buffer's bytes never overlap
        another's otherwise). So no entry exceeds :attr:`peak`, nor the budget. One sweep
        over the buffers rather than one per time point.
        """
        change = [0] * (steps + 1)
        at: dict[int, list[tuple[int, int, int]]] = {}  # address -> (first, last, size)
        for n, a in self.address.items():
            first, last = self.lifetimes[n]
            if a is None or first >= steps or last < first:
                continue
            change[max(first, 0)] += self.sizes[n]
            change[min(last + 1, steps)] -= self.sizes[n]
            at.setdefault(a, []).append((first, last, self.sizes[n]))
        for same in at.values():  # handovers: one dies where the next at its address starts
            same.sort()
            for (_, last, size), (first, _, nxt) in itertools.pairwise(same):
                if first == last and 0 <= first < steps:
                    change[first] -= min(size, nxt)
                    change[first + 1] += min(size, nxt)
        out, live = [], 0
        for delta in change[:steps]:
            live += delta
            out.append(live)
        return out


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _overlaps(a: Buffer, b: Buffer) -> bool:
    """Whether two buffers need disjoint space (live together, not an in-place handover)."""
    if (a.parent == b.name and b.last == a.first) or (b.parent == a.name and a.last == b.first):
        return False
    return a.first <= b.last and b.first <= a.last


def _gaps(taken: list[tuple[int, int]], budget: int) -> list[tuple[int, int]]:
    """Free ``(start, end)`` ranges of ``[0, budget)`` around the ``taken`` ones."""
    out, at = [], 0
    for start, end in sorted(taken):
        if start > at:
            out.append((at, start))
        at = max(at, end)
    if at < budget:
        out.append((at, budget))
    return out


def place(buffers: Sequence[Buffer], machine: Machine, strategy: str = "greedy") -> LXPlan:
    """Place per-core buffers in LX.

    Raises:
        DeviceError: for an unknown strategy or two buffers with one name.
    """
    if strategy not in STRATEGIES:
        raise DeviceError(f"LX placer {strategy!r}: expected one of {STRATEGIES}")
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise DeviceError(f"LX buffers need distinct names, got {names}")
    align, budget = machine.lx_alignment, machine.lx_usable
    sizes = {b.name: _align(b.size, align) for b in buffers}
    lifetimes = {b.name: (b.first, b.last) for b in buffers}
    if strategy == "greedy":
        address = _greedy(buffers, sizes, budget)
    else:
        address = _fit(buffers, sizes, budget, best=strategy == "best_fit")
    return LXPlan(address, sizes, lifetimes, strategy, budget)


def _inplace(
    b: Buffer, by: dict[str, Buffer], address: dict[str, int | None], sizes: dict[str, int]
) -> int | None:
    """The parent's address when ``b`` can take its space in place, else None."""
    p = by.get(b.parent) if b.parent else None
    ok = p is not None and p.last == b.first and address.get(p.name) is not None
    return address[p.name] if ok and sizes[b.name] <= sizes[p.name] else None


def _greedy(buffers: Sequence[Buffer], sizes: dict[str, int], budget: int) -> dict:
    by = {b.name: b for b in buffers}
    address: dict[str, int | None] = {}
    live: dict[str, tuple[int, int]] = {}
    spans: list[tuple[int, int]] = []  # the live blocks, sorted (they are disjoint)
    starting: dict[int, list[Buffer]] = {}
    for b in buffers:
        starting.setdefault(b.first, []).append(b)
    ending: list[tuple[int, str]] = []  # (last, name) of the buffers placed, a heap

    def free(name: str | None) -> None:
        span = live.pop(name, None) if name is not None else None
        if span is not None:
            del spans[bisect.bisect_left(spans, span)]

    for t in sorted(starting):
        while ending and ending[0][0] < t:
            free(heapq.heappop(ending)[1])
        for b in starting[t]:
            size = sizes[b.name]
            at = _inplace(b, by, address, sizes)
            if at is not None:
                free(b.parent)
            else:
                at = _greedy_spot(spans, size, budget)
            address[b.name] = at
            if at is not None:
                live[b.name] = (at, at + size)
                bisect.insort(spans, (at, at + size))
                heapq.heappush(ending, (b.last, b.name))
    return address


def _greedy_spot(spans: list[tuple[int, int]], size: int, budget: int) -> int | None:
    """Where the greedy placer puts ``size`` bytes beside the sorted live ``spans``.

    At 0 if it fits below the lowest block, else above the highest, else in the first
    gap (the gaps of :func:`_gaps`, walked without sorting again).
    """
    if not spans:
        return 0 if size <= budget else None
    if size <= spans[0][0]:
        return 0
    high = spans[-1][1]  # disjoint blocks: the last one ends highest
    if high + size <= budget:
        return high
    at = 0
    for start, end in spans:  # a walk per placement over every live block: kept cheap
        if start - at >= size:
            return at
        if end > at:  # max(at, end) without the call (the 32-layer GPT step: 1M of them)
            at = end
    return at if budget - at >= size else None


def _fit(buffers: Sequence[Buffer], sizes: dict[str, int], budget: int, best: bool) -> dict:
    by = {b.name: b for b in buffers}
    relations = {b.name: 0 for b in buffers}
    for b in buffers:
        if b.parent in relations:
            relations[b.name] += 1
            relations[b.parent] += 1
    order = sorted(buffers, key=lambda b: (-b.priority(relations[b.name]), b.first, b.name))
    address: dict[str, int | None] = {}
    placed = _Timeline()
    for b in order:
        size = sizes[b.name]
        at = _inplace(b, by, address, sizes)
        if at is None:
            fits = [(s, e) for s, e in _gaps(placed.taken(b), budget) if e - s >= size]
            if fits:
                at = min(fits, key=lambda g: (g[1] - g[0], g[0]))[0] if best else fits[0][0]
        address[b.name] = at
        if at is not None:
            placed.add(b, (at, at + size))
    return {b.name: address[b.name] for b in buffers}


class _Timeline:
    """Placed buffers filed by the blocks of op indices their lifetimes cover.

    The space a new buffer must avoid is found among the buffers filed in its own
    blocks, not by a scan of every placed buffer (which made the fit placers quadratic
    in the program's length).
    """

    BLOCK = 32

    def __init__(self) -> None:
        self.blocks: dict[int, list[tuple[Buffer, tuple[int, int]]]] = {}

    def _keys(self, b: Buffer) -> range:
        return range(b.first // self.BLOCK, b.last // self.BLOCK + 1)

    def add(self, b: Buffer, span: tuple[int, int]) -> None:
        """File a placed buffer and its ``(start, end)`` addresses."""
        for k in self._keys(b):
            self.blocks.setdefault(k, []).append((b, span))

    def taken(self, b: Buffer) -> list[tuple[int, int]]:
        """The address ranges of the placed buffers that need space disjoint from ``b``."""
        seen: set[str] = set()
        out = []
        for k in self._keys(b):
            for o, span in self.blocks.get(k, ()):
                if o.name not in seen and _overlaps(b, o):
                    seen.add(o.name)
                    out.append(span)
        return out


@dataclass(frozen=True)
class Stream:
    """A counted outer loop that moves one tile of a too-large per-core slice at a time.

    Attributes:
        dim: the device dim the loop tiles (outer dims run one index per trip).
        trips: iterations.
        tile: device-dim indices per iteration.
        tile_bytes: bytes per iteration.
    """

    dim: int
    trips: int
    tile: int
    tile_bytes: int


def stream(box: Sequence[int], itemsize: int, budget: int) -> Stream | None:
    """How to stream a per-core box of device extents ``box`` through ``budget`` bytes.

    None if the box fits. Otherwise the loop runs over the outermost dim whose single
    index fits, taking as many indices per trip as fit; the dims outside it run one
    index per trip, so ``trips`` counts their iterations too.
    """
    total = math.prod(box) * itemsize
    if total <= budget:
        return None
    for j, n in enumerate(box):
        per_index = math.prod(box[j + 1 :]) * itemsize
        if n > 1 and per_index <= budget:
            tile = min(n, budget // per_index)
            trips = math.prod(box[:j]) * -(-n // tile)
            return Stream(j, trips, tile, tile * per_index)
    raise DeviceError(f"a per-core box {tuple(box)} has no tile within {budget} LX bytes")
