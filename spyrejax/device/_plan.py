"""Planning a program: its ops divided, its intermediates placed in LX, every op costed.

:func:`plan_program` takes a program's ops as the lowering lists them (:class:`OpDesc`,
pure data) and makes the :class:`DeviceProgram` (:mod:`._program`): every compute op
divided over the cores, the intermediates that can stay in LX placed there
(spyre-device spec section 3), the fused kernels found and every op costed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._counts import count
from ._cost import OpCost, op_cost, relayout_cost, transfer_cost
from ._division import WorkDivision
from ._divisions import divide_alike
from ._fusion import Fusion, find_fusions, is_fill, is_relayout
from ._kernels import fused_parts, row_passes, streamed_row_bytes
from ._lx import Buffer, LXPlan, Stream, place, stream
from ._machine import Machine
from ._program import DeviceOp, DeviceProgram, FusedGroup, OpDesc, Region
from ._space import TensorSpec

__all__ = ["plan_program"]

_LOAD_RELAYOUT = "loadrelayout"
"""The op of a matmul's operand relaid in LX as the matmul loads it (``LoadRelayout``:
``lowering.program`` names a copy by its primitive's class)."""


def _counted(descs: Sequence[OpDesc], times: Sequence[float]) -> list[bool]:
    """Which ops the totals count: of each ``cond``, the costliest branch's only.

    Inner ``cond``s are decided first, so a branch's cost is what it counts itself.
    """
    chains = [d.region.chain() if d.region else () for d in descs]
    conds: dict[int, tuple[int, dict[int, Region]]] = {}  # index -> (depth, branches)
    for chain in chains:
        for depth, r in enumerate(chain):
            if r.kind == "cond" and r.branch is not None:
                conds.setdefault(r.index, (depth, {}))[1][r.branch] = r
    dropped: set[Region] = set()
    for _, branches in sorted(conds.values(), key=lambda c: -c[0]):

        def cost(r: Region) -> float:
            return sum(
                t
                for t, chain in zip(times, chains, strict=True)
                if r in chain and not dropped.intersection(chain)
            )

        best = max(sorted(branches.values(), key=lambda r: r.branch or 0), key=cost)
        dropped.update(r for r in branches.values() if r != best)
    return [not dropped.intersection(chain) for chain in chains]


def _same_slices(prod: WorkDivision, p_op: int, cons: WorkDivision, c_op: int) -> bool:
    count("device.same_slices")
    if prod.cores_used != cons.cores_used:
        return False
    return all(prod.box(p_op, c) == cons.box(c_op, c) for c in range(prod.cores_used))


def _buffers(
    descs: Sequence[OpDesc], divisions: list[WorkDivision | None], keep: set[str], memo: _Memo
) -> list[Buffer]:
    """Per-core buffers of the intermediates that may live in LX.

    A value written or read in more than one loop body or branch (``OpDesc.region``:
    a loop's operand, carry or result, a branch's result) lives in DDR: it cannot stay
    in one op's LX from one iteration (or branch) to the next. So does a value two ops
    write (the branches of a ``cond`` writing its result).
    """
    producer: dict[str, int] = {}
    region: dict[str, Region | None] = {}  # the region a value is first used in
    ddr: set[str] = set()  # written twice, or used in more than one region
    readers: dict[str, list[tuple[int, int]]] = {}
    for i, d in enumerate(descs):
        name, r = d.output[0], d.region
        if name in producer:
            ddr.add(name)
        producer[name] = i
        if region.setdefault(name, r) != r:
            ddr.add(name)
        for k, (name, _) in enumerate(d.inputs):
            readers.setdefault(name, []).append((i, k))
            if region.setdefault(name, r) != r:
                ddr.add(name)
    out = []
    for name, i in producer.items():
        div, uses = divisions[i], readers.get(name, [])
        if name in keep or div is None or not uses:
            continue
        if name in ddr:
            continue  # crosses a loop body's or branch's boundary: DDR
        n_out = len(div.space.operands) - 1
        ok = all(
            (d := divisions[j]) is not None and memo.same_slices(div, n_out, d, k) for j, k in uses
        )
        if not ok:
            continue
        size = div.space.output.tensor.nbytes // div.cores_used
        parent = None
        if div.space.in_place:
            parent = next((n for n, _ in descs[i].inputs if n in producer), None)
        last = max(j for j, _ in uses)
        out.append(Buffer(name, size, i, last, parent, len(uses)))
    return out


