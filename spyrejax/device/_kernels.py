"""The time of a fused kernel, shared among its ops (``device._plan`` plans them).

- An elementwise chain, a softmax or a norm (and a matmul's epilogue): one stream of
  DDR reads and writes (:func:`one_stream`); its matmuls keep their own cost.
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

from ._cost import burst_seconds, memory_seconds
from ._fusion import MATMUL_OPS, Fusion
from ._machine import Machine
from ._program import DeviceOp, OpDesc

if TYPE_CHECKING:
    from ._lx import LXPlan
    from ._space import TensorSpec

__all__ = ["attention_kernel", "fused_parts", "one_stream"]


def fused_parts(
    descs: Sequence[OpDesc],
    members: list[DeviceOp],
    fusion: Fusion,
    fits: bool,
    fills: set[str],
    lx: LXPlan,
    machine: Machine,
) -> list[tuple[int, DeviceOp]]:
    """A fused kernel's ops with their parts of its time: ``(index, op)`` of those changed."""
    if fusion.family != "attention":
        return one_stream(members, machine)
    # A view of one value is read as that value (a broadcast mask: its own bytes); a
    # view joining several (pieces placed in one buffer, an update in place) is read
    # as the whole buffer it is.
    viewed = {d.output[0]: d.inputs[0] for d in descs if d.kind == "view" and len(d.inputs) == 1}

    def root(name: str, t: TensorSpec) -> tuple[str, TensorSpec]:
        while name in viewed:
            name, t = viewed[name]
        return name, t

    return attention_kernel(members, fusion, root, fits, fills, lx.in_lx, machine)


def one_stream(members: list[DeviceOp], machine: Machine) -> list[tuple[int, DeviceOp]]:
    """A fused kernel's elementwise ops, reductions and relayouts as one stream.

    Apart, each op's reads and writes are timed by themselves (a read-only ``max``, a
    write-only ``div``); in one kernel the reads and writes interleave: the kernel's
    DDR time is each op's bytes at its pattern's bandwidth plus the turnaround of
    ``min(reads, writes)`` of them all, and its time ``max(compute, DDR, LX) + ring``,
    shared among those ops in proportion to their own times; each op is a stage of the
    kernel, so its share is at least ``stage_s``. A kernel whose every DDR transfer is
    one burst per core (``Machine.ddr_burst_bytes``) loads, then stores, unpipelined:
    its DDR time is at least that (:func:`._cost.burst_seconds`). Matmuls keep their own cost (their
    model times their traffic). Returns ``(index, op)`` of the ops changed.
    """
    kernels = [op for op in members if op.desc.kind != "view" and op.opfunc not in MATMUL_OPS]
    if len(kernels) < 2:
        return []
    costs = [op.cost for op in kernels]
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
    memory = max(
        memory, _bursts(machine, [c.read_bytes for c in costs], [c.write_bytes for c in costs])
    )
    compute, lx = sum(c.compute_s for c in costs), sum(c.lx_s + c.relayout_s for c in costs)
    total = max(compute, memory, lx) + sum(c.ring_s for c in costs)
    own = sum(c.time_s - c.launch_s for c in costs)
    out = []
    for op, c in zip(kernels, costs, strict=True):
        part = total * ((c.time_s - c.launch_s) / own if own else 1 / len(kernels))
        time = max(c.stage_s, part) + c.launch_s
        out.append((op.index, replace(op, cost=replace(c, time_s=time))))
    return out


def _bursts(machine: Machine, reads: list[int], writes: list[int]) -> float:
    """A fused kernel's DDR time as bursts (``burst_seconds``: 0 unless each is one).

    Each op's DDR reads and its write are taken as one operand's burst: the kernel
    loads them side by side, then stores.
    """
    return burst_seconds(
        machine, tuple(r for r in reads if r), tuple(w for w in writes if w), machine.cores
    )


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
    ddr = memory_seconds(machine, sum(reads), sum(writes), machine.cores, "ddr")
    ddr = max(ddr, _bursts(machine, reads, writes))
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
