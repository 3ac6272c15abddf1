"""spyrejax.jit(f, emulate="cores"): every divided op run core by core equals the default mode.

Each core's slice is loaded from the DDR image by its descriptors, the kernel runs on
the LX data and the result is stored back by descriptors: equal results prove that the
divisions tile every iteration space exactly once and that the per-core loop nests are
right. Ops that do not reassociate give the same bits; sums, means and matmuls (split-K
ones included) the same values within rounding.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, division_key, rand, spy_divisions, spyre_primitive_classes
from hypothesis import given, settings
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.device import Machine, WorkDivision, divide_op
from spyrejax.lowering import checking_cores
from spyrejax.lowering._spaces import type_spec as _spec
from spyrejax.lowering.program import _cores
from spyrejax.lowering.program._coremoves import lx_image, lx_stored
from spyrejax.lowering.program._cores import injecting
from spyrejax.lowering.program._device import classify

F16 = np.float16


def both(f, *args):
    """The host results of the default mode and of emulate="cores"."""
    want = sj.to_host(sj.jit(f)(*args))
    got = sj.to_host(sj.jit(f, emulate="cores")(*args))
    return got, want


def divisions(f, *args):
    return [op.division for op in sj.explain(f, *args).ops if op.division is not None]


# Programs whose every op is exact (no reassociation): one elementwise op, astype, max, min.
EXACT = {
    "add": (lambda a, b: a + b, lambda: (rand((100, 150)), rand((100, 150), seed=1))),
    "mul_broadcast_row": (lambda a, b: a * b, lambda: (rand((100, 150)), rand((150,), seed=1))),
    "div_broadcast_col": (lambda a, b: a / b, lambda: (rand((64, 96)), rand((64, 1), seed=1) + 3)),
    "exp_f16": (jnp.exp, lambda: (rand((512, 512), F16),)),
    "tanh_3d": (jnp.tanh, lambda: (rand((5, 100, 150)),)),
    "astype_f16": (lambda a: a.astype(F16), lambda: (rand((40, 70)),)),
    "compare": (lambda a, b: a < b, lambda: (rand((33, 200)), rand((33, 200), seed=1))),
    "where": (lambda a: jnp.where(a > 0, a, 0.5 * a), lambda: (rand((70, 130)),)),
    "int_ops": (lambda a: a * 3 + 1, lambda: (jnp.arange(300, dtype=jnp.int32).reshape(3, 100),)),
    "max_stick": (lambda a: a.max(-1), lambda: (rand((37, 300)),)),
    "max_rows": (lambda a: a.max(0), lambda: (rand((37, 300)),)),
    "min_all_split": (lambda a: a.min(), lambda: (rand((8192,)),)),
    "max_3d": (lambda a: a.max((0, 2)), lambda: (rand((5, 100, 150)),)),
}

# Programs with sums, means or matmuls (reassociated per core), and chains XLA may fuse.
CLOSE = {
    "sum_stick": (lambda a: a.sum(1), lambda: (rand((100, 150)),), 150),
    "sum_rows": (lambda a: a.sum(0), lambda: (rand((100, 150)),), 100),
    "sum_all_split": (lambda a: a.sum(), lambda: (rand((8192,)),), 8192),
    "mean_3d": (lambda a: a.mean((0, 2)), lambda: (rand((5, 100, 150)),), 750),
    "sum_f16": (lambda a: a.sum(-1), lambda: (rand((64, 1000), F16),), 1000),
    "matmul": (lambda a, b: a @ b, lambda: (rand((100, 150)), rand((150, 70), seed=1)), 150),
    "matvec_split_k": (
        lambda a, b: a @ b,
        lambda: (rand((1, 8192), F16), rand((8192, 64), F16, seed=1)),
        8192,
    ),
    "batched_matmul": (
        lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
        lambda: (rand((3, 40, 70)), rand((3, 70, 50), seed=1)),
        70,
    ),
    "softmax": (lambda a: jax.nn.softmax(a, axis=-1), lambda: (rand((64, 200)),), 200),
    "layer_norm": (
        lambda a: (a - a.mean(-1, keepdims=True)) * jax.lax.rsqrt(a.var(-1, keepdims=True) + 1e-5),
        lambda: (rand((64, 96)),),
        96,
    ),
    "attention": (
        lambda q, k, v: jax.nn.softmax(jnp.einsum("hqd,hkd->hqk", q, k) / 4.0, -1) @ v,
        lambda: tuple(rand((2, 16, 32), seed=s) for s in range(3)),
        32,
    ),
    "mlp": (
        lambda x, w1, w2: jax.nn.gelu(x @ w1) @ w2,
        lambda: (rand((32, 64)), rand((64, 128), seed=1) / 8, rand((128, 64), seed=2) / 8),
        128,
    ),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_ops_give_the_same_bits_per_core(name):
    f, make = EXACT[name]
    got, want = both(f, *make())
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", sorted(CLOSE))
def test_reassociating_programs_agree_within_rounding(name):
    f, make, n = CLOSE[name]
    got, want = both(f, *make())
    assert_close(got, want, reduce_len=n, ops=8)


def test_the_examples_really_split_the_work():
    """The cases above cover split rows, split sticks, a split reduction and split K."""
    (row,) = divisions(lambda a, b: a + b, rand((100, 150)), rand((100, 150)))
    assert row.splits["out"] == 25  # the spec's [100, 150] division
    (red,) = divisions(lambda a: a.min(), rand((8192,)))
    assert red.splits["out"] > 1 and red.space.dim("out").reduced
    (mv,) = divisions(lambda a, b: a @ b, rand((1, 8192), F16), rand((8192, 64), F16))
    assert mv.splits["in"] > 1  # split K: partial sums combined over the ring


@settings(max_examples=8, deadline=None)
@given(
    rows=st.integers(1, 70),
    cols=st.integers(1, 200),
    axis=st.sampled_from([None, 0, 1]),
)
def test_per_core_equals_default_for_any_shape(rows, cols, axis):
    a, b = rand((rows, cols)), rand((cols,), seed=1)

    def f(a, b):
        return jnp.maximum(a, b).max(axis)

    got, want = both(f, a, b)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300))
def test_load_then_store_by_descriptors_tiles_the_output_exactly_once(rows, cols):
    """Every data position of the output comes back from exactly the core that owns it."""
    t = jax.typeof(sj.to_device(rand((rows, cols))))
    space = classify(_add_prim(t), [_spec(t, "a"), _spec(t, "b")], _spec(t, "out"))[2]
    div = divide_op(space, Machine.spyre())
    img = jnp.arange(np.prod(t.layout.device_size), dtype=jnp.float32).reshape(t.layout.device_size)
    back = np.asarray(lx_stored(div, 2, lx_image(div, 2, img)))
    data = ~t.layout.padding_mask(t.base_shape)
    np.testing.assert_array_equal(back[data], np.asarray(img)[data])


def _add_prim(t):
    from spyrejax.primitives._elementwise import _CLASSES

    return _CLASSES["add"](t, t)


def test_an_unknown_mode_is_a_named_error():
    with pytest.raises(sj.DeviceError, match="emulate"):
        sj.jit(jnp.sin, emulate="corelets")


# -- with_division hints: per core as in the device model -----------------------------------

A, B = rand((100, 150)), rand((150, 70), seed=1)

# name: (program given how to hint its result, arguments, reduction length (0: exact),
# the hint). Each hint divides otherwise than the default.
HINTED = {
    "elementwise": (lambda h: lambda a: h(jnp.tanh(a) * 2), (A,), 0, {"out": 4}),
    "sum_split_reduction": (lambda h: lambda a: h(a.sum(1)), (A,), 150, {"out": 4}),
    "max_rows": (lambda h: lambda a: h(a.max(0)), (A,), 0, {"mb": 1}),
    "matmul_split_k": (lambda h: lambda a, b: h(a @ b), (A, B), 150, {"in": 5}),
    "matmul_fewer_cores": (lambda h: lambda a, b: h(a @ b), (A, B), 150, {"mb": 4}),
}


@pytest.mark.parametrize("name", sorted(HINTED))
def test_hinted_ops_are_divided_per_core_as_the_device_model_divides_them(name):
    program, args, n, hint = HINTED[name]
    f = program(lambda y: sj.with_division(y, **hint))
    with spy_divisions() as seen:
        got = sj.to_host(sj.jit(f, emulate="cores")(*args))
    want = sj.to_host(sj.jit(f)(*args))
    assert [division_key(d) for d in seen] == [division_key(d) for d in divisions(f, *args)]
    default = [division_key(d) for d in divisions(program(lambda y: y), *args)]
    (hinted,) = [d for d in seen if all(d.splits[k] == v for k, v in hint.items())]
    assert division_key(hinted) not in default  # the hint changed the division per core
    if n:
        assert_close(got, want, reduce_len=n)
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_the_hints_split_k_and_change_the_core_count():
    (k,) = divisions(HINTED["matmul_split_k"][0](lambda y: sj.with_division(y, **{"in": 5})), A, B)
    assert k.splits["in"] == 5 and k.space.dim("in").reduced
    (m,) = divisions(HINTED["matmul_fewer_cores"][0](lambda y: sj.with_division(y, mb=4)), A, B)
    (d,) = divisions(lambda a, b: a @ b, A, B)
    assert m.cores_used == 12 != d.cores_used


def test_an_invalid_hint_is_refused_per_core_as_by_the_device_model():
    def f(a, b):
        return sj.with_division(a @ b, **{"in": 2})  # 150 floats are 5 sticks

    with pytest.raises(sj.DeviceError, match="in=2 does not divide"):
        sj.explain(f, A, B)
    with pytest.raises(sj.DeviceError, match="in=2 does not divide"):
        sj.jit(f, emulate="cores")(A, B)


def test_a_hint_on_a_shard_map_reaches_the_body_op_that_gives_its_result():
    m = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    P = jax.sharding.PartitionSpec
    body = jax.shard_map(lambda a: jnp.tanh(a) * 2 + a, mesh=m, in_specs=P("x"), out_specs=P("x"))

    def f(x):
        return sj.with_division(body(x), out=2)

    x = rand((64, 256))
    with spy_divisions() as seen:
        got = sj.to_host(sj.jit(f, emulate="cores")(x))
    ops = [division_key(d) for d in divisions(f, x)]
    assert [division_key(d) for d in seen] == ops
    assert [o[0] for o in ops] == ["tanh", "mul", "add"] and ops[2][1]["out"] == 2
    np.testing.assert_array_equal(np.asarray(got), np.asarray(sj.to_host(sj.jit(f)(x))))


def test_a_hint_divides_the_ops_of_its_geometry_that_its_node_binds():
    """``select_n`` of three cases is one node binding two ``where``s of one geometry:
    one division per geometry, so both take the hint (its ``eq``s do not), in the
    device model and per core alike."""
    which = (jnp.arange(64 * 128).reshape(64, 128) % 3).astype(jnp.int32)

    def f(w, x):
        return sj.with_division(jax.lax.select_n(w, x, x * 2, x * 3), out=2)

    x = rand((64, 128))
    ops = divisions(f, which, x)
    assert [d.space.opfunc for d in ops if d.splits["out"] == 2] == ["where", "where"]
    assert len([d for d in ops if d.space.opfunc == "eq"]) == 2
    with spy_divisions() as seen:
        got = sj.to_host(sj.jit(f, emulate="cores")(which, x))
    assert [division_key(d) for d in seen] == [division_key(d) for d in ops]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(sj.to_host(sj.jit(f)(which, x))))


# -- the check mode: every divided op both ways ------------------------------------------


def test_the_check_mode_runs_both_ways_and_keeps_the_default_results():
    f, make = EXACT["where"]
    g, make_g, _ = CLOSE["mlp"]
    with checking_cores() as check:
        got = sj.to_host(sj.jit(f)(*make()))
        got_g = sj.to_host(sj.jit(g)(*make_g()))
        jax.effects_barrier()
    assert check.take() == [] and not check.fallbacks
    assert check.checked["matmul"] == 2 and check.checked["where"] == 1
    np.testing.assert_array_equal(np.asarray(got), np.asarray(sj.to_host(sj.jit(f)(*make()))))
    # The same kernels; XLA may fuse a float chain otherwise around the extra reads.
    assert_close(got_g, sj.to_host(sj.jit(g)(*make_g())), reduce_len=128, ops=8)


def test_explain_and_as_text_show_the_program_without_the_checks_comparisons():
    g, make_g, _ = CLOSE["mlp"]
    args = make_g()
    plain = sj.explain(g, *args).jaxpr, sj.jit(g).lower(*args).as_text()
    with checking_cores():
        checked = sj.explain(g, *args).jaxpr, sj.jit(g).lower(*args).as_text()
    assert checked == plain and plain[0].count("Matmul") == 2


def test_the_check_mode_reports_a_wrong_per_core_result_with_its_op_division_and_line():
    def off_by_one_on_core_3(prim, div, vals):
        return [v.at[3].add(1) if v.shape[0] > 3 else v for v in vals]

    with injecting(off_by_one_on_core_3), checking_cores() as check:
        sj.jit(lambda a: jnp.exp(a) + 1)(rand((100, 150)))
        jax.effects_barrier()
    # The comparisons are unordered callbacks: XLA may run them in either order.
    found = sorted(check.take(), key=lambda m: m.op != "exp")
    assert [m.op for m in found] == ["exp", "add"]
    assert dict(found[0].splits) == {"mb": 1, "out": 25} and found[0].cores == 25
    assert "test_device_cores.py" in found[0].source and "differ" in found[0].detail
    assert check.take() == []


def test_a_split_sum_within_rounding_passes_and_a_lost_slice_does_not():
    """The rounding bound of a split reduction is tight enough to see a lost core's slice."""
    a = rand((1, 8192))
    with checking_cores() as check:
        sj.jit(lambda a: a.sum(-1))(a)
        jax.effects_barrier()
    assert check.take() == [] and check.checked["sum"] == 1

    def lose_core_0(prim, div, vals):
        return [v.at[0].set(0) for v in vals]

    with injecting(lose_core_0), checking_cores() as check:
        sj.jit(lambda a: a.sum(-1))(a)
        jax.effects_barrier()
    (m,) = check.take()
    assert m.op == "sum" and dict(m.splits)["mb"] == 32  # the reduced (stick) dim split


