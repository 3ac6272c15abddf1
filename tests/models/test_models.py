"""Whole models through spyrejax.jit, checked with chex against jax.jit on the same inputs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from blocks import attention, rms_norm
from helpers import assert_close, rand
from helpers import assert_matches_jax_jit as _close

import spyrejax as sj


def mlp(x, w1, b1, w2, b2):
    return jax.nn.gelu(x @ w1 + b1) @ w2 + b2


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + eps) * g + b


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("d", [64, 150])
def test_mlp_with_gelu(dtype, d):
    args = (
        rand((8, d), dtype, 0),
        rand((d, 96), dtype, 1, low=-0.2, high=0.2),
        rand((96,), dtype, 2, low=-0.2, high=0.2),
        rand((96, d), dtype, 3, low=-0.2, high=0.2),
        rand((d,), dtype, 4, low=-0.2, high=0.2),
    )
    # Two products (of d and 96 terms), bias adds and gelu's tanh formula: about 8 ops.
    _close(mlp, *args, reduce_len=4 * max(d, 96), ops=8)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16], ids=str)
def test_softmax(dtype):
    # max, subtract, exp, a sum of up to 150 terms, divide.
    _close(lambda x: jax.nn.softmax(x, axis=-1), rand((6, 150), dtype), reduce_len=150, ops=4)
    _close(lambda x: jax.nn.softmax(x, axis=0), rand((6, 150), dtype), reduce_len=6, ops=4)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
def test_layer_norm_and_rms_norm(dtype):
    x, g, b = rand((10, 150), dtype), rand((150,), dtype, 1), rand((150,), dtype, 2)
    # Two means of 150 terms; about six rounded ops on the way (the centred values'
    # error is relative to x, which the division by the deviation keeps near 1).
    _close(layer_norm, x, g, b, reduce_len=4 * 150, ops=7)
    _close(rms_norm, x, g, reduce_len=150, ops=5)


@pytest.mark.parametrize("shape", [(16, 64), (2, 4, 16, 64), (10, 150)], ids=str)
def test_causal_attention(shape):
    q, k, v = (rand(shape, jnp.float32, s, low=-1, high=1) for s in range(3))
    # Scores of d terms, a softmax of t, a product of t terms.
    _close(attention, q, k, v, reduce_len=9 * max(shape[-2:]), ops=8)


def test_equinox_mlp_from_partitioned_model():
    model = eqx.nn.MLP(40, 24, width_size=70, depth=2, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_array)
    x = rand((40,), jnp.float32)

    def run(params, x):
        return eqx.combine(params, static)(x)

    # Three products of up to 70 terms, each with a bias and a relu.
    _close(run, params, x, reduce_len=9 * 70, ops=6)
    # Parameters already on the device, as SpyreArrays.
    on_device = jax.tree.map(sj.to_device, params)
    got = sj.to_host(sj.jit(run)(on_device, x))
    assert_close(got, run(params, x), reduce_len=9 * 70, ops=6)


def test_gradient_of_a_small_loss():
    def loss(w, x, y):
        pred = jnp.tanh(x @ w)
        return jnp.mean((pred - y) ** 2)

    w, x, y = (
        rand((150, 20), jnp.float32, 0, low=-0.2, high=0.2),
        rand((8, 150), jnp.float32, 1),
        rand((8, 20), jnp.float32, 2),
    )
    # Forward: a product of 150 terms, a mean of 160; backward: sums over 8 rows and 20.
    _close(jax.grad(loss), w, x, y, reduce_len=9 * 160, ops=8)
    _close(jax.value_and_grad(loss, argnums=(0, 1)), w, x, y, reduce_len=9 * 160, ops=8)


def test_vmapped_function():
    def f(x, w):
        return jax.nn.softmax(x @ w, axis=-1).sum(0)

    xb, w = rand((3, 5, 150)), rand((150, 70), jnp.float32, 1)
    _close(jax.vmap(f, in_axes=(0, None)), xb, w, reduce_len=9 * 150, ops=6)


def test_transformer_block():
    d, h, t = 64, 2, 16

    def block(x, wq, wk, wv, wo, g1, w1, w2, g2):
        y = rms_norm(x, g1)
        q, k, v = ((y @ w).reshape(t, h, d // h).transpose(1, 0, 2) for w in (wq, wk, wv))
        a = attention(q, k, v).transpose(1, 0, 2).reshape(t, d)
        x = x + a @ wo
        return x + jax.nn.gelu(rms_norm(x, g2) @ w1) @ w2

    ws = [rand((d, d), jnp.float32, i, low=-0.2, high=0.2) for i in range(4)]
    args = (
        rand((t, d)),
        *ws,
        rand((d,), jnp.float32, 5),
        rand((d, 128), jnp.float32, 6, low=-0.2, high=0.2),
    )
    args = (*args, rand((128, d), jnp.float32, 7, low=-0.2, high=0.2), rand((d,), jnp.float32, 8))
    # Norms, three projections, attention, two more products: a chain of about six
    # sums of up to 128 terms and about thirty rounded ops.
    _close(block, *args, reduce_len=36 * 128, ops=30)
