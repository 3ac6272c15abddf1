"""astype between 16-bit and 32-bit formats in the card's staggered order (issue 26, item 4).

The card's conversion emits DL16_TO_FP32 / FP32_TO_DL16; ``sp.astype(..., arranged=True)``
keeps that order. The planner chooses it itself where the readers keep the arrangement
(the standard order costs the card a relayout inside each group), and keeps the standard
order where a reader would need the value restickified.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit

import spyrejax as sj
from spyrejax import LayoutError
from spyrejax import primitives as sp
from spyrejax.lowering.program._cores import core_check

F16, BF16, F32 = jnp.float16, jnp.bfloat16, jnp.float32
PAIRS = [(F16, F32), (BF16, F32), (F32, F16), (F32, BF16)]


def rand(shape, dtype, seed=0):
    # Rounded on the host (float64 to ``dtype``, to nearest even: the bits jnp.asarray's
    # convert gives, checked on 6M values a dtype) instead of by an eager XLA convert
    # compiled per shape and dtype.
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def closed_chain(dst):
    """Convert, compute position by position, convert back: the order never matters."""

    def f(x):
        y = x.astype(dst)
        return (y * y + 1.0).astype(x.dtype)

    return f


def restickified(report, shape):
    """The restickifies of values of ``shape`` (not those of a row statistic, a result)."""
    dims = "[" + ",".join(map(str, shape)) + "]"
    return [r for r in report.restickifies if r.source_type.partition("[")[2].startswith(dims[1:])]


def arranged_in_plan(fn, *args):
    text = str(sj.explain(fn, *args).details())
    return "DL16_TO_FP32" in text or "FP32_TO_DL16" in text


@pytest.mark.parametrize(("src", "dst"), PAIRS)
@pytest.mark.parametrize("shape", [(8, 100), (3, 70), (2, 3, 130)])
def test_astype_matches_jax_jit_on_padded_shapes(shape, src, dst):
    x = rand(shape, src)
    assert_matches_jax_jit(closed_chain(dst), x, exact=True)
    assert_matches_jax_jit(lambda x: x.astype(dst), x, exact=True)


def plain_chain(dst):
    """The chain of the issue: convert, a position-by-position map, convert back."""

    def f(x):
        y = x.astype(dst)
        return (y * 2 + 1).astype(x.dtype)

    return f


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_the_planner_keeps_the_cards_order_through_a_closed_chain(src, dst):
    # Both conversions are the card's: the arranged one saves the relayout of each, the
    # ops between keep the arrangement, and every op is divided over the cores.
    x = rand((64, 256), src)
    report = sj.explain(plain_chain(dst), x)
    name = "DL16_TO_FP32" if dst == F32 else "FP32_TO_DL16"
    assert name in report.jaxpr and not report.restickifies
    arranged = [t for t in report.tensors if name in t.type]
    assert len(arranged) >= 2  # the conversion's result and the maps' (bfloat16 + 1: f32)
    converts = [op for op in report.ops if op.desc.opfunc == "astype"]
    assert len(converts) == 2 and all(op.division.cores > 1 for op in converts)
    assert_matches_jax_jit(plain_chain(dst), x, exact=True)


@pytest.mark.parametrize(
    "reader",
    [
        lambda y: y @ jnp.ones((y.shape[-1], 64), y.dtype),  # a product
        lambda y: y * 2,  # a result: returned in the default layout
    ],
    ids=["matmul", "result"],
)
def test_the_planner_keeps_the_standard_order_where_a_reader_needs_it(reader):
    # Restickifying an arranged value costs more than the relayout it saves.
    x = rand((16, 128), F16)

    def f(x):
        return reader(x.astype(F32))

    assert not arranged_in_plan(f, x)
    assert_matches_jax_jit(f, x, reduce_len=128)


def test_a_sum_over_rows_keeps_the_cards_order_to_its_result():
    # Every row's groups are in one order: the sum over rows keeps it, and only its
    # [128] result is restickified (returned in the default layout), not the [16, 128]
    # value, and the conversion saves its relayout of the 16-bit side.
    x = rand((16, 128), F16)

    def f(x):
        return jnp.sum(x.astype(F32) * 2, axis=0)

    report = sj.explain(f, x)
    assert "DL16_TO_FP32" in report.jaxpr and not restickified(report, x.shape)
    assert [r.cost for r in report.restickifies] == [128]
    (convert,) = [op for op in report.ops if op.desc.opfunc == "astype"]
    assert convert.desc.space.relayout_bytes == 0
    assert_matches_jax_jit(f, x, reduce_len=16)


def test_a_sum_over_the_stick_dim_reads_the_cards_order():
    # A group holds elements of the stick dim only: a sum over it folds each group whole,
    # in any order, so the conversion keeps the card's order and nothing is restickified.
    x = rand((16, 128), F16)

    def f(x):
        return jnp.sum(x.astype(F32) * 2, axis=-1)

    report = sj.explain(f, x)
    assert "DL16_TO_FP32" in report.jaxpr and not restickified(report, x.shape)
    assert_matches_jax_jit(f, x, reduce_len=128)


def rms_norm(x):
    x32 = x.astype(F32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32**2, -1, keepdims=True) + 1e-6)).astype(x.dtype)


def layer_norm(x, w):
    x32 = x.astype(F32)
    m = jnp.mean(x32, -1)[:, None]
    v = jnp.mean((x32 - m) * (x32 - m), -1)[:, None]
    return w * ((x32 - m) * jax.lax.rsqrt(v + 1e-5)).astype(x.dtype)


@pytest.mark.parametrize("src", [F16, BF16])
@pytest.mark.parametrize("norm", [rms_norm, layer_norm])
@pytest.mark.parametrize("width", [256, 200])
def test_norms_in_float32_on_a_16_bit_activation_keep_the_cards_order(norm, src, width):
    # The sums over the stick dim read the card's order (a group folds whole) and the row
    # statistics broadcast back along the stick dim hold one value per group: the [T, D]
    # values are never restickified (the row statistics are, as in the standard order).
    # A partial last group too (200 = 3 x 64 + 8).
    x = rand((16, width), src)
    args = (x,) if norm is rms_norm else (x, rand((width,), src, seed=1))
    report = sj.explain(norm, *args)
    assert "DL16_TO_FP32" in report.jaxpr and not restickified(report, x.shape)
    assert_matches_jax_jit(norm, *args, reduce_len=width, ops=4)


@pytest.mark.parametrize("width", [1000, 1024])
@pytest.mark.parametrize("norm", [rms_norm, layer_norm])
def test_a_norm_of_many_rows_is_one_kernel_in_lx_in_the_cards_order(norm, width):
    # 4096 rows of 1000 (a partial last group) or 1024: the [T, D] activation is not
    # restickified (it was, onto its rows and back, at 1000: 8.3M elements), and the
    # fused kernel keeps its intermediates in LX: its sparse row sums count a stick a
    # row, not their whole image (counted whole, they sent the kernel through DDR at
    # 1,332 us against 175).
    x = jax.ShapeDtypeStruct((4096, width), BF16)
    args = (x,) if norm is rms_norm else (x, jax.ShapeDtypeStruct((width,), BF16))
    report = sj.explain(norm, *args)
    assert "DL16_TO_FP32" in report.jaxpr and not restickified(report, x.shape)
    (group,) = report.device.groups
    assert group.in_lx and group.time_s < group.unfused_s / 2


def rms_norm_16(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w


def rms_norm_32(x, w):
    return rms_norm(x) * w


@pytest.mark.parametrize("src", [F16, BF16])
@pytest.mark.parametrize("norm", [rms_norm_16, rms_norm_32])
def test_an_rms_norm_of_80_wide_rows_reads_them_in_their_layout(norm, src):
    # Rows of 80 16-bit elements fill a stick and a quarter (padded to 128): stuck on the
    # rows they are dense, which the planner preferred while it charged every value of
    # the norm's chain DDR bytes, restickifying x (or x * x) onto the rows (524,288
    # elements at 4096 rows). The chain's values never leave LX (the fused rms_norm
    # kernel): charged their LX traffic, the rows stay on their own stick.
    x = jax.ShapeDtypeStruct((4096, 80), src)
    report = sj.explain(norm, x, jax.ShapeDtypeStruct((80,), src))
    assert not restickified(report, x.shape) and report.copy_cost == 0
    assert [g.family for g in report.device.groups] == ["rms_norm"]
    xs, w = rand((64, 80), src), rand((80,), src, seed=1)
    assert not restickified(sj.explain(norm, xs, w), xs.shape)
    assert_matches_jax_jit(norm, xs, w, reduce_len=80, ops=5)


def test_a_sparse_conversion_is_charged_no_relayout():
    # A float16 softmax sums in float32 and converts the [.., 1] row sums back: a sparse
    # stick holds its one element in lane 0, which the card's order leaves in place, so
    # that conversion costs no relayout and the softmax plans with nothing moved (charged
    # as if dense, the planner took the card's order there and restickified 540,672
    # elements at [16, 1024, 1024]). The conversion up is read by the row sums only: it
    # is written in the card's order, which the sums read as it is.
    x = rand((4, 8, 256), F16)
    report = sj.explain(lambda s: jax.nn.softmax(s, -1), x)
    assert not report.restickifies
    assert "FP32_TO_DL16" not in report.jaxpr and "DL16_TO_FP32" in report.jaxpr
    # The device model agrees: neither conversion pays a relayout.
    converts = [op for op in report.ops if op.desc.opfunc == "astype"]
    assert [op.desc.space.relayout_bytes for op in converts] == [0, 0]
    assert all(op.cost.relayout_s == 0 for op in converts)


def test_the_device_model_charges_a_standard_conversion_its_relayout():
    # A product needs the standard order: the conversion up pays the card's in-group
    # relayout (2 x 4 KiB of float16), as the planner's objective does.
    x = rand((16, 128), F16)
    report = sj.explain(lambda x: x.astype(F32) @ jnp.ones((128, 64), F32), x)
    (convert,) = [op for op in report.ops if op.desc.opfunc == "astype"]
    assert convert.desc.space.relayout_bytes == 2 * x.size * 2 and convert.cost.relayout_s > 0


def test_the_planner_restickifies_the_cards_order_where_that_costs_less():
    # One conversion read by two closed chains and by a product: the card's order saves
    # three relayouts of the 16-bit side (3 * 2 * 2 KiB) and costs one restickify of the
    # fp32 value for the product (4 + 4 KiB): the planner takes it.
    # (With one closed chain the two cost the same; with none, the standard order wins:
    # the test above.)
    x = rand((8, 128), F16)

    def f(x):
        y = x.astype(F32)
        return (y * 2).astype(F16), (y + 1).astype(F16), y @ jnp.ones((128, 8), F32)

    report = sj.explain(f, x)
    assert "DL16_TO_FP32" in report.jaxpr
    moved = [r for r in report.restickifies if "DL16_TO_FP32" in r.source_type]
    assert [r.cost for r in moved] == [8 * 128]
    assert_matches_jax_jit(f, x, reduce_len=128)


def test_arranged_astype_eagerly_and_refusals():
    x = rand((3, 100), F16)
    d = sj.to_device(x)
    a = sp.astype(d, F32, arranged=True)
    assert "DL16_TO_FP32" in jax.typeof(a).str_short()
    np.testing.assert_array_equal(np.asarray(sj.to_host(a)), np.asarray(x, np.float32))
    b = sp.astype(sp.elementwise("mul", a, a), F16)  # the conversion back: standard order
    assert not jax.typeof(b).layout.is_arranged
    np.testing.assert_array_equal(np.asarray(sj.to_host(b)), np.asarray(x * x))
    kept = sp.reduce("sum", a, (0,))  # the stick dim kept: the result keeps the order
    assert jax.typeof(kept).layout.arrangement.value == "DL16_TO_FP32"
    np.testing.assert_array_equal(
        np.asarray(sj.to_host(kept)), np.asarray(jax.jit(lambda x: x.astype(F32).sum(0))(x))
    )
    lone = sp.astype(sj.to_device(rand((3, 20), F16)), F32, arranged=True)
    with pytest.raises(LayoutError, match="within one stick"):
        sp.reduce("sum", lone, (0,))
    with pytest.raises(LayoutError, match="Matmul reads elements in their standard places"):
        sp.matmul(a, sj.to_device(np.ones((100, 4), np.float32)))
    with pytest.raises(LayoutError, match="16-bit and 32-bit"):
        sp.astype(d, jnp.int8, arranged=True)
    with pytest.raises(LayoutError, match="already in DL16_TO_FP32"):
        sp.astype(a, F16, arranged=True)
    restored = sp.restickify(a, sj.SpyreTensorLayout((3, 100), np.float32))
    np.testing.assert_array_equal(np.asarray(sj.to_host(restored)), np.asarray(x, np.float32))


def arranged_and_standard(both, x):
    """``both(d, arranged)`` jitted both ways on ``x`` put on the device: result pairs."""
    d = sj.to_device(x)
    got, want = (jax.jit(both, static_argnums=1)(d, a) for a in (True, False))
    return zip(got, want, strict=True)


def assert_same_values(got, want):
    """Bit for bit the same host values."""
    np.testing.assert_array_equal(np.asarray(sj.to_host(got)), np.asarray(sj.to_host(want)))


@pytest.mark.parametrize(("src", "dst"), [(F16, F32), (F32, BF16)])
@pytest.mark.parametrize("shape", [(3, 20), (2, 32), (3, 1000), (2, 3, 130)])
def test_reductions_and_row_broadcasts_read_arranged_groups_as_standard_ones(shape, src, dst):
    # Whole groups, partial last groups (1000 = 15 * 64 + 40, 130), a stick dim within one
    # stick (the synthetic pair): bit for bit the standard order's result.
    last = len(shape) - 1

    def both(d, arranged):
        x = sp.astype(d, dst, arranged=arranged)
        assert jax.typeof(x).layout.is_arranged == arranged
        out = []
        for op in ("sum", "max"):
            r = sp.reduce(op, x, (last,), keepdims=True)
            z = sp.elementwise("sub", x, r)  # the row statistic broadcast along the stick
            assert jax.typeof(z).layout.arrangement == jax.typeof(x).layout.arrangement
            out += [r, sp.astype(z, src)]
        return out

    for g, w in arranged_and_standard(both, rand(shape, src)):
        assert jax.typeof(g) == jax.typeof(w)
        assert_same_values(g, w)


def compiled(f, x):
    """The transposes and the entry's fusions (passes) of ``f``'s compiled program."""
    hlo = jax.jit(f).lower(x).compile().as_text()
    return hlo.count("transpose("), hlo[hlo.index("ENTRY") :].count("fusion(")


PARTIAL = [(F16, F32, (8, 1000)), (F32, BF16, (8, 1000)), (BF16, F32, (4, 3, 130))]


@pytest.mark.parametrize(("src", "dst", "shape"), PARTIAL)
def test_a_partial_last_group_converts_on_the_image(src, dst, shape):
    # 1000 = 15 * 64 + 40: the conversion re-cuts the sticks on the image and places the
    # groups last, so a sum over the stick dim (which puts them back) compiles to the
    # standard order's program, pass for pass, with the same bits.
    x, last = sj.to_device(rand(shape, src)), len(shape) - 1

    def total(arranged):
        return lambda x: sp.reduce("sum", sp.astype(x, dst, arranged=arranged), (last,))

    if core_check() is None:  # the program's text, not the per-core check's
        assert compiled(total(True), x) == compiled(total(False), x)
    got, want = (np.asarray(sj.to_host(jax.jit(total(a))(x))) for a in (True, False))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("src", "dst", "shape"), [(BF16, F32, (8, 1000)), (F16, F32, (4, 128))])
def test_pointwise_ops_between_arranged_values_compile_as_the_standard_order(src, dst, shape):
    # A norm's chain: convert in the card's order, square, scale by a row statistic,
    # sum over the stick dim, convert back. Each pointwise op computes in the standard
    # order and arranges its result last, so each producer's placing meets its reader's
    # putting back and XLA cancels both: the program has no more transposes than the
    # standard order's (26 against 4 when each op computed on the arranged image), and
    # its values are the same (position by position: the same bits).
    x, last = sj.to_device(rand(shape, src)), len(shape) - 1

    def chain(arranged):
        def f(x):
            y = sp.astype(x, dst, arranged=arranged)
            sq = sp.elementwise("mul", y, y)
            r = sp.reduce("sum", sq, (last,), keepdims=True)
            z = sp.elementwise("mul", y, r)
            return r, sp.astype(z, src, arranged=False)

        return f

    if core_check() is None:  # the program's text, not the per-core check's
        assert compiled(chain(True), x)[0] <= compiled(chain(False), x)[0]
    for g, w in zip(*(jax.jit(chain(a))(x) for a in (True, False)), strict=True):
        np.testing.assert_array_equal(np.asarray(sj.to_host(g)), np.asarray(sj.to_host(w)))


def test_a_padded_bfloat16_result_read_back_is_not_transposed():
    # 70 elements: two groups, the second partial. The groups are placed after the
    # bfloat16 result's fence, where the restickify putting them back cancels them.
    x = sj.to_device(rand((70,), F32))
    std = jax.typeof(sp.astype(x, BF16)).layout

    def back(x):
        return sp.restickify(sp.astype(x, BF16, arranged=True), layout=std)

    if core_check() is None:
        assert compiled(back, x)[0] == 0
    got, want = sj.to_host(jax.jit(back)(x)), sj.to_host(sp.astype(x, BF16))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize(("src", "dst"), [(F16, F32), (F32, BF16)])
@pytest.mark.parametrize("shape", [(3, 100), (5, 64), (3, 1000), (2, 3, 130), (4, 3, 64)])
def test_reductions_keeping_the_stick_dim_keep_the_arrangement(shape, src, dst):
    # Every row's groups are in one order, so a reduction over other dims combines the
    # same positions and its result is in that order: bit for bit the standard order's
    # result arranged, whole or partial groups, one or several axes. (A stick dim within
    # one stick, the synthetic pair, is refused: the eager test below.)
    axes = [(0,), tuple(range(len(shape) - 1))]

    def both(d, arranged):
        x = sp.astype(d, dst, arranged=arranged)
        out = []
        for op in ("sum", "max", "mean"):
            for ax in axes:
                for keep in (False, True):
                    r = sp.reduce(op, x, ax, keepdims=keep)
                    assert jax.typeof(r).layout.arrangement == jax.typeof(x).layout.arrangement
                    out += [r, sp.astype(r, src)]
        return out

    for g, w in arranged_and_standard(both, rand(shape, src)):
        assert jax.typeof(g).shape == jax.typeof(w).shape
        assert_same_values(g, w)


@pytest.mark.parametrize("shape", [(3, 20), (2, 32), (5,)])
def test_a_stick_dim_within_one_stick_converts_onto_a_pair_of_sticks(shape):
    x = rand(shape, F16)
    a = sp.astype(sj.to_device(x), F32, arranged=True)
    lay = jax.typeof(a).layout
    assert lay.arrangement.value == "DL16_TO_FP32" and -1 in lay.stride_map
    assert 2 in lay.device_size  # the group's second stick: a synthetic dim of 2
    np.testing.assert_array_equal(np.asarray(sj.to_host(a)), np.asarray(x, np.float32))
    b = sp.astype(sp.elementwise("mul", a, a), F16)
    assert not jax.typeof(b).layout.is_arranged
    np.testing.assert_array_equal(np.asarray(sj.to_host(b)), np.asarray(x * x))


def test_arranged_chains_differentiate_and_vmap():
    x = rand((8, 128), F16)

    def loss(x):
        return jnp.sum((jnp.tanh(x.astype(F32)) * 2.0).astype(F16).astype(F32))

    assert_matches_jax_jit(jax.grad(loss), x, ops=4)
    assert_matches_jax_jit(jax.vmap(closed_chain(F32)), x, exact=True)


def test_the_export_names_the_arrangement_of_each_arranged_tensor():
    e = sj.export(plain_chain(F32), np.zeros((8, 128), np.float16))
    fields = [
        [d.get("elementArrangement_") for d in dsc["labeledDs_"]]
        for doc in e.superdsc
        for body in doc.values()
        for entry in body["dscs_"]
        for dsc in entry.values()
    ]
    arranged = "DL16_TO_FP32"
    assert fields == [
        [None, arranged],
        [arranged, arranged],
        [arranged, arranged],
        [arranged, None],
    ]


def test_the_device_model_charges_what_the_planner_charges_for_the_standard_order(
    monkeypatch,
):
    # The planner's arranged 16 -> 32 -> 16 chain against the same chain with the
    # arranged mode not offered (standard order): explain predicts the arranged one
    # cheaper by the two conversions' in-group relayouts, each twice the 16-bit side's
    # bytes through the cores' LX ports (primitives._arranged.card_relayout_bytes).
    from spyrejax.device._cost import lx_seconds
    from spyrejax.lowering.rules import _elementwise

    x = jax.ShapeDtypeStruct((256, 1024), F16)
    arranged = sj.explain(plain_chain(F32), x)
    assert "DL16_TO_FP32" in arranged.jaxpr
    assert all(op.cost.relayout_s == 0 for op in arranged.ops)
    monkeypatch.setattr(_elementwise, "card_order_matters", lambda *a, **k: False)
    standard = sj.explain(plain_chain(F32), x)  # a new function: planned anew
    assert "DL16_TO_FP32" not in standard.jaxpr
    converts = [op for op in standard.ops if op.desc.opfunc == "astype"]
    relayout = lx_seconds(
        standard.device.machine, 2 * 256 * 1024 * 2, converts[0].division.cores_used
    )
    assert [op.cost.relayout_s for op in converts] == [relayout, relayout]
    assert relayout > 0 and "incl. 0.171 us in-group relayout" in str(standard.device)
    assert "in-group relayout" in standard._repr_html_()
    gap = standard.time_s - arranged.time_s
    assert gap == pytest.approx(2 * relayout, rel=1e-9)


def test_the_order_matters_on_dense_sticks_of_both_sides():
    # One predicate decides from both types: a sparse stick on either side holds its one
    # element in lane 0. A value broadcast from row sums has a sparse layout under a
    # dense shape, so converting it to a dense result (a shape-only or result-only
    # reading would say "matters") is no case for the card's order.
    from spyrejax.primitives._arranged import card_order_matters
    from spyrejax.primitives._astype import Astype
    from spyrejax.primitives._stick import SPARSE, default_type

    dense16, dense32 = (default_type((4, 128), t, 1) for t in (F16, F32))
    broadcast = jax.typeof(sp.broadcast_to(sj.to_device(rand((4, 1), F16)), (4, 128)))
    assert broadcast.layout.is_sparse and broadcast.shape == dense16.shape
    assert card_order_matters(dense16, dense32) and card_order_matters(dense32, dense16)
    assert not card_order_matters(broadcast, dense32)
    assert not card_order_matters(dense16, default_type((4, 128), F32, SPARSE))
    assert not card_order_matters(dense16, default_type((4, 128), BF16, 1))  # same width
    # The primitive charges by the same predicate: none for the broadcast operand.
    assert Astype(dense16, dtype=np.dtype(F32)).reorders
    assert not Astype(broadcast, dtype=np.dtype(F32)).reorders


@pytest.mark.parametrize("shape", [(4, 128), (4, 1), (128,), (), (4, 1000), (4, 40)])
def test_the_planner_offers_the_cards_order_where_the_primitive_charges_its_relayout(shape):
    # The convert rule's modes and Astype.reorders read one predicate: each mode whose
    # stick dim holds a whole group or more (1000 = 15 x 64 + 40 too) offers the arranged
    # variant exactly where the standard conversion of that mode's operand pays the
    # relayout; a stick dim shorter than a group (4, 40) is not offered it.
    from spyrejax.lowering._graph import build_graph
    from spyrejax.lowering._registry import rule_for
    from spyrejax.primitives._astype import Astype
    from spyrejax.primitives._stick import SPARSE, default_type

    closed = jax.make_jaxpr(lambda x: x.astype(F32))(jax.ShapeDtypeStruct(shape, F16))
    (node,) = [n for n in build_graph(closed).nodes if n.prim == "convert_element_type"]
    modes = rule_for(node).modes(node)
    arranged = {m.out for m in modes if m.variant == "arranged"}
    for m in modes:
        if m.variant or (m.out != SPARSE and shape[m.out] < 64):
            continue
        x = default_type(shape, F16, SPARSE if m.ins[0] is None else m.ins[0])
        assert (m.out in arranged) == Astype(x, dtype=np.dtype(F32)).reorders, m
    assert arranged == (
        {1} if shape in ((4, 128), (4, 1000)) else {0} if shape == (128,) else set()
    )
