"""Predicted time of ops and programs (spyre-device spec section 4), from a Machine only.

Per op, torch-spyre's form: ``time = max(compute, memory, lx) + ring + launch``, with

- memory = ``(read + write) / bandwidth + turnaround x min(read, write)``; the bandwidth
  is the access pattern's (DDR streams, restickify, cross-row reduce, broadcast operand)
  derated by the cores the op keeps active; a kernel whose every DDR operand's per-core
  slice is one burst (``Machine.ddr_burst_bytes``) loads, then stores, unpipelined, each
  burst at one core's stream rate (:func:`burst_seconds`): memory is the larger of the two;
- compute = ``MACs / cores / rate`` for matmuls on a ``roofline`` profile (ktir-cpu;
  the rate scaled by the operand format's PT rate); elementwise ops are memory-bound on
  Spyre (a machine with vector lanes, such as ktir-cpu's, charges them
  ``elements / lanes / clock``, transcendentals more);
- a matmul on a ``calibrated`` profile (spyre) is costed by :mod:`._matmul_cost`
  (section 8's measured structure: multicast, DDR streams, LX re-reads, DMA runs);
- lx = the bytes an elementwise op or reduction moves through its cores' LX ports (every
  operand, in LX or not: the vector units read and write LX) / (port bandwidth x cores);
  zero on a machine whose LX is free (ktir-cpu);
- ring = bytes over the ring (a K split's partial sums) / ring bandwidth;
- relayout = the bytes an op's cores reorder inside stick groups in their own LX (a
  16 <-> 32-bit conversion in the standard order, ``OpSpace.relayout_bytes``) / (LX
  port bandwidth x cores): the elements never leave the core, so the port is the limit;
  a pass of its own after the conversion writes a group (an assumption, not measured:
  the card's conversion emits the staggered order, the relayout reorders what it
  wrote), added like the ring's term: ``max(compute, memory, lx) + ring + relayout``
  (inside a fused kernel it joins the kernel's LX term instead, ``device._kernels``);
- launch = the machine's per-kernel device cost, once per kernel (views are none);
- every op that runs on the cores (a stage of a kernel: a divided op, a copy, a
  restickify; not a view, a fill, or a cast inside a fused kernel) takes at least
  ``stage_s`` before its launch: ``time = max(stage, max(compute, memory, lx) + ring)
  + launch``.

Bytes are device bytes, stick-granular; a value living in LX costs no DDR traffic; an
operand read twice by one op (``x + x``) or broadcast is read once; a constant fill
(``OpDesc`` of a ``full``) is one stick, read once. A lane view (``x[..., k::s]``) is
read as whole sticks of its buffer (the card reads a stick whatever lanes it uses), once
per op however many of the buffer's lane sets the op reads. Nothing here is fitted: every rate
is a :class:`Machine` constant.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ._machine import Machine
from ._matmul_cost import matmul_time, pt_rate, relaid_read

if TYPE_CHECKING:
    from ._division import WorkDivision
    from ._space import OpSpace

__all__ = [
    "OpCost",
    "burst_seconds",
    "lx_seconds",
    "memory_seconds",
    "op_cost",
    "relayout_cost",
    "transfer_cost",
]

# Format conversions: inside a fused kernel they ride in the stages around them.
CASTS = frozenset(("astype", "convert_element_type"))


@dataclass(frozen=True)
class OpCost:
    """What one op costs.

    Attributes:
        read_bytes: DDR bytes read (device bytes; LX-resident operands are free).
        write_bytes: DDR bytes written.
        ring_bytes: bytes moved between cores over the ring.
        macs: multiply-accumulates.
        sticks: 128-byte sticks moved to or from DDR.
        compute_s: compute time.
        memory_s: DDR time.
        ring_s: ring time.
        time_s: predicted time, ``max(stage, max(compute, memory, lx) + ring +
            relayout) + launch`` (an op inside a fused kernel: its share of the
            kernel's time, see ``device._plan``).
        bound: ``"compute"`` or ``"memory"``.
        pattern: the access pattern whose bandwidth was used.
        lx_s: time of the bytes through the cores' LX ports.
        launch_s: the kernel's launch cost (0 for a view).
        stage_s: the least time the op takes as a stage of its kernel (0 for a view,
            a fill, or a cast inside a fused kernel).
        relayout_s: time of its in-group relayout through the cores' LX ports
            (``OpSpace.relayout_bytes``; 0 for most ops).
    """

    read_bytes: int
    write_bytes: int
    ring_bytes: int
    macs: int
    sticks: int
    compute_s: float
    memory_s: float
    ring_s: float
    time_s: float
    bound: str
    pattern: str
    lx_s: float = 0.0
    launch_s: float = 0.0
    stage_s: float = 0.0
    relayout_s: float = 0.0

    def repeated(self, n: int) -> OpCost:
        """The cost of ``n`` runs of the op (bytes, MACs, sticks and times times ``n``)."""
        if n == 1:
            return self
        return replace(
            self,
            read_bytes=self.read_bytes * n,
            write_bytes=self.write_bytes * n,
            ring_bytes=self.ring_bytes * n,
            macs=self.macs * n,
            sticks=self.sticks * n,
            compute_s=self.compute_s * n,
            memory_s=self.memory_s * n,
            ring_s=self.ring_s * n,
            time_s=self.time_s * n,
            lx_s=self.lx_s * n,
            launch_s=self.launch_s * n,
            stage_s=self.stage_s * n,
            relayout_s=self.relayout_s * n,
        )

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: MACs per DDR byte."""
        moved = self.read_bytes + self.write_bytes
        return self.macs / moved if moved else 0.0


def _bandwidth(machine: Machine, pattern: str) -> float:
    return {
        "ddr": machine.ddr_bw,
        "restickify": machine.restickify_bw,
        "reduce": machine.reduce_bw,
        "broadcast": machine.broadcast_bw,
    }[pattern]


def memory_seconds(machine: Machine, read: int, write: int, cores: int, pattern: str) -> float:
    """DDR time of ``read`` and ``write`` bytes with ``cores`` active cores."""
    bw = _bandwidth(machine, pattern) * machine.bandwidth_fraction(cores)
    ns = machine.turnaround_ns_per_byte * min(read, write)
    return (read + write) / bw + ns * 1e-9


def burst_seconds(
    machine: Machine, reads: tuple[int, ...], writes: tuple[int, ...], cores: int
) -> float:
    """DDR time of a kernel whose operands each move as one burst per core (else 0).

    ``reads`` and ``writes`` are the bytes of each DDR operand (every core's slices). When
    the largest per-core slice is at most ``ddr_burst_bytes`` the kernel is unpipelined:
    its loads (the operands' bursts side by side) end before its stores begin, and each
    burst runs at ``ddr_burst_core_bw`` per core (the requests one DMA keeps in flight
    over the DDR's latency): section 8's ``x * 2`` at 1 MB and its DDR round trip of 1 MB,
    both ~66 GB/s where a streamed kernel reaches ~100 (read + write) and 150 (one way).
    """
    rate = machine.ddr_burst_core_bw * max(cores, 1)
    biggest = max((*reads, *writes), default=0)
    if not rate or not biggest or biggest > machine.ddr_burst_bytes * max(cores, 1):
        return 0.0
    return (max(reads, default=0) + max(writes, default=0)) / rate


def _finish(
    machine: Machine,
    read: int,
    write: int,
    ring: int,
    macs: int,
    compute: float,
    cores: int,
    pattern: str,
    lx: float = 0.0,
    kernel: bool = True,
    stage: bool = True,
    burst: float = 0.0,
    relayout: float = 0.0,
) -> OpCost:
    memory = memory_seconds(machine, read, write, cores, pattern) if read + write else 0.0
    memory = max(memory, burst)
    ring_s = ring / machine.ring_bw
    bound = "compute" if compute > max(memory, lx) else "memory"
    sticks = (read + write) // machine.stick_bytes
    launch = machine.launch_s if kernel else 0.0
    floor = machine.stage_s if stage else 0.0
    return OpCost(
        read, write, ring, macs, sticks, compute, memory, ring_s,
        max(floor, max(compute, memory, lx) + ring_s + relayout) + launch, bound, pattern, lx,
        launch, floor, relayout,
    )  # fmt: skip


def lx_seconds(machine: Machine, moved: int, cores: int) -> float:
    """Time of ``moved`` bytes through the LX ports of ``cores`` cores (0 if LX is free)."""
    if machine.lx_free or not moved:
        return 0.0
    return moved / (machine.lx_bw * max(cores, 1))


def _matmul_cost(
    division: WorkDivision,
    machine: Machine,
    in_lx: frozenset[int],
    kernel: bool,
    relaid: tuple[tuple[int, int], ...],
) -> OpCost:
    """A calibrated profile's matmul (:mod:`._matmul_cost`), as an :class:`OpCost`."""
    t = matmul_time(division, machine, in_lx, relaid)
    bound = "compute" if t.pt_s > t.memory_s else "memory"
    sticks = (t.read_bytes + t.write_bytes) // machine.stick_bytes
    launch = machine.launch_s if kernel else 0.0
    floor = machine.stage_s
    return OpCost(
        t.read_bytes, t.write_bytes, t.ring_bytes, division.space.macs, sticks, t.pt_s, t.memory_s,
        t.reduce_s, max(floor, t.time_s) + launch, bound, "ddr", 0.0, launch, floor,
    )  # fmt: skip


def _pattern(space: OpSpace) -> str:
    if space.kind == "reduce":
        stick_var = next((w[0] for w in space.operands[0].walks[-1:] if w is not None), None)
        crosses_rows = any(d.reduced and d.name != stick_var for d in space.dims)
        return "reduce" if crosses_rows else "ddr"
    return "broadcast" if space.broadcast else "ddr"


def op_cost(
    division: WorkDivision,
    machine: Machine,
    in_lx: frozenset[int] = frozenset(),
    fills: frozenset[int] = frozenset(),
    launch: bool = True,
    relaid: tuple[tuple[int, int], ...] = (),
) -> OpCost:
    """The cost of a divided op.

    Args:
        division: the op's division.
        machine: the machine profile.
        in_lx: indices of the operands (inputs, then the output) living in LX.
        fills: indices of the inputs that are constant fills: one stick, read once.
        launch: whether it launches a kernel (not an op inside a fused kernel but its
            first). A cast inside a fused kernel (not its first) is no stage of its
            own: the vector units convert formats as they load and store.
        relaid: ``(index, source bytes)`` of the inputs a matmul lays out anew in LX
            as it loads them (``LoadRelayout``): read from DDR at their source image's
            bytes (``_matmul_cost.relaid_read``).
    """
    space = division.space
    cores = division.cores_used
    read, moved, seen, reads = 0, 0, set(), []
    sources = dict(relaid)
    for i, op in enumerate(space.operands[:-1]):
        # One value read twice (x + x) is read once; so are the sticks of one buffer
        # read on several of their lane sets (x[..., 0::2] * x[..., 1::2]).
        key = op.tensor.sticks_of or i
        if key in seen:
            continue
        seen.add(key)
        size = machine.stick_bytes if i in fills else op.tensor.nbytes
        moved += size
        if i not in in_lx:
            ddr = relaid_read(size, size, sources[i]) if i in sources else size
            read += ddr
            reads.append(ddr)
    out = len(space.operands) - 1
    write = 0 if out in in_lx else space.output.tensor.nbytes
    moved += space.output.tensor.nbytes
    ring = 0
    compute = 0.0
    lx = 0.0
    if space.kind == "matmul":
        if machine.matmul_model == "calibrated":
            return _matmul_cost(division, machine, in_lx, launch, relaid)
        k = division.splits[space.names[-1]]
        ring = (k - 1) * space.output.tensor.nbytes  # partial sums to a K partner
        fmt = space.operands[0].tensor.layout.device_dtype.name
        rate = machine.matmul_macs_per_ns * pt_rate(machine, fmt)
        compute = space.macs / cores / rate * 1e-9
    elif machine.vector_lanes_per_cycle:
        elements = 1
        for n in space.output.tensor.shape:
            elements *= n
        factor = machine.transcendental_factor if space.transcendental else 1.0
        compute = elements * factor / cores / machine.vector_lanes_per_cycle / machine.clock_hz
    if space.kind != "matmul":
        lx = lx_seconds(machine, moved, cores)
    pattern = _pattern(space)
    stage = launch or space.opfunc not in CASTS
    burst = burst_seconds(machine, tuple(reads), (write,) if write else (), cores)
    relayout = lx_seconds(machine, space.relayout_bytes, cores)
    return _finish(
        machine, read, write, ring, space.macs, compute, cores, pattern, lx, launch, stage,
        burst, relayout,
    )  # fmt: skip


def relayout_cost(
    machine: Machine,
    nbytes: int,
    launch: bool = False,
    read: int = 0,
    write: int = 0,
    stage: bool = True,
) -> OpCost:
    """A restickify of ``nbytes`` inside a fused kernel: each core relays its own tile.

    The kernel runs its ops on one division, so the tile stays on its core: it is
    read and written through the core's LX port, not moved over the ring. ``read``:
    the DDR bytes it loads first (its input is not in LX); ``write``: those it stores
    after (its result leaves the kernel), each a plain stream of its own layout.
    ``stage=False``: a part of another op's load (a matmul's ``LoadRelayout``), no
    stage of its own: its LX ports' time only.
    """
    cores = machine.cores
    lx = lx_seconds(machine, 2 * nbytes, cores)
    burst = burst_seconds(machine, (read,) if read else (), (write,) if write else (), cores)
    return _finish(
        machine, read, write, 0, 0, 0.0, cores, "ddr", lx, kernel=launch, stage=stage, burst=burst
    )


def transfer_cost(
    machine: Machine, read: int, write: int, pattern: str = "ddr", kernel: bool = True
) -> OpCost:
    """The cost of a device-to-device copy (a restickify or a program's own copy).

    ``kernel=False``: no kernel runs (a view, or a fill its readers broadcast): no launch
    and no stage.
    """
    cores = machine.cores
    burst = burst_seconds(machine, (read,) if read else (), (write,) if write else (), cores)
    return _finish(
        machine, read, write, 0, 0, 0.0, cores, pattern, kernel=kernel, stage=kernel, burst=burst
    )
