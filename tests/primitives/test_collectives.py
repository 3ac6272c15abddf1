"""Collectives on Spyre arrays inside jax.shard_map (8 CPU devices, tests/conftest.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spyrejax as sj
from tests.helpers import assert_close, rand


def smap(f, in_specs, out_specs, k=4, check_vma=True):
    m = jax.make_mesh((k,), ("x",))
    sm = jax.shard_map(f, mesh=m, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)
    return jax.jit(sm)


def split(d, ndim=2):
    parts = [None] * ndim
    parts[d] = "x"
    return sj.P(*parts)


def test_psum_adds_every_cards_array():
    xh = rand((8, 256))
    out = smap(lambda a: sj.psum(a, "x"), sj.P(), sj.P())(sj.to_device(xh))
    assert_close(sj.to_host(out), 4 * xh, ops=3, scale=8)


@pytest.mark.parametrize("d", [0, 1])
def test_all_gather_joins_the_blocks_of_a_dim(d):
    xh = rand((8, 256))
    # As jax.lax.all_gather, the result still varies over x for check_vma.
    gather = smap(lambda a: sj.all_gather(a, "x", axis=d), split(d), sj.P(), check_vma=False)
    out = gather(sj.to_device(xh))
    assert jax.typeof(out) == jax.typeof(sj.to_device(xh))
    np.testing.assert_array_equal(sj.to_host(out), xh)


@pytest.mark.parametrize("d", [0, 1])
def test_psum_scatter_keeps_each_cards_block_of_the_sum(d):
    xh = rand((8, 256))
    f = smap(lambda a: sj.psum_scatter(a, "x", scatter_dimension=d), sj.P(), split(d))
    assert_close(sj.to_host(f(sj.to_device(xh))), 4 * xh, ops=3, scale=8)


def test_all_to_all_moves_the_split_from_columns_to_rows():
    xh = rand((8, 256))
    f = smap(lambda a: sj.all_to_all(a, "x", 0, 1), split(1), split(0))
    np.testing.assert_array_equal(sj.to_host(f(sj.to_device(xh))), xh)


def test_ppermute_rotates_the_blocks():
    xh = rand((8, 256))
    perm = [(i, (i + 1) % 4) for i in range(4)]
    f = smap(lambda a: sj.ppermute(a, "x", perm), split(0), split(0))
    np.testing.assert_array_equal(sj.to_host(f(sj.to_device(xh))), np.roll(xh, 2, axis=0))


def test_a_gather_of_a_padded_dim_names_the_fix():
    x = sj.to_device(rand((8, 784), np.float16))  # each card: 784 = 12.25 sticks
    with pytest.raises(sj.LayoutError, match="pads it"):
        smap(lambda a: sj.all_gather(a, "x", axis=1), sj.P(), sj.P(), k=2, check_vma=False)(x)


def test_a_varying_result_with_a_replicated_out_spec_is_refused():
    """As JAX's check_vma: each card's exp(a) differs, so P() has no one value to return."""
    with pytest.raises(sj.SpyreTypeError, match=r"varies over them"):
        smap(lambda a: sj.exp(a), split(0), sj.P())(sj.to_device(rand((8, 256))))


def test_psum_makes_a_result_replicated():
    seen = []

    def body(a):
        s = sj.psum(a, "x")
        seen.append((jax.typeof(a).vma, jax.typeof(s).vma))
        return s

    smap(body, split(0), sj.P())(sj.to_device(rand((8, 256))))
    assert seen == [(frozenset({"x"}), frozenset())]


def test_collectives_report_the_bytes_each_card_sends():
    t = jax.typeof(sj.to_device(rand((8, 256))))  # image 8 KiB
    ps = sj.primitives._collectives.Psum(t, axes=("x",), size=4)
    assert ps.bytes_moved == 2 * 3 * 8192 // 4
    ag = sj.primitives._collectives.AllGather(t, axes=("x",), size=4, dim=0)
    assert ag.bytes_moved == 3 * 8192


def test_tensor_parallel_mlp_equals_the_unsharded_one():
    """Column-split then row-split weights and one psum (Megatron-style)."""
    xh, w1h, w2h = rand((8, 256), seed=1), rand((256, 512), seed=2), rand((512, 256), seed=3)
    x, w1, w2 = map(sj.to_device, (xh, w1h, w2h))

    def mlp(x, w1, w2):
        return sj.matmul(sj.relu(sj.matmul(x, w1)), w2)

    def body(x, w1, w2):
        return sj.psum(mlp(x, w1, w2), "x")

    f = smap(body, (sj.P(), sj.P(None, "x"), sj.P("x", None)), sj.P())
    want = sj.to_host(jax.jit(mlp)(x, w1, w2))
    assert_close(sj.to_host(f(x, w1, w2)), want, reduce_len=512, scale=64)


# -- spyrejax.jit of plain JAX functions calling jax.shard_map ------------------------

AUTO = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
PS = jax.sharding.PartitionSpec


def plain_shard_map(body, in_specs, out_specs, check_vma=True):
    return jax.shard_map(
        body, mesh=AUTO, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma
    )


def test_jit_of_a_tensor_parallel_mlp_equals_the_unsharded_one():
    xh, w1h, w2h = rand((8, 256), seed=1), rand((256, 512), seed=2), rand((512, 256), seed=3)

    def mlp(x, w1, w2):
        return jax.nn.relu(x @ w1) @ w2

    def tp(x, w1, w2):
        body = lambda x, w1, w2: jax.lax.psum(mlp(x, w1, w2), "x")  # noqa: E731
        return plain_shard_map(body, (PS(), PS(None, "x"), PS("x", None)), PS())(x, w1, w2)

    out = sj.jit(tp)(xh, w1h, w2h)
    assert isinstance(out, sj.SpyreArray)
    assert_close(sj.to_host(out), jax.jit(mlp)(xh, w1h, w2h), reduce_len=512, scale=64)


COLLECTIVES = {
    "all_gather_rows": (lambda a: jax.lax.all_gather(a, "x", axis=0, tiled=True), PS("x"), PS()),
    "all_gather_sticks": (
        lambda a: jax.lax.all_gather(a, "x", axis=1, tiled=True),
        PS(None, "x"),
        PS(),
    ),
    "psum_scatter": (
        lambda a: jax.lax.psum_scatter(a, "x", scatter_dimension=1, tiled=True),
        PS(),
        PS(None, "x"),
    ),
    "all_to_all": (lambda a: jax.lax.all_to_all(a, "x", 0, 1, tiled=True), PS(None, "x"), PS("x")),
    "ppermute": (
        lambda a: jax.lax.ppermute(a, "x", [(i, (i + 1) % 4) for i in range(4)]),
        PS("x"),
        PS("x"),
    ),
    "psum": (lambda a: jax.lax.psum(a, "x"), PS("x"), PS()),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_jit_of_each_collective_equals_jax_jit(name):
    body, ins, outs = COLLECTIVES[name]
    f = plain_shard_map(body, ins, outs, check_vma=False)
    xh = rand((8, 256))
    assert_close(sj.to_host(sj.jit(f)(xh)), jax.jit(f)(xh), ops=3, scale=8)


def test_a_split_the_default_layout_cannot_block_is_planned_with_a_restickify():
    """96 float16 columns over 2 cards: 48 per card ends inside a stick of 64, so the
    planner moves the stick to the rows first; the columns are then whole rows."""
    xh = rand((8, 96), np.float16)
    m = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    f = jax.shard_map(
        lambda a: jax.lax.all_gather(a, "x", axis=1, tiled=True),
        mesh=m,
        in_specs=PS(None, "x"),
        out_specs=PS(),
        check_vma=False,
    )
    np.testing.assert_array_equal(sj.to_host(sj.jit(f)(xh)), xh)
    moves = sj.explain(f, xh).restickifies
    # The gathered result is returned in the default layout of its shape (issue 24): the
    # only other move is that one, charged to the shard_map that makes it.
    returned = [r for r in moves if r.reason.startswith("returned in the default layout")]
    (move,) = [r for r in moves if r not in returned]
    assert "shard_map" in move.reason
    assert all(
        r.reason.startswith("returned in the default layout of its shape: shard_map at")
        for r in returned
    )


def test_explain_shows_the_bytes_each_collective_moves():
    f = plain_shard_map(lambda a: jax.lax.psum(a, "x"), PS("x"), PS(), check_vma=False)
    report = sj.explain(f, rand((8, 256)))
    ((what, sent),) = report.collectives
    assert "Psum" in what and "f32[2,256]" in what
    assert sent == 2 * 3 * (8 * 2 * 32 * 4) // 4  # ring all-reduce of one card's 2 KiB image
    assert f"collectives between cards: {sent} B sent per card" in str(report)  # the summary
    assert f"{sent} B per card" in report.details()
    secs = sent / sj.Machine.spyre().card_link_bw  # charged at the machine's card link
    assert f"({secs * 1e6:.2f} us card to card on spyre)" in str(report)


def test_the_plan_cost_counts_the_elements_every_card_sends():
    f = plain_shard_map(lambda a: jax.lax.psum(a, "x"), PS("x"), PS(), check_vma=False)
    xh = rand((8, 256))
    report = sj.explain(f, xh)
    ((_, sent),) = report.collectives
    assert report.collective_cost == 4 * (sent // 4)  # 4 cards, each sending sent // 4 f32
    assert f"collective_cost: {report.collective_cost} elements sent by all cards" in str(report)
    plan = sj.jit(f).lower(xh).plan
    assert plan.collective_cost == report.collective_cost
    assert plan.cost == plan.restickify_cost + plan.copy_cost + plan.collective_cost


def test_a_restickify_inside_a_shard_map_body_counts_on_every_card():
    """The plan's cost is every card's work: the replicated weight restickified in the
    body on each of 4 cards counts 4 times. The device model runs the body once (the
    cards work at the same time), on one card's block."""
    xh, wh = rand((8, 256), seed=1), rand((64, 256), seed=2)
    f = plain_shard_map(lambda a, w: a @ w.T, (PS("x"), PS()), PS("x"))
    assert_close(sj.to_host(sj.jit(f)(xh, wh)), jax.jit(f)(xh, wh), reduce_len=256, scale=16)
    report = sj.explain(f, xh, wh)
    (move,) = report.restickifies
    per_card = math.prod(sj.to_device(wh).layout.device_size)  # w.T's base, whole on each
    assert move.cost == report.restickify_cost == 4 * per_card
    assert f"{per_card} per card x 4" in move.reason
    ops = [(op.desc.opfunc, op.desc.output[1].shape) for op in report.ops]
    assert ("matmul", (2, 64)) in ops and [o for o, _ in ops].count("restickify") == 1


