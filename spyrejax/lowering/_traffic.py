"""The planner's objective: the device bytes a choice of layouts reads and writes.

One owner for what an option, a restickify and a host fallback cost the planner: bytes of
device images in their layouts, padding included (``layout.nbytes``), so a slice, a
reduction or a broadcast lands in the layout that costs least downstream; and the order
among equal costs (:data:`MOVE_TIE`, :func:`tie_break`).

A value a chain of kernels makes and reads inside itself (:func:`chained`: elementwise
ops and reductions, as ``device._fusion`` fuses them and the LX placer keeps their
intermediates) is charged its LX traffic (:data:`LX_SHARE` of its bytes), not DDR bytes:
the card never writes it to DDR, so its padding costs LX port time only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import primitives as sp
from ..device._fusion import CHAIN_SPACES
from ..device._machine import Machine, default_machine
from ..device._matmul_cost import relaid_read
from ..layout import BYTES_PER_STICK, SpyreTensorLayout
from ..layout._gaps import valid_nbytes
from ..primitives._arranged import card_relayout_bytes
from ..primitives._array import SpyreType
from ..primitives._astype import Astype
from ..primitives._copies import SliceCopy
from ..primitives._in_place import FillAround
from ..primitives._iota import Full
from ..primitives._stick import SPARSE, default_layout, restickify_cost, stick_of
from ._graph_edits import _POINTWISE

if TYPE_CHECKING:  # lowering._graph imports the rewrites, which import this module's peers
    from ._graph import Graph

__all__ = [
    "LX_SHARE",
    "MOVE_TIE",
    "RELAYOUT_TIE",
    "chain_bytes",
    "chain_io",
    "chained",
    "move_bytes",
    "nbytes",
    "read_bytes",
    "read_tie_break",
    "rebased",
    "reorder_bytes",
    "source_bytes",
    "through_ddr",
    "tie_break",
    "traffic",
    "with_standard",
]

MOVE_TIE = 2.0**-10
"""A restickify's extra cost, far below a byte: at equal bytes, a node's own copy (which
explain reports on its source line) is planned rather than a restickify before a view. A
power of two: sums of byte counts and ties stay exact in floats."""


REBASE = 2.0**36
"""The least total past which a value's totals are taken relative to it (:func:`rebased`).

The planner's forward totals add each input's total, so a value read along two paths (a
residual stream, a weight read forward and backward) counts twice: a deep graph's totals
double per layer (2^17 a GPT layer: 2^577 at 32 layers; inf at about 59 by extrapolation,
where no option is finite: a 700-step chain of `x * x + x` failed so). A node's choice
depends only on its inputs' totals relative to each other, so past 2^36 bytes (64 GiB:
more than a program of the card moves, so the totals below it are exact sums of bytes
in floats) they are rebased. Until 2026-11-29 the threshold was 2^960, where a float's
step at 2^577 is 2^525 bytes and rounding chose among near options: the 4-layer GPT
training step planned 370 restickifies (by ``explain``) where exact totals give 266, and
the device model predicts the exact plan faster (24.3 ms against 25.0; with dropout 51.4
against 55.7; benchmarks/README items 47, 60, 65). Its CPU slowdown of item 47 was XLA
recomputing the residual gradient's chain in each reader, fixed in the interpreter
(item 60)."""


def rebased(produced: dict[Any, tuple[float, Any]]) -> dict[Any, tuple[float, Any]]:
    """A value's totals by type, less their least where that passes :data:`REBASE`."""
    least = min((c for c, _ in produced.values()), default=0.0)
    if least <= REBASE:
        return produced  # the planner's own fresh dict: no copy on its hot path
    return {t: (c - least, o) for t, (c, o) in produced.items()}


RELAYOUT_TIE = 2.0**-14
"""What reading a value kept in an element arrangement costs a restickify besides its bytes.

A restickify of an arranged value moves it anyway, so the tie makes the planner
convert in the standard order where the value is moved regardless. Far below a byte
and below :data:`MOVE_TIE`."""


def nbytes(t: SpyreType) -> int:
    """The device bytes of ``t``'s image, padding included (a view: its base image).

    A layout with gaps (a slot of a larger buffer) is read and written in its valid
    range only: the gaps are the buffer's other slots, written by their own producers.
    """
    return valid_nbytes(t.layout)


