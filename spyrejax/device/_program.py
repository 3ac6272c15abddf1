"""A program on the device: its ops divided, its intermediates placed in LX, its cost.

The lowering side lists a program's ops as :class:`OpDesc` values (pure data: names of
the values each reads and writes, their :class:`TensorSpec`, the iteration space of a
compute op); :func:`plan_program` divides every compute op, decides which
intermediates live in LX (spyre-device spec section 3), and costs every op.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._errors import DeviceError
from ..layout._residency import DDR, Residency
from ._cost import OpCost, op_cost, relayout_cost, transfer_cost
from ._division import OpSpace, TensorSpec, WorkDivision, divide
from ._fusion import Fusion, find_fusions, is_fill, is_relayout
from ._kernels import fused_parts
from ._lx import INPLACE_OPS, Buffer, LXPlan, Stream, place, stream
from ._machine import Machine

__all__ = [
    "DeviceOp",
    "DeviceProgram",
    "FusedGroup",
    "OpDesc",
    "Region",
    "divide_op",
    "is_fill",
    "plan_program",
]


@dataclass(frozen=True)
class Region:
    """The body of a loop, or one branch of a ``cond``, that ops of a program belong to.

    Attributes:
        index: which loop or ``cond`` of the program (the branches of one ``cond``
            share it), in program order.
        kind: ``"scan"``, ``"while"`` or ``"cond"``.
        source: the user's source line of the loop or ``cond``.
        trips: a ``scan``'s trip count; None for a ``while`` (unknown at trace time,
            counted once: a lower bound) and a ``cond``.
        branch: a ``cond``'s branch (0-based), else None.
        branches: how many branches the ``cond`` has, else None.
        parent: the region around this one, None at the top level.
    """

    index: int
    kind: str
    source: str
    trips: int | None = None
    branch: int | None = None
    branches: int | None = None
    parent: Region | None = None

    def chain(self) -> tuple[Region, ...]:
        """The regions from the outermost to this one."""
        return (*(self.parent.chain() if self.parent else ()), self)

    def describe(self) -> str:
        """``x12`` (a scan), ``while (>=1)``, ``cond branch 1 of 2``; nested ones outer first."""
        parts = []
        for r in self.chain():
            if r.kind == "scan":
                parts.append(f"x{r.trips}")
            elif r.kind == "while":
                parts.append("while (>=1)")
            else:
                parts.append(f"cond branch {r.branch} of {r.branches}")
        return " ".join(parts)


@dataclass(frozen=True)
class OpDesc:
    """One op of a program, as the lowering lists it.

    Attributes:
        opfunc: the op's name.
        kind: ``"compute"`` (divided), ``"restickify"``, ``"copy"`` (a device copy) or
            ``"view"`` (no data moves).
        source: the user's source line.
        inputs: ``(value name, tensor)`` per Spyre operand.
        output: ``(value name, tensor)`` of the result.
        space: the iteration space of a compute op.
        hint: splits the user fixed with ``with_division``.
        repeat: how many times it runs: the trip counts of the ``scan`` loops around
            it (1 outside loops; a ``while`` loop counts once). Its cost counts every run.
        region: the innermost loop body or branch it belongs to (None: top level).
    """

    opfunc: str
    kind: str
    source: str
    inputs: tuple[tuple[str, TensorSpec], ...]
    output: tuple[str, TensorSpec]
    space: OpSpace | None = None
    hint: Mapping[str, int] | None = None
    repeat: int = 1
    region: Region | None = None


@dataclass(frozen=True)
class DeviceOp:
    """One op of a planned program.

    Attributes:
        index: position in the program.
        desc: what the lowering listed.
        division: the work division (compute ops), else None.
        cost: the predicted cost, of every run of an op in a loop (``desc.repeat``).
        lx_inputs: names of the inputs read from LX.
        lx_output: whether the result stays in LX.
        streams: per input/output operand index, the streaming loop of a per-core
            slice too large for LX (only operands that need one).
        lx_peak: LX bytes per core live while the op runs (intermediates placed in LX).
        runs: how many times it counts in the program's totals: ``repeat``, or 0 for
            an op of a ``cond`` branch that is not the costliest.
        group: the index of the fused kernel it runs in (``DeviceProgram.groups``), or
            None: its own kernel. Its cost is then its part of that kernel (no launch but
            the first op's, no DDR traffic for the values kept in LX).
    """

    index: int
    desc: OpDesc
    division: WorkDivision | None
    cost: OpCost
    lx_inputs: tuple[str, ...] = ()
    lx_output: bool = False
    streams: tuple[tuple[int, Stream], ...] = ()
    lx_peak: int = 0
    runs: int = 1
    group: int | None = None

    @property
    def opfunc(self) -> str:
        """The op's name."""
        return self.desc.opfunc

    @property
    def source(self) -> str:
        """The user's source line."""
        return self.desc.source

    @property
    def repeat(self) -> int:
        """How many times it runs (the trip counts of the loops around it)."""
        return self.desc.repeat

    @property
    def region(self) -> Region | None:
        """The innermost loop body or ``cond`` branch it belongs to (None: top level)."""
        return self.desc.region

    @property
    def read_bytes(self) -> int:
        """DDR bytes read."""
        return self.cost.read_bytes

    @property
    def write_bytes(self) -> int:
        """DDR bytes written."""
        return self.cost.write_bytes

    @property
    def macs(self) -> int:
        """Multiply-accumulates."""
        return self.cost.macs

    @property
    def time_s(self) -> float:
        """Predicted seconds."""
        return self.cost.time_s

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"memory"``."""
        return self.cost.bound

    def core_bytes(self) -> tuple[int, ...]:
        """Per-core device bytes of each operand (inputs, then output) on core 0."""
        d = self.division
        if d is None:
            return ()
        return tuple(d.core_bytes(i) for i in range(len(d.space.operands)))


@dataclass(frozen=True)
class FusedGroup:
    """A chain of ops the program runs as one kernel (found by ``device._fusion``).

    Attributes:
        index: its position in ``DeviceProgram.groups``.
        family: ``softmax``, ``layer_norm``, ``rms_norm``, ``attention`` or
            ``matmul_epilogue``.
        ops: the indices of its ops in the program (views between them included).
        source: the user's source line of the op naming it (``Fusion.anchor``).
        internal: the values made and read only inside it.
        in_lx: whether they stay in LX: a row of each (the last dim, one core's
            smallest tile) fits the LX budget together. If not, they go through DDR.
        time_s: the kernel's predicted seconds (the sum of its ops' parts), every run.
        unfused_s: what its ops cost as kernels of their own.
    """

    index: int
    family: str
    ops: tuple[int, ...]
    source: str
    internal: frozenset[str]
    in_lx: bool
    time_s: float
    unfused_s: float

    def describe(self) -> str:
        """``softmax (8 ops, intermediates in LX)``."""
        where = "intermediates in LX" if self.in_lx else "intermediates through DDR"
        return f"{self.family} ({len(self.ops)} ops, {where})"


@dataclass(frozen=True)
class DeviceProgram:
    """A program planned for a machine.

    The ops of loop bodies and ``cond`` branches are listed too (``op.region`` says
    where). The totals (:attr:`time_s`, :attr:`macs`, :attr:`read_bytes`,
    :attr:`write_bytes`) sum the :attr:`counted` ops: a ``scan`` body's ops count every
    run, a ``while`` body (and its predicate) once, as a lower bound (:attr:`lower_bound`),
    and of a ``cond``'s branches only the costliest (by predicted time).

    Attributes:
        ops: the ops in program order.
        machine: the machine profile.
        lx: the LX placement of the intermediates.
        groups: the fused kernels (each op's ``group`` points here).
    """

    ops: tuple[DeviceOp, ...]
    machine: Machine
    lx: LXPlan
    groups: tuple[FusedGroup, ...] = ()

    @property
    def counted(self) -> tuple[DeviceOp, ...]:
        """The ops the totals count (all but those of the cheaper ``cond`` branches)."""
        return tuple(op for op in self.ops if op.runs)

    @property
    def lower_bound(self) -> bool:
        """Whether the totals are a lower bound: a ``while`` body counts once."""
        return any(r.kind == "while" for op in self.ops if op.region for r in op.region.chain())

    @property
    def time_s(self) -> float:
        """Predicted seconds: the sum of the counted ops' times."""
        return sum(op.time_s for op in self.counted)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the counted ops."""
        return sum(op.macs for op in self.counted)

    @property
    def read_bytes(self) -> int:
        """DDR bytes the counted ops read."""
        return sum(op.read_bytes for op in self.counted)

    @property
    def write_bytes(self) -> int:
        """DDR bytes the counted ops write."""
        return sum(op.write_bytes for op in self.counted)

    @property
    def compute_ops(self) -> tuple[DeviceOp, ...]:
        """The divided ops."""
        return tuple(op for op in self.ops if op.division is not None)

    @property
    def lx_peak(self) -> int:
        """The LX bytes per core the program needs: the highest byte the LX plan places.

        Never above :attr:`lx_budget`; every op's ``lx_peak`` (the bytes in use while it
        runs) is at most this.
        """
        return self.lx.peak

    @property
    def lx_budget(self) -> int:
        """The usable LX bytes per core (``machine.lx_usable``)."""
        return self.machine.lx_usable

    @property
    def lx_fraction(self) -> float:
        """The backend's scratchpad budget the prediction was made with."""
        return self.machine.lx_fraction

    def residency(self, name: str) -> Residency:
        """Where the value ``name`` (an op's input or output) lives.

        In LX (the cores of the op writing it, its per-core address and aligned size)
        if the LX plan placed it there, else DDR.

        Raises:
            DeviceError: for a name no op reads or writes.
        """
        writers, read = self._values
        op = writers.get(name)
        if op is not None and op.division is not None and self.lx.in_lx(name):
            at, size = self.lx.address[name], self.lx.sizes[name]
            return Residency.lx(op.division.cores_used, at, size)
        if op is None and name not in read:
            raise DeviceError(f"DeviceProgram.residency: no op reads or writes a value {name!r}")
        return DDR

    @functools.cached_property
    def _values(self) -> tuple[dict[str, DeviceOp], frozenset[str]]:
        """The op writing each value, and the values ops read."""
        writers = {op.desc.output[0]: op for op in self.ops}
        return writers, frozenset(n for op in self.ops for n, _ in op.desc.inputs)

    def table(self) -> list[dict[str, object]]:
        """One row per op: what it is, where, its division and its predicted cost."""
        return [
            {
                "op": f"{op.index}_{op.opfunc}",
                "source": op.source,
                "division": op.division.describe() if op.division else op.desc.kind,
                "read_bytes": op.read_bytes,
                "write_bytes": op.write_bytes,
                "macs": op.macs,
                "lx_peak": op.lx_peak,
                "time_us": op.time_s * 1e6,
                "bound": op.bound,
                "kernel": "" if op.group is None else f"#{op.group} {self.groups[op.group].family}",
                "loop": _where(op),
            }
            for op in self.ops
            if op.desc.kind != "view"
        ]

    def __str__(self) -> str:
        rows = self.table()
        m = self.machine
        out = [f"device model ({m.name}, {m.cores} cores, LX fraction {m.lx_fraction:g}):"]
        for r in rows:
            out.append(
                f"  {r['op']:<16} {r['division']:<40} read {r['read_bytes']:>10} B  write "
                f"{r['write_bytes']:>10} B  MACs {r['macs']:>12}  LX {r['lx_peak']:>8} B  "
                f"{r['time_us']:10.3f} us  {r['bound']}  [{r['source']}]"
                + (f"  fused {r['kernel']}" if r["kernel"] else "")
                + (f"  {r['loop']}" if r["loop"] else "")
            )
        for g in self.groups:
            out.append(
                f"  fused kernel #{g.index}: {g.describe()} {g.time_s * 1e6:.3f} us "
                f"(as separate kernels {g.unfused_s * 1e6:.3f} us)  [{g.source}]"
            )
        bound = " (a lower bound: while loops counted once)" if self.lower_bound else ""
        out.append(f"  predicted time: {self.time_s * 1e6:.3f} us{bound}")
        return "\n".join(out)