def test_jit_of_a_data_parallel_training_step_equals_jax_jit():
    xh, wh, yh = rand((8, 256), seed=1), rand((256, 64), seed=2, low=-0.1, high=0.1), rand((8, 64))

    def loss(w, x, y):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

    def step(w, x, y):
        def body(w, x, y):
            return jax.lax.pmean(jax.grad(loss)(w, x, y), "x")

        g = plain_shard_map(body, (PS(), PS("x"), PS("x")), PS())(w, x, y)
        return w - 0.1 * g

    out = sj.jit(step)(wh, xh, yh)
    assert_close(sj.to_host(out), jax.jit(step)(wh, xh, yh), reduce_len=256, ops=8)


def test_jit_of_grad_through_shard_map_equals_jax_jit():
    xh, wh, yh = rand((8, 256), seed=1), rand((256, 64), seed=2, low=-0.1, high=0.1), rand((8, 64))

    def loss(w, x, y):
        h = plain_shard_map(lambda w, x: jnp.tanh(x @ w), (PS(), PS("x")), PS("x"))(w, x)
        return jnp.sum((h - y) ** 2)

    g = jax.grad(loss)
    assert_close(
        sj.to_host(sj.jit(g)(wh, xh, yh)), jax.jit(g)(wh, xh, yh), reduce_len=256, ops=8, scale=16
    )