class _Memo:
    """The costs, streams and slice comparisons of one program's divided ops.

    Each is computed once per :func:`_division_key` (a repeated layer's ops share them).
    """

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.keys: dict[int, tuple[WorkDivision, int]] = {}  # by id: each key once
        # Each distinct key numbered: the caches below hash a small int, not the key.
        self.numbers: dict[Hashable, int] = {}
        self.costs: dict[Hashable, OpCost] = {}
        self.streams: dict[Hashable, tuple[tuple[int, Stream], ...]] = {}
        self.same: dict[Hashable, bool] = {}

    def key(self, div: WorkDivision) -> int:
        """The number of the division's :func:`_division_key` (equal keys, one number)."""
        found = self.keys.get(id(div))
        if found is None:
            number = self.numbers.setdefault(_division_key(div), len(self.numbers))
            found = self.keys[id(div)] = (div, number)  # keeps div: its id
        return found[1]

    def same_slices(self, prod: WorkDivision, p_op: int, cons: WorkDivision, c_op: int) -> bool:
        """Whether each core's boxes of ``prod``'s operand ``p_op``, ``cons``'s ``c_op`` match."""
        key = (self.key(prod), p_op, self.key(cons), c_op)
        found = self.same.get(key)
        if found is None:
            found = self.same[key] = _same_slices(prod, p_op, cons, c_op)
        return found

    def op_cost(
        self,
        div: WorkDivision,
        where: frozenset[int],
        filled: frozenset[int],
        launch: bool,
        held: int = 0,
        relaid: tuple[tuple[int, int], ...] = (),
    ) -> OpCost:
        """``op_cost`` of the division with these operands in LX, filled and relaid.

        ``held``: LX bytes per core other values keep across a matmul (:func:`_held`):
        its blocking has the rest of the budget.
        """
        key = (self.key(div), where, filled, launch, held, relaid)
        cost = self.costs.get(key)
        if cost is None:
            count("device.cost")
            machine = self.machine
            if held:
                usable = max(machine.lx_usable - held, machine.lx_alignment)
                machine = replace(machine, lx_fraction=usable / machine.lx_bytes)
            cost = self.costs[key] = op_cost(div, machine, where, filled, launch, relaid)
        return cost

    def streams_of(self, div: WorkDivision) -> tuple[tuple[int, Stream], ...]:
        """``_streams`` of the division."""
        key = self.key(div)
        found = self.streams.get(key)
        if found is None:
            found = self.streams[key] = _streams(div, self.machine)
        return found


def _division_key(div: WorkDivision) -> Hashable:
    """What a division's costs depend on: everything but its tensors' names.

    Of the names, only which operands read one value's sticks (``x + x`` reads ``x``
    once; so do lane views of one buffer: ``TensorSpec.sticks_of``, as ``op_cost``).
    """
    space = div.space
    names = [o.tensor.sticks_of for o in space.operands]
    aliases = tuple(names.index(n) if n else k for k, n in enumerate(names))
    shape = (space.geometry(), space.transcendental, space.in_place, aliases)
    return (shape, tuple(div.splits.items()), div.cores, div.order, div.committed, div.how)


