"""jax.grad of a spyrejax.jit function keeps the function's own derivative rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj


@jax.custom_vjp
def _clip_gradient(x):
    return x


_clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))

# Functions whose derivative is not that of their primitives: relu's rule says 0 at 0
# (lax.max's tie says 0.5), softmax and logsumexp stop the gradient of their max,
# gelu's erf derivative is a custom_jvp, the clip is a custom_vjp.
FUNCTIONS = {
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),
    "softmax": lambda x: jax.nn.softmax(x, axis=-1) * jnp.arange(x.shape[-1], dtype=x.dtype),
    "logsumexp": lambda x: jax.nn.logsumexp(x, axis=-1),
    "stop_gradient": lambda x: jax.lax.stop_gradient(x) * x,
    "custom_vjp": lambda x: _clip_gradient(x) * 5,
}


def _input(shape):
    return rand(shape, low=-2.0, high=2.0).at[0, :5].set(0.0)  # relu's tie at 0


def _host(jit, y):
    return sj.to_host(y) if jit is sj.jit else y


def _loss(f, jit):
    """The sum of every result of ``f`` (a dict of arrays), ``f`` run under ``jit``."""

    def loss(x):
        return sum(_host(jit, y).sum() for y in jit(f)(x).values())

    return loss


def _all(xs):
    """Every function of FUNCTIONS on its own input, side by side in one program."""
    return {name: FUNCTIONS[name](x) for name, x in xs.items()}


@pytest.mark.parametrize("shape", [(3, 70), (2, 64)], ids=str)
def test_grad_of_jit_matches_grad_of_jax_jit(shape):
    # One program of all the functions (one compile per jit and transform instead of one
    # per function): the loss is the sum of their losses, each on its own input, so the
    # gradient of each input is its function's alone, checked as each function alone was.
    xs = {name: _input(shape) for name in FUNCTIONS}
    want = jax.grad(_loss(_all, jax.jit))(xs)
    got = {
        "": jax.grad(_loss(_all, sj.jit))(xs),
        # A Spyre array input, and the whole gradient under jax.jit.
        "on device": jax.grad(lambda xs: _loss(_all, sj.jit)(jax.tree.map(sj.to_device, xs)))(xs),
        "under jax.jit": jax.jit(jax.grad(_loss(_all, sj.jit)))(xs),
    }
    failures = []
    for how, grads in got.items():
        for name in FUNCTIONS:
            try:
                assert_close(grads[name], want[name], reduce_len=shape[-1], ops=4)
            except AssertionError as error:  # collected, raised below
                failures.append(f"[{name} {how}] {error}")
    assert not failures, "\n".join(failures)


def test_value_and_grad_with_integer_inputs_and_several_outputs():
    def f(x, n, w):
        return jax.nn.relu(x * n.astype(x.dtype)) @ w, n + 1

    x, w, n = _input((3, 70)), rand((70, 5), seed=1), jnp.int32(2)

    def loss(jit):
        def run(x, w):
            y, m = (_host(jit, v) for v in jit(f)(x, n, w))
            return y.sum() * m.astype(y.dtype)

        return jax.value_and_grad(run, argnums=(0, 1))

    assert_close(loss(sj.jit)(x, w), loss(jax.jit)(x, w), reduce_len=70 * 15, ops=4)


def test_vmap_of_a_function_with_derivative_rules():
    x = _input((3, 70))
    for f in (jax.nn.relu, lambda r: jax.nn.logsumexp(r) + jax.lax.stop_gradient(r).sum()):
        got = jax.vmap(lambda r, f=f: sj.to_host(sj.jit(f)(r)))(x)
        assert_close(got, jax.vmap(f)(x), reduce_len=70, ops=4)


def test_grad_of_vmap_keeps_the_derivative_rules():
    # The backward pass under vmap reads batched Spyre results in their batched layouts
    # (primitives._mapping moves what is not in place): relu's tie at 0 as jax.jit's.
    x = _input((3, 70))
    got = jax.grad(lambda x: sj.to_host(jax.vmap(sj.jit(jax.nn.relu))(x)).sum())(x)
    want = jax.grad(lambda x: jax.nn.relu(x).sum())(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    per_row = jax.vmap(jax.grad(lambda r: sj.to_host(sj.jit(lambda r: jax.nn.relu(r).sum())(r))))
    np.testing.assert_array_equal(np.asarray(sj.to_host(per_row(x))), np.asarray(want))
