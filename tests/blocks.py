"""Small models several test files run: RMS norm, attention, a transformer block, a CNN.

Shared here (not imported from one test file into another) because the test files live in
folders of their own.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from helpers import rand


def rms_norm(x, g, eps=1e-6):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + eps) * g


def attention(q, k, v):
    t, d = q.shape[-2], q.shape[-1]
    s = jnp.einsum("...qd,...kd->...qk", q, k) / jnp.sqrt(jnp.asarray(d, q.dtype))
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, jnp.asarray(-1e9, s.dtype))
    return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v)


D, H, T = 64, 2, 16


def _block(x, wq, wk, wv, wo, g1, w1, w2, g2):
    y = rms_norm(x, g1)
    q, k, v = ((y @ w).reshape(T, H, D // H).transpose(1, 0, 2) for w in (wq, wk, wv))
    a = attention(q, k, v).transpose(1, 0, 2).reshape(T, D)
    x = x + a @ wo
    return x + jax.nn.gelu(rms_norm(x, g2) @ w1) @ w2


def _two_layers(x, *weights):
    return _block(_block(x, *weights), *weights)


def _weights():
    ws = [rand((D, D), jnp.float32, i, low=-0.2, high=0.2) for i in range(4)]
    return (
        *ws,
        rand((D,), jnp.float32, 5),
        rand((D, 128), jnp.float32, 6, low=-0.2, high=0.2),
        rand((128, D), jnp.float32, 7, low=-0.2, high=0.2),
        rand((D,), jnp.float32, 8),
    )


class CNN(eqx.Module):
    """conv-relu-maxpool-conv-relu-avgpool-flatten-linear, on one image."""

    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    pool1: eqx.nn.MaxPool2d
    pool2: eqx.nn.AvgPool2d
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(1, 8, 3, padding=1, key=k1)
        self.conv2 = eqx.nn.Conv2d(8, 16, 3, padding=1, key=k2)
        self.pool1 = eqx.nn.MaxPool2d(2, 2)
        self.pool2 = eqx.nn.AvgPool2d(2, 2)
        self.head = eqx.nn.Linear(16 * 4 * 4, 10, key=k3)

    def __call__(self, x):
        x = self.pool1(jax.nn.relu(self.conv1(x)))
        x = self.pool2(jax.nn.relu(self.conv2(x)))
        return self.head(x.reshape(-1))