def _where(op: DeviceOp) -> str:
    """The loops and branches around an op, and whether the totals leave it out."""
    if op.region is None:
        return ""
    return op.region.describe() + ("" if op.runs else " (not counted: a cheaper branch)")


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
    if prod.cores_used != cons.cores_used:
        return False
    return all(prod.box(p_op, c) == cons.box(c_op, c) for c in range(prod.cores_used))


def _buffers(
    descs: Sequence[OpDesc], divisions: list[WorkDivision | None], keep: set[str]
) -> list[Buffer]:
    """Per-core buffers of the intermediates that may live in LX.

    A value written or read in more than one loop body or branch (``OpDesc.region``:
    a loop's operand, carry or result, a branch's result) lives in DDR: it cannot stay
    in one op's LX from one iteration (or branch) to the next. So does a value two ops
    write (the branches of a ``cond`` writing its result).
    """
    producer = {d.output[0]: i for i, d in enumerate(descs)}
    regions: dict[str, set[Region | None]] = {}
    writes: dict[str, int] = {}
    readers: dict[str, list[tuple[int, int]]] = {}
    for i, d in enumerate(descs):
        writes[d.output[0]] = writes.get(d.output[0], 0) + 1
        regions.setdefault(d.output[0], set()).add(d.region)
        for k, (name, _) in enumerate(d.inputs):
            readers.setdefault(name, []).append((i, k))
            regions.setdefault(name, set()).add(d.region)
    out = []
    for name, i in producer.items():
        div, uses = divisions[i], readers.get(name, [])
        if name in keep or div is None or not uses:
            continue
        if writes[name] > 1 or len(regions[name]) > 1:
            continue  # crosses a loop body's or branch's boundary: DDR
        n_out = len(div.space.operands) - 1
        ok = all(
            divisions[j] is not None and _same_slices(div, n_out, divisions[j], k) for j, k in uses
        )
        if not ok:
            continue
        size = div.space.output.tensor.nbytes // div.cores_used
        parent = None
        if descs[i].opfunc in INPLACE_OPS:
            parent = next((n for n, _ in descs[i].inputs if n in producer), None)
        last = max(j for j, _ in uses)
        out.append(Buffer(name, size, i, last, parent, len(uses)))
    return out


