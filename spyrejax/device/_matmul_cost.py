"""Predicted time of a divided matmul on the Spyre card (spyre-device spec section 8).

The card runs every core's slice of a matmul as one kernel: the PT array computes, the
cores' DMA engines bring each core's box of A and B from DDR into LX, partial sums of a
K split are combined, the result is stored. The measured sweep of every 32-core division
of 12 Granite shapes (``../shared/data/spyre/granite_splits_lx0.2.txt``) shows that the
bytes a division must read explain little of its time; what does (section 8):

- **PT**: ``MACs per core / (MACs per cycle x dtype rate x 1.1 GHz x efficiency)``.
- **Batched PT**: a batched matmul whose operands keep the batch inside their rows (the
  tiled layout of a 3-D operand: ``[M, K sticks, B, 64]``; not a batch laid out outside
  M, such as the heads of a 4-D ``[1, H, T, D]``) runs one small matmul per batch
  slice and N stick of a core (a job, its tiles gathered a batch of sticks apart): its
  MACs run at no more than ``mm_batched_macs_per_s`` per core. The core's K loop runs
  outside its jobs (a K stick of every batch slice arrives together), so a job whose
  K slice spans more than one stick accumulates its tile across that loop and is
  finished on its own when K ends: ``mm_batch_job_s`` per such tile.
- **DDR**: each tile of an operand that ``g`` cores share (the splits of the variables
  it does not walk) is read once and multicast, so the DDR reads the operand's unique
  bytes, times its LX re-reads (below); reads and writes pay the DDR's read/write
  turnaround on ``min(read, write)`` (spec section 1), as every other op does. With
  more distinct streams (``cores / g``) than the DDR serves cleanly (``max_cores /
  stream_sharers``: 8), the banks conflict: the operand's bytes cost ``1 + penalty x
  log2(streams / 8)^2`` times more (on 32 cores: fewer than 4 sharers; one core
  reading alone, section 8's pure-N split on 1-8 cores, pays nothing). A core whose
  other operand's slice is small (at most ``mm_alone_fraction`` of ``lx_usable``:
  loaded once, a decode activation) reads one stream and pays nothing either: section
  8's decode weight streaming (M <= 4, every core on its own weight tile) runs at
  145-157 GB/s.
- **LX re-reads**: a core keeps an output block in fp32 accumulators in its share of LX
  (``lx_usable``, set by ``lx_fraction``), an fp16 output staged beside them for its
  store, with a double-buffered K step of A and B beside it; the block (any whole sticks
  by any rows) of least traffic that fits gives how many times A and B pass.
- **DMA runs**: every contiguous run of a core's box in DDR (from the operand's device
  layout) costs a setup that a run of ``mm_run_bytes`` or more hides behind its own
  transfer: boxes cut across the batch or stick tiles into short runs run slowly.
- **Multicast sync**: a tile shared by more than ``multicast_sharers`` cores is handed
  out in LX-sized chunks, each a barrier of its sharers that grows with the ring
  distance it must reach: with their number, up to the ring's diameter (a
  bidirectional ring of ``max_cores`` reaches every core within ``max_cores / 2``
  hops), so 32 sharers of a plain matmul's tile wait as long as 16 (section 8's
  Llama q_proj (32,1,1)). Batched matmuls keep the barrier linear in the sharers:
  their 32-way multicasts cost the card more, not less (see ``_barrier_reach``). A
  batched B arrives in K steps (one K stick of every job of the core); when a K step
  does not fit a chunk, in chunks of whole job tiles, as many as fit: a small budget
  leaves chunks part empty and multiplies the barriers (``_batched_chunks``, section
  8's decode attention-times-V 1_32_1_1 at lx 0.2).
- **Partial-sum spill** (batched matmuls): the tiled layout puts the batch inside a
  batched operand's rows, so a core's output block carries all its batch slices; when
  it does not fit ``lx_usable`` and its K slice spans more than one stick, the tiles
  that fit stay in LX and the fp32 partial sums of the rest go to DDR and back between
  K steps. A spilled tile of at most ``ddr_burst_bytes`` is one burst each way that the
  K loop waits for: at one core's stream rate (``ddr_burst_core_bw``), as every burst
  of the model; larger tiles stream at the DDR's rate. No constant of its own.
- **K-split**: fp32 partial sums of each core's output block, combined by its partners
  (a reduce-scatter: each sends and receives ``(sk - 1) / sk`` of its partials). A core
  whose whole working set stays in LX (its slices of A and B beside its fp32 output
  block, within ``lx_usable``) runs one pass and hands its partials LX to LX to its K
  partners, ring neighbours (spec section 2), at the ring bandwidth: section 8's decode
  QK^T 8_2_1_2 at lx_fraction 0.8. A batched matmul whose set does not fit (its block
  holds all its batch slices) sends them through DDR after its K loop, written and read
  back by every core at once at the DDR's rate (the same kernel at 0.2: 202 us); a plain
  matmul's are combined at ``mm_partial_sum_bw`` (fitted: the partials of a core that
  streams its slices are combined between its DMA transfers).

``time = max(PT, max(DDR, runs) + sync) + K-split``. The fitted constants are
:class:`Machine` fields with their origin. Pure Python; nothing here reads JAX.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import DeviceError
from ..layout._dtypes import BYTES_PER_STICK
from ._machine import Machine

if TYPE_CHECKING:
    from ._division import WorkDivision

__all__ = ["MatmulTime", "block_passes", "matmul_time", "pt_rate", "relaid_read"]


@dataclass(frozen=True)
class MatmulTime:
    """The terms of a divided matmul's predicted time (seconds) and its DDR bytes.

    Attributes:
        pt_s: the PT array's time (a batched matmul's: at least its batched rate, plus
            its jobs' setups).
        ddr_s: DDR time of the bytes read (with re-reads and the stream factor) and
            written (with any partial-sum spill).
        runs_s: DMA setups of core 0's contiguous runs not hidden by their transfer.
        sync_s: barriers of tiles multicast to more cores than a cohort serves.
        reduce_s: combining a K split's fp32 partial sums (over the ring when the
            core's slices and partials all stay in LX; through DDR for a batched
            matmul whose set does not fit: ``_k_combine``).
        read_bytes: DDR bytes read (unique bytes times LX re-reads, plus spilled or
            exchanged partial sums read back).
        write_bytes: DDR bytes written (the output, plus spilled or exchanged partial
            sums).
        passes: how many times A and B pass through LX (1: no re-read).
        ring_bytes: a K split's fp32 partial sums the cores hand each other, in all
            (0 when they go through DDR: in ``read_bytes`` and ``write_bytes``).
    """

    pt_s: float
    ddr_s: float
    runs_s: float
    sync_s: float
    reduce_s: float
    read_bytes: int
    write_bytes: int
    passes: tuple[int, int]
    ring_bytes: int = 0

    @property
    def memory_s(self) -> float:
        """The data side: ``max(ddr, runs) + sync``."""
        return max(self.ddr_s, self.runs_s) + self.sync_s

    @property
    def time_s(self) -> float:
        """``max(pt, memory) + reduce``."""
        return max(self.pt_s, self.memory_s) + self.reduce_s


def pt_rate(machine: Machine, device_format: str) -> float:
    """The PT's MAC rate for an operand format, relative to fp16 (``pt_dtype_rates``).

    Raises:
        DeviceError: for a format the machine gives no rate.
    """
    rates = dict(machine.pt_dtype_rates)
    if device_format not in rates:
        raise DeviceError(
            f"Machine {machine.name!r} has no PT rate for {device_format}; it has {sorted(rates)}"
        )
    return rates[device_format]


def relaid_read(read: int, image: int, source: int) -> int:
    """The DDR bytes of reading ``read`` bytes of an operand relaid in LX as it is loaded.

    A matmul's operand laid out anew as the matmul loads it (``LoadRelayout``: an image
    of ``image`` bytes that never goes to DDR) is brought in from its source image
    (``source`` bytes, in its own layout) and relaid in LX: a read of the relaid image
    moves the source's share of it, not the relaid image's padding. The one rule the
    device model's matmul and the planner's objective (``lowering._traffic``) read.
    """
    return -(-read * source // image) if image else 0


def _fits_lx(batch: int, m: int, n: int, k: int, itemsize: int, acc: int, lx: int) -> bool:
    """Whether a core's working set fits its ``lx`` bytes of LX: the one "fits LX" rule.

    The set is ``batch`` slices, each an ``m x n`` block of accumulators (``acc`` bytes
    each) beside ``k`` elements of A's ``m`` rows and B's ``n`` columns (``itemsize``
    bytes each). Callers choose ``k``: a double-buffered K step (``block_passes``), the
    whole K slice (a core that runs one pass), or none (the accumulators alone).
    """
    return batch * (m * n * acc + (m + n) * k * itemsize) <= lx


@functools.lru_cache(maxsize=4096)
def block_passes(m: int, n: int, k: int, lx: int, itemsize: int, acc: int) -> tuple[int, int]:
    """How many times a core's A and B pass through LX for an ``m x n x k`` slice.

    The core keeps an output block of ``tm x tn`` accumulators (``acc`` bytes each) in
    ``lx`` bytes beside a double-buffered K step (one stick of K) of A and B, and reads
    A once per column block and B once per row block. A block is any number of whole
    sticks of N by any number of rows of M (coarse tiling counts its tiles; nothing
    makes them powers of two): for each width, the tallest block that fits; the one of
    least traffic wins. If none fits, one row by one stick.
    """
    eps = BYTES_PER_STICK // itemsize
    step = min(k, eps)
    sticks = -(-n // eps)
    best: tuple[int, int, int] | None = None
    for width in sorted({-(-sticks // blocks) for blocks in range(1, sticks + 1)}):
        tn = min(n, width * eps)
        tm = _tallest(m, tn, 2 * step, itemsize, acc, lx)
        if not tm:
            break  # a wider block fits fewer rows still
        pa, pb = -(-n // tn), -(-m // tm)
        traffic = m * k * pa + k * n * pb
        if best is None or traffic < best[0]:
            best = (traffic, pa, pb)
    if best is None:
        return sticks, m
    return best[1], best[2]


def _tallest(m: int, tn: int, k: int, itemsize: int, acc: int, lx: int) -> int:
    """The most rows (at most ``m``) of a ``tn``-wide block that fit ``lx`` (0: none)."""
    lo, hi = 0, m
    while lo < hi:  # _fits_lx grows with the rows: the largest that fits, by bisection
        mid = (lo + hi + 1) // 2
        if _fits_lx(1, mid, tn, k, itemsize, acc, lx):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _runs(size: tuple[int, ...], box: tuple[int, ...]) -> tuple[int, int]:
    """The contiguous runs of a box of a row-major device array: ``(count, elements)``."""
    run, i = 1, len(size) - 1
    while i >= 0 and box[i] == size[i]:
        run *= size[i]
        i -= 1
    if i >= 0:
        run *= box[i]
    return (math.prod(box) // run, run) if run else (0, 0)


def _all_boxes_bytes(division: WorkDivision, operand: int) -> int:
    """The bytes of every core's box of an operand: a ragged short slice's counted short."""
    if not division.ragged:
        return division.core_bytes(operand) * division.cores_used
    return sum(division.core_bytes(operand, c) for c in range(division.cores_used))


def _sharers(division: WorkDivision, operand: int) -> int:
    """Cores sharing each of the operand's tiles: the splits of variables it does not walk."""
    space = division.space
    op = space.operands[operand]
    walked = {w[0] for w in op.walks if w is not None}
    for f in op.folds:
        if f is not None:
            walked.update(v for v in f.vars if v is not None)
    return math.prod(division.splits[n] for n in space.names if n not in walked)


