"""The time of a fused kernel, shared among its ops (``device._plan`` plans them).

- An elementwise chain, a softmax or a norm (and a matmul's epilogue): one stream of
  DDR reads and writes (:func:`one_stream`); its matmuls keep their own cost. A softmax
  or a norm whose rows do not fit LX streams them in two passes (:func:`first_pass`).
- Both: an op's in-group relayout (``OpCost.relayout_s``, a standard-order 16 <-> 32-bit
  conversion's) joins the kernel's LX-port term, as its restickifies' relayouts do:
  the kernel's stages overlap (the same assumption, unmeasured), where an op alone
  pays it after its conversion (``device._cost``).
- An attention: ONE kernel, flash-style (:func:`attention_kernel`).

Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ._cost import OpCost, burst_seconds, memory_seconds
from ._fusion import MATMUL_OPS, Fusion, is_reduction
from ._machine import Machine
from ._program import DeviceOp, OpDesc

if TYPE_CHECKING:
    from ._lx import LXPlan
    from ._space import TensorSpec

__all__ = [
    "ROW_PASSES",
    "attention_kernel",
    "first_pass",
    "fused_parts",
    "one_stream",
    "row_passes",
    "streamed_row_bytes",
]

ROW_PASSES = 2
"""How many times a softmax or a norm whose rows do not fit LX reads them (:func:`first_pass`)."""


def fused_parts(
    descs: Sequence[OpDesc],
    members: list[DeviceOp],
    fusion: Fusion,
    fits: bool,
    passes: int,
    fills: set[str],
    lx: LXPlan,
    machine: Machine,
) -> list[tuple[int, DeviceOp]]:
    """A fused kernel's ops with their parts of its time: ``(index, op)`` of those changed.

    ``passes``: :data:`ROW_PASSES` for a kernel streaming rows that do not fit LX
    (:func:`first_pass`), else 1.
    """
    if fusion.family != "attention":
        twice = first_pass(descs, fusion) if passes > 1 else frozenset()
        return one_stream(members, machine, twice)
    # A view of one value is read as that value (a broadcast mask: its own bytes); a
    # view joining several (pieces placed in one buffer, an update in place) is read
    # as the whole buffer it is.
    viewed = {d.output[0]: d.inputs[0] for d in descs if d.kind == "view" and len(d.inputs) == 1}

    def root(name: str, t: TensorSpec) -> tuple[str, TensorSpec]:
        while name in viewed:
            name, t = viewed[name]
        return name, t

    return attention_kernel(members, fusion, root, fits, fills, lx.in_lx, machine)


def row_passes(descs: Sequence[OpDesc], fusion: Fusion) -> int:
    """How many times a kernel of reductions whose rows do not fit LX reads them.

    :data:`ROW_PASSES` when an op after a reduction makes a value shaped as a
    reduction's input (the result broadcast back over the rows: a softmax's ``sub``, a
    norm's scale); 1 when the reductions' results only leave the kernel (a sum of a
    cast streams its rows once).
    """
    reduces = [i for i in fusion.ops if is_reduction(descs[i])]
    rows = {descs[i].space.operands[0].tensor.shape for i in reduces}
    after, made = set(reduces), {descs[i].output[0] for i in reduces}
    for i in fusion.ops:
        d = descs[i]
        if i in after or not any(n in made for n, _ in d.inputs):
            continue
        after.add(i)
        made.add(d.output[0])
        if d.kind == "compute" and not is_reduction(d) and d.output[1].shape in rows:
            return ROW_PASSES
    return 1


def first_pass(descs: Sequence[OpDesc], fusion: Fusion) -> frozenset[int]:
    """The ops a two-pass kernel runs in its first pass: its reductions and what they read.

    A softmax or a norm whose rows do not fit LX is not run through DDR at full
    intermediates: the back end streams each row twice. Pass 1 reads the kernel's
    inputs and keeps per row in LX what its reductions need (a softmax's running max
    and sum, rescaled as the max grows; a norm's sum and sum of squares); pass 2 reads
    the inputs again, recomputes the elementwise ops, and writes the outputs. Two
    passes is the least a streamed row takes; a back end running the chain as written
    (a softmax's sum after its max, a layer norm's variance after its mean) takes
    three. The ops of pass 1 (the reductions and the kernel's ops they depend on) read
    their DDR inputs once per pass; its elementwise ops run in both passes.
    """
    writer = {descs[i].output[0]: i for i in fusion.ops}
    todo = [i for i in fusion.ops if is_reduction(descs[i])]
    seen: set[int] = set()
    while todo:
        i = todo.pop()
        if i not in seen:
            seen.add(i)
            todo.extend(writer[n] for n, _ in descs[i].inputs if n in writer)
    return frozenset(seen)


def one_stream(
    members: list[DeviceOp], machine: Machine, twice: frozenset[int] = frozenset()
) -> list[tuple[int, DeviceOp]]:
    """A fused kernel's elementwise ops, reductions and relayouts as one stream.

    Apart, each op's reads and writes are timed by themselves (a read-only ``max``, a
    write-only ``div``); in one kernel the reads and writes interleave: the kernel's
    DDR time is each op's bytes at its pattern's bandwidth plus the turnaround of
    ``min(reads, writes)`` of them all, and its time ``max(compute, DDR, LX) + ring``,
    shared among those ops in proportion to their own times; each op is a stage of the
    kernel, so its share is at least ``stage_s``. A kernel whose every DDR transfer is
    one burst per core (``Machine.ddr_burst_bytes``) loads, then stores, unpipelined:
    its DDR time is at least that (:func:`._cost.burst_seconds`, on the cores the kernel
    uses). Matmuls keep their own cost (their model times their traffic). ``twice``:
    the ops of a two-pass kernel's first pass (:func:`first_pass`): their DDR reads
    are made again in pass 2, and their LX port bytes but a reduction's. Returns
    ``(index, op)`` of the ops changed.
    """
    kernels = [op for op in members if op.desc.kind != "view" and op.opfunc not in MATMUL_OPS]
    if len(kernels) < 2:
        return []
    costs = [_again(op, machine) if op.index in twice else op.cost for op in kernels]
    read, write = sum(c.read_bytes for c in costs), sum(c.write_bytes for c in costs)
    streams = sum(
        memory_seconds(
            machine,
            c.read_bytes,
            c.write_bytes,
            op.division.cores_used if op.division else machine.cores,
            c.pattern,
        )
        - machine.turnaround_ns_per_byte * min(c.read_bytes, c.write_bytes) * 1e-9
        for op, c in zip(kernels, costs, strict=True)
    )
    memory = streams + machine.turnaround_ns_per_byte * min(read, write) * 1e-9
    reads, writes = [c.read_bytes for c in costs], [c.write_bytes for c in costs]
    memory = max(memory, _bursts(machine, reads, writes, _cores(kernels, machine)))
    compute, lx = sum(c.compute_s for c in costs), sum(c.lx_s + c.relayout_s for c in costs)
    total = max(compute, memory, lx) + sum(c.ring_s for c in costs)
    own = sum(c.time_s - c.launch_s for c in costs)
    out = []
    for op, c in zip(kernels, costs, strict=True):
        part = total * ((c.time_s - c.launch_s) / own if own else 1 / len(kernels))
        time = max(c.stage_s, part) + c.launch_s
        out.append((op.index, replace(op, cost=replace(c, time_s=time))))
    return out


def _again(op: DeviceOp, machine: Machine) -> OpCost:
    """An op of a two-pass kernel's first pass with its later passes' reads (and LX) added."""
    c = op.cost
    reduces = is_reduction(op.desc)
    again = ROW_PASSES - 1
    return replace(
        c,
        read_bytes=c.read_bytes + again * c.read_bytes,
        sticks=c.sticks + again * -(-c.read_bytes // machine.stick_bytes),
        lx_s=c.lx_s if reduces else c.lx_s + again * c.lx_s,
    )


def _cores(kernels: list[DeviceOp], machine: Machine) -> int:
    """The cores a fused kernel runs on: the most any of its divided ops uses."""
    used = [op.division.cores_used for op in kernels if op.division is not None]
    return max(used, default=machine.cores)


def _bursts(machine: Machine, reads: list[int], writes: list[int], cores: int) -> float:
    """A fused kernel's DDR time as bursts (``burst_seconds``: 0 unless each is one).

    Each op's DDR reads and its write are taken as one operand's burst: the kernel
    loads them side by side, then stores, on its ``cores``.
    """
    return burst_seconds(
        machine, tuple(r for r in reads if r), tuple(w for w in writes if w), cores
    )


def streamed_row_bytes(machine: Machine) -> int:
    """What a kernel with a matmul holds at once of a row it streams: one stick of it.

    An attention (:func:`attention_kernel`) streams its keys' blocks, flash-style: per
    query row it holds one block of keys of its scores and of every value laid out as
    them, its softmax's max and sum kept online (rescaled as the max grows). Its time has
    no term that grows as the block narrows (k and v pass through LX once per core
    whatever the block), so the block it needs is the least the matmul makes: one stick
    of keys (a block is whole sticks of N, ``_matmul_cost.block_passes``). An epilogue's
    elementwise ops take the matmul's output block (which the matmul's own blocking
    keeps in LX) a stick at a time: no op of it reads across a row.
    """
    return machine.stick_bytes


def attention_kernel(
    members: list[DeviceOp],
    fusion: Fusion,
    root: Any,
    fits: bool,
    fills: set[str],
    in_lx: Any,
    machine: Machine,
) -> list[tuple[int, DeviceOp]]:
    """A fused attention as ONE kernel (flash-style, blocked over the keys and values).

    Its time is ``max(stages, max(PT, DDR, LX) + ring) + launch``: PT the sum of its
    matmuls' PT terms (the matmul model's rate at their divisions), DDR the bytes of
    every value entering the kernel read once (q, k, v, a mask; a fill one stick) and
    of every value leaving it written once, plus, when its intermediates do not fit
    LX, their spill (each written and read once), at least its bursts' time when each
    is one burst per core (as :func:`one_stream`); LX the bytes its vector ops and
    relayouts move through the cores' LX ports; ring a K split's partial sums; stages
    ``stage_s`` per op. The PT, the DMA engines and the vector units overlap (an
    assumption: the card's pipelining of a fused kernel is not measured). The time is
    shared among its ops in proportion to their own times (each at least a stage).
    """
    kernels = [op for op in members if op.desc.kind != "view"]
    if len(kernels) < 2:
        return []
    made = {op.desc.output[0] for op in kernels}
    runs = kernels[0].desc.repeat
    seen: set[str] = set()
    reads, writes = [], []  # per op: what it brings into the kernel, what it sends out
    for op in kernels:
        read = 0
        for name, t in op.desc.inputs:
            name, t = root(name, t)  # a view of a value (a broadcast mask): the value
            if name in made or name in seen or in_lx(name):
                continue
            seen.add(name)
            read += machine.stick_bytes if name in fills else t.nbytes
        name, t = op.desc.output
        internal = name in fusion.internal
        write = 0 if (internal and fits) or in_lx(name) else t.nbytes
        if internal and not fits:  # to DDR and back once
            read += t.nbytes
        reads.append(read * runs)
        writes.append(write * runs)
    costs = [op.cost for op in kernels]
    pt = sum(c.compute_s for c in costs)
    cores = _cores(kernels, machine)
    ddr = memory_seconds(machine, sum(reads), sum(writes), cores, "ddr")
    ddr = max(ddr, _bursts(machine, reads, writes, cores))
    lx = sum(c.lx_s + c.relayout_s for c in costs)
    total = max(pt, ddr, lx) + sum(c.ring_s for c in costs)
    own = sum(c.time_s - c.launch_s for c in costs)
    bound = "compute" if pt >= max(ddr, lx) else "memory"
    out = []
    for op, c, rb, wb in zip(kernels, costs, reads, writes, strict=True):
        w = (c.time_s - c.launch_s) / own if own else 1 / len(costs)
        cost = replace(
            c,
            time_s=max(c.stage_s, total * w) + c.launch_s,
            read_bytes=rb,
            write_bytes=wb,
            sticks=(rb + wb) // machine.stick_bytes,
            memory_s=ddr * w,
            bound=bound,
        )
        out.append((op.index, replace(op, cost=cost)))
    return out