@functools.lru_cache(maxsize=65536)
def read_bytes(t: SpyreType) -> int:
    """The device bytes an op reading ``t`` pays: its image's (:func:`nbytes`).

    A view broadcasting its base along a dim (stride 0) is read at the bytes of its
    shape in the default layout: the device model runs an op with a broadcast operand
    at the broadcast pattern's bandwidth, as slow as reading it whole (in the default
    layout of its own stick: a broadcast along a short last dim, ``jnp.repeat``'s
    ``[..., D/2, 2]``, is not charged that dim padded to sticks); so a broadcast
    constant is filled (``full``: one stick its readers read) rather than moved to the
    device and broadcast as a view.
    """
    if t.is_view and any(n > 1 and s == 0 for n, s in zip(t.shape, t.strides, strict=True)):
        return max(nbytes(t), _dense_bytes(t.shape, t.dtype, t.stick_dim))
    return nbytes(t)


@functools.lru_cache(maxsize=4096)
def _dense_bytes(shape: tuple[int, ...], dtype: np.dtype, stick: int | None) -> int:
    if stick is None or not shape:
        return SpyreTensorLayout(shape, dtype).nbytes
    return default_layout(shape, dtype, stick).nbytes


def source_bytes(t: SpyreType) -> float:
    """What a restickify pays to read ``t``: its bytes, and twice :data:`RELAYOUT_TIE`.

    Twice the tie out of an element arrangement: a value moved anyway is converted in
    the standard order (its relayout rides on the move; the arrangement saves nothing).
    """
    return nbytes(t) + (2 * RELAYOUT_TIE if t.layout.is_arranged else 0)


def move_bytes(source: SpyreType, target: SpyreType) -> float:
    """Device bytes a restickify reads and writes: the source image and the target's."""
    return source_bytes(source) + nbytes(target)


def _spyre_types(avals: Any) -> list[SpyreType]:
    """The Spyre types among (possibly nested) abstract values."""
    if isinstance(avals, tuple | list):
        return [t for a in avals for t in _spyre_types(a)]
    return [avals] if isinstance(avals, SpyreType) else []


def through_ddr(p: Any) -> bool:
    """Whether a copy or charge moves its elements through DDR.

    Not a matmul's operand laid out anew as the matmul loads it (``LoadRelayout``,
    ``through_ddr`` False), nor a body's charge standing for one; every other copy does.
    """
    return getattr(p, "through_ddr", True)


