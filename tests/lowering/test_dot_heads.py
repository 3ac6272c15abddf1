"""Products into heads (``lowering.rules._dot``'s ``"heads"`` mode): ``x @ w[k, H, D]``.

Where the head dim ``D`` is no whole sticks, the product merged into one ``n = H * D``
starts every head but the first mid-stick; run per head, each head's ``D`` lies on
sticks of its own, the product's result is the default layout of ``[..., H, D]`` and
a weight ``[k, H, D]`` is read as it arrives. The planner weighs both.
"""

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_close, assert_matches_jax_jit, rand

import spyrejax as sj
from spyrejax.layout import SpyreTensorLayout


def _into_heads(x, w):
    return jnp.einsum("btk,khd->bthd", x, w)


@pytest.mark.parametrize(("d", "dtype"), [(80, jnp.float16), (48, jnp.float32)], ids=["f16", "f32"])
def test_a_projection_into_heads_reads_its_weight_as_it_arrives(d, dtype):
    # x [2, 4, 64] @ w [64, 3, d]: merged into n = 3 * d the weight was copied into the
    # merged layout and the product restickified back into the result's (float16 d 80:
    # 24,576 copied, 2,048 restickified). Per head, the batch of x outside the heads
    # (a view of a product laid out so), nothing moves.
    x = rand((2, 4, 64), dtype, seed=1)
    w = rand((64, 3, d), dtype, seed=2, low=-0.1, high=0.1)
    report = sj.explain(_into_heads, x, w)
    assert report.copy_cost == 0 and not report.restickifies
    assert "LoadRelayout" not in report.jaxpr
    got = assert_matches_jax_jit(_into_heads, x, w, reduce_len=64)
    want = SpyreTensorLayout((2, 4, 3, d), dtype)
    assert jax.typeof(sj.jit(_into_heads)(x, w)).layout == want
    assert got.shape == (2, 4, 3, d)


@pytest.mark.parametrize("emulate", [None, "cores"])
def test_a_decode_steps_one_token_projects_into_heads_with_no_copy(emulate):
    # One token (T 1, a decode step): the lhs's free dims are all of size 1. Merged, the
    # weight was copied into the merged layout every call (f16 D 80, 2 heads: 12,288
    # elements, 3.0 us predicted); per head, nothing moves (1.0 us).
    x = rand((1, 1, 48), jnp.float16, seed=1)
    w = rand((48, 2, 80), jnp.float16, seed=2, low=-0.1, high=0.1)
    report = sj.explain(_into_heads, x, w)
    assert report.copy_cost == 0 and not report.restickifies
    got = sj.to_host(sj.jit(_into_heads, emulate=emulate)(x, w))
    assert_close(got, jax.jit(_into_heads)(x, w), reduce_len=48)


def test_a_weight_reshaped_into_heads_is_laid_out_per_head_as_the_product_loads_it():
    # w [160, 2 * 80] reshaped to [160, 2, 80] is a view whose sticks run across the
    # heads, which the matmul cannot read as B: the per-head product lays it out per
    # head as it loads it (LoadRelayout, the weight's elements once), which at 256
    # tokens costs less than restickifying the merged product into the result's layout.
    def f(x, w):
        return jnp.einsum("tk,khd->thd", x, w.reshape(160, 2, 80))

    x = rand((256, 160), jnp.float16, seed=1)
    w = rand((160, 160), jnp.float16, seed=2, low=-0.1, high=0.1)
    report = sj.explain(f, x, w)
    assert report.jaxpr.count("= LoadRelayout") == 1 and report.copy_cost == 0
    assert [r.cost for r in report.restickifies] == [160 * 192]  # the weight, as stored
    assert [r.in_lx for r in report.restickifies] == [True]  # through LX ports, not DDR
    assert "(1 restickifies, 1 of them relaid in LX as a matmul loads them)" in str(report)
    assert_matches_jax_jit(f, x, w, reduce_len=160)


def _rotated_heads(x, w):
    q = jnp.einsum("tk,khd->thd", x, w.reshape(160, 2, 80))
    return jnp.concatenate([-q[..., 40:], q[..., :40]], -1) + q


def test_a_weight_relaid_as_the_product_loads_it_is_read_at_its_stored_bytes():
    # A LoadRelayout'd weight never goes to DDR: the matmul loads the stored image's
    # blocks (61,440 bytes of [160, 160] float16) and relays them in LX, so the planner
    # and the device model charge that read at the stored image's bytes, not at the
    # relaid per-head image's (81,920: each head's 80 padded to 128). Charged at the
    # relaid bytes, the planner kept the merged product at 4 tokens and the rotation
    # copied its quarters (6,144 elements, 15.00 us predicted; per head 7.10 us).
    from spyrejax.device import matmul_time

    x = rand((4, 160), jnp.float16, seed=1)
    w = rand((160, 160), jnp.float16, seed=2, low=-0.1, high=0.1)
    report = sj.explain(_rotated_heads, x, w)
    assert report.jaxpr.count("= LoadRelayout") == 1 and report.copy_cost == 0
    (load,) = [op for op in report.ops if op.desc.opfunc == "loadrelayout"]
    (source,) = [t for _, t in load.desc.inputs]
    assert source.nbytes == 61_440 and load.desc.output[1].nbytes == 81_920
    relaid = load.desc.output[0]
    (mm,) = [op for op in report.ops if relaid in (n for n, _ in op.desc.inputs)]
    machine = report.device.machine
    stored = matmul_time(mm.division, machine, relaid=((1, source.nbytes),)).read_bytes
    assert mm.cost.read_bytes == stored < matmul_time(mm.division, machine).read_bytes
    assert_matches_jax_jit(_rotated_heads, x, w, reduce_len=160)


def test_head_dims_of_whole_sticks_keep_the_merged_product():
    # At d 64 (float16) the merged product's sticks start at every head already: one
    # plain matmul of n = 128, the weight a view, nothing moved.
    x = rand((2, 4, 64), jnp.float16, seed=1)
    w = rand((64, 2, 64), jnp.float16, seed=2, low=-0.1, high=0.1)
    report = sj.explain(_into_heads, x, w)
    assert report.copy_cost == 0 and not report.restickifies
    assert report.jaxpr.count("= Matmul") == 1 and "128]{" in report.jaxpr
    assert_matches_jax_jit(_into_heads, x, w, reduce_len=64)