def divide_op(
    space: OpSpace, machine: Machine, hint: Mapping[str, int] | None = None
) -> WorkDivision:
    """An op's division as a program plan makes it (pass 2 scored by predicted time)."""

    def score(div: WorkDivision) -> float:
        return op_cost(div, machine).time_s

    return divide(space, machine, hint, score)


def _divide_alike(
    space: OpSpace,
    hint: Mapping[str, int] | None,
    machine: Machine,
    alike: dict[Any, WorkDivision],
) -> WorkDivision:
    """``divide_op``, or the division of an op of the same geometry and hint.

    The division is made for this op's own space (its tensors' names), with the splits
    of the op it repeats; the two share their per-core boxes, computed once.
    """
    key = (space.geometry(), None if hint is None else tuple(sorted(hint.items())))
    seen = alike.get(key)
    if seen is None:
        alike[key] = seen = divide_op(space, machine, hint)
        return seen
    return replace(seen, space=space)


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
    divisions: list[WorkDivision | None] = []
    alike: dict[Any, WorkDivision] = {}  # by geometry and hint: repeated layers divide once
    for d in descs:
        if d.kind == "compute" and d.space is not None:
            divisions.append(_divide_alike(d.space, d.hint, machine, alike))
        else:
            divisions.append(None)
    buffers = _buffers(descs, divisions, set(keep_in_ddr))
    lx = place(buffers, machine, strategy)
    ops = []
    peaks = lx.live_bytes(len(descs))
    fills = {d.output[0] for d in descs if is_fill(d)} - set(keep_in_ddr)
    fusions = find_fusions(descs, frozenset(keep_in_ddr)) if fuse else []
    member = {i: k for k, f in enumerate(fusions) for i in f.ops}
    made = {d.output[0]: d.output[1] for d in descs}
    fits = [_fits(f, made, machine) for f in fusions]
    unfused: list[float] = []
    loaded: list[frozenset[str]] = [frozenset()] * len(fusions)  # inputs a kernel has read
    for i, (d, div) in enumerate(zip(descs, divisions, strict=True)):
        lx_in = tuple(n for n, _ in d.inputs if lx.in_lx(n))
        lx_out = lx.in_lx(d.output[0])
        own = _own_cost(d, div, machine, fills, lx.in_lx)
        unfused.append(own.repeated(d.repeat).time_s)
        k = member.get(i)
        cost = own
        if k is not None:
            cost = _member_cost(descs, i, div, fusions[k], fits[k], loaded[k], fills, lx, machine)
            loaded[k] = loaded[k] | {n for n, _ in d.inputs}  # its tile stays for the next
        streams = _streams(div, machine) if div is not None else ()
        cost = cost.repeated(d.repeat)
        ops.append(DeviceOp(i, d, div, cost, lx_in, lx_out, streams, peaks[i], d.repeat, k))
    for k, f in enumerate(fusions):  # each fused kernel's ops share its time
        for i, op in fused_parts(descs, [ops[i] for i in f.ops], f, fits[k], fills, lx, machine):
            ops[i] = op
    counted = _counted(descs, [op.time_s for op in ops])
    ops = [op if c else replace(op, runs=0) for op, c in zip(ops, counted, strict=True)]
    groups = tuple(
        FusedGroup(
            k,
            f.family,
            f.ops,
            descs[f.anchor].source,
            f.internal,
            fits[k],
            sum(ops[i].time_s for i in f.ops),
            sum(unfused[i] for i in f.ops),
        )
        for k, f in enumerate(fusions)
    )
    return DeviceProgram(tuple(ops), machine, lx, groups)


