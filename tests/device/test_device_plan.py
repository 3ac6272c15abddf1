"""LX placement, per-core DMA, cost, and the device model of spyrejax.jit programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.device import (
    Buffer,
    Machine,
    TensorSpec,
    core_dci,
    divide,
    elementwise_space,
    matmul_time,
    place,
    stream,
)
from spyrejax.layout import SpyreTensorLayout

F16 = np.float16
S = jax.ShapeDtypeStruct


# The placers' tests were written for the 1.6 MB budget (lx_fraction 0.8): their sizes
# fill it and fit its gaps.
LX08 = Machine.spyre(lx_fraction=0.8)


def spec(shape, name=""):
    return TensorSpec.of(shape, SpyreTensorLayout(shape, F16), name=name)


# --- LX placement ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["greedy", "first_fit", "best_fit"])
def test_three_buffers_of_3_3_4_bytes_go_to_0_128_256(strategy):
    bufs = [Buffer(n, s, 0, 1) for n, s in (("a", 3), ("b", 3), ("c", 4))]
    plan = place(bufs, LX08, strategy)
    assert sorted(plan.address.values()) == [0, 128, 256]
    if strategy == "greedy":
        assert plan.address == {"a": 0, "b": 128, "c": 256}


def test_an_in_place_op_reuses_its_dying_input():
    bufs = [Buffer("x", 1000, 0, 1), Buffer("y", 1000, 1, 2, parent="x")]
    for strategy in ("greedy", "first_fit", "best_fit"):
        plan = place(bufs, LX08, strategy)
        assert plan.address["x"] == plan.address["y"] == 0


def test_a_buffer_over_the_budget_stays_in_ddr():
    plan = place([Buffer("big", 2 * 2**20, 0, 1)], LX08)
    assert plan.address == {"big": None} and not plan.in_lx("big")


def test_unknown_placer_is_a_named_error():
    with pytest.raises(sj.DeviceError, match="placer"):
        place([], LX08, "random")


buffers = st.lists(
    st.tuples(st.integers(1, 700_000), st.integers(0, 6), st.integers(0, 3)),
    min_size=1,
    max_size=8,
).map(lambda xs: [Buffer(f"b{i}", s, t, t + d) for i, (s, t, d) in enumerate(xs)])


@given(buffers, st.sampled_from(["greedy", "first_fit", "best_fit"]))
def test_placements_never_overlap_while_both_live(bufs, strategy):
    m = LX08
    plan = place(bufs, m, strategy)
    placed = [b for b in bufs if plan.in_lx(b.name)]
    for b in placed:
        a = plan.address[b.name]
        assert a % 128 == 0 and a + plan.sizes[b.name] <= m.lx_usable
    for i, x in enumerate(placed):
        for y in placed[i + 1 :]:
            if x.first <= y.last and y.first <= x.last:
                ax, ay = plan.address[x.name], plan.address[y.name]
                assert ax + plan.sizes[x.name] <= ay or ay + plan.sizes[y.name] <= ax


def _greedy_by_the_spec(bufs, budget):
    """The greedy placer as the spec words it, one time point and one scan at a time."""
    size = {b.name: -(-b.size // 128) * 128 for b in bufs}
    by = {b.name: b for b in bufs}
    address, live = {}, {}
    for t in sorted({b.first for b in bufs}):
        live = {n: span for n, span in live.items() if by[n].last >= t}
        for b in [b for b in bufs if b.first == t]:
            p = by.get(b.parent)
            at = None
            dying = p is not None and p.last == t and address.get(p.name) is not None
            if dying and size[b.name] <= size[p.name]:
                at = address[p.name]
                live.pop(p.name, None)
            if at is None:
                taken = sorted(live.values())
                gaps, end = [], 0
                for s, e in taken:
                    if s > end:
                        gaps.append((end, s))
                    end = max(end, e)
                gaps.append((end, budget))
                if not taken:
                    at = 0 if size[b.name] <= budget else None
                elif size[b.name] <= taken[0][0]:
                    at = 0
                elif max(e for _, e in taken) + size[b.name] <= budget:
                    at = max(e for _, e in taken)
                else:
                    at = next((s for s, e in gaps if e - s >= size[b.name]), None)
            address[b.name] = at
            if at is not None:
                live[b.name] = (at, at + size[b.name])
    return address


# Sizes in eighths of a megabyte (some a little less: the same after alignment), so
# blocks fill LX and fit its gaps exactly as well as loosely.
eighths = st.builds(lambda k, less: k * 2**17 - less, st.integers(1, 6), st.sampled_from([0, 100]))
many_buffers = st.lists(
    st.tuples(eighths, st.integers(0, 12), st.integers(0, 4), st.integers(0, 40)),
    min_size=1,
    max_size=40,
).map(
    lambda xs: [
        Buffer(f"b{i}", s, t, t + d, parent=f"b{p}" if p < i else None)
        for i, (s, t, d, p) in enumerate(xs)
    ]
)


@given(many_buffers)
def test_greedy_placement_is_the_spec_sweep(bufs):
    """The placer keeps its live blocks sorted; it places as the plain sweep does."""
    m = LX08
    assert place(bufs, m, "greedy").address == _greedy_by_the_spec(bufs, m.lx_usable)


def _fit_by_the_spec(bufs, budget, best):
    """Spec section 3's first-fit/best-fit, checking every placed buffer (the oracle)."""
    m = LX08
    size = {b.name: -(-b.size // m.lx_alignment) * m.lx_alignment for b in bufs}
    by = {b.name: b for b in bufs}
    rel = {b.name: 0 for b in bufs}
    for b in bufs:
        if b.parent in rel:
            rel[b.name] += 1
            rel[b.parent] += 1
    address = {}
    for b in sorted(bufs, key=lambda b: (-b.priority(rel[b.name]), b.first, b.name)):
        p = by.get(b.parent)
        at = None
        if p is not None and p.last == b.first and address.get(p.name) is not None:
            at = address[p.name] if size[b.name] <= size[p.name] else None
        if at is None:
            taken = []
            for o in bufs:
                handover = (b.parent == o.name and o.last == b.first) or (
                    o.parent == b.name and b.last == o.first
                )
                live = b.first <= o.last and o.first <= b.last
                if address.get(o.name) is not None and live and not handover:
                    taken.append((address[o.name], address[o.name] + size[o.name]))
            gaps, end = [], 0
            for s, e in sorted(taken):
                if s > end:
                    gaps.append((end, s))
                end = max(end, e)
            gaps.append((end, budget))
            fits = [g for g in gaps if g[1] - g[0] >= size[b.name]]
            if fits:
                at = (min(fits, key=lambda g: (g[1] - g[0], g[0])) if best else fits[0])[0]
        address[b.name] = at
    return address


# Lifetimes over a long program: the placers file buffers by blocks of op indices.
long_buffers = st.lists(
    st.tuples(eighths, st.integers(0, 150), st.integers(0, 70), st.integers(0, 60)),
    min_size=1,
    max_size=60,
).map(
    lambda xs: [
        Buffer(f"b{i}", s, t, t + d, parent=f"b{p}" if p < i else None)
        for i, (s, t, d, p) in enumerate(xs)
    ]
)


@given(long_buffers, st.sampled_from(["first_fit", "best_fit"]))
def test_fit_placement_is_the_spec_placement(bufs, strategy):
    m = LX08
    want = _fit_by_the_spec(bufs, m.lx_usable, strategy == "best_fit")
    assert place(bufs, m, strategy).address == want


@given(many_buffers, st.sampled_from(["greedy", "first_fit", "best_fit"]))
def test_live_bytes_are_the_bytes_the_buffers_live_at_each_point_cover(bufs, strategy):
    plan = place(bufs, LX08, strategy)
    steps = max(b.last for b in bufs) + 2

    def covered(names):  # an in-place handover shares its bytes: count them once
        spans = sorted((plan.address[n], plan.address[n] + plan.sizes[n]) for n in names)
        total, end = 0, 0
        for s, e in spans:
            total += max(0, e - max(s, end))
            end = max(end, e)
        return total

    want = [covered(plan.live_at(t)) for t in range(steps)]
    assert plan.live_bytes(steps) == want
    assert max(want) <= plan.peak <= plan.budget


def test_a_slice_too_large_for_lx_is_streamed_by_a_counted_loop():
    budget = Machine.spyre(lx_fraction=0.8).lx_usable
    s = stream((4, 16384, 64), 2, budget)
    assert s is not None and s.dim == 1 and s.trips == 4 * 2  # a row of 2 MiB is too big
    s = stream((100, 160, 64), 2, budget)  # 20 KiB per row
    assert s.dim == 0 and s.tile == 81 and s.trips == 2
    assert s.tile_bytes <= budget
    assert stream((1, 16, 64), 2, 1 << 20) is None


# --- per-core DMA ------------------------------------------------------------------------------


def _run(dci, src, dst):
    """Execute descriptors on flat NumPy buffers (a reference engine for the tests)."""
    for d in dci:
        for idx in np.ndindex(*d.size):
            s = d.offset_src + sum(i * st for i, st in zip(idx, d.stride_src, strict=True))
            t = d.offset_dst + sum(i * st for i, st in zip(idx, d.stride_dst, strict=True))
            dst[t] = src[s]


@pytest.mark.parametrize("shape", [(512, 512), (100, 150), (3, 5, 130)])
def test_per_core_descriptors_load_each_cores_box(shape):
    x = spec(shape)
    d = divide(elementwise_space("add", x, [x, x]), Machine.spyre())
    image = np.arange(np.prod(x.layout.device_size), dtype=np.int64)
    full = image.reshape(x.layout.device_size)
    for core in (0, 1, d.cores_used - 1):
        box = d.box_shape(0, core)
        lx = np.full(np.prod(box), -1, np.int64)
        dci = core_dci(d, 0, core)
        if np.prod(box) <= 4096:
            _run(dci, image, lx)
            want = full[tuple(slice(a, b) for a, b in d.box(0, core))].ravel()
            np.testing.assert_array_equal(lx, want)
        assert dci[0].offset_src * 2 == d.offset(0, core)
        store = core_dci(d, 2, core, load=False)
        assert store.to_dict()["isHostToSen_"] == 0


def test_the_512_add_moves_16_rows_per_core_2048_bytes_apart():
    x = spec((512, 512))
    d = divide(elementwise_space("add", x, [x, x]), Machine.spyre())
    nests = [core_dci(d, 0, c)[0].loop_nest() for c in range(3)]
    assert [n.ranges for n in nests] == [(8, 16, 64)] * 3
    assert [n.host_offset * 2 for n in nests] == [0, 2048, 4096]


# --- cost ------------------------------------------------------------------------------------


def test_bytes_are_stick_granular():
    r = sj.explain(lambda a: -a, S((3, 100), F16))
    assert r.ops[0].read_bytes == 3 * 2 * 128  # 384 elements, not 300 or 320


def test_a_broadcast_operand_is_read_once():
    r = sj.explain(lambda a, b: a + b, S((256, 512), F16), S((512,), F16))
    (op,) = [o for o in r.ops if o.opfunc == "add"]
    assert op.read_bytes == 256 * 512 * 2 + 512 * 2
    assert op.cost.pattern == "broadcast"


def test_x_plus_x_reads_x_once():
    r = sj.explain(lambda a: a + a, S((256, 512), F16))
    assert r.ops[0].read_bytes == 256 * 512 * 2


def test_elementwise_ops_are_memory_bound_and_transcendentals_cost_what_neg_costs():
    neg = sj.explain(lambda a: -a, S((1024, 1024), F16))
    exp = sj.explain(jnp.exp, S((1024, 1024), F16))
    assert neg.ops[0].bound == exp.ops[0].bound == "memory"
    assert neg.time_s == pytest.approx(exp.time_s)
    ktir = sj.explain(jnp.exp, S((1024, 1024), F16), machine=Machine.ktir_cpu())
    ktir_neg = sj.explain(lambda a: -a, S((1024, 1024), F16), machine=Machine.ktir_cpu())
    assert ktir.ops[0].cost.compute_s == pytest.approx(4 * ktir_neg.ops[0].cost.compute_s)


def test_a_large_matmul_streams_its_a_operand_again_per_column_block_of_lx():
    r = sj.explain(jnp.matmul, S((8192, 32768), F16), S((32768, 4096), F16))
    op = r.ops[0]
    assert op.macs == 8192 * 32768 * 4096
    assert dict(op.division.splits) == {"mb": 16, "out": 1, "in": 2}
    # The PT term: MACs per core at the 1.1 GHz peak (1,024 MAC/cycle) x efficiency 0.85.
    assert op.cost.compute_s == pytest.approx(op.macs / 32 / (1024 * 1.1e9 * 0.85))
    # Each core's output block (512 x 4096 fp32 accumulators, 8 MiB, beside its fp16
    # staging for the store, 4 MiB) is far beyond the 0.2 LX budget: blocks of 256 rows x
    # 3 sticks, so A passes 22 times, B twice, and the DDR is the bound.
    terms = matmul_time(op.division, r.device.machine)
    assert terms.passes == (22, 2) and op.bound == "memory"
    # The K pairs reduce-scatter their fp32 partial sums (a float16 output's accumulators
    # are fp32): each core hands its partner half of its 512 x 4096 block's.
    assert op.cost.ring_bytes == 32 * (512 * 4096 * 4 // 2) == 8192 * 4096 * 4
    assert r.time_s == pytest.approx(sum(o.time_s for o in r.ops))


def test_a_k_splits_partial_sums_go_over_the_ring_or_through_ddr_not_both():
    # Section 8's decode QK^T split 8_2_1_2: at lx_fraction 0.8 a core's set stays in LX
    # and hands its fp32 partials to its K partner over the ring; at 0.2 it does not fit
    # and the partials go out to DDR and back (counted in the DDR bytes, not the ring).
    from spyrejax.device import op_cost
    from spyrejax.device._calibrate import Measurement, sweep_division

    for lx, over_ring in ((0.8, True), (0.2, False)):
        machine = Machine.spyre(lx_fraction=lx)
        division = sweep_division(Measurement(64, 32, 576, 128, (8, 2, 1, 2), 0.0), machine)
        cost, terms = op_cost(division, machine), matmul_time(division, machine)
        sent = division.core_bytes(2) * 4 // 2 // 2  # half its fp16 block's partials, fp32
        assert cost.ring_bytes == (sent * 32 if over_ring else 0)
        output = 64 * 32 * 576 * 2
        assert terms.write_bytes == (output if over_ring else output + sent * 32)


def test_an_lx_resident_intermediate_costs_no_ddr_traffic():
    def f(a):
        return jnp.exp(-a)

    r = sj.explain(f, S((64, 512), F16))
    neg, exp = r.ops
    assert neg.lx_output and exp.lx_inputs == (neg.desc.output[0],)
    assert neg.write_bytes == 0 and exp.read_bytes == 0
    assert exp.write_bytes == 64 * 512 * 2
    assert r.device.lx_peak == 64 * 512 * 2 // 32


def test_a_matmul_blocks_in_the_lx_a_value_kept_across_it_leaves():
    # r lives in LX from its producer to its reader after the matmul (128 KiB a core of
    # the 0.2 budget's 419,430 B): the matmul blocks in the rest, so it re-reads A more
    # than the same matmul computed before r is made, with the whole budget. (Its time
    # is its share of the fused epilogue's: compute-bound here, it barely moves.)
    def before(a, b, x, w):
        h = x @ w
        return jnp.tanh(a + b) + h

    def across(a, b, x, w):
        r = jnp.tanh(a + b)
        return r + x @ w

    args = (S((1024, 2048), F16), S((1024, 2048), F16), S((1024, 4096), F16), S((4096, 2048), F16))
    ops = {}
    for f in (before, across):
        r = sj.explain(f, *args)
        ops[f] = next(o for o in r.ops if o.opfunc == "matmul")
    held = ops[across].lx_peak - ops[before].lx_peak
    assert held == 1024 * 2048 * 2 // 32  # r, a core's rows of it
    assert ops[across].division.splits == ops[before].division.splits
    assert ops[across].cost.read_bytes > ops[before].cost.read_bytes  # A passes again


# --- explain and hints ----------------------------------------------------------------------


def test_explain_takes_shape_dtype_structs_and_reports_per_op():
    r = sj.explain(lambda a, b: a + b, S((512, 512), F16), S((512, 512), F16))
    (op,) = r.ops
    assert dict(op.division.splits) == {"mb": 1, "out": 32}
    assert op.division.offsets(0)[:3] == (0, 2048, 4096)
    assert op.read_bytes == 2 * 512 * 512 * 2 and op.write_bytes == 512 * 512 * 2
    assert op.time_s > 0 and op.bound == "memory" and "<lambda>" in op.source
    assert "predicted time" in str(r)


def test_with_division_is_the_identity_outside_spyrejax_and_a_hint_inside():
    x = jnp.ones((512, 512), jnp.float16)
    f = lambda a: sj.with_division(jnp.exp(a), mb=8)  # noqa: E731
    np.testing.assert_array_equal(jax.jit(f)(x), jnp.exp(x))
    np.testing.assert_array_equal(np.asarray(sj.jit(f)(x)), np.asarray(jnp.exp(x)))
    r = sj.explain(f, S((512, 512), F16))
    assert dict(r.ops[0].division.splits) == {"mb": 8, "out": 4}
    assert r.ops[0].division.how == "hint"


def test_with_division_errors_are_named():
    with pytest.raises(sj.DeviceError, match="unknown dim"):
        sj.with_division(jnp.ones(3), rows=2)
    with pytest.raises(sj.DeviceError, match="positive int"):
        sj.with_division(jnp.ones(3), mb=0)
    with pytest.raises(sj.DeviceError, match="does not divide"):
        sj.explain(lambda a: sj.with_division(jnp.exp(a), mb=3), S((512, 512), F16))


@pytest.mark.parametrize("emulate", [None, "cores"])
def test_an_impossible_hint_raises_when_the_program_is_called_in_every_mode(emulate):
    f = sj.jit(lambda a: sj.with_division(jnp.exp(a), mb=3), emulate=emulate)
    with pytest.raises(sj.DeviceError, match="mb=3 does not divide exp"):
        f(jnp.ones((512, 512), jnp.float16))
    with pytest.raises(sj.DeviceError, match="use 64 cores, more than 32"):
        g = sj.jit(lambda a: sj.with_division(jnp.exp(a), mb=8, out=8), emulate=emulate)
        g(jnp.ones((512, 512), F16))


# --- pictures -------------------------------------------------------------------------------


def test_core_ownership_shows_each_cores_rows():
    from spyrejax import viz

    r = sj.explain(lambda a, b: a + b, S((512, 512), F16), S((512, 512), F16))
    pic = viz.core_ownership(r.ops[0].division)
    assert pic.owner.shape == (8, 512)
    assert (pic.owner[:, :16] == 0).all() and (pic.owner[:, 16:32] == 1).all()
    assert (pic.copies == 1).all() and "<table>" in pic._repr_html_()


def test_roofline_puts_the_big_matmul_near_the_compute_roof():
    from spyrejax import viz

    r = sj.explain(lambda a, b: jnp.exp(a @ b), S((4096, 4096), F16), S((4096, 4096), F16))
    roof = viz.roofline(r)
    mm = roof.names.index("0_matmul")
    assert roof.intensity[mm] > roof.ridge
    assert roof.achieved[mm] <= roof.peak
    assert roof.intensity[roof.names.index("1_exp")] == 0


def test_explain_html_shows_the_device_table():
    f = lambda a, b: jnp.tanh(a @ b).sum(0)  # noqa: E731
    report = sj.explain(f, S((256, 512), F16), S((512, 128), F16))
    page = report._repr_html_()
    assert "device model" in page and "predicted us" in page
    for op in report.ops:
        if op.desc.kind != "view":
            assert f"<td>{op.index}_{op.opfunc}</td>" in page
    assert f"{report.time_s * 1e6:.3f} us" in page


def test_while_and_cond_bodies_are_listed_and_the_total_says_it_is_a_lower_bound():
    def f(x, p):
        y = jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (jnp.tanh(c[0]), c[1] + 1), (x, 0))
        return jax.lax.cond(p, lambda c: c * 2, lambda c: c + 1, y[0])

    r = sj.explain(f, S((64, 128), F16), S((), bool))
    kinds = {o.opfunc: o.region.kind for o in r.ops if o.region is not None}
    assert kinds["tanh"] == "while" and kinds["mul"] == kinds["add"] == "cond"
    assert r.device.lower_bound and "a lower bound" in str(r)
    assert "not counted: the bodies" not in str(r)
    plain = sj.explain(lambda x: jnp.tanh(x), S((64, 128), F16))
    assert not plain.device.lower_bound and "lower bound" not in str(plain)


def _layer(c, w):
    return jnp.tanh(c @ w)


def test_a_scan_bodys_ops_are_listed_once_and_run_its_trip_count_times():
    x, ws = S((64, 128), F16), S((3, 128, 128), F16)
    r = sj.explain(lambda x, ws: jax.lax.scan(lambda c, w: (_layer(c, w), None), x, ws)[0], x, ws)
    one = sj.explain(lambda x, ws: _layer(x, ws[0]), x, ws)
    assert not r.device.lower_bound
    body = {o.opfunc: o for o in r.ops if o.repeat == 3}
    single = {o.opfunc: o for o in one.ops}
    for name in ("matmul", "tanh"):
        assert body[name].time_s == pytest.approx(3 * single[name].time_s, rel=1e-9)
        assert body[name].macs == 3 * single[name].macs
        assert body[name].read_bytes == 3 * single[name].read_bytes
        assert body[name].division.splits == single[name].division.splits
    assert r.time_s == pytest.approx(sum(o.time_s for o in r.ops)) and r.time_s > 0
    # Nested scans multiply; the loop's result keeps its outer name.
    inner = lambda c, w: jax.lax.scan(lambda d, _: (_layer(d, w), None), c, None, length=2)[0]  # noqa: E731
    nested = sj.explain(
        lambda x, ws: jax.lax.scan(lambda c, w: (inner(c, w), None), x, ws)[0], x, ws
    )
    assert {o.repeat for o in nested.ops if o.opfunc == "matmul"} == {6}
    assert nested.ops[-1].desc.output[0] == r.ops[-1].desc.output[0]


def test_an_ops_read_bytes_do_not_depend_on_another_op_of_its_geometry():
    # x[..., 0::2] * x[..., 1::2] reads one buffer's sticks once; a[..., 0::2] * b[..., 1::2]
    # reads two buffers'. Of one geometry, each op's cost is its own in one program (the
    # device plan's cost cache keyed them alike: the second took the first's figure).
    def one(x):
        return x[..., 0::2] * x[..., 1::2]

    def two(a, b):
        return a[..., 0::2] * b[..., 1::2]

    x = S((64, 512), jnp.float16)

    def reads(f, *args):
        return [op.read_bytes for op in sj.explain(f, *args).device.counted if op.division]

    alone = reads(one, x) + reads(two, x, x)
    assert alone[1] == 2 * alone[0]
    assert reads(lambda x, a, b: (one(x), two(a, b)), x, x, x) == alone
    assert reads(lambda x, a, b: (two(a, b), one(x)), x, x, x) == alone[::-1]


def test_a_load_relayout_is_a_part_of_its_matmuls_kernel_with_no_launch_or_stage():
    # w.reshape(k, H, D) of a [k, H * D] weight: its sticks fold the heads, so the
    # per-head product relays it in LX as the matmul loads it. It is no kernel of its
    # own: its LX ports' time only (it was charged a launch and a stage, 1.0 us of 4.5).
    def f(x, w):
        return jnp.einsum("tk,khd->thd", x, w.reshape(160, 2, 80))

    report = sj.explain(f, S((256, 160), jnp.float16), S((160, 160), jnp.float16))
    (relaid,) = [op for op in report.device.counted if op.opfunc == "loadrelayout"]
    (product,) = [op for op in report.device.counted if op.desc.kind == "compute"]
    machine = Machine.spyre()
    assert relaid.cost.launch_s == 0 and relaid.cost.stage_s == 0
    assert 0 < relaid.time_s < machine.stage_s / 10
    assert product.cost.launch_s == machine.launch_s  # the matmul launches the kernel