def test_data_parallel_step_of_a_transformer_mlp_block_over_8_cards_equals_one_card():
    """Each card differentiates its 2 rows' share of the loss; JAX's transpose of the
    replicated parameters sums the cards' gradients (a psum the planner lowers)."""
    mesh8 = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    d, rows = 64, 16

    def block(p, x):
        w1, w2, g = p
        h = x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g
        return x + jax.nn.gelu(h @ w1) @ w2

    def share(p, x, y):  # this card's part of the mean over all rows
        return jnp.sum((block(p, x) - y) ** 2) / (rows * d)

    def update(p, g):
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)

    def one_card(p, x, y):
        return update(p, jax.grad(share)(p, x, y))

    def many_cards(p, x, y):
        body = jax.grad(share)
        specs = (PS(), PS("x"), PS("x"))
        return update(p, jax.shard_map(body, mesh=mesh8, in_specs=specs, out_specs=PS())(p, x, y))

    p = (
        rand((d, 128), jnp.float32, 1, low=-0.2, high=0.2),
        rand((128, d), jnp.float32, 2, low=-0.2, high=0.2),
        rand((d,), jnp.float32, 3),
    )
    x, y = rand((rows, d), seed=4), rand((rows, d), seed=5)
    one = jax.tree.map(sj.to_host, sj.jit(one_card)(p, x, y))
    many = jax.tree.map(sj.to_host, sj.jit(many_cards)(p, x, y))
    assert_close(many, one, reduce_len=rows * 128, ops=12)