def matmul_time(
    division: WorkDivision,
    machine: Machine,
    in_lx: frozenset[int] = frozenset(),
    relaid: tuple[tuple[int, int], ...] = (),
) -> MatmulTime:
    """The terms of a divided matmul's time on ``machine`` (a ``calibrated`` profile).

    Args:
        division: the matmul's division (iteration space ``batch..., M, N, K``).
        machine: the machine profile (its PT, DDR and matmul constants, ``lx_usable``).
        in_lx: indices of the operands (A, B, then the output) living in LX: they cost
            no DDR bytes, runs or re-reads.
        relaid: ``(index, source bytes)`` of the operands relaid in LX as the matmul
            loads them (``LoadRelayout``): their DDR reads are the source image's
            (:func:`relaid_read`).
    """
    space = division.space
    names = space.names
    m_name, n_name, k_name = names[-3], names[-2], names[-1]
    cores = division.cores_used
    a, _, out = space.operands
    itemsize = a.tensor.itemsize
    batch = math.prod(division.chunk(n) for n in names[:-3])
    inner = _inner_batch(division)  # batch slices inside A's rows (the rest: outer loops)
    projection = inner > 1 and _shared_weight(division)
    m, n, k = (division.chunk(x) for x in (m_name, n_name, k_name))
    if projection:  # one weight for every slice: a plain matmul of inner x m rows (its
        m, batch, inner = m * inner, batch // inner, 1  # blocking, spill, barrier), but
        # its rows gathered a batch of sticks apart (its rate, below)
    rate = pt_rate(machine, a.tensor.layout.device_dtype.name)
    pt = batch * m * n * k / (machine.peak_macs_per_cycle * rate * machine.pt_clock_hz)
    pt /= machine.matmul_efficiency
    if projection:  # the projection's rate (spec section 1)
        pt = max(pt, batch * m * n * k / (_projection_rate(division, machine) * rate))
    elif inner > 1:  # one PT job per batch slice and N stick (the batch inside the rows)
        pt = max(pt, batch * m * n * k / (machine.mm_batched_macs_per_s * rate))
        pt += _accumulated_tiles(batch, n, k, machine.stick_bytes // itemsize) * (
            machine.mm_batch_job_s
        )
    acc = _block_bytes(out.tensor.itemsize, 2 in in_lx, machine)
    passes = block_passes(m, n, k, machine.lx_usable, itemsize, acc)
    read = 0.0
    read_bytes = 0
    runs = 0.0
    sync = 0.0
    chunk = machine.lx_usable / 3
    sources = dict(relaid)
    for i, p in ((0, passes[0]), (1, passes[1])):
        if i in in_lx:
            continue
        g = _sharers(division, i)
        per_core = division.core_bytes(i)
        unique = _all_boxes_bytes(division, i) // g * p
        if i in sources:  # loaded from its source image, relaid in LX
            unique = relaid_read(unique, space.operands[i].tensor.nbytes, sources[i])
        read_bytes += unique
        streams = cores / g  # distinct tiles read at once
        if division.core_bytes(1 - i) <= machine.mm_alone_fraction * machine.lx_usable:
            streams = 1.0  # read alone: the other operand's slice is loaded once, small
        few = max(0.0, math.log2(streams * machine.mm_stream_sharers / machine.max_cores))
        read += unique * (1 + machine.mm_stream_penalty * few * few)
        runs += _core_runs(division, i, machine) * p
        over = max(0.0, _barrier_reach(g, inner, machine) / machine.mm_multicast_sharers - 1)
        if i == 1 and inner > 1:  # a batched B: K steps, or whole job tiles, a chunk
            chunks = _batched_chunks(per_core, p, (inner, batch, n, k), itemsize, chunk, machine)
        else:
            chunks = math.ceil(per_core * p / chunk)
        sync += chunks * over * machine.mm_multicast_sync_s
    spill = _spill_bytes(inner, m, n, k, itemsize, acc, machine) * (batch // inner)
    burst = _spill_burst_s(spill, m, min(n, machine.stick_bytes // itemsize), machine)
    streamed = 0 if burst else spill * cores // 2  # each way, at the DDR's rate
    stored = 0 if 2 in in_lx else out.tensor.nbytes
    read += streamed
    read_bytes += spill * cores // 2
    write = stored + spill * cores // 2
    if 2 not in in_lx:
        runs += _core_runs(division, 2, machine)
    bw = machine.ddr_bw * machine.bandwidth_fraction(cores)
    turn = machine.turnaround_ns_per_byte * 1e-9 * min(read, stored + streamed)  # section 1
    ddr = (read + stored + streamed) / bw + turn + burst
    resident = _fits_lx(batch, m, n, k, itemsize, acc, machine.lx_usable)
    reduce, exchanged = _k_combine(division, machine, resident, inner > 1, bw)
    read_bytes += exchanged
    write += exchanged
    ring = 0 if exchanged else _partials_sent(division, machine) * cores
    return MatmulTime(
        pt, ddr, runs * machine.mm_run_s, sync, reduce, read_bytes, write, passes, ring
    )


def _k_combine(
    division: WorkDivision, machine: Machine, resident: bool, batched: bool, bw: float
) -> tuple[float, int]:
    """Seconds combining a K split's fp32 partial sums, and the DDR bytes moved each way.

    Each core holds the fp32 partials of its whole output box; its ``sk`` K partners
    each end with ``1/sk`` of the box summed (a reduce-scatter), so every core sends
    and receives ``(sk - 1) / sk`` of its partials:

    - a core whose slices and partials all stay in LX hands them LX to LX to its ring
      neighbours (spec section 2), at ``ring_bw``;
    - a batched matmul (the batch inside its rows) whose set does not fit: its block
      carries all its batch slices and cannot be blocked over them (as its partial-sum
      spill), so the partials go out to DDR after its K loop and come back, every core
      at once: written, then read, at the DDR's rate. No constant of its own; on the
      sweep's decode QK^T (B64_M32_N576_K128) it predicts the five 2-way K splits at
      0.2 within -20%..+4% (the fitted per-core rate below gave -39%..-21%);
    - otherwise (a plain matmul, its block tiled and summed as each block finishes)
      at ``mm_partial_sum_bw`` per core (fitted on the sweep).
    """
    sent = _partials_sent(division, machine)
    if not sent:
        return 0.0, 0
    if resident:
        return sent / machine.ring_bw, 0
    if batched:
        exchanged = sent * division.cores_used
        return 2 * exchanged / bw, exchanged
    return sent / machine.mm_partial_sum_bw, 0


def _partials_sent(division: WorkDivision, machine: Machine) -> int:
    """The fp32 partial-sum bytes one core of a K split sends its partners (0: no split).

    A reduce-scatter among ``sk`` partners: each sends ``(sk - 1) / sk`` of its box's
    partials, fp32 (``mm_accumulator_bytes``) whatever the output's dtype.
    """
    sk = division.splits[division.space.names[-1]]
    if sk == 1:
        return 0
    out = division.space.operands[2].tensor
    partial = division.core_bytes(2) * machine.mm_accumulator_bytes // out.itemsize
    return (sk - 1) * partial // sk


def _batched_chunks(
    nbytes: int,
    passes: int,
    extents: tuple[int, int, int, int],
    itemsize: int,
    chunk: float,
    machine: Machine,
) -> int:
    """How many multicast chunks a core's ``nbytes`` of a batched B arrive in, ``passes`` times.

    The tiled layout keeps the batch inside B's rows (``[K, N sticks, B, 64]``): one K row
    holds a stick of every batch slice and N stick. The core's K loop runs outside its jobs
    (:func:`_jobs`) when a chunk (``chunk`` bytes, a third of ``lx_usable``) holds a K step:
    one stick of K (the PT's step, as ``block_passes``'s; the core's whole K slice if
    shorter, a head dim under a stick) of every job of its ``inner`` slices, ``K rows x
    jobs`` sticks. The slice then arrives in K steps, ``ceil(bytes / chunk)`` chunks as any
    operand's. When a K step does not fit a chunk, no box cut along K feeds every job, so
    the slice is cut along its jobs instead: each chunk a box of whole job tiles (a batch
    slice's N stick over the core's whole K slice, ``k`` sticks), as many as fit (at least
    one; a tile larger than a chunk takes ``ceil(tile / chunk)``). Tiles of more than half a
    chunk leave the rest of it empty, so a small budget multiplies the barriers beyond the
    bytes' count: section 8's decode attention-times-V ``[32, 64, 576] @ [32, 576, 128]``
    1_32_1_1 has a 512 KB K step (32 slices x 2 N sticks x 64 K rows) and 64 tiles of 72 KB:
    at lx 0.2 (140 KB chunks) one tile a chunk, 64 barriers where its 4.7 MB counted 34 (343
    us on the card: 303 predicted, 188 by the bytes); at 0.8 (559 KB chunks) the K step
    fits, 9 chunks (94 us on the card).
    """
    inner, batch, n, k = extents  # the core's slices inside the rows, all its slices, N, K
    stick = machine.stick_bytes
    eps = stick // itemsize  # elements of a stick: K rows of a K step, N of a job tile
    tile = k * stick  # a job's B: one stick of N in each of its k K rows
    if min(k, eps) * stick * _jobs(inner, n, eps) <= chunk:  # a K step fits: chunks of them
        return math.ceil(nbytes * passes / chunk)
    jobs = _jobs(batch, n, eps)
    if tile > chunk:
        return passes * jobs * math.ceil(tile / chunk)
    return passes * math.ceil(jobs / int(chunk // tile))


def _barrier_reach(sharers: int, inner: int, machine: Machine) -> int:
    """How many sharers a multicast chunk's barrier costs as: its reach on the ring.

    A barrier's latency grows with the ring distance between its sharers; a
    bidirectional ring of ``max_cores`` cores reaches every core within ``max_cores /
    2`` hops, so beyond that many sharers it costs no more. Section 8's Llama q_proj
    (M=512, N=K=4096) split (32,1,1), every core sharing all of B, ran 852 us of wall
    time: the barrier linear in 32 sharers put it at 1,336 us; capped at 16, 808.

    A batched operand (``inner > 1``: the batch inside its rows) keeps all its sharers:
    its 32-way multicasts ran 2-3x over the model (the sweep's batched 1_32_1_1 rows),
    and capping them ranks decode attention-times-V worse (rho 0.55 -> 0.41, before its
    chunks of whole job tiles, ``_batched_chunks``, put it at 0.77). A choice made on
    the sweep, with no physical reason found (docs/device-model.md).
    """
    return sharers if inner > 1 else min(sharers, machine.max_cores // 2)


def _shared_weight(division: WorkDivision) -> bool:
    """Whether B walks none of the batch dims: one weight shared by every batch slice.

    ``[B, T, K] @ [K, N]`` (a linear layer on a batch of sequences) is such a
    projection; attention's ``[B, H, T, D] @ [B, H, D, S]`` is not (each slice its own B).
    """
    names = division.space.names
    walks = division.space.operands[1].walks
    return not any(w is not None and w[0] in names[:-3] for w in walks)


def _projection_rate(division: WorkDivision, machine: Machine) -> float:
    """A 3-D by 2-D projection's fp16 MAC rate per core, by its whole batch (section 1).

    torch-spyre's fitted rates (spec section 1): 705 MAC/ns/core for a batch of at most
    4, 470 beyond; a plain matmul's is 1,140 (the 1.1 GHz peak, section 8). The batch
    inside A's rows makes the PT gather rows a batch of sticks apart, as a batched
    matmul's, but the weight's tiles serve every batch slice, so it runs 3-4x faster than
    a batched matmul's 160 (85 fitted on the sweep). Not fitted here: the sweep has no
    projection.
    """
    batch = math.prod(d.extent for d in division.space.dims[:-3])
    if batch <= machine.mm_projection_small_batch:
        return machine.mm_projection_macs_per_s
    return machine.mm_projection_wide_macs_per_s


def _jobs(batch: int, n: int, eps: int) -> int:
    """A batched core's PT jobs: one per batch slice and N stick (``eps`` elements).

    The batch inside the rows (``[M, K sticks, B, 64]``) makes a K stick of every batch
    slice arrive together, so the core's K loop runs outside its jobs.
    """
    return batch * -(-n // eps)


def _accumulated_tiles(batch: int, n: int, k: int, eps: int) -> int:
    """A batched core's output tiles finished one by one: one a job (:func:`_jobs`).

    A job whose K slice spans more than one stick accumulates its fp32 tile in LX
    across the K loop and is finished on its own when K ends (its tiles lie a batch of
    sticks apart: no two make one block); a job of one K stick leaves the PT in its one
    pass. 0 when the K slice is one stick or less.
    """
    return _jobs(batch, n, eps) if k > eps else 0


def _block_bytes(out_itemsize: int, out_in_lx: bool, machine: Machine) -> int:
    """LX bytes per element of a core's output block (accumulator and staged output).

    Beside its fp32 accumulator, the output in its own narrower format when the output
    goes to DDR: the DMA stores from LX, so the accumulators are converted (fp32 ->
    fp16) into a staging block before the store. An fp16 output costs 4 + 2 bytes per
    element of the block, a float32 one 4 (stored from the accumulators), one left in LX
    for its reader 4 (the reader's buffer is counted where it is placed).
    """
    acc = machine.mm_accumulator_bytes
    return acc + (out_itemsize if out_itemsize < acc and not out_in_lx else 0)


def _inner_batch(division: WorkDivision) -> int:
    """A core's batch slices that A's layout keeps inside its rows (its M device dim).

    The tiled layout of a 3-D operand ``[B, M, K]`` is ``[M, K sticks, B, 64]``: the
    batch inside the rows. A batch dim laid out outside M (the heads of a 4-D ``[1, H,
    T, D]``, device ``[H, T, D sticks, 1, 64]``) is an outer loop: each of its slices
    is a plain matmul.
    """
    names = division.space.names
    walks = division.space.operands[0].walks
    where = {w[0]: j for j, w in reversed(list(enumerate(walks))) if w is not None}
    rows = where.get(names[-3], -1)
    return math.prod(division.chunk(b) for b in names[:-3] if b not in where or where[b] > rows)


def _spill_bytes(
    batch: int, m: int, n: int, k: int, itemsize: int, acc: int, machine: Machine
) -> int:
    """DDR bytes one core moves spilling fp32 partial sums between K steps.

    In the tiled layout a batched operand's batch sits inside its rows (``[M, K sticks,
    B, 64]``), so a core's LX block carries all its batch slices and cannot be blocked
    over them (coarse tiling loops over outer device dims only). When the core's
    ``batch x m x n`` output block (``acc`` bytes an element: fp32 accumulators and the
    staged output, :func:`_block_bytes`) does not fit ``lx_usable`` and its K slice
    spans more than one stick, the tiles that fit stay in LX across the K loop and only
    the rest spill: their partial sums are written to DDR and read back at every further
    K step. No fitted constant.
    """
    steps = -(-k // (machine.stick_bytes // itemsize))  # K sticks of the slice
    whole = batch * m * n * acc
    if batch == 1 or steps == 1 or whole <= machine.lx_usable:
        return 0
    excess = (whole - machine.lx_usable) * machine.mm_accumulator_bytes // acc  # fp32 part
    return 2 * (steps - 1) * excess


def _spill_burst_s(spill: int, m: int, width: int, machine: Machine) -> float:
    """Seconds one core's spill takes when each spilled tile is one DMA burst (else 0).

    A spilled tile (a batch slice's ``m`` rows by one N stick of ``width`` elements, fp32)
    of at most ``ddr_burst_bytes`` is one burst each way, and the K loop waits for it to
    come back: unpipelined, at one core's stream rate (``ddr_burst_core_bw``, as every
    burst of the model). Larger tiles stream at the DDR's rate (0 here).
    """
    tile = m * width * machine.mm_accumulator_bytes
    if not spill or not machine.ddr_burst_core_bw or tile > machine.ddr_burst_bytes:
        return 0.0
    return spill / machine.ddr_burst_core_bw


def _core_runs(division: WorkDivision, operand: int, machine: Machine) -> float:
    """Setups of core 0's runs of an operand not hidden by their own transfer.

    A run costs ``mm_run_s``; one of ``mm_run_bytes`` or more hides it, a shorter one
    hides the fraction its bytes make of ``mm_run_bytes``.
    """
    tensor = division.space.operands[operand].tensor
    count, run = _runs(tuple(tensor.layout.device_size), division.box_shape(operand, 0))
    return count * max(0.0, 1 - run * tensor.itemsize / machine.mm_run_bytes)
