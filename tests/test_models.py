"""Whole models through spyrejax.jit, checked with chex against jax.jit on the same inputs."""

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spyrejax as sj

TOL = {
    np.dtype(jnp.float32): {"rtol": 2e-4, "atol": 2e-4},
    np.dtype(jnp.float16): {"rtol": 2e-2, "atol": 2e-2},
    np.dtype(jnp.bfloat16): {"rtol": 1e-1, "atol": 1e-1},
}


def _close(fn, *args, dtype=jnp.float32):
    got = jax.tree.map(sj.to_host, sj.jit(fn)(*args))
    want = jax.jit(fn)(*args)
    chex.assert_trees_all_close(
        jax.tree.map(lambda x: x.astype(jnp.float32), got),
        jax.tree.map(lambda x: x.astype(jnp.float32), want),
        **TOL[np.dtype(dtype)],
    )
    chex.assert_trees_all_equal_dtypes(got, want)


def _rand(shape, dtype=jnp.float32, seed=0, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape) * scale, dtype)


def mlp(x, w1, b1, w2, b2):
    return jax.nn.gelu(x @ w1 + b1) @ w2 + b2


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + eps) * g + b


def rms_norm(x, g, eps=1e-6):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + eps) * g


def attention(q, k, v):
    t, d = q.shape[-2], q.shape[-1]
    s = jnp.einsum("...qd,...kd->...qk", q, k) / jnp.sqrt(jnp.asarray(d, q.dtype))
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, jnp.asarray(-1e9, s.dtype))
    return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("d", [64, 150])
def test_mlp_with_gelu(dtype, d):
    args = (
        _rand((8, d), dtype, 0),
        _rand((d, 96), dtype, 1, 0.1),
        _rand((96,), dtype, 2, 0.1),
        _rand((96, d), dtype, 3, 0.1),
        _rand((d,), dtype, 4, 0.1),
    )
    _close(mlp, *args, dtype=dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16], ids=str)
def test_softmax(dtype):
    _close(lambda x: jax.nn.softmax(x, axis=-1), _rand((6, 150), dtype), dtype=dtype)
    _close(lambda x: jax.nn.softmax(x, axis=0), _rand((6, 150), dtype), dtype=dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
def test_layer_norm_and_rms_norm(dtype):
    x, g, b = _rand((10, 150), dtype), _rand((150,), dtype, 1), _rand((150,), dtype, 2)
    _close(layer_norm, x, g, b, dtype=dtype)
    _close(rms_norm, x, g, dtype=dtype)


@pytest.mark.parametrize("shape", [(16, 64), (2, 4, 16, 64), (10, 150)], ids=str)
def test_causal_attention(shape):
    q, k, v = (_rand(shape, jnp.float32, s, 0.5) for s in range(3))
    _close(attention, q, k, v)


def test_equinox_mlp_from_partitioned_model():
    model = eqx.nn.MLP(40, 24, width_size=70, depth=2, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_array)
    x = _rand((40,), jnp.float32)

    def run(params, x):
        return eqx.combine(params, static)(x)

    _close(run, params, x)
    # Parameters already on the device, as SpyreArrays.
    on_device = jax.tree.map(sj.to_device, params)
    got = sj.to_host(sj.jit(run)(on_device, x))
    chex.assert_trees_all_close(got, run(params, x), rtol=2e-4, atol=2e-4)


def test_gradient_of_a_small_loss():
    def loss(w, x, y):
        pred = jnp.tanh(x @ w)
        return jnp.mean((pred - y) ** 2)

    w, x, y = _rand((150, 20), seed=0, scale=0.1), _rand((8, 150), seed=1), _rand((8, 20), seed=2)
    _close(jax.grad(loss), w, x, y)
    _close(jax.value_and_grad(loss, argnums=(0, 1)), w, x, y)


def test_vmapped_function():
    def f(x, w):
        return jax.nn.softmax(x @ w, axis=-1).sum(0)

    xb, w = _rand((3, 5, 150)), _rand((150, 70), seed=1)
    _close(jax.vmap(f, in_axes=(0, None)), xb, w)


def test_transformer_block():
    d, h, t = 64, 2, 16

    def block(x, wq, wk, wv, wo, g1, w1, w2, g2):
        y = rms_norm(x, g1)
        q, k, v = ((y @ w).reshape(t, h, d // h).transpose(1, 0, 2) for w in (wq, wk, wv))
        a = attention(q, k, v).transpose(1, 0, 2).reshape(t, d)
        x = x + a @ wo
        return x + jax.nn.gelu(rms_norm(x, g2) @ w1) @ w2

    ws = [_rand((d, d), seed=i, scale=0.1) for i in range(4)]
    args = (_rand((t, d)), *ws, _rand((d,), seed=5), _rand((d, 128), seed=6, scale=0.1))
    args = (*args, _rand((128, d), seed=7, scale=0.1), _rand((d,), seed=8))
    _close(block, *args)