def test_a_division_by_the_same_scalar_before_and_after_a_psum_is_planned_for_each():
    """Types compare without vma: the planner's cached evaluation of ``sum / 8`` on a
    varying value must not stand for the same division of the (replicated) psum."""
    f = plain_shard_map(
        lambda a: jax.lax.pmean(jnp.sum(a) / 8, "x"),  # pmean divides by 4... and 8 here
        PS("x"),
        PS(),
    )
    g = plain_shard_map(lambda a: jax.lax.psum(jnp.sum(a) / 4, "x") / 4, PS("x"), PS())
    xh = rand((8, 256))
    for h in (f, g):
        assert_close(sj.to_host(sj.jit(h)(xh)), jax.jit(h)(xh), reduce_len=2048, ops=3)


def test_a_shard_map_with_several_results_runs_its_body_once():
    """One psum feeds both results: the body is planned and run once, one collective."""

    def body(a):
        s = jax.lax.psum(a, "x")
        return s, jnp.exp(s)

    f = plain_shard_map(body, PS("x"), (PS(), PS()))
    xh = rand((8, 256), low=-0.5, high=0.5)
    got = sj.jit(f)(xh)
    assert_close(jax.tree.map(sj.to_host, got), jax.jit(f)(xh), ops=3, scale=2)
    assert len(sj.explain(f, xh).collectives) == 1


def test_a_replicated_table_gathered_by_per_card_indices_equals_jax_jit():
    """An embedding lookup: the table is the same on every card, the indices are not."""
    table, ids = rand((64, 32)), jnp.asarray(np.arange(128).reshape(16, 8) * 3 % 64, jnp.int32)
    f = plain_shard_map(lambda t, i: t[i], (PS(), PS("x")), PS("x"))
    np.testing.assert_array_equal(sj.to_host(sj.jit(f)(table, ids)), jax.jit(f)(table, ids))


# -- collectives over jax.vmap's own axis are reductions (issue 28) ---------------------


def test_collectives_over_a_vmapped_axis_are_reductions_as_under_jax_jit():
    """``pmean``/``pmax``/``pmin`` over vmap's axis name are positional-axis collectives in
    the jaxpr: reductions of the mapped dim, whatever the user called them."""

    def f(x):
        def row(r):
            centred = r - jax.lax.pmean(r, "b")
            return centred, jax.lax.pmax(r, "b") - jax.lax.pmin(r, "b")

        return jax.vmap(row, axis_name="b")(x)

    xh = rand((8, 256))
    got = jax.tree.map(sj.to_host, sj.jit(f)(xh))
    assert_close(got, jax.jit(f)(xh), reduce_len=8, ops=3, scale=4)
    # Its gradient: the transpose of a vmapped psum is a psum over no axes (the identity).
    centre = jax.vmap(lambda r: r - jax.lax.pmean(r, "b"), axis_name="b")
    g = lambda x: jnp.sum(centre(x) ** 2)  # noqa: E731
    assert_close(sj.to_host(sj.jit(jax.grad(g))(xh)), jax.jit(jax.grad(g))(xh), reduce_len=8, ops=6)


def test_a_vmapped_psum_inside_shard_map_reduces_the_mapped_dim_then_sums_the_cards():
    def body(a):  # psum over ("b", "x"): the mapped dim (positional), then the cards
        return jax.vmap(lambda r: jax.lax.psum(r, ("b", "x")), axis_name="b")(a)

    f = plain_shard_map(body, PS("x"), PS(), check_vma=False)
    xh = rand((8, 256))
    assert_close(sj.to_host(sj.jit(f)(xh)), jax.jit(f)(xh), reduce_len=8, ops=3, scale=8)


# -- meshes with Explicit axes (jax.make_mesh's default) -------------------------------


def test_shard_map_on_an_explicit_mesh_takes_named_sharding_inputs_as_jax_jit_does():
    """The input's sharding is part of its type: kept on the way in (issue 28)."""
    mesh = jax.make_mesh((4,), ("d",))
    assert mesh.explicit_axes == ("d",)
    f = jax.shard_map(
        lambda x: jax.lax.psum(x.sum(0, keepdims=True), "d"),
        mesh=mesh,
        in_specs=PS("d"),
        out_specs=PS(),
    )
    sharding = jax.sharding.NamedSharding(mesh, PS("d"))
    x = jax.device_put(rand((8, 256)), sharding)
    want = jax.jit(f)(x)
    for _ in range(2):  # the second call takes the dispatch path of a cached lowering
        assert_close(sj.to_host(sj.jit(f)(x)), want, reduce_len=8, scale=8)
    # An unsharded array of the same shape is another signature (jax.jit refuses it too).
    with pytest.raises(ValueError, match="does not match the specs of the input"):
        sj.jit(f)(rand((8, 256)))