def traffic(called: list[Any]) -> float:
    """The device bytes a lowering's primitives read and write: the planner's objective.

    Every primitive but a view reads its operands' images and writes its results', in
    their layouts' bytes (padding included); a collective also sends its elements
    between cards. A matmul's operand laid out anew as it is loaded (``LoadRelayout``,
    ``through_ddr`` False) moves nothing through DDR but the matmul's read of it, in a
    loop body as at the top level, and that read moves its source image's bytes
    (:func:`_relaid_saving`). A charge standing for a body's copies
    (``lowering._control``) reads and writes the elements it moves, as often as it runs,
    unless it stands for such a relayout; a host fallback in a body moves its DMA bytes.
    """
    total = 0
    for p in called:
        if p.role == "view":
            continue
        if not through_ddr(p):
            total += _relaid_saving(p)
            continue
        if isinstance(p, Full):  # a fill writes one stick, its readers broadcast it
            total += BYTES_PER_STICK
        elif isinstance(p, FillAround):  # an in-place pad writes its border only
            total += _elements_bytes(p.moves, _spyre_types(p.out_avals))
        elif isinstance(p, SliceCopy):  # reads what its result's elements are, as charged
            (t,), out = _spyre_types(p.in_avals), p.out_aval
            total += -(-read_bytes(t) * out.size // max(t.size, 1)) + nbytes(out)
        elif isinstance(p, sp.SpyrePrim):
            total += sum(map(read_bytes, _spyre_types(p.in_avals)))
            total += sum(map(nbytes, _spyre_types(p.out_avals)))
            if isinstance(p, Astype) and p.reorders:
                total += reorder_bytes(p)
            if p.role == "collective":
                total += _elements_bytes(p.moves, _spyre_types(p.in_avals))
        elif p.role == "host":
            total += p.to_host_bytes + p.to_device_bytes
        else:
            total += 2 * _elements_bytes(p.moves, _spyre_types(p.in_avals))
    return total


def _relaid_saving(p: Any) -> int:
    """What a ``LoadRelayout``'s one reader, a matmul, reads less than its result's bytes.

    The matmul reads its operand at its source image's bytes (the card loads the
    source's blocks and lays them out in LX: ``device._matmul_cost.relaid_read``, the
    rule the device model prices the read by), where :func:`traffic` charges it the
    relaid image's (a negative number where the relayout pads). A loop body's charge
    standing for one moves nothing itself: the body's plan holds its reader.
    """
    if not isinstance(p, sp.SpyrePrim):
        return 0
    (source,), relaid = _spyre_types(p.in_avals), nbytes(p.out_aval)
    return relaid_read(relaid, relaid, read_bytes(source)) - relaid


def reorder_bytes(p: Astype) -> int:
    """What the card pays to give ``p``'s conversion in the standard order.

    :func:`primitives._arranged.card_relayout_bytes` of the bytes it converts (its
    operand image's, or a lane view's lanes': ``Astype.converted_nbytes``) and its
    result image's (:func:`nbytes`), charged where ``p.reorders``.
    """
    return card_relayout_bytes(p.converted_nbytes, nbytes(p.out_aval))


def _elements_bytes(elements: int, avals: list[SpyreType]) -> int:
    """Bytes of ``elements`` device elements in the format of the first of ``avals``."""
    if not avals or not elements:
        return 0
    t = avals[0]
    return elements * nbytes(t) // restickify_cost(t)


@functools.lru_cache(maxsize=65536)
def tie_break(t: SpyreType) -> tuple[Any, ...]:
    """Among equal costs: dense, contiguous, the default layout's stick, lower sticks.

    Dense before sparse, contiguous before views, without gaps before with, the stick of
    the default layout (the last dim that is not size 1) before the others, then lower
    sticks.
    """
    s = stick_of(t)
    last = next((d for d in reversed(range(t.ndim)) if t.shape[d] > 1), SPARSE)
    return (s == SPARSE, t.is_view, t.layout.has_gaps, s != last, s)


def read_tie_break(t: SpyreType) -> tuple[Any, ...]:
    """Among types a consumer can read at equal cost: a window first, then :func:`tie_break`.

    A value written into a window of a larger buffer is read there by the kernels that
    take gaps (pointwise ops), not restickified out of it.
    """
    return (not t.layout.has_gaps, *tie_break(t))


def with_standard(chosen: list[tuple[Any, float]], ranked: list[tuple[Any, float]]) -> list:
    """A consumer's candidate types, and the cheapest standard one if one is arranged.

    ``chosen`` are the candidates, ``ranked`` every type in the planner's order.
    Most consumers refuse an arranged type (``SpyrePrim.takes_arrangements``): it must
    not crowd out the standard order the same conversion also gives.
    """
    if not any(t is not None and t.layout.is_arranged for t, _ in chosen):
        return chosen
    standard = [tc for tc in ranked if not tc[0].layout.is_arranged and tc not in chosen]
    return chosen + standard[:1]


def _lx_share(machine: Machine) -> float:
    """DDR's bandwidth over all cores' LX ports', rounded to a power of two."""
    return 2.0 ** round(math.log2(machine.ddr_bw / (machine.cores * machine.lx_bw)))


LX_SHARE = _lx_share(default_machine())
"""What a byte a chain keeps in LX costs the planner, in DDR bytes (2^-5 on ``Machine.spyre``).

The device model times an LX access at the cores' LX ports (``Machine.lx_bw`` a core,
32 of them: 6.1 TB/s) and a DDR access at ``ddr_bw`` (150 GB/s). A power of two: sums of
byte counts stay exact in floats (``lowering._chosen`` re-sums a searched node's totals)."""

_LX_FITS = default_machine().lx_usable * default_machine().cores
"""The most bytes a chained value may take and be charged as kept in LX: the LX budget
of every core (``device._lx.place`` keeps a value whose per-core share fits)."""

_CHAIN_PRIMS = (
    _POINTWISE | {p for r in sp.REDUCTIONS_TABLE for p in r.lowers} | {"convert_element_type"}
)
"""The JAX primitives whose lowerings run one elementwise kernel or reduction."""


def chained(graph: Graph) -> frozenset[int]:
    """The ids of the values a chain of kernels makes and reads inside itself.

    Made by an elementwise op, a conversion or a reduction, read only by such ops (of
    one graph: a loop body is planned apart), and no result of the graph: the kernels
    ``device._fusion.find_fusions`` joins (``_fusible``: elementwise ops and reductions,
    no matmul), whose intermediates the card keeps in LX, as the LX placer keeps the
    intermediate of two such ops (``device._plan``). A conservative local rule: a value
    read by a view (a broadcast, a reshape) or a copy is not chained.
    """
    out = {id(o) for o in graph.outputs}
    readers: dict[int, list[str]] = {}
    for node in graph.nodes:
        for u in node.ins:
            readers.setdefault(id(u), []).append(node.prim)
    return frozenset(
        id(v)
        for node in graph.nodes
        if node.prim in _CHAIN_PRIMS and len(node.outs) == 1
        for v in node.outs
        if id(v) not in out and readers.get(id(v)) and set(readers[id(v)]) <= _CHAIN_PRIMS
    )


def _chain_kernel(p: Any) -> bool:
    """A divided kernel a chain holds: an elementwise op, a conversion, a reduction.

    The fused chains' rule (``device._fusion.CHAIN_SPACES``) read of the primitive's
    iteration space, as ``device._fusion`` reads it of the device model's ops.
    """
    return isinstance(p, sp.SpyrePrim) and p.space_kind in CHAIN_SPACES


def chain_io(
    called: list[Any], ins: Sequence[SpyreType | None], result: SpyreType | None
) -> tuple[tuple[float, ...], float]:
    """The bytes a lowering's chain kernels read of each input and write of its result.

    What :func:`traffic` charges them (an input through the views the lowering takes of
    it; a result through the views it is given as), of values that fit LX
    (``_LX_FITS``); the planner charges what of it a chained value's is at
    :data:`LX_SHARE` (:func:`chain_bytes`). Inputs of one type share its reads.
    """
    where: dict[SpyreType, list[int]] = {}
    for j, t in enumerate(ins):
        if t is not None and nbytes(t) <= _LX_FITS:
            where.setdefault(t, []).append(j)
    maker: dict[SpyreType, Any] = {}
    called = [p for p in called if isinstance(p, sp.SpyrePrim)]  # not a body's charges
    for p in called:
        typed = _spyre_types(p.in_avals)
        if p.role == "view" and len(typed) == 1 and typed[0] in where:
            where.setdefault(p.out_aval, where[typed[0]])
        if not (p.role == "view" and typed == [p.out_aval]):  # a view onto its own type
            maker[getattr(p, "out_aval", None)] = p
    reads = [0.0] * len(ins)
    for p in called:
        if _chain_kernel(p):
            for t in _spyre_types(p.in_avals):
                for j in where.get(t, ()):
                    reads[j] += read_bytes(t) / len(where[t])
    p, seen = maker.get(result), set()
    while p is not None and p.role == "view" and len(_spyre_types(p.in_avals)) == 1:
        seen.add(id(p))  # views of views back to a view seen: no kernel made it
        p = maker.get(_spyre_types(p.in_avals)[0])
        p = None if id(p) in seen else p
    fits = p is not None and _chain_kernel(p) and nbytes(p.out_aval) <= _LX_FITS
    return tuple(reads), float(nbytes(p.out_aval)) if fits else 0.0


def chain_bytes(
    ins: Sequence[Any], outs: Sequence[Any], io: tuple[tuple[float, ...], float], inside: Any
) -> float:
    """What an option saves of its traffic on chained values (``inside``: their ids).

    ``io``: its :func:`chain_io`. Each byte of a chained input read or a chained result
    written costs :data:`LX_SHARE` instead of one.
    """
    reads, write = io
    saved = sum(b for u, b in zip(ins, reads, strict=False) if id(u) in inside)
    if outs and id(outs[0]) in inside:
        saved += write
    return (1 - LX_SHARE) * saved
