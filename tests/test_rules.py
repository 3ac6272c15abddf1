"""Lowering rules for what textbook JAX code emits, each against jax.jit."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj

DTYPES = [jnp.float16, jnp.bfloat16, jnp.float32]
SHAPES = [(3, 150), (4, 64)]  # with and without stick padding


def _check(fn, *args, reduce_len=1, ops=1):
    """sj.jit(fn) against jax.jit(fn), within the rounding of the computation."""
    got = jax.tree.map(sj.to_host, sj.jit(fn)(*args))
    want = jax.jit(fn)(*args)
    chex.assert_trees_all_equal_dtypes(got, want)
    assert_close(got, want, reduce_len=reduce_len, ops=ops)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [*SHAPES, ()], ids=str)
def test_pow_of_a_float_to_an_integer_power(shape, dtype):
    # optax's bias correction: x / (1 - 0.9 ** count) with an int32 step count.
    x = rand(shape, dtype)
    n = jnp.asarray(np.arange(np.prod(shape, dtype=int)).reshape(shape) % 7 + 1, jnp.int32)

    def f(x, n):
        return x / (1 - jax.lax.pow(jnp.asarray(0.9, dtype), n)) + jax.lax.pow(x, n)

    _check(f, x, n, ops=4)
    _check(lambda x, c: x / (1 - jax.lax.pow(jnp.asarray(0.9, dtype), c)), x, jnp.int32(3), ops=3)


def test_pow_primitive_takes_an_integer_exponent_array():
    x, n = rand((3, 70)), jnp.asarray(np.arange(210).reshape(3, 70) % 5, jnp.int32)
    got = sj.to_host(sj.pow(sj.to_device(x), sj.to_device(n)))
    assert_close(got, jax.lax.pow(x, n), ops=2)
    with pytest.raises(sj.SpyreTypeError, match="integer or the values' dtype"):
        sj.pow(sj.to_device(x), sj.to_device(n.astype(jnp.float16)))