# -- device dims folding several logical dims (views that run a dim past its end) ----------

# Each program reads (or writes) a view whose device dim folds several logical dims: the
# folded variables are never split, so every core walks the whole folded range.
FOLDED = {
    # f32 sticks of 32 lanes over a transposed view's rows of 32: (out, x) folded. The
    # product is viewed back to x's shape, whose default layout it has: returned as it
    # is (returned folded, the planner copies to the default layout before the multiply).
    "transpose_reshape": (
        lambda x: (x.T.reshape(4, 16, 32) * 2).reshape(64, 32).T,
        lambda: (rand((32, 64)),),
        0,
    ),
    # One stick spans two rows after the reshape (f32: 32 lanes, rows of 16).
    "split_stick_f32": (lambda x: x.reshape(8, 8, 16) * 2, lambda: (rand((8, 128)),), 0),
    # Then transposed: the stick folds logical dims 0 and 2, not adjacent.
    "split_stick_transposed": (
        lambda x: x.reshape(8, 8, 32).transpose(1, 0, 2) + 1,
        lambda: (rand((8, 256), F16),),
        0,
    ),
    # A stick over three logical dims (radix 4 x 5 x 16).
    "fold_of_three": (lambda x: x.reshape(6, 4, 5, 16) - 1, lambda: (rand((6, 320)),), 0),
    # Rows of 60 in two sticks (4 padding lanes) cut into 3 x 20: partial sticks.
    "partial_sticks": (lambda x: x.reshape(4, 3, 20) * 2, lambda: (rand((4, 60)),), 0),
    # A broadcast operand next to the folded one.
    "broadcast": (
        lambda x, b: x.reshape(8, 8, 32) * b,
        lambda: (rand((8, 256), F16), rand((8, 1, 1), F16, seed=1)),
        0,
    ),
    "int": (
        lambda x: x.reshape(6, 8, 16) * 3 + 1,
        lambda: (jnp.arange(768, dtype=jnp.int32).reshape(6, 128),),
        0,
    ),
    # Viewed back to x's shape: returned [8, 8, 32], a copy to its default layout before
    # the conversion is cheaper in device bytes than converting the folded view.
    "astype": (
        lambda x: x.reshape(8, 8, 32).astype(jnp.float32).reshape(8, 256),
        lambda: (rand((8, 256), F16),),
        0,
    ),
    # Converted straight from the folded view: cheaper in device bytes than a copy to
    # the default layout first when the result is reshaped again (returned [4, 16, 32],
    # the planner copies to its default layout before the conversion).
    "astype_transposed": (
        lambda x: x.T.reshape(4, 16, 32).astype(F16).reshape(64, 32),
        lambda: (rand((32, 64)),),
        0,
    ),
    # Reductions over the folded dims.
    "max_over_fold": (lambda x: x.reshape(8, 8, 32).max((1, 2)), lambda: (rand((8, 256), F16),), 0),
    "sum_over_fold": (lambda x: x.reshape(8, 8, 16).sum((1, 2)), lambda: (rand((8, 128)),), 128),
    # The matmul primitive takes no folded operand (a reshape copy comes first): its
    # operand here is the folded result of a per-core op, viewed back unfolded.
    "matmul_of_folded": (
        lambda x, w: (x.reshape(8, 8, 16) * 2).reshape(8, 128) @ w,
        lambda: (rand((8, 128)), rand((128, 24), seed=1)),
        128,
    ),
}


