"""The device model of loops and branches: scan, while and cond bodies listed and counted.

A ``scan`` body counts every run, a ``while`` body once (a lower bound: the trip count
is unknown at trace time), a ``cond`` its costliest branch; values crossing a body's
boundary live in DDR; ``with_division`` hints inside bodies divide their ops alike in
``explain``, ``export`` and ``emulate="cores"``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import division_key, rand, spy_divisions

import spyrejax as sj
from spyrejax.device import Region
from spyrejax.device._superdsc import validate_superdsc

F16 = np.float16
S = jax.ShapeDtypeStruct
X = S((64, 128), F16)


def _while(x):
    return jax.lax.while_loop(lambda c: c[1] < 5, lambda c: (jnp.tanh(c[0]) * 2, c[1] + 1), (x, 0))[
        0
    ]


def _by_name(ops):
    return {o.opfunc: o for o in ops}


def test_a_while_body_is_listed_and_counted_once_as_a_lower_bound():
    r = sj.explain(_while, X)
    one = _by_name(sj.explain(lambda x: jnp.tanh(x) * 2, X).ops)
    body = [o for o in r.ops if o.region is not None]
    assert {o.region.kind for o in body} == {"while"}
    assert {"lt", "tanh", "mul", "add"} <= {o.opfunc for o in body}  # predicate and body
    tanh = _by_name(body)["tanh"]
    assert tanh.runs == tanh.repeat == 1
    assert tanh.time_s == pytest.approx(one["tanh"].time_s, rel=1e-9)
    assert r.device.lower_bound and r.device.counted == r.ops
    assert r.time_s == pytest.approx(sum(o.time_s for o in r.ops)) and r.time_s > 0
    assert "a lower bound: each while loop's body counts once" in str(r)
    assert "while (>=1)" in str(r.device) and "while (>=1)" in str(r)


def test_a_cond_lists_every_branch_and_counts_the_costliest():
    def f(x, p):
        return jax.lax.cond(p, lambda c: jnp.exp(c) * jnp.tanh(c) + c, lambda c: c + 1, x)

    r = sj.explain(f, X, S((), bool))
    branch = {}
    for o in r.ops:
        if o.region is not None:
            branch.setdefault(o.region.branch, []).append(o)
    assert sorted(branch) == [0, 1] and len(branch[0]) == 1 and len(branch[1]) == 4
    cost = {k: sum(o.time_s for o in ops) for k, ops in branch.items()}
    assert cost[1] > cost[0]
    assert all(o.runs == 1 for o in branch[1]) and all(o.runs == 0 for o in branch[0])
    outside = sum(o.time_s for o in r.ops if o.region is None)
    assert r.time_s == pytest.approx(outside + cost[1], rel=1e-9)
    assert not r.device.lower_bound
    assert "cond branch 0 of 2" in str(r.device) and "not counted: a cheaper branch" in str(r)


def test_the_totals_sum_the_counted_ops():
    def f(x, ws, p):
        x = jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0]
        x = _while(x)
        return jax.lax.cond(p, lambda c: c @ ws[0], lambda c: c * 3, x)

    r = sj.explain(f, X, S((3, 128, 128), F16), S((), bool))
    d = r.device
    counted = [o for o in d.ops if o.runs]
    assert d.counted == tuple(counted) and len(counted) < len(d.ops)
    for total in ("time_s", "macs", "read_bytes", "write_bytes"):
        assert getattr(d, total) == pytest.approx(sum(getattr(o, total) for o in counted))
    # The costlier branch is the matmul's: its MACs count, the scan's three times.
    matmuls = [o for o in d.ops if o.opfunc == "matmul"]
    assert [o.runs for o in matmuls] == [3, 1] and d.macs == sum(o.macs for o in matmuls)
    assert d.macs == 4 * 64 * 128 * 128


def test_a_scan_nested_in_a_while_counts_its_trips_once_per_while_run():
    def f(x):
        def body(c):
            y = jax.lax.scan(lambda d, _: (jnp.tanh(d), None), c[0], None, length=4)[0]
            return y, c[1] + 1

        return jax.lax.while_loop(lambda c: c[1] < 3, body, (x, 0))[0]

    r = sj.explain(f, X)
    (tanh,) = [o for o in r.ops if o.opfunc == "tanh"]
    assert [g.kind for g in tanh.region.chain()] == ["while", "scan"]
    assert tanh.region.trips == 4 and tanh.region.parent.trips is None
    assert tanh.repeat == tanh.runs == 4
    assert tanh.region.describe() == "while (>=1) x4"
    scan_line, while_line = (int(g.source.split(":")[1]) for g in tanh.region.chain()[::-1])
    assert scan_line == while_line - 3  # each region names its own loop's line
    assert r.device.lower_bound


def test_regions_name_their_loop_and_the_branches_of_one_cond_share_it():
    def f(x, p):
        y = jax.lax.scan(lambda c, _: (c * 2, None), x, None, length=6)[0]
        return jax.lax.switch(p, [lambda c: c + 1, lambda c: c - 1, jnp.tanh], y)

    r = sj.explain(f, X, S((), np.int32))
    regions = [o.region for o in r.ops if o.region is not None]
    assert all(isinstance(g, Region) for g in regions)
    scan = next(g for g in regions if g.kind == "scan")
    assert scan.trips == 6 and "test_device_loops.py" in scan.source
    conds = [g for g in regions if g.kind == "cond"]
    assert sorted(g.branch for g in conds) == [0, 1, 2]
    assert {g.index for g in conds} != {scan.index} and len({g.index for g in conds}) == 1
    assert {g.branches for g in conds} == {3}
    assert "cond branch 2 of 3" in {g.describe() for g in conds}


def test_values_crossing_a_body_boundary_live_in_ddr_and_body_intermediates_in_lx():
    def f(x):
        return jax.lax.scan(lambda c, _: (jnp.exp(c) * 2, None), x, None, length=3)[0]

    r = sj.explain(f, S((512, 512), F16))
    d = r.device
    (exp,) = [o for o in d.ops if o.opfunc == "exp"]
    (mul,) = [o for o in d.ops if o.opfunc == "mul"]
    assert exp.lx_output and d.residency(exp.desc.output[0]).memory == "LX"
    carry_in = exp.desc.inputs[0][0]
    assert d.residency(carry_in).memory == "DDR"  # the loop's operand (and carry)
    assert d.residency(mul.desc.output[0]).memory == "DDR"  # the loop's result
    body = r.jaxpr[r.jaxpr.index("jaxpr={") :]
    assert "@LX[c0:" in body  # the body's intermediate carries its mark


def test_a_cond_result_written_by_every_branch_lives_in_ddr():
    def f(x, p):
        return jax.lax.cond(p, lambda c: jnp.exp(c) * 2, lambda c: jnp.tanh(c) * 3, x) + 1

    r = sj.explain(f, S((512, 512), F16), S((), bool))
    d = r.device
    muls = [o for o in d.ops if o.opfunc == "mul"]
    assert len(muls) == 2 and muls[0].desc.output[0] == muls[1].desc.output[0]
    assert not any(o.lx_output for o in muls)
    assert d.residency(muls[0].desc.output[0]).memory == "DDR"
    assert all(o.lx_output for o in d.ops if o.opfunc in ("exp", "tanh"))


HINT = {"out": 4}
BODIES = {
    "scan": lambda h: (
        lambda a: jax.lax.scan(lambda c, _: (h(jnp.tanh(c) * 2), None), a, None, length=2)[0]
    ),
    "while": lambda h: (
        lambda a: jax.lax.while_loop(
            lambda c: c[1] < 2, lambda c: (h(jnp.tanh(c[0]) * 2), c[1] + 1), (a, 0)
        )[0]
    ),
    "cond": lambda h: (
        lambda a: jax.lax.cond(a[0, 0] > 0, lambda c: h(jnp.tanh(c) * 2), lambda c: c - 1, a)
    ),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_a_hint_in_a_body_divides_its_op_alike_in_explain_export_and_cores(kind):
    f = BODIES[kind](lambda y: sj.with_division(y, **HINT))
    a = rand((100, 150))
    ops = [o for o in sj.explain(f, a).ops if o.division is not None]
    (hinted,) = [o for o in ops if o.division.splits.get("out") == 4]
    assert hinted.opfunc == "mul" and hinted.region.kind == kind
    plain = sj.explain(BODIES[kind](lambda y: y), a)
    assert all(o.division.splits.get("out") != 4 for o in plain.ops if o.opfunc == "mul")
    e = sj.export(f, a)
    assert len(e.superdsc) == len(ops)
    for doc in e.superdsc:
        validate_superdsc(doc)
    with spy_divisions() as seen:
        got = sj.to_host(sj.jit(f, emulate="cores")(a))
    want = sj.to_host(sj.jit(f)(a))
    assert [division_key(d) for d in seen] == [division_key(o.division) for o in ops]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _twice(x):
    """Two ops of one geometry (a mul of the same types), each hinted its own way."""
    return sj.with_division(sj.with_division(x * 2, out=2) * 2, out=4)


# where: (program, its muls: two per _twice)
OWN_HINTS = {
    "scan body": (lambda a: jax.lax.scan(lambda c, _: (_twice(c), None), a, None, length=2)[0], 2),
    "cond branch": (lambda a: jax.lax.cond(a[0, 0] > 0, _twice, lambda c: c - 1, a), 2),
    "repeated layers": (lambda a: _twice(_twice(a)), 4),
}


@pytest.mark.parametrize("where", sorted(OWN_HINTS))
def test_two_hinted_ops_of_one_geometry_keep_their_own_hints(where):
    """A hint reaches the op its value names, in a body, a branch or a repeated layer,
    whatever the other ops of that geometry bound before or after it: in explain and
    per core alike."""
    f, n = OWN_HINTS[where]
    a = rand((100, 150))
    muls = [o for o in sj.explain(f, a).ops if o.opfunc == "mul"]
    assert [o.division.splits["out"] for o in muls] == [2, 4] * (n // 2)
    with spy_divisions() as seen:
        got = sj.to_host(sj.jit(f, emulate="cores")(a))
    assert [division_key(d) for d in seen if d.space.opfunc == "mul"] == [
        division_key(o.division) for o in muls
    ]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(sj.to_host(sj.jit(f)(a))))


def test_hints_on_two_results_of_one_node_are_a_named_error():
    def f(x, y):
        c, d = jax.lax.scan(
            lambda c, _: ((jnp.tanh(c[0]), c[1] * 2), None), (x, y), None, length=2
        )[0]
        return sj.with_division(c, out=4) + sj.with_division(d, mb=2)

    a, b = rand((100, 150)), rand((100, 150), seed=1)
    with pytest.raises(sj.DeviceError, match="hints on 2 results of scan"):
        sj.explain(f, a, b)
    with pytest.raises(sj.DeviceError, match="hints on 2 results"):
        sj.jit(f)(a, b)


def test_an_invalid_hint_in_a_body_is_refused_in_every_mode():
    f = BODIES["while"](lambda y: sj.with_division(y, out=7))
    a = rand((100, 150))
    with pytest.raises(sj.DeviceError, match="out=7"):
        sj.explain(f, a)
    with pytest.raises(sj.DeviceError, match="out=7"):
        sj.jit(f)(a)


def test_a_hint_on_a_loops_result_asks_for_the_hint_inside_its_body():
    def f(a):
        return sj.with_division(BODIES["scan"](lambda y: y)(a), out=4)

    for _ in range(2):  # at every call, the record kept or not
        with pytest.raises(sj.DeviceError, match=r"comes from the scan at .*hint the value inside"):
            sj.explain(f, rand((100, 150)))


def test_a_scans_slices_and_stacked_results_move_no_data_of_their_own():
    """The body reads its slice of the stacked operand in place and writes its stacked
    result itself: the ``wrap``s that relabel them are views, so each iteration reads
    one slice and the program writes each result once."""

    def f(c, xs):
        def body(c, x):
            y = jnp.tanh(c * x)
            return c + y, y * 2

        return jax.lax.scan(body, c, xs)

    n, slice_bytes = 10, 64 * 128 * 2
    r = sj.explain(f, X, S((n, 64, 128), F16))
    wraps = [o for o in r.ops if o.opfunc == "wrap"]
    assert wraps and all(o.desc.kind == "view" and o.time_s == 0 for o in wraps)
    reads_slice = [o for o in r.ops if any(w.desc.output[0] in dict(o.desc.inputs) for w in wraps)]
    # The stacked results are then returned in the default layout of their shape (the
    # scan writes them stacked, batch dim outermost): one restickify, after the loop.
    (back,) = [m for m in r.restickifies if m.reason.startswith("returned in the default")]
    assert [o.opfunc for o in reads_slice] == ["mul", "restickify"]  # c * x, every iteration
    assert reads_slice[1].repeat == 1 and back.value.startswith("float16[10, 64, 128]")
    reads_slice = reads_slice[:1]
    (mul,) = reads_slice
    assert mul.repeat == n and mul.read_bytes == n * 2 * slice_bytes  # c and one slice
    writers = [o for o in r.ops if o.write_bytes]
    assert r.device.write_bytes == sum(o.write_bytes for o in writers)
    assert all(o.opfunc != "wrap" for o in writers)


def test_a_loop_run_per_core_leaks_no_tracer_and_its_writes_follow_their_producers(
    monkeypatch,
):
    # The per-core executor keeps each result's division while the result lives (weakly):
    # a LanePlace in a loop body still finds its producer's, and no body tracer outlives
    # the body's trace. Checked on the executor first (an executor holding its results
    # fails here at once; ``jax.checking_leaks`` would take minutes to name the holder).
    import gc

    from spyrejax.lowering.program import _cores, _interpret

    def rotate(c):  # RoPE's pairs: each lane view's result placed back on its lanes
        a, b = c[..., ::2], c[..., 1::2]
        return jnp.stack([a * 0.5 - b, b * 0.5 + a], -1).reshape(c.shape)

    def f(x):
        return jax.lax.fori_loop(0, 2, lambda _, c: rotate(c), x)

    executors, found = [], []

    class Kept(_cores.CoreExecutor):
        def __init__(self, *args):
            super().__init__(*args)
            executors.append(self)

    splits = _cores.producer_splits
    monkeypatch.setattr(_interpret, "CoreExecutor", Kept)
    monkeypatch.setattr(
        _cores, "producer_splits", lambda made, space: found.append(space) or splits(made, space)
    )
    x = rand((4, 128), np.float32)
    got = sj.to_host(sj.jit(f, emulate="cores")(x))
    assert [s.opfunc for s in found] == ["lane_place", "lane_place", "lane_assemble"]
    gc.collect()
    assert executors and all(not e._made for e in executors)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(sj.to_host(sj.jit(f)(x))))
    with jax.checking_leaks():
        sj.jit(lambda x: f(x) + 1, emulate="cores")(x)
