"""The pair-sum unroll (lowering._pair_sums): ``reshape(sum(f(a, b), -1), [..., N * R])``.

FMS's RoPE is its case in test_rope.py. Here a pair sum over a broadcast operand, in
float and integer types, and the sums it leaves to the reduction: where an operand's
piece would be a copy (an input with pairs of its own, such as FMS's rotation given as
a host array), a sum of three terms, and a sum not interleaved back. Each matches jax.jit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit, rand

import spyrejax as sj

T, H, D = 4, 2, 64


def _scaled_pairs(x, s):
    # Each pair of x summed and scaled by s, in both rows: s * (x0 + x1) twice.
    w = jnp.broadcast_to(s[:, None, :, None, None], (T, 1, D // 2, 2, 2))
    return (w * x.reshape(T, H, D // 2, 1, 2)).sum(-1).reshape(T, H, D)


def _host_rotation(x, rot):
    return (rot * x.reshape(T, H, D // 2, 1, 2)).sum(-1).reshape(T, H, D)


def _triple(x, w):
    return (w * x.reshape(T, H, 32, 1, 3)).sum(-1).reshape(T, H, 64)


def _not_interleaved(x, s):
    w = jnp.broadcast_to(s[:, None, :, None, None], (T, 1, D // 2, 2, 2))
    return (w * x.reshape(T, H, D // 2, 1, 2)).sum(-1)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.float32, jnp.int32], ids=str)
def test_a_pair_sum_through_a_broadcast_is_unrolled_and_copies_nothing(dtype):
    x, s = rand((T, H, D), dtype, seed=1), rand((T, D // 2), dtype, seed=2)
    report = sj.explain(_scaled_pairs, x, s)
    assert "Sum[" not in report.jaxpr and report.jaxpr.count("LaneView[") == 2
    assert report.copy_cost == 0 and not report.restickifies
    assert_matches_jax_jit(_scaled_pairs, x, s, ops=3)


def test_sums_the_unroll_leaves_to_the_reduction():
    x = rand((T, H, D), jnp.float32, seed=1)
    rot = rand((T, 1, D // 2, 2, 2), jnp.float32, seed=2)
    assert "Sum[" in sj.explain(_host_rotation, x, rot).jaxpr
    assert_matches_jax_jit(_host_rotation, x, rot, ops=2, reduce_len=2)
    x3 = rand((T, H, 96), jnp.float32, seed=3)
    w3 = rand((T, 1, 32, 2, 3), jnp.float32, seed=4)
    assert "Sum[" in sj.explain(_triple, x3, w3).jaxpr
    assert_matches_jax_jit(_triple, x3, w3, ops=2, reduce_len=3)
    s = rand((T, D // 2), jnp.float32, seed=5)
    assert "Sum[" in sj.explain(_not_interleaved, x, s).jaxpr
    assert_matches_jax_jit(_not_interleaved, x, s, ops=2, reduce_len=2)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.float32], ids=str)
def test_the_unroll_of_negative_zeros_is_zero(dtype):
    # -0.0 + -0.0 is -0.0 where the reduction, from its +0.0 init, gives +0.0: the same
    # value (the module docstring says so); the unroll is in place all the same.
    x, s = jnp.full((T, H, D), -0.0, dtype), jnp.ones((T, D // 2), dtype)
    want = np.asarray(jax.jit(_scaled_pairs)(x, s))
    got = np.asarray(sj.to_host(sj.jit(_scaled_pairs)(x, s)))
    assert "Sum[" not in sj.explain(_scaled_pairs, x, s).jaxpr
    np.testing.assert_array_equal(got, want)  # -0.0 == +0.0