def folded_ops(f, *args):
    """The divided ops of ``f`` that read or write a folded device dim."""
    return [
        op.division.space.opfunc
        for op in sj.explain(f, *args).ops
        if op.division is not None
        and any(fold is not None for o in op.division.space.operands for fold in o.folds)
    ]


@pytest.mark.parametrize("name", FOLDED)
def test_folded_device_dims_run_per_core(name):
    f, make, reduce_len = FOLDED[name]
    args = make()
    assert folded_ops(f, *args)
    got, want = both(f, *args)
    if reduce_len:
        assert_close(got, want, reduce_len=reduce_len)
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with checking_cores() as check:
        sj.to_host(sj.jit(f)(*args))
        jax.effects_barrier()
    assert check.take() == [] and not check.fallbacks and check.checked


def test_a_division_that_splits_a_folded_variable_falls_back_visibly():
    def f(x):  # device dims folding logical dims 0 and 1 (FOLDED's transpose_reshape)
        return (x.T.reshape(4, 16, 32) * 2).reshape(64, 32).T

    x = rand((32, 64))

    def split_out(space, machine, hint=None):
        splits = {n: 1 for n in space.names} | {"out": 2}
        return WorkDivision(space, splits, machine.cores, space.names)

    with _cores.dividing(split_out):
        with pytest.raises(sj.SpyreUnsupportedError, match=r"splits out, which .* folded"):
            sj.jit(f, emulate="cores")(x)
        with checking_cores() as check:
            got = sj.to_host(sj.jit(f)(x))
            jax.effects_barrier()
    assert check.take() == [] and sum(check.fallbacks.values()) == 1
    assert next(iter(check.fallbacks)).startswith("mul: ")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(x) * 2)


