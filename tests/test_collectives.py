"""Collectives on Spyre arrays inside jax.shard_map (8 CPU devices, tests/conftest.py)."""

import jax
import numpy as np
import pytest

import spyrejax as sj
from tests.helpers import assert_close, rand


def smap(f, in_specs, out_specs, k=4):
    m = jax.make_mesh((k,), ("x",))
    return jax.jit(jax.shard_map(f, mesh=m, in_specs=in_specs, out_specs=out_specs))


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
    out = smap(lambda a: sj.all_gather(a, "x", axis=d), split(d), sj.P())(sj.to_device(xh))
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
        smap(lambda a: sj.all_gather(a, "x", axis=1), sj.P(), sj.P(), k=2)(x)


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