def plan_program(
    descs: Sequence[OpDesc],
    machine: Machine,
    keep_in_ddr: Sequence[str] = (),
    strategy: str = "greedy",
    fuse: bool = True,
) -> DeviceProgram:
    """Divide, place and cost a program's ops.

    A value written or read in more than one region (``OpDesc.region``) lives in DDR;
    of each ``cond``, the ops of the branches other than the costliest get ``runs=0``.
    The chains torch-spyre runs as one kernel (``device._fusion``) are costed as one:
    one launch, and no DDR traffic for the values they keep in LX.

    Args:
        descs: the ops in program order.
        machine: the machine profile.
        keep_in_ddr: value names that live in DDR whatever happens (graph inputs and
            outputs).
        strategy: the LX placer (``greedy``, ``first_fit``, ``best_fit``).
        fuse: whether to find fused kernels (False: every op is its own kernel).
    """
    divisions = _divisions(descs, machine)
    memo = _Memo(machine)
    buffers = _buffers(descs, divisions, set(keep_in_ddr), memo)
    lx = place(buffers, machine, strategy)
    ops = []
    peaks = lx.live_bytes(len(descs))
    fills = {d.output[0] for d in descs if is_fill(d)} - set(keep_in_ddr)
    relaid = _relaid_sources(descs)
    fusions = find_fusions(descs, frozenset(keep_in_ddr)) if fuse else []
    member = {i: k for k, f in enumerate(fusions) for i in f.ops}
    made = {d.output[0]: d.output[1] for d in descs}
    rows = [_rows(f, descs, divisions, made, machine) for f in fusions]
    fits, passes = [r[0] for r in rows], [r[1] for r in rows]
    unfused: list[float] = []
    loaded: list[frozenset[str]] = [frozenset()] * len(fusions)  # inputs a kernel has read
    for i, (d, div) in enumerate(zip(descs, divisions, strict=True)):
        lx_in = tuple(n for n, _ in d.inputs if lx.in_lx(n))
        lx_out = lx.in_lx(d.output[0])
        held = _held(d, div, peaks[i], lx)
        own = _own_cost(d, div, memo, fills, lx.in_lx, held=held, relaid=relaid)
        unfused.append(own.repeated(d.repeat).time_s)
        k = member.get(i)
        cost = own
        if k is not None:
            f = fusions[k]
            kept = fits[k] or passes[k] > 1  # streamed rows: no intermediate goes to DDR
            cost = _member_cost(descs, i, div, f, kept, loaded[k], fills, lx, memo, held, relaid)
            # its inputs' tiles and its result's stay for the kernel's next ops (a result
            # read after the kernel is written out too, not read back in)
            loaded[k] = loaded[k] | {n for n, _ in d.inputs} | {d.output[0]}
        streams = memo.streams_of(div) if div is not None else ()
        cost = cost.repeated(d.repeat)
        ops.append(DeviceOp(i, d, div, cost, lx_in, lx_out, streams, peaks[i], d.repeat, k))
    for k, f in enumerate(fusions):  # each fused kernel's ops share its time
        members = [ops[i] for i in f.ops]
        for i, op in fused_parts(descs, members, f, fits[k], passes[k], fills, lx, machine):
            ops[i] = op
    counted = _counted(descs, [op.time_s for op in ops])
    ops = [op if c else replace(op, runs=0) for op, c in zip(ops, counted, strict=True)]
    groups = _groups(descs, fusions, fits, passes, ops, unfused)
    return DeviceProgram(tuple(ops), machine, lx, groups)


def _divisions(descs: Sequence[OpDesc], machine: Machine) -> list[WorkDivision | None]:
    """Each op's division (None: not a compute op); a geometry divides once a process."""
    return [
        divide_alike(d.space, d.hint, machine)
        if d.kind == "compute" and d.space is not None
        else None
        for d in descs
    ]


def _groups(
    descs: Sequence[OpDesc],
    fusions: Sequence[Fusion],
    fits: Sequence[bool],
    passes: Sequence[int],
    ops: Sequence[DeviceOp],
    unfused: Sequence[float],
) -> tuple[FusedGroup, ...]:
    """The fused kernels, each with its time and what its ops cost as kernels of their own."""
    return tuple(
        FusedGroup(
            k,
            f.family,
            f.ops,
            descs[f.anchor].source,
            f.internal,
            fits[k],
            sum(ops[i].time_s for i in f.ops),
            sum(unfused[i] for i in f.ops),
            passes[k],
        )
        for k, f in enumerate(fusions)
    )


