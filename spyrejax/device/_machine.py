"""Machine profiles: every constant of the device model, each with its origin.

This module is the only place a machine constant is written (spyre-device spec
section 1). A :class:`Machine` is a frozen record; :meth:`Machine.spyre` is the card as
torch-spyre's compiler and cost model describe it, :meth:`Machine.ktir_cpu` the
defaults of ktir-cpu (a CPU interpreter of Spyre kernels with a latency model), so a
prediction can be compared with that peer emulator.

Origins: ``datasheet`` (published, or a compiler constant), ``fitted`` (torch-spyre
fitted it to profiler measurements), ``derived`` (computed from the others),
``ktir-cpu`` (that emulator's default).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, fields, replace
from typing import Any

from .._errors import DeviceError
from ..layout._dtypes import _NO_STICK_GEOMETRY, BYTES_PER_STICK, DataFormats

__all__ = ["Machine", "default_machine"]

_MIB = 1 << 20
_GIB = 1 << 30

# The Spyre card's PT array: fp16 MACs per cycle per core and its clock (section 8).
_PT_MACS_PER_CYCLE = 1024
_PT_CLOCK_HZ = 1.1e9

_FIT = (
    "fitted (least squares on log time, all 236 rows of "
    "../shared/data/spyre/granite_splits_lx0.2.txt below 100 ms at lx_fraction 0.2, "
    "with section 8's four lx 0.8 points), on the model before the batched PT terms and "
    "the matmul turnaround; kept: tools/fit_matmul_cost.py's refit on today's model is "
    "no better on what is judged (in sample 12/12 picks, median rho 0.84 against the "
    "shipped 0.86; leave-one-shape-out 12/12, 0.84, 11/12, an exact tie settled by the "
    "planner's rule counting as a hit) and each of the four moved by "
    "x0.8 or x1.25 keeps 11-12/12 picks and rho 0.84-0.86: the data cannot tell the sets "
    "apart (docs/device-model.md)"
)
# The PT's MAC rate per operand format, relative to fp16 (Machine.pt_dtype_rates): by
# element bits, as section 8 gives fp8 and int8 2x and int4 4x; 32-bit formats 1/4 (an
# assumption: the spec gives the PT no 32-bit rate).
_RATE_BY_BITS = {2: 8.0, 4: 4.0, 8: 2.0, 16: 1.0, 32: 0.25}
_PT_RATES = tuple(
    (f.name, _RATE_BY_BITS[f.bits])
    for f in DataFormats
    if f not in _NO_STICK_GEOMETRY and f.bits in _RATE_BY_BITS
)


@dataclass(frozen=True)
class Machine:
    """A Spyre machine profile: the constants the device model plans and costs with.

    Rates are per core unless named otherwise; bandwidths in bytes per second.

    Attributes:
        name: the profile's name.
        cores: cores the compiler may use for one op (1..32).
        max_cores: cores on the card.
        corelets: corelets per core.
        clock_hz: core clock.
        peak_macs_per_cycle: fp16 MACs per cycle per core at peak (the PT array).
        pt_clock_hz: the PT (matmul) array's clock.
        matmul_macs_per_ns: fp16 matmul MACs per ns per core (a ``roofline`` profile's
            matmul rate).
        pt_dtype_rates: the PT's MAC rate per operand device format, relative to fp16,
            as ``((format name, factor), ...)``.
        matmul_model: ``"calibrated"`` (matmuls costed by ``device._matmul_cost``, the
            terms fitted on section 8's sweep) or ``"roofline"`` (``max(MACs / rate,
            bytes / bandwidth)``).
        matmul_efficiency: the fraction of the PT peak a matmul's PT term runs at.
        mm_accumulator_bytes: bytes of one PT accumulator (partial sums are fp32).
        mm_stream_sharers: cores sharing an operand's tiles from which the DDR runs at
            full speed on all the cores; the DDR serves ``max_cores / mm_stream_sharers``
            distinct streams (``cores / sharers``) cleanly, more conflict in its banks.
        mm_stream_penalty: the DDR cost factor's growth beyond those streams:
            ``1 + penalty x log2(streams x mm_stream_sharers / max_cores)^2``.
        mm_alone_fraction: a core whose other operand's slice is at most this fraction
            of ``lx_usable`` (loaded once) reads one stream: no bank-conflict factor.
        mm_multicast_sharers: cores one multicast serves without a barrier.
        mm_multicast_sync_s: the barrier per LX chunk (a third of ``lx_usable``) of a
            tile multicast to more cores, per multiple of ``mm_multicast_sharers``.
        mm_run_s: DMA setup of one contiguous run of a core's box in DDR.
        mm_run_bytes: run length that hides its setup (shorter runs hide a part).
        mm_partial_sum_bw: bytes per second one core combines a plain matmul's fp32
            partial sums of a K split at, when they do not stay in LX.
        mm_batched_macs_per_s: the most fp16 MACs per second one core's PT runs a
            batched matmul at (its operands keep the batch inside their rows: one small
            matmul per batch slice).
        mm_batch_job_s: finishing one output tile of a batched matmul (a batch slice
            and an N stick of a core's slice) whose K slice spans more than one stick:
            accumulated in LX across the core's K loop, it is finished on its own.
        mm_projection_macs_per_s: the most fp16 MACs per second one core's PT runs a
            3-D by 2-D projection at (``[B, T, K] @ [K, N]``: the batch inside A's rows,
            one weight shared by every batch slice), for a batch of at most
            ``mm_projection_small_batch``.
        mm_projection_wide_macs_per_s: the same for a larger batch.
        mm_projection_small_batch: the largest batch ``mm_projection_macs_per_s`` holds for.
        lx_bytes: scratchpad per core.
        lx_fraction: the fraction of the scratchpad the backend may use for a program's
            buffers (torch-spyre's ``DXP_LX_FRAC_AVAIL``; its default 0.2). It changes
            what stays in LX and so the time: every prediction records it.
        lx_alignment: byte alignment of scratchpad buffers.
        span_limit: bytes a core can address in DDR from one base (per operand).
        ring_bytes_per_cycle: ring bandwidth between cores, each way.
        ddr_bytes: device memory.
        ddr_usable_bytes: device memory usable by programs.
        ddr_segment_bytes: size of one DDR address segment.
        ddr_peak_bw: DDR peak bandwidth.
        ddr_bw: DDR bandwidth of a read-only or write-only stream.
        turnaround_ns_per_byte: read/write turnaround, per byte of min(read, write).
        ddr_burst_bytes: the largest per-core slice of an operand a kernel moves as one
            DMA burst, unpipelined: a kernel whose every DDR operand's slice is at most
            this loads them all, computes, then stores (no load in flight while it
            stores); a larger slice is streamed in chunks, the next in flight while
            the last is stored, and runs at the DDR's rate.
        ddr_burst_core_bw: bytes per second one core moves one burst at (one DMA
            stream: the bytes it keeps in flight over the DDR's latency); a kernel's
            bursts of different operands run side by side, its loads before its stores.
            0: no burst term (the DDR rate only).
        cores_derate: fraction of the 32-core DDR bandwidth reached with n active
            cores, as ``((n, fraction), ...)``; between entries the lower entry holds.
        restickify_bw: bandwidth of a restickify.
        reduce_bw: bandwidth of a cross-row reduction.
        broadcast_bw: bandwidth of an op with a broadcast operand.
        max_cards: cards per host.
        card_link_bw: bytes per second one card sends to another (its PCIe link, one
            direction): what collectives between cards are charged at.
        stick_bytes: bytes in a stick (the DDR and DMA granule).
        vector_lanes_per_cycle: elementwise lanes per cycle per core, or 0 when
            elementwise ops are modelled memory-bound (the spyre profile).
        transcendental_factor: cost of a transcendental over a plain vector op.
        lx_port_bytes_per_cycle: bytes per cycle one core's LX port moves (its vector
            units read and write operands through it).
        launch_s: device time a kernel costs beyond its traffic (launch and setup),
            charged once per kernel (a divided op, a copy, a restickify).
        stage_s: the least device time one stage of a kernel takes (an op of it: one
            DSC of its SuperDSC, run by every core in its schedule): every core sets up
            the stage's loop nests and DMA descriptors and the stage ends with its
            slowest core. A fused kernel of ``n`` ops runs ``n`` stages.
        host_call_s: host wall time of one compiled call from Python, whatever its
            size. Host overhead, never added to a predicted device time.
        lx_free: whether LX accesses cost nothing (ktir-cpu: yes; spyre: the LX port).
        stick_granular_ddr: whether DDR traffic is charged per unique stick touched.
        origins: where each constant comes from, by field name.
    """

    name: str
    cores: int
    max_cores: int
    corelets: int
    clock_hz: float
    peak_macs_per_cycle: int
    pt_clock_hz: float
    matmul_macs_per_ns: float
    pt_dtype_rates: tuple[tuple[str, float], ...]
    matmul_model: str
    matmul_efficiency: float
    mm_accumulator_bytes: int
    mm_stream_sharers: int
    mm_stream_penalty: float
    mm_alone_fraction: float
    mm_multicast_sharers: int
    mm_multicast_sync_s: float
    mm_run_s: float
    mm_run_bytes: int
    mm_partial_sum_bw: float
    mm_batched_macs_per_s: float
    mm_batch_job_s: float
    mm_projection_macs_per_s: float
    mm_projection_wide_macs_per_s: float
    mm_projection_small_batch: int
    lx_bytes: int
    lx_fraction: float
    lx_alignment: int
    span_limit: int
    ring_bytes_per_cycle: int
    ddr_bytes: int
    ddr_usable_bytes: int
    ddr_segment_bytes: int
    ddr_peak_bw: float
    ddr_bw: float
    turnaround_ns_per_byte: float
    ddr_burst_bytes: int
    ddr_burst_core_bw: float
    cores_derate: tuple[tuple[int, float], ...]
    restickify_bw: float
    reduce_bw: float
    broadcast_bw: float
    max_cards: int
    card_link_bw: float
    stick_bytes: int
    vector_lanes_per_cycle: int
    transcendental_factor: float
    lx_port_bytes_per_cycle: int
    launch_s: float
    stage_s: float
    host_call_s: float
    lx_free: bool
    stick_granular_ddr: bool
    origins: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.cores, int) or not 1 <= self.cores <= self.max_cores:
            raise DeviceError(
                f"Machine {self.name!r}: cores must be an int in 1..{self.max_cores}, "
                f"got {self.cores!r}"
            )
        frac = self.lx_fraction
        if isinstance(frac, bool) or not isinstance(frac, int | float) or not 0 < frac <= 1:
            raise DeviceError(
                f"Machine {self.name!r}: lx_fraction must be a number in (0, 1], got {frac!r}"
            )

    # -- derived ------------------------------------------------------------------

    @property
    def lx_usable(self) -> int:
        """Usable scratchpad bytes per core (derived: ``lx_fraction`` of it, rounded down)."""
        return int(self.lx_bytes * self.lx_fraction)

    @property
    def lx_bw(self) -> float:
        """One core's LX port bandwidth, bytes per second (derived)."""
        return self.lx_port_bytes_per_cycle * self.clock_hz

    @property
    def ring_bw(self) -> float:
        """Ring bandwidth each way, bytes per second (derived)."""
        return self.ring_bytes_per_cycle * self.clock_hz

    @property
    def peak_macs_per_s(self) -> float:
        """Peak fp16 MACs per second per core (derived: the PT's MACs per cycle x its clock)."""
        return self.peak_macs_per_cycle * self.pt_clock_hz

    def bandwidth_fraction(self, active: int) -> float:
        """Fraction of the full DDR bandwidth that ``active`` cores reach.

        Linear between the table's core counts (24 cores get 0.77, not the 16 cores'
        0.54: a step would make 31 cores half as fast as 32).
        """
        table = self.cores_derate
        keys = [n for n, _ in table]
        i = bisect.bisect_right(keys, max(1, active)) - 1
        if i < 0:
            return table[0][1]
        if i + 1 >= len(table):
            return table[i][1]
        (n0, f0), (n1, f1) = table[i], table[i + 1]  # linear between measured counts
        return f0 + (f1 - f0) * (active - n0) / (n1 - n0)

    def origin(self, name: str) -> str:
        """Where the constant ``name`` comes from.

        Raises:
            DeviceError: if the profile has no such constant.
        """
        own = dict(self.origins)
        if name in own:
            return own[name]
        if name in ("lx_usable", "lx_bw", "ring_bw", "peak_macs_per_s"):
            return "derived"
        raise DeviceError(f"Machine has no constant {name!r}")

    def with_cores(self, cores: int) -> Machine:
        """The same machine, with ``cores`` cores per op (a compiler setting)."""
        return replace(self, cores=cores)

    def with_lx_fraction(self, lx_fraction: float) -> Machine:
        """The same machine, the backend allowed ``lx_fraction`` of LX (a backend setting)."""
        return replace(self, lx_fraction=lx_fraction)

    def table(self) -> list[tuple[str, Any, str]]:
        """Every constant as ``(name, value, origin)`` rows."""
        skip = {"name", "origins"}
        return [
            (f.name, getattr(self, f.name), self.origin(f.name))
            for f in fields(self)
            if f.name not in skip
        ]

    # -- profiles -------------------------------------------------------------------

    @classmethod
    def spyre(cls, cores: int = 32, lx_fraction: float = 0.2) -> Machine:
        """The Spyre card (spyre-device spec sections 1 and 8).

        Args:
            cores: cores per op (a compiler setting, 1..32).
            lx_fraction: the backend's scratchpad budget (torch-spyre's default 0.2; the
                12 Granite matmul latencies the model was first checked on ran at ~0.8).
        """
        d, f, v = "datasheet", "fitted", "derived"
        origins = {
            "cores": "datasheet (a compiler setting of 1..32)",
            "max_cores": d,
            "corelets": d,
            "clock_hz": f"{d} (section 1; the ring and LX ports run at it)",
            "peak_macs_per_cycle": (
                f"{v} (section 8: the card's 32,768 fp16 MAC/cycle / 32 cores; x 2 x 1.1 GHz "
                "x 32 = 72.1 TFLOP/s)"
            ),
            "pt_clock_hz": (
                "measured (section 8: the profiler's PT utilisation equals "
                "B*M*N*K / 32768 cycles / 1.1 GHz / time on every measured matmul)"
            ),
            "matmul_macs_per_ns": (
                f"{v} (the PT peak, 1,024 x 1.1 GHz; section 8: torch-spyre's sustained "
                "1,140 MAC/ns/core is this peak)"
            ),
            "pt_dtype_rates": (
                "section 8 by element bits (fp8 and int8 2x fp16, int4 4x); 32-bit formats "
                "(float32, int32) 1/4: an assumption, the spec gives the PT no 32-bit rate "
                "(operands of 2x the bits of fp16 on both sides)"
            ),
            "matmul_model": "model (spyrejax/device/_matmul_cost.py)",
            "matmul_efficiency": (
                "chosen: the sweep's compute-bound best divisions ran at 0.73-0.83 of the "
                "PT peak (M=512 shapes, 4_8 splits), section 8's prefill projections 0.73-0.74"
            ),
            "mm_accumulator_bytes": "model (fp32 partial sums)",
            "mm_stream_sharers": (
                "structural, chosen on the sweep (splits sharing each tile among 4-8 cores "
                "are the fastest of every Granite shape)"
            ),
            "mm_stream_penalty": _FIT,
            "mm_alone_fraction": (
                "chosen: spec section 8's decode weight streaming (M <= 4; the activation "
                "slice a few KB per core, every core on its own weight tile) runs at 145-157 "
                "GB/s, so a lone weight stream pays no bank conflicts; on the Granite sweep "
                "1/8 and 1/16 of lx_usable keep its figures (median rho 0.86), 1/4 and 1/3 "
                "misrank the M=64 shapes (0.82, 0.77)"
            ),
            "mm_multicast_sharers": (
                "structural, chosen on the sweep (leave-one-shape-out: 4 ranks better than 8)"
            ),
            "mm_multicast_sync_s": _FIT
            + "; the 0.2-vs-0.8 pairs of section 8 with it; kept when a plain matmul's "
            "barrier reach was capped at the ring's diameter (16 sharers) afterwards: the cap "
            "(max_cores / 2, no constant) and the batched matmuls' exemption from it were "
            "chosen with section 8's q_proj (32,1,1) and the sweep's 1_32_1_1 rows in view "
            "(the exemption on the sweep's rho alone), so q_proj (32,1,1) is in sample; "
            "kept again when a batched B whose K step overflows a chunk came to arrive in "
            "chunks of whole job tiles (device/_matmul_cost._batched_chunks, no constant: "
            "section 8's decode attention-times-V 1_32_1_1 at 0.2 188 -> 303 us, card 343)",
            "mm_run_s": _FIT,
            "mm_run_bytes": (
                "structural, chosen on the sweep (4 KB; 8 and 16 KB rank and predict worse "
                "out of sample)"
            ),
            "mm_batched_macs_per_s": (
                "chosen on the sweep's four batched shapes (the attention-times-V shapes' "
                "best divisions ran at 79-85 GMAC/s per core: B32_M512_N128_K512 4_4_2_1, "
                "B32_M64_N128_K576 2_8_2_1); spec section 1: torch-spyre fitted 160 "
                "MAC/ns/core for batched matmuls in the tiled order"
            ),
            "mm_projection_macs_per_s": (
                "spec section 1 (torch-spyre's fitted rate of a 3-D by 2-D projection, batch "
                "<= 4: 705 MAC/ns/core); not fitted here: the sweep holds no such shape"
            ),
            "mm_projection_wide_macs_per_s": (
                "spec section 1 (torch-spyre's fitted rate of a 3-D by 2-D projection with a "
                "larger batch: 470 MAC/ns/core); not fitted here"
            ),
            "mm_projection_small_batch": "spec section 1 (the 705 rate holds for batch <= 4)",
            "mm_batch_job_s": (
                "chosen on the sweep's batched shapes: decode QK^T B64_M32_N576_K128's "
                "K-unsplit divisions with 1-4 rows per core (1_32_1_1, 2_16_1_1, 4_8_1_1: "
                "576, 288, 144 tiles of 2 K sticks; 793, 405, 234 us) leave ~0.9 us a tile "
                "over the model without it, and the time a tile takes does not grow with its "
                "K sticks (decode attention-times-V 1_32_1_1 at 0.8: 64 tiles of 9 K sticks "
                "in 94 us); a K-split core's tiles of one K stick pay none. Was 0.5 us (the "
                "largest before section 8's lx 0.8 pairs moved) while the batched K splits' "
                "partials were combined at the plain matmul's fitted rate: predicted 21-39% "
                "under the card, they ranked above 4_8_1_1 only because it too was 45% "
                "under. With those partials through DDR (device/_matmul_cost._k_combine, no "
                "constant), 0.75 us is the least that picks the decode QK^T shape's best "
                "(0.5 and 0.7 pick 4_8_1_1, 1.48x the card's best) and 0.8 ranks best "
                "(median rho 0.87; 0.9 the same, 0.75 0.84); section 8's lx 0.8 pairs "
                "pay for it within their 30% bar: decode attention-times-V 1_32_1_1 92 -> "
                "107 us (card 94), 2_8_2_1 64 -> 68 (card 60)"
            ),
            "mm_partial_sum_bw": _FIT
            + " (near a core's share of DDR: 150 GB/s / 32 = 4.7); plain matmuls only: a "
            "core whose slices and partials all stay in LX combines over the ring instead "
            "(ring_bw), a batched matmul whose set does not fit through DDR (_k_combine)",
            "lx_bytes": d,
            "lx_fraction": "torch-spyre's default DXP_LX_FRAC_AVAIL (spec section 8)",
            "lx_alignment": d,
            "span_limit": d,
            "ring_bytes_per_cycle": d,
            "ddr_bytes": d,
            "ddr_usable_bytes": d,
            "ddr_segment_bytes": d,
            "ddr_peak_bw": d,
            "ddr_bw": f"{f} (torch-spyre; spec section 8's decode weight streaming, 145-157 GB/s)",
            "turnaround_ns_per_byte": (
                f"{f} (torch-spyre); with ddr_bw it gives spec section 8's x*2 sweep "
                "(2-32 MB, ~100 GB/s of read+write) within 6%"
            ),
            "ddr_burst_bytes": (
                "chosen between spec section 8's x*2 points of 1 MB (32 KB per core per "
                "operand on 32 cores: 31.8 us, 66 GB/s, one burst) and 2 MB (64 KB: 38.7 us, "
                "~100 GB/s, streamed): 48 KB, the middle; the 1-2 MB step (6.9 us for 2 MB "
                "more, faster than the DDR's peak) is a change of regime, not a rate"
            ),
            "ddr_burst_core_bw": (
                "fitted on spec section 8's x*2 at 1 MB: 1 MB read then 1 MB written in "
                "31.8 us is 66 GB/s per direction over 32 cores, 2.06 GB/s per core "
                "(about 2 KB in flight over ~1 us of DDR latency); the ring fact says the "
                "same (a 1 MB DDR round trip ~34 us, 31.1 + 2.9); the tiny add's bursts "
                "(1 KB per core per operand) then take 0.5 + 0.5 us"
            ),
            "cores_derate": (
                f"{f} (torch-spyre, on reductions: 4, 8, 16, 32 cores 0.43, 0.54, 0.54, 1.0); "
                "1 and 2 cores raised from its 0.11 and 0.22 by spec section 8's pure-N "
                "split (M=128, K=8192, 2 MiB of weights per core): one core read its 4.2 MB "
                "in 178 us of wall time (>= 0.16 of 150 GB/s), two their 6.3 MB in 171 "
                "(>= 0.25); linear between the counts"
            ),
            "restickify_bw": f,
            "reduce_bw": f,
            "broadcast_bw": f,
            "max_cards": d,
            "card_link_bw": f"{v} (PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130, one way)",
            "stick_bytes": d,
            "vector_lanes_per_cycle": "model: elementwise ops are memory-bound (fitted)",
            "transcendental_factor": f"{f} (gelu and exp cost what neg costs)",
            "lx_port_bytes_per_cycle": "issue 25 (128 B/cycle/core)",
            "launch_s": (
                "fitted: spec section 8 tiny add [4, 1, 4096] fp16 (1 us of device time) less "
                "the model's DDR time of it (0.84 us); the x*2 sweep's 2-32 MB intercept is ~0"
            ),
            "stage_s": (
                "chosen on spec section 8's tiny add [4, 1, 4096] fp16, one stage: its 1 us "
                "less launch_s (its 96 KB take 0.84 us by the DDR model, under the floor); "
                "a stage per DSC of a kernel is spec section 5's SuperDSC (dscs_, "
                "coreIdToDscSchedule); issue 25: the card takes several times 1.7 us for a "
                "tiny softmax (6 stages: 5.3 us)"
            ),
            "host_call_s": "measured: spec section 8 (wall time of a compiled call from Python)",
            "lx_free": "model (LX accesses cost the LX port's time)",
            "stick_granular_ddr": "spec section 4 (device bytes, stick-granular)",
        }
        return cls(
            name="spyre",
            cores=cores,
            max_cores=32,
            corelets=2,
            clock_hz=1.5e9,
            peak_macs_per_cycle=_PT_MACS_PER_CYCLE,
            pt_clock_hz=_PT_CLOCK_HZ,
            matmul_macs_per_ns=_PT_MACS_PER_CYCLE * (_PT_CLOCK_HZ / 1e9),  # the PT peak
            pt_dtype_rates=_PT_RATES,
            matmul_model="calibrated",
            matmul_efficiency=0.85,
            mm_accumulator_bytes=4,
            mm_stream_sharers=4,
            mm_stream_penalty=0.0532,
            mm_alone_fraction=0.125,
            mm_multicast_sharers=4,
            mm_multicast_sync_s=0.548e-6,
            mm_run_s=0.177e-6,
            mm_run_bytes=4096,
            mm_partial_sum_bw=5.86e9,
            mm_batched_macs_per_s=85e9,
            mm_batch_job_s=0.8e-6,
            mm_projection_macs_per_s=705e9,
            mm_projection_wide_macs_per_s=470e9,
            mm_projection_small_batch=4,
            lx_bytes=2 * _MIB,
            lx_fraction=lx_fraction,
            lx_alignment=128,
            span_limit=256 * _MIB,
            ring_bytes_per_cycle=128,
            ddr_bytes=128 * 10**9,
            ddr_usable_bytes=112 * 10**9,
            ddr_segment_bytes=16 * _GIB,
            ddr_peak_bw=204.8e9,
            ddr_bw=150e9,
            turnaround_ns_per_byte=0.00574,
            ddr_burst_bytes=48 * 1024,
            ddr_burst_core_bw=66e9 / 32,
            cores_derate=((1, 0.16), (2, 0.25), (4, 0.43), (8, 0.54), (16, 0.54), (32, 1.0)),
            restickify_bw=116e9,
            reduce_bw=113e9,
            broadcast_bw=118e9,
            max_cards=8,
            card_link_bw=32e9 * 16 / 8 * 128 / 130,
            stick_bytes=BYTES_PER_STICK,
            vector_lanes_per_cycle=0,
            transcendental_factor=1.0,
            lx_port_bytes_per_cycle=128,
            launch_s=0.15e-6,
            stage_s=0.85e-6,
            host_call_s=2.9e-3,
            lx_free=False,
            stick_granular_ddr=True,
            origins=tuple(origins.items()),
        )

    @classmethod
    def ktir_cpu(cls, cores: int = 32, lx_fraction: float = 0.2) -> Machine:
        """ktir-cpu's latency-model defaults (spyre-device spec section 1).

        Its card geometry (cores, scratchpad, spans) is the Spyre card's; its rates are
        its own: 1 GHz, 0.128 TB/s DDR, 0.064 TB/s ring, 64 fp16 lanes per cycle, 8
        systolic rows (512 MACs per cycle per core), transcendentals 4x, DDR charged
        per unique stick touched, LX free, no launch or stage cost. It has no fitted derates.
        """
        base = cls.spyre(cores, lx_fraction)
        k = "ktir-cpu"
        clock_hz, macs_per_cycle = 1e9, 8 * 64  # 8 systolic rows x 64 lanes
        rates = {
            "clock_hz": clock_hz,
            "pt_clock_hz": clock_hz,
            "peak_macs_per_cycle": macs_per_cycle,
            "matmul_macs_per_ns": macs_per_cycle * (clock_hz / 1e9),  # the peak, as spyre()
            "matmul_model": "roofline",
            "ring_bytes_per_cycle": 64,
            "ddr_peak_bw": 0.128e12,
            "ddr_bw": 0.128e12,
            "turnaround_ns_per_byte": 0.0,
            "ddr_burst_core_bw": 0.0,
            "cores_derate": ((1, 1.0),),
            "restickify_bw": 0.128e12,
            "reduce_bw": 0.128e12,
            "broadcast_bw": 0.128e12,
            "vector_lanes_per_cycle": 64,
            "transcendental_factor": 4.0,
            "launch_s": 0.0,
            "stage_s": 0.0,
            "lx_free": True,
        }
        origins = dict(base.origins)
        origins.update({name: k for name in rates})
        origins["matmul_macs_per_ns"] = f"{k} (8 systolic rows x 64 lanes at 1 GHz)"
        origins["matmul_model"] = f"{k} (a roofline: max(MACs / rate, bytes / bandwidth))"
        origins["ring_bytes_per_cycle"] = f"{k} (0.064 TB/s at 1 GHz)"
        return replace(base, name="ktir-cpu", origins=tuple(origins.items()), **rates)


def default_machine(machine: Machine | None = None) -> Machine:
    """``machine``, or the device model's default profile ``Machine.spyre()``.

    The one owner of the default: ``explain``, ``export`` and ``emulate="cores"`` all
    divide on the machine this gives, so they agree on every division.
    """
    return Machine.spyre() if machine is None else machine
