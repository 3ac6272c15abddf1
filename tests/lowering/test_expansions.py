"""Primitives the graph replaces by JAX code in other primitives: they run on the device.

``tile`` (a broadcast and a reshape), JAX's own hijax primitives (``jnp.searchsorted``,
``jnp.nonzero``, ``jnp.ldexp``, ``jnp.frexp``, ``jax.random.choice`` through them) and
``checkpoint_name`` (an identity) used to fall back to the host.
"""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, assert_matches_jax_jit, rand
from jax.ad_checkpoint import checkpoint_name

import spyrejax as sj


def _same(fn, *args):
    """``sj.jit(fn)`` gives what ``jax.jit(fn)`` gives, bit for bit, with no fallback."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyreFallbackWarning)
        assert sj.explain(fn, *args).fallbacks == ()
    return assert_matches_jax_jit(fn, *args, exact=True)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("shape", "reps"),
    [((3, 10), (1, 2)), ((3, 64), (2, 1)), ((2, 3, 37), (2, 1, 3)), ((70,), (3,))],
    ids=str,
)
def test_tile(shape, reps, dtype):
    x = rand(shape, dtype)
    _same(lambda x: jnp.tile(x, reps), x)
    w = rand(tuple(n * r for n, r in zip(shape, reps, strict=True)), dtype, 1)
    grad = jax.grad(lambda x: (jnp.tile(x, reps) * w).astype(jnp.float32).sum())
    got, want = sj.to_host(sj.jit(grad)(x)), jax.jit(grad)(x)
    assert_close(got, want, reduce_len=int(np.prod(reps)))  # sums over the copies


def test_equinox_rotary_embedding_runs_on_the_device():
    """``eqx.nn.RotaryPositionalEmbedding`` tiles its sin and cos tables."""
    rope = eqx.nn.RotaryPositionalEmbedding(20)

    def f(q):  # q[seq, heads, head dim], as equinox's attention hands it over
        return jax.vmap(rope, in_axes=1, out_axes=1)(q)

    q = rand((12, 4, 20))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyreFallbackWarning)
        assert sj.explain(f, q).fallbacks == ()
    assert_close(sj.to_host(sj.jit(f)(q)), jax.jit(f)(q), ops=3)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side):
    x = rand((70,), low=-2, high=2)
    queries = jnp.concatenate([rand((30,), seed=1), jnp.sort(x)[::7]])  # ties too
    _same(lambda x, q: jnp.searchsorted(jnp.sort(x), q, side=side), x, queries)


def test_interp():
    """searchsorted, gathers, and a constant reshaped from a scalar (linspace's end)."""
    x = rand((70,), low=-2.5, high=2.5)
    fn = lambda x: jnp.interp(x, jnp.linspace(-2.0, 2.0, 5), jnp.arange(5.0) ** 2)  # noqa: E731
    assert_close(sj.to_host(sj.jit(fn)(x)), jax.jit(fn)(x), ops=4, scale=16.0)


def test_nonzero_with_a_size():
    x = rand((3, 37), seed=2)
    _same(lambda x: jnp.nonzero(x > 0.5, size=20, fill_value=-1), x)
    _same(lambda x: jnp.argwhere(x[0] < 0.0, size=8), x)


def test_ldexp_and_frexp():
    x, e = rand((3, 37)) * 100.0, jnp.arange(-6, 5, dtype=jnp.int32)
    _same(lambda x, e: jnp.ldexp(x[:, :11], e), x, e)
    _same(jnp.frexp, x)


def test_random_choice_with_probabilities():
    logits = rand((70,))
    _same(
        lambda k, lg: jax.random.choice(k, 70, (5,), p=jax.nn.softmax(lg)),
        jax.random.key(3),
        logits,
    )


def test_checkpoint_name_and_a_remat_policy():
    def f(x):
        h = checkpoint_name(jnp.sin(x) * 2.0, "h")
        return (h * h).sum()

    policy = jax.checkpoint_policies.save_only_these_names("h")
    grad = jax.grad(jax.checkpoint(f, policy=policy))
    x = rand((3, 70))
    _same(lambda x: checkpoint_name(x * 2.0, "h"), x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyreFallbackWarning)
        assert sj.explain(grad, x).fallbacks == ()
    assert_close(sj.to_host(sj.jit(grad)(x)), jax.jit(grad)(x), ops=4)