def _member_cost(
    descs: Sequence[OpDesc],
    i: int,
    div: WorkDivision | None,
    f: Fusion,
    fits: bool,
    loaded: frozenset[str],
    fills: set[str],
    lx: LXPlan,
    machine: Machine,
) -> OpCost:
    """The cost of op ``i`` inside the fused kernel ``f`` (before the kernel shares its time).

    Its internal values (and the inputs the kernel has loaded) are in LX when they fit;
    an attention's inputs too (its DDR is counted once for the kernel, ``_kernels``).
    """
    kept = f.internal | loaded if fits else frozenset()
    if f.family == "attention":
        kept = kept | {n for j in f.ops for n, _ in descs[j].inputs}
    first = i == next(j for j in f.ops if descs[j].kind != "view")
    in_lx = lambda n: n in kept or lx.in_lx(n)  # noqa: E731
    return _own_cost(descs[i], div, machine, fills, in_lx, fused=(kept, first))


def _own_cost(
    d: OpDesc,
    div: WorkDivision | None,
    machine: Machine,
    fills: set[str],
    in_lx: Any,
    fused: tuple[frozenset[str], bool] | None = None,
) -> OpCost:
    """An op's cost, the values ``in_lx(name)`` says in LX; ``fused``: (kept, first).

    An op inside a fused kernel launches none unless it is the kernel's first, and a
    restickify between two of its values kept in LX is a relayout over the ring.
    """
    launch = fused is None or fused[1]
    if div is not None:
        where = {k for k, (n, _) in enumerate(d.inputs) if in_lx(n)}
        if in_lx(d.output[0]):
            where.add(len(d.inputs))
        filled = frozenset(k for k, (n, _) in enumerate(d.inputs) if n in fills)
        return op_cost(div, machine, frozenset(where), filled, launch)
    if fused is not None and is_relayout(d):
        kept = fused[0]
        if d.output[0] in kept and all(n in kept for n, _ in d.inputs):
            return relayout_cost(machine, d.output[1].nbytes, launch)
    cost = _transfer(d, machine, fills)
    return cost if launch or d.kind == "view" else _no_launch(cost)