def _member_cost(
    descs: Sequence[OpDesc],
    i: int,
    div: WorkDivision | None,
    f: Fusion,
    in_lx: bool,
    loaded: frozenset[str],
    fills: set[str],
    lx: LXPlan,
    memo: _Memo,
    held: int = 0,
    relaid: Mapping[str, int] | None = None,
) -> OpCost:
    """The cost of op ``i`` inside the fused kernel ``f`` (before the kernel shares its time).

    Its internal values (and the inputs the kernel has loaded) are in LX when ``in_lx``
    (they fit, or the kernel streams its rows in two passes); an attention's inputs too
    (its DDR is counted once for the kernel, ``_kernels``).
    """
    kept = f.internal | loaded if in_lx else frozenset()
    if f.family == "attention":
        kept = kept | {n for j in f.ops for n, _ in descs[j].inputs}
    first = i == next(j for j in f.ops if descs[j].kind != "view")
    in_lx = lambda n: n in kept or lx.in_lx(n)  # noqa: E731
    fused = (kept, first)
    return _own_cost(descs[i], div, memo, fills, in_lx, fused=fused, held=held, relaid=relaid)


def _own_cost(
    d: OpDesc,
    div: WorkDivision | None,
    memo: _Memo,
    fills: set[str],
    in_lx: Any,
    fused: tuple[frozenset[str], bool] | None = None,
    held: int = 0,
    relaid: Mapping[str, int] | None = None,
) -> OpCost:
    """An op's cost, the values ``in_lx(name)`` says in LX; ``fused``: (kept, first).

    ``held``: the LX bytes per core other values keep across it (a matmul's blocking
    has the rest). ``relaid``: the source bytes of each value a matmul lays out anew
    in LX as it loads it (:func:`_relaid_sources`): the matmul reads that value from
    DDR at its source image's bytes.

    An op inside a fused kernel launches none unless it is the kernel's first, and a
    restickify of it with its input or its result in LX is each core relaying its tile
    through its LX port (``relayout_cost``): it reads from DDR only an input not in LX
    and writes to DDR only a result that leaves the kernel (one with neither in LX is a
    DDR restickify); so is a matmul's operand laid out anew as the matmul loads it
    (``LoadRelayout``: its matmul reads the operand from DDR, at its source image's
    bytes: ``relaid``).
    """
    launch = fused is None or fused[1]
    machine = memo.machine
    if div is not None:
        where = {k for k, (n, _) in enumerate(d.inputs) if in_lx(n)}
        if in_lx(d.output[0]):
            where.add(len(d.inputs))
        filled = frozenset(k for k, (n, _) in enumerate(d.inputs) if n in fills)
        relaid = relaid or {}
        sources = tuple((k, relaid[n]) for k, (n, _) in enumerate(d.inputs) if n in relaid)
        return memo.op_cost(div, frozenset(where), filled, launch, held, sources)
    if d.opfunc == _LOAD_RELAYOUT:  # a matmul's operand relaid in LX as the matmul loads
        # it: a part of the matmul's kernel, no launch or stage of its own
        return relayout_cost(machine, d.output[1].nbytes, launch=False, stage=False)
    if fused is not None and is_relayout(d):
        ddr_in = [(n, t) for n, t in d.inputs if not in_lx(n)]
        out_lx = in_lx(d.output[0])
        if out_lx or len(ddr_in) < len(d.inputs):  # relaid in LX: DDR for the rest
            read = sum(_read_bytes(t, n in fills, machine) for n, t in ddr_in)
            write = 0 if out_lx else d.output[1].nbytes
            return relayout_cost(machine, d.output[1].nbytes, launch, read, write)
    cost = _transfer(d, machine, fills)
    return cost if launch or d.kind == "view" else _no_launch(cost)


def _relaid_sources(descs: Sequence[OpDesc]) -> dict[str, int]:
    """The bytes of the source image of each value relaid in LX as a matmul loads it.

    A ``LoadRelayout``'s result, by name: its one reader, a matmul, brings it in from
    the source image in DDR and lays each block out anew in LX, so it reads the
    source's bytes (``_matmul_cost.relaid_read``), not the relaid image's padding.
    """
    return {d.output[0]: d.inputs[0][1].nbytes for d in descs if d.opfunc == _LOAD_RELAYOUT}


def _held(d: OpDesc, div: WorkDivision | None, live: int, lx: LXPlan) -> int:
    """LX bytes per core that values other than a matmul's own keep across it (0 else).

    The placer keeps a value in LX from its producer to its last reader (spec section
    3) whatever runs between; a matmul between them blocks its tiles in what is left of
    the budget (a residual stream kept across an MLP's three matmuls). ``live``: the LX
    bytes in use at the op (:meth:`LXPlan.live_bytes`), its own operands' among them.
    """
    if div is None or div.space.kind != "matmul" or not live:
        return 0
    own = {n for n, _ in d.inputs} | {d.output[0]}
    return max(0, live - sum(lx.sizes[n] for n in own if lx.in_lx(n)))


