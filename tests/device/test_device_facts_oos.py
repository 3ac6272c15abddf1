"""Every quantitative fact of spec section 8 as a check of the device model, and the
model's floors on shapes the measured sweep does not have (issue 25: out of sample).

Wall vs device time. Section 8 gives some figures as wall time (Llama-3.1-8B q_proj's
four splits, the pure-N split); the model predicts profiled device time. The sweep holds
the same q_proj shape (Granite's B1_M512_N4096_K4096) as profiled device time: 317, 376,
614 and 803 us against section 8's 355, 412, 658 and 852 us of wall time, so wall runs
device + 40-50 us there. A wall fact is met when the prediction lies in ``[(wall -
WALL_OVER_US) x (1 - rel), wall x (1 + rel)]``. ``rel`` is 20% for single points: the
issue's bar for a best division's time is 30%, and the model meets the sweep's best
divisions at +1% to +16%. Profiled device facts take the issue's 30%.

The figures the model does not meet are strict xfails naming what is missing, so a fix
shows up as an XPASS.

Not all of it is out of sample: section 8's four lx 0.8 budget pairs (``BUDGET_PAIRS``)
are IN sample for ``mm_batch_job_s`` (its origin weighs the sweep's picks against those
pairs, ``machine.origin("mm_batch_job_s")``) and were part of the four fitted constants'
fit; their test checks the model still meets them, not that it predicts them. The decode
QK^T pair at 0.2 (8_2_1_2, 202 us) is also a row of the sweep, as is decode
attention-times-V 1_32_1_1 at 0.2 (343 us), which the batched multicast's chunk rule
(``_matmul_cost._batched_chunks``, no constant) was found on: in sample too.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.device import Machine, op_cost
from spyrejax.device._calibrate import Measurement, sweep_division
from spyrejax.device._division import WorkDivision, _divisors, order
from spyrejax.device._matmul_cost import matmul_time
from spyrejax.device._space import TensorSpec, matmul_space
from spyrejax.layout import SpyreTensorLayout

S = jax.ShapeDtypeStruct
MIB = 1 << 20
F16 = np.float16
WALL_OVER_US = 50.0  # wall minus profiled device time of the same q_proj shape (see above)
PT_PEAK = 32768 * 1.1e9  # section 8: MAC/s of the card's 32 cores at fp16
DDR_FASTEST = 157e9  # section 8: the fastest measured DDR stream (decode weight streaming)


def predicted_us(b, m, n, k, slices, lx=0.2):
    machine = Machine.spyre(lx_fraction=lx)
    division = sweep_division(Measurement(b, m, n, k, slices, 0.0), machine)
    return op_cost(division, machine).time_s * 1e6


def assert_near_wall(pred_us, wall_us, rel=0.2):
    lo, hi = (wall_us - WALL_OVER_US) * (1 - rel), wall_us * (1 + rel)
    assert lo <= pred_us <= hi, (
        f"predicted {pred_us:.0f} us, wall {wall_us} (range {lo:.0f}..{hi:.0f})"
    )


# --- clock: the PT peak ----------------------------------------------------------------


def test_the_pt_peak_is_72_tflops_and_large_projections_run_near_74_percent_of_it():
    m = Machine.spyre()
    assert 2 * m.peak_macs_per_s * m.max_cores == pytest.approx(72.1e12, rel=1e-3)
    # Section 8: large prefill projections reach 73-74% of the peak. The model's pick
    # (least predicted time over every legal division) of Granite and Llama prefill
    # projections: within 15% of 73.5% (the PT efficiency caps it at 0.85).
    for b, mm, n, k in [(1, 512, 12800, 4096), (1, 512, 4096, 12800), (1, 512, 14336, 4096)]:
        best = min(t for t, _ in times(b, mm, n, k))
        util = b * mm * n * k / PT_PEAK / best
        assert util == pytest.approx(0.735, rel=0.15), (mm, n, k, util)


# --- the scratchpad budget ------------------------------------------------------------------

# Section 8's same kernels at lx_fraction 0.2 and 0.8 (profiled us). IN sample, not out:
# mm_batch_job_s was chosen with the four lx 0.8 points in view and the fitted constants'
# least squares included them (machine.origin()).
BUDGET_PAIRS = [
    ("prefill QK^T", (512, 32, 512, 128), (1, 4, 8, 1), 1634, 743),
    ("decode QK^T", (64, 32, 576, 128), (8, 2, 1, 2), 202, 90),
    ("decode attn@V", (32, 64, 128, 576), (1, 32, 1, 1), 343, 94),
    ("decode attn@V", (32, 64, 128, 576), (2, 8, 2, 1), 60, 60),
]
# What the model misses, by (slices, budget): none since a batched B whose K step does not
# fit a chunk arrives in chunks of whole job tiles (decode attn@V 1_32_1_1 at 0.2: 188 ->
# 303 us, its 64 tiles of 72 KB one a chunk; _matmul_cost._batched_chunks).
BUDGET_MISSES: dict[tuple[tuple[int, ...], float], str] = {}


def _budget_cases():
    for name, shape, slices, at02, at08 in BUDGET_PAIRS:
        for lx, us in ((0.2, at02), (0.8, at08)):
            why = BUDGET_MISSES.get((slices, lx))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            yield pytest.param(shape, slices, lx, us, marks=marks, id=f"{name}-{slices}-lx{lx}")


@pytest.mark.parametrize("shape, slices, lx, us", list(_budget_cases()))
def test_the_budget_pairs_are_predicted_within_30_percent(shape, slices, lx, us):
    assert predicted_us(*shape, slices, lx) == pytest.approx(us, rel=0.3)


@pytest.mark.parametrize("name, shape, slices, at02, at08", BUDGET_PAIRS)
def test_a_smaller_budget_is_never_faster_and_a_split_that_rereads_nothing_does_not_care(
    name, shape, slices, at02, at08
):
    small, large = predicted_us(*shape, slices, 0.2), predicted_us(*shape, slices, 0.8)
    assert small >= large
    if at02 == at08:
        assert small == pytest.approx(large, rel=0.1)


# --- divisions are bimodal ------------------------------------------------------------------

# Llama-3.1-8B q_proj (M=512, N=K=4096), section 8's wall ms by (m, n, k) split. In sample
# since the barrier's reach cap (device/_matmul_cost._barrier_reach) was chosen with (32,1,1).
Q_PROJ_WALL_US = {(4, 8, 1): 355, (8, 4, 1): 412, (1, 32, 1): 658, (32, 1, 1): 852}


@pytest.mark.parametrize("split", list(Q_PROJ_WALL_US))
def test_llama_q_proj_splits_against_their_wall_times(split):
    assert_near_wall(predicted_us(1, 512, 4096, 4096, (1, *split)), Q_PROJ_WALL_US[split])


def test_llama_q_proj_splits_rank_as_measured():
    pred = {s: predicted_us(1, 512, 4096, 4096, (1, *s)) for s in Q_PROJ_WALL_US}
    assert sorted(pred, key=pred.get) == sorted(Q_PROJ_WALL_US, key=Q_PROJ_WALL_US.get)


def test_the_mixed_split_is_2x_faster_than_the_plateau_at_equal_traffic():
    # Section 8: a few mixed M x N splits run 2-5x faster than the plateau of the others.
    # The sweep's B1_M512_N4096_K4096: best 317 us, median of its 19 kernels 589.
    ts = sorted(t for t, d in times(1, 512, 4096, 4096) if d.cores_used == 32)
    assert np.median(ts) / ts[0] >= 1.5


# --- DDR ----------------------------------------------------------------------------------


def test_x_times_2_at_1_mb():
    # IN SAMPLE: Machine.ddr_burst_core_bw was fitted on this point, so this pins the fit
    # rather than judging it (the ring saving below is the burst term's check on a fact
    # it was not fitted on). 1 MB runs at 66 GB/s on the card against 100 from 2 MB on:
    # its 32 KB per core and operand move as one burst each, loads before stores
    # (Machine.ddr_burst_bytes); a fixed cost per kernel would break the 2 MB point
    # (38.7 us) and the tiny add (1 us).
    r = sj.explain(lambda x: x * 2, S((128, 4096), F16))
    assert r.time_s * 1e6 == pytest.approx(31.8, rel=0.15)


def test_a_fused_kernel_of_bursts_loads_then_stores_as_x_times_2_does():
    # No card figure for this softmax: a consistency check of the model. Granite decode's
    # scores [4, 32, 1, 4096] fp16 are 1 MB: a fused softmax of them reads and writes
    # 32 KB a core, as x*2 at 1 MB does, and pays its stages on top.
    shape = S((4, 32, 1, 4096), F16)
    scale = sj.explain(lambda s: s * 2, shape).time_s
    d = sj.explain(lambda s: jax.nn.softmax(s, -1), shape).device
    (g,) = d.groups
    stages = sum(d.ops[i].cost.stage_s for i in g.ops)
    assert scale * 1e6 == pytest.approx(31.8, rel=0.15)
    assert scale < g.time_s < scale + stages


@pytest.mark.parametrize("mb", [1, 2])
def test_the_burst_regime_ends_between_1_and_2_mb(mb):
    # Section 8: 2 MB more traffic took 6.9 us more (38.7 - 31.8), faster than the DDR's
    # peak: a change of regime (one burst per core and operand, then streamed chunks).
    # The threshold (Machine.ddr_burst_bytes) was CHOSEN between these two points: this
    # pins where the model puts the regime; no data says where between them it ends.
    m = Machine.spyre()
    r = sj.explain(lambda x: x * 2, S((mb * 128, 4096), F16))
    (op,) = r.device.ops
    streamed = 2 * mb * MIB / m.ddr_bw + m.turnaround_ns_per_byte * mb * MIB * 1e-9
    assert (op.cost.memory_s > 1.5 * streamed) == (mb == 1)


@pytest.mark.parametrize("mm", [1, 4])
@pytest.mark.parametrize("n, k", [(4096, 4096), (4096, 12800), (12800, 4096)])
def test_decode_weight_streaming_runs_at_145_to_157_gb_per_s(mm, n, k):
    # Section 8: M <= 4, N x K up to 4096 x 12800: 145-157 GB/s; 5% either side (the
    # range is the card's own spread over those shapes).
    r = sj.explain(lambda a, b: a @ b, S((mm, k), F16), S((k, n), F16))
    assert 138e9 <= n * k * 2 / r.time_s <= 165e9


PURE_N_WALL_US = {1: 178, 2: 171, 4: 174, 8: 257, 16: 447, 32: 599}


@pytest.mark.parametrize("cores", sorted(PURE_N_WALL_US))
def test_the_pure_n_split_scales_as_measured(cores):
    # Section 8: M=128, K=8192, 2 MiB of weights per core on 1-32 cores (wall). Flat to
    # 4 cores (each core's 4.2 MB at its own DDR rate, the PT close behind), then the
    # aggregate DDR saturates.
    assert_near_wall(
        predicted_us(1, 128, 128 * cores, 8192, (1, 1, cores, 1)), PURE_N_WALL_US[cores]
    )


# --- ring, launch ------------------------------------------------------------------------


def test_a_ring_handover_saves_31_us_per_mb_over_a_ddr_round_trip():
    # A 1 MB round trip is a burst written and a burst read (32 KB a core): ~66 GB/s, as
    # section 8's 1 MB x*2. Beyond the burst size the model's round trip streams at
    # 150 GB/s one way (14 us per MB): only the 1 MB point of the fact is modelled.
    from spyrejax.device import transfer_cost
    from spyrejax.device._cost import relayout_cost

    m = Machine.spyre()
    mb = 1 << 20
    trip = (
        transfer_cost(m, 0, mb, kernel=False).time_s + transfer_cost(m, mb, 0, kernel=False).time_s
    )
    saved = trip - relayout_cost(m, mb).time_s
    assert saved * 1e6 == pytest.approx(31.1 + 2.9, rel=0.3)


# --- out of sample: shapes the sweep does not have ------------------------------------------


def _spec(shape):
    return TensorSpec.of(shape, SpyreTensorLayout(list(shape), F16))


def divisions(b, m, n, k, machine):
    """Every legal division of a (batched) matmul on ``machine``: splits dividing the sticks."""
    batch = () if b == 1 else (b,)
    space = matmul_space(_spec((*batch, m, k)), _spec((*batch, k, n)), _spec((*batch, m, n)))
    for combo in itertools.product(*(_divisors(d.units, machine.cores) for d in space.dims)):
        if math.prod(combo) <= machine.cores:
            splits = dict(zip(space.names, combo, strict=True))
            yield WorkDivision(space, splits, machine.cores, order(space, splits), how="hint")


def times(b, m, n, k, lx=0.2):
    machine = Machine.spyre(lx_fraction=lx)
    return [(op_cost(d, machine).time_s, d) for d in divisions(b, m, n, k, machine)]


def floors(b, m, n, k):
    """Section 8's floors of a division on ``cores`` cores: the PT peak and the DDR's bytes."""
    ddr = 2 * b * (m * k + k * n + m * n) / DDR_FASTEST  # every byte once, fastest stream
    return lambda cores: max(b * m * n * k / (cores * PT_PEAK / 32), ddr)


# Llama-3.1-8B (d 4096, 32 heads of 128, 8 KV heads, MLP 14336, vocab 128256) and
# non-power-of-two dims, prefill and decode.
OOS = [
    (1, 512, 4096, 4096), (1, 512, 1024, 4096), (1, 512, 14336, 4096), (1, 512, 4096, 14336),
    (1, 4, 14336, 4096), (1, 1, 1024, 4096), (1, 500, 11008, 5120), (1, 500, 5120, 11008),
    (1, 576, 576, 576), (1, 300, 1000, 700), (1, 96, 576, 5120), (32, 512, 512, 128),
    (32, 512, 128, 512), (8, 4, 4096, 128), (32, 4, 128, 4096),
]  # fmt: skip


@pytest.mark.parametrize("shape", OOS, ids=lambda s: "B{}_M{}_N{}_K{}".format(*s))
def test_out_of_sample_divisions_respect_the_floors_and_rank_without_absurdity(shape):
    floor = floors(*shape)
    ts = times(*shape)
    for t, d in ts:  # no division beats the PT peak of its cores or the DDR's bytes
        assert t >= floor(d.cores_used), d.describe()
    big = max(ts, key=lambda x: x[1].cores_used)[1].cores_used
    few = min(t for t, d in ts if d.cores_used <= 2)
    many = min(t for t, d in ts if d.cores_used >= big // 2)
    assert few >= many  # 2 cores never beat the most cores on these shapes
    # The chooser's pick over all legal divisions is one of them and is the least.
    a = S((shape[0], shape[1], shape[3]) if shape[0] > 1 else shape[1:4:2], F16)
    bshape = (shape[0], shape[3], shape[2]) if shape[0] > 1 else (shape[3], shape[2])
    (op,) = [o for o in sj.explain(lambda x, y: x @ y, a, S(bshape, F16)).ops if o.cost.macs]
    assert op.division.cores_used <= 32 and op.time_s >= floor(op.division.cores_used)


dims = st.integers(1, 48).map(lambda s: 64 * s) | st.integers(1, 3000)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4).map(lambda e: 1 if e == 1 else 2**e), dims, dims, dims, st.data())
def test_any_division_of_any_shape_is_no_faster_than_its_floors(b, m, n, k, data):
    machine = Machine.spyre(lx_fraction=data.draw(st.sampled_from([0.2, 0.8])))
    ds = list(divisions(b, m, n, k, machine))
    d = data.draw(st.sampled_from(ds))
    t = op_cost(d, machine).time_s
    assert t >= floors(b, m, n, k)(d.cores_used)
    assert t >= machine.launch_s + machine.stage_s  # a kernel is never free
    if machine.lx_fraction == 0.2:  # more budget is never slower
        wide = machine.with_lx_fraction(0.8)
        assert op_cost(d, wide).time_s <= t * (1 + 1e-9)


# --- kernels at Granite sizes: each prediction between its floors and a ceiling -----------


def _rms(x, w):
    v = jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True)
    return x * jax.lax.rsqrt(v + 1e-6).astype(x.dtype) * w


def _attn(causal):
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)


KERNELS = {
    "add [512, 4096]": (lambda a, b: a + b, [(512, 4096), (512, 4096)]),
    "softmax [32, 512, 4096]": (lambda s: jax.nn.softmax(s, -1), [(32, 512, 4096)]),
    "rms norm [512, 4096]": (_rms, [(512, 4096), (4096,)]),
    # Decode sizes: a token per sequence of a batch of 4 (bursts of 1-32 KB a core).
    "add [4, 1, 4096]": (lambda a, b: a + b, [(4, 1, 4096), (4, 1, 4096)]),
    "softmax [4, 32, 1, 4096]": (lambda s: jax.nn.softmax(s, -1), [(4, 32, 1, 4096)]),
    "rms norm [4, 1, 4096]": (_rms, [(4, 1, 4096), (4096,)]),
    "prefill attention q512 kv512 causal": (
        _attn(True), [(1, 512, 32, 128), (1, 512, 8, 128), (1, 512, 8, 128)]
    ),
    "prefill attention q512 kv4096": (
        _attn(False), [(1, 512, 32, 128), (1, 4096, 32, 128), (1, 4096, 32, 128)]
    ),
    "decode attention b4 kv4096": (
        _attn(False), [(4, 1, 32, 128), (4, 4096, 8, 128), (4, 4096, 8, 128)]
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_granite_kernels_sit_between_their_floors_and_a_few_times_them(name):
    f, shapes = KERNELS[name]
    args = [S(s, F16) for s in shapes]
    with jax.numpy_dtype_promotion("standard"):  # dot_product_attention's fp32 logits
        r = sj.explain(f, *args)
    inputs = sum(math.prod(s) * 2 for s in shapes)
    # Floors: every input read and the output written once at the fastest measured DDR
    # stream (the inputs' logical bytes: device bytes only add), and the MACs at the PT peak.
    macs = sum(op.cost.macs for op in r.ops)
    out = math.prod(shapes[0]) * 2  # each kernel's result has its first argument's shape
    floor = max((inputs + out) / DDR_FASTEST, macs / PT_PEAK)
    assert r.time_s >= floor
    # Ceiling: a fused kernel streams its bytes about once: within 2x of the floor at
    # the card's read+write rate (~100 GB/s, section 8's x*2), plus a stage per op.
    stages = sum(op.cost.stage_s + op.cost.launch_s for op in r.ops)
    assert r.time_s <= 2 * floor * DDR_FASTEST / 100e9 + stages, (r.time_s, floor)


# --- 3-D by 2-D projections ---------------------------------------------------------------

# Spec section 1: a projection [B, T, K] @ [K, N] (one weight for every batch slice) runs at
# 705 MAC/ns/core for B <= 4, 470 beyond, against a plain matmul's 1,140: 1.6-2.4x slower
# in its PT, the same bytes. Not in the sweep (out of sample).
PROJECTIONS = [
    ((2, 256, 4096), (4096, 4096)),
    ((8, 64, 4096), (4096, 4096)),
    ((4, 128, 4096), (4096, 12800)),
    ((2, 256, 4096), (4096, 49152)),
]


@pytest.mark.parametrize("lhs, rhs", PROJECTIONS, ids=str)
def test_a_projection_costs_about_its_2d_matmul_not_a_batched_one(lhs, rhs):
    def time_of(a):
        report = sj.explain(lambda x, w: x @ w, S(a, F16), S(rhs, F16))
        return report.time_s

    ratio = time_of(lhs) / time_of((math.prod(lhs[:-1]), lhs[-1]))
    # 1140 / 470 = 2.43 is the slowest the PT rate alone makes it; never faster than the
    # 2-D form, whose division it can always take.
    assert 1 - 1e-9 <= ratio <= 1140 / 470, ratio


def test_a_projection_reads_what_its_2d_form_reads_in_the_same_division():
    # A core holds B x T rows of a projection: its A re-reads, spill and barrier are a 2-D
    # matmul's (review of 25fd4f6: one batch slice's T rows were blocked, so A seemed
    # re-read B times less and [2, 256, 4096] @ [4096, 49152] ran 3% under its 2-D form).
    machine = Machine.spyre()

    def terms(lhs, rhs):
        report = sj.explain(lambda x, w: x @ w, S(lhs, F16), S(rhs, F16))
        (op,) = [o for o in report.ops if "matmul" in o.opfunc]
        splits = {n: s for n, s in op.division.splits.items() if n != "x"}
        return splits, matmul_time(op.division, machine)

    for lhs, rhs in [((16, 128, 4096), (4096, 11008)), ((2, 256, 4096), (4096, 49152))]:
        proj_splits, proj = terms(lhs, rhs)
        plain_splits, plain = terms((math.prod(lhs[:-1]), lhs[-1]), rhs)
        assert proj_splits == plain_splits
        assert (proj.passes, proj.read_bytes, proj.write_bytes) == (
            plain.passes,
            plain.read_bytes,
            plain.write_bytes,
        )
        assert proj.memory_s == pytest.approx(plain.memory_s)
        assert proj.pt_s >= plain.pt_s