def _no_launch(cost: OpCost) -> OpCost:
    return replace(cost, time_s=cost.time_s - cost.launch_s, launch_s=0.0)


def _fits(f: Fusion, made: Mapping[str, TensorSpec], machine: Machine) -> bool:
    """Whether a row (last dim) of each of a fused kernel's internal values fits LX."""
    need = 0
    for name in f.internal:
        t = made[name]
        rows = math.prod(t.shape[:-1]) if len(t.shape) > 1 else 1
        need += -(-t.nbytes // max(rows, 1))
    return need <= machine.lx_usable


def _transfer(d: OpDesc, machine: Machine, fills: set[str]) -> OpCost:
    """The cost of an op that is not divided: a view, a fill, a copy or a restickify.

    A view moves nothing and runs no kernel; a fill that is no program output is one
    stick, written with no kernel of its own. A copy reads of each input what its
    result needs: the part of the input's image its result's elements are (a slice
    ``x[:4]`` reads 4 rows, a pad or a concatenate whole inputs).
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
            read += -(-t.nbytes * math.prod(out.shape) // math.prod(t.shape))
        else:
            read += t.nbytes
    pattern = "restickify" if d.kind == "restickify" else "ddr"
    return transfer_cost(machine, read, out.nbytes, pattern)


def _streams(div: WorkDivision, machine: Machine) -> tuple[tuple[int, Stream], ...]:
    """Operands whose per-core slice does not fit its share of LX."""
    n = len(div.space.operands)
    budget = machine.lx_usable // n
    out = []
    for i, op in enumerate(div.space.operands):
        s = stream(div.box_shape(i, 0), op.tensor.itemsize, budget)
        if s is not None:
            out.append((i, s))
    return tuple(out)