def _read_bytes(t: TensorSpec, fill: bool, machine: Machine) -> int:
    """The DDR bytes of reading a value whole: a constant fill is one stick."""
    return machine.stick_bytes if fill else t.nbytes


def _no_launch(cost: OpCost) -> OpCost:
    return replace(cost, time_s=cost.time_s - cost.launch_s, launch_s=0.0)


def _rows(
    f: Fusion,
    descs: Sequence[OpDesc],
    divisions: Sequence[WorkDivision | None],
    made: Mapping[str, TensorSpec],
    machine: Machine,
) -> tuple[bool, int]:
    """A fused kernel's ``(in_lx, passes)``: its intermediates in LX?, its inputs' reads.

    Its rows fit (:func:`_fits`): in LX, one pass. A softmax's or a norm's that do not
    are streamed (``_kernels.row_passes``): in two passes, or in one when its
    reductions' results only leave the kernel (it needs no whole row: in LX). An
    attention's or an epilogue's that do not go through DDR.
    """
    if _fits(f, divisions, made, machine):
        return True, 1
    if not _streams_rows(f):
        return False, 1
    passes = row_passes(descs, f)
    return passes == 1, passes


def _fits(
    f: Fusion,
    divisions: Sequence[WorkDivision | None],
    made: Mapping[str, TensorSpec],
    machine: Machine,
) -> bool:
    """Whether what a fused kernel holds of each internal value at once fits LX together.

    A kernel of reductions and elementwise ops (a softmax, a norm) holds, of a value
    shaped as one of its reductions' input, what one result of that reduction reads
    (:func:`_reduced_boxes`: the reduced extent a core works on under the reduction's
    division, one element along the other dims), in whole sticks: the last dim of a
    norm's or softmax's rows, every row of a column of a softmax over axis 0. A kernel
    with a matmul holds of a row it streams one block (``_kernels.streamed_row_bytes``):
    an attention of each value whose last dim is its keys (the extent its softmax
    reduces: the scores, k laid out on the keys), an epilogue of each value. Of any
    other value (and where no box can be read off) a row is its last dim, if it has
    two or more; of a 1-D value with one element per row of those (a row statistic: a
    norm's sum, sparse or dense), that element and its share of the value's padding;
    any other 1-D value is one row.
    """
    boxes = _reduced_boxes(divisions, f) if _streams_rows(f) else {}
    streamed = _block_streamed(f, divisions)
    values = [made[name] for name in f.internal]
    row_counts = {math.prod(t.shape[:-1]) for t in values if len(t.shape) > 1}
    need = 0
    for t in values:
        box = boxes.get(t.shape)
        held = t.box_nbytes(box) if box is not None else None
        if held is None and streamed(t):
            held = streamed_row_bytes(machine)
        if held is not None:
            need += held
            continue
        if len(t.shape) > 1:
            rows = math.prod(t.shape[:-1])
        else:
            rows = t.shape[0] if t.shape and t.shape[0] in row_counts else 1
        need += -(-t.nbytes // max(rows, 1))
    return need <= machine.lx_usable


_MATMUL_FAMILIES = frozenset({"attention", "matmul_epilogue"})


@dataclass(frozen=True)
class _BlockStreamed:
    """Which values of a fused kernel with a matmul it streams a row of by blocks.

    Such a kernel holds one block of such a row at a time (``_kernels.streamed_row_bytes``),
    not the row. The values are told apart by their shapes alone.

    Attributes:
        every_row: an epilogue's: its elementwise ops take the matmul's output a block of
            a row at a time as it finishes, so every value of two or more dims.
        key_extents: an attention's: the extents its softmax reduces (its keys; the flash
            kernel, ``_kernels.attention_kernel``, streams their blocks). A value of two
            or more dims whose last dim has one of these extents is streamed: matched by
            extent, so a value whose last dim only happens to be as long counts too.
    """

    every_row: bool = False
    key_extents: frozenset[int] = frozenset()

    def __call__(self, t: TensorSpec) -> bool:
        """Whether the kernel streams ``t``'s rows by blocks."""
        if len(t.shape) < 2:
            return False
        return self.every_row or t.shape[-1] in self.key_extents


def _block_streamed(f: Fusion, divisions: Sequence[WorkDivision | None]) -> _BlockStreamed:
    """The values a fused kernel streams a row of by blocks: an epilogue's, an attention's."""
    if f.family == "matmul_epilogue":
        return _BlockStreamed(every_row=True)
    if f.family != "attention":
        return _BlockStreamed()
    keys = frozenset(
        v.extent
        for i in f.ops
        if (div := divisions[i]) is not None and div.space.kind == "reduce"
        for v in div.space.dims
        if v.reduced
    )
    return _BlockStreamed(key_extents=keys)


def _streams_rows(f: Fusion) -> bool:
    """Whether a fused kernel is reductions and elementwise ops (a softmax, a norm).

    Such a kernel whose rows do not fit LX runs in two passes over them (``_kernels``:
    its intermediates never go to DDR); a kernel with a matmul (an attention, an
    epilogue) sends them through DDR instead.
    """
    return f.family not in _MATMUL_FAMILIES


def _reduced_boxes(
    divisions: Sequence[WorkDivision | None], f: Fusion
) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Per input shape of a kernel's reductions: the box one result reads on a core.

    The extent a core works on (``WorkDivision.chunk``, its division's) along each
    logical dim a reduction of that shape reduces, 1 elsewhere; none for a shape one of
    whose reduced variables walks a device dim folding several logical dims.
    """
    out: dict[tuple[int, ...], tuple[int, ...]] = {}
    unknown: set[tuple[int, ...]] = set()
    for i in f.ops:
        div = divisions[i]
        if div is None or div.space.kind != "reduce":
            continue
        x = div.space.operands[0]
        shape = x.tensor.shape
        box = list(out.get(shape, (1,) * len(shape)))
        for var in (v for v in div.space.dims if v.reduced):
            walked = [
                dev.dims
                for dev, walk in zip(x.tensor.dims, x.walks, strict=True)
                if walk is not None and walk[0] == var.name
            ]
            if not walked or any(len(d) != 1 for d in walked):
                unknown.add(shape)
                continue
            for (k,) in walked:
                box[k] = max(box[k], min(div.chunk(var.name), shape[k]))
        out[shape] = tuple(box)
    return {s: b for s, b in out.items() if s not in unknown}


def _transfer(d: OpDesc, machine: Machine, fills: set[str]) -> OpCost:
    """The cost of an op that is not divided: a view, a fill, a copy or a restickify.

    A view moves nothing and runs no kernel; a fill that is no program output is one
    stick, written with no kernel of its own. A copy reads of each input what its
    result needs: the sticks of the input's image holding a box of its result's shape
    (a slice ``x[:4]`` reads 4 rows, ``x[:, -1]`` a stick of each row, a pad or a
    concatenate whole inputs; the share of the input's bytes where no box is known).
    """
    if d.kind == "view":
        return transfer_cost(machine, 0, 0, kernel=False)
    if d.output[0] in fills:
        return transfer_cost(machine, 0, machine.stick_bytes, kernel=False)
    out = d.output[1]
    read = 0
    for name, t in d.inputs:
        if name in fills:
            read += machine.stick_bytes
        elif d.kind == "copy" and math.prod(t.shape) > math.prod(out.shape):
            box = t.box_nbytes(out.shape)
            share = -(-t.nbytes * math.prod(out.shape) // math.prod(t.shape))
            read += share if box is None else box
        else:
            read += t.nbytes
    pattern = "restickify" if d.kind == "restickify" else "ddr"
    return transfer_cost(machine, read, out.nbytes, pattern)


def _streams(div: WorkDivision, machine: Machine) -> tuple[tuple[int, Stream], ...]:
    """Operands whose per-core slice does not fit its share of LX."""
    count("device.streams")
    n = len(div.space.operands)
    budget = machine.lx_usable // n
    out = []
    for i, op in enumerate(div.space.operands):
        s = stream(div.box_shape(i, 0), op.tensor.itemsize, budget)
        if s is not None:
            out.append((i, s))
    return tuple(out)