@pytest.mark.parametrize(
    ("f", "shape", "seed"),
    [
        # XLA divides by a broadcast softmax denominator as a multiplication by its
        # reciprocal; a core holding one copy of it divides exactly.
        (lambda x: jax.nn.softmax(x.T * 1.5, axis=-1), (2, 64), 0),
        # A max over -0.0 and 0.0 (zeros times values of either sign) may give either.
        (lambda x: ((x.T - x.T.max(1, keepdims=True)) @ x).max(-1), (1, 64), 1),
    ],
    ids=["div_by_broadcast", "max_of_signed_zeros"],
)
def test_the_check_mode_allows_xla_s_own_roundings_and_no_more(f, shape, seed):
    """Both differed bit for bit in the suite's run (tests/frontend/test_jit.py's random graphs)."""
    x = rand(shape, seed=seed, low=-1, high=1)
    with checking_cores() as check:
        got = sj.to_host(sj.jit(f)(x))
        jax.effects_barrier()
    assert check.take() == []
    assert_close(got, f(x), reduce_len=64, ops=4)


# -- each divided primitive owns its device side --------------------------------------------


def test_every_divided_primitive_defines_its_space_and_its_core_kernel_together():
    """A primitive is divided iff it defines ``space``; then it must run per core too."""
    from spyrejax.primitives._base import SpyrePrim

    divided = {c for c in spyre_primitive_classes() if c.space is not SpyrePrim.space}
    assert {"Elementwise", "Astype", "Reduce", "Matmul"} <= {c.__name__ for c in divided}
    assert all(c.core_kernel is not SpyrePrim.core_kernel for c in divided)


