"""Lowering rules for what textbook JAX code emits, each against jax.jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand
from helpers import assert_matches_jax_jit as _check

import spyrejax as sj

DTYPES = [jnp.float16, jnp.bfloat16, jnp.float32]
SHAPES = [(3, 150), (4, 64)]  # with and without stick padding


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


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bitcast_convert_type_reads_the_same_bits(shape):
    x = rand(shape)

    def f(x):
        bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
        hi = jax.lax.bitcast_convert_type(bits & jnp.uint32(0xFFFFF000), jnp.float32)
        return hi, x - hi, jax.lax.bitcast_convert_type(x, jnp.int32) >> 23

    got = jax.tree.map(sj.to_host, sj.jit(f)(x))
    want = jax.jit(f)(x)
    for g, w in zip(got, want, strict=True):  # bit manipulations: exact
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    h = sj.to_device(rand(shape, jnp.float16))
    assert sj.primitives.bitcast(h, jnp.bfloat16).layout == h.layout  # no data moves
    with pytest.raises(sj.SpyreTypeError, match="width"):
        sj.primitives.bitcast(h, jnp.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gradients_of_erf_and_exact_gelu(shape, dtype):
    x = rand(shape, dtype, low=-3.0, high=3.0)

    def f(x):
        def loss(x):
            return (jax.nn.gelu(x, approximate=False) + jax.lax.erf(x)).sum()

        return jax.grad(loss)(x)

    # JAX's float32 erf derivative splits x^2 into exact halves through uint32 bits;
    # a handful of rounded ops on the way.
    _check(f, x, ops=8)


def test_polynomial_is_horners_loop():
    x = rand((3, 70))
    c = rand((3, 70), seed=1)
    _check(lambda x: jax.lax.polynomial(x, [1.0, 0.5, 1 / 6, 1 / 24]), x, ops=6)
    _check(lambda x, c: jax.lax.polynomial(x, [c, 2.0, c]), x, c, ops=4)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_strided_slices_and_their_gradients(shape, dtype):
    x = rand(shape, dtype)

    def f(x):
        return x[:, ::2] * 2, x[1:, 3::3], x[::-1, 1::5]

    _check(f, x)
    # The transpose of a strided slice is a pad with interior padding.
    _check(jax.grad(lambda x: (x[:, 1::3] ** 2).sum()), x, ops=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_interior_padding(shape, dtype):
    x = rand(shape, dtype)
    _check(lambda x: jax.lax.pad(x, jnp.asarray(0.5, dtype), ((1, 0, 2), (-1, 3, 1))), x)


@pytest.mark.parametrize("s", [0.7, -0.2, 0.0])
def test_where_with_literal_operands_at_0d(s):
    s = jnp.float32(s)
    _check(lambda s: jnp.where(s > 0, 0.0, 1.0) * s + jnp.where(s < 0, s, 2.0), s)
    _check(jax.grad(lambda s: jnp.maximum(s, 0.0) + jax.nn.elu(s) * 3), s, ops=2)
    xs = jnp.linspace(-1.0, 1.0, 70, dtype=jnp.float32)  # and under vmap, padded
    _check(jax.vmap(lambda s: jnp.where(s > 0, 0.0, 1.0)), xs)