def test_the_op_records_facts_reach_the_device_model_through_the_space():
    """Transcendental and in-place are fields of the elementwise op records."""
    r = sj.explain(lambda a: jnp.exp(a) - jnp.sqrt(a) * jnp.log2(a), rand((64, 128)))
    facts = {
        op.opfunc: (op.division.space.transcendental, op.division.space.in_place) for op in r.ops
    }
    assert facts["exp"] == (True, True) and facts["sqrt"] == (True, False)
    assert facts["log2"] == (False, False) and facts["sub"] == (False, True)


def test_a_ragged_division_runs_per_core_as_the_whole_op():
    # A span limit of two of the weight's stick columns forces pass 1 to split N's 37
    # sticks (a prime over the core count) raggedly, 19 slices of 2: the cores of the
    # short last slice load, compute and store less, and the result equals the default
    # mode's.
    import dataclasses

    seen = []

    def small_span(space, machine, hint=None):
        seen.append(divide_op(space, dataclasses.replace(machine, span_limit=64_000), hint))
        return seen[-1]

    x, w = rand((6, 250)), rand((250, 37 * 32 - 5), seed=1)
    with _cores.dividing(small_span):
        got = sj.to_host(sj.jit(lambda a, b: a @ b, emulate="cores")(x, w))
    assert [(d.ragged, d.splits["out"]) for d in seen] == [(("out",), 19)]
    want = sj.to_host(sj.jit(lambda a, b: a @ b)(x, w))
    assert_close(got, want, reduce_len=250)
