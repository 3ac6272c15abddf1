"""Issue 24: the planner weighs device bytes, and results come in default layouts.

A slice, a reduction or a broadcast lands in the layout that costs least downstream
(the plan's objective is the device's traffic in bytes, padding included), and a
result comes back in the default layout of its shape, the type a host array gets: so
``x[:4]`` of a default-layout array is no 16-fold padded image, and a program fed its
own results meets the signature it was compiled for.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj


def _default(a):
    """The type a host array of ``a``'s shape and dtype gets."""
    return sj.to_device(np.zeros(a.shape, a.dtype)).type


X = rand((256, 512), jnp.float16)  # f16: 64 per stick, so a slice stuck on dim 0 pads 16x
BIG = rand((1024, 4096), jnp.float16, 2)  # issue 24's case
X3 = rand((4, 16, 96), jnp.float32, 1)
W = rand((96, 40), jnp.float32, 3)

SLICES = {
    "x[:4]": (lambda x: x[:4], BIG),
    "x[1:]": (lambda x: x[1:], BIG),
    "x[:, :64]": (lambda x: x[:, :64], BIG),
    "split": (lambda x: jnp.split(x, 4), X),
    "x[:4] * 2": (lambda x: x[:4] * 2, X),
    "last token": (lambda x: x[:, -1, :], X3),
    "positions": (lambda x: x[0, :8] + 1, X3),
    "last-token logits": (lambda x: (x @ W)[:, -1, :] * 1, X3),
}


@pytest.mark.parametrize("name", SLICES)
def test_a_slice_comes_back_in_the_default_layout_of_its_shape(name):
    f, x = SLICES[name]
    got = sj.jit(f)(sj.to_device(x))
    want = f(x)
    for g, w in zip(*(jax.tree.leaves(t) for t in (got, want)), strict=True):
        assert g.type == _default(w)
        if name == "last-token logits":  # a product of 96 terms
            assert_close(sj.to_host(g), w, reduce_len=96)
        else:
            np.testing.assert_array_equal(sj.to_host(g), w)  # copies and +1: exact


@pytest.mark.parametrize("name", ["x[:4]", "x[1:]", "x[:, :64]", "last token"])
def test_explain_shows_no_padded_slice(name):
    """The device bytes of every value are its data's, up to a stick's rounding."""
    f, x = SLICES[name]
    report = sj.explain(f, jax.ShapeDtypeStruct(x.shape, x.dtype))
    for t in report.tensors:
        if not t.view:  # x[:4] stuck on the sliced dim took 16x its 32,768 bytes
            assert t.device_bytes <= 2 * t.data_bytes, t


def test_a_slice_is_made_dense_not_padded_along_the_sliced_dim():
    f = SLICES["x[:4] * 2"][0]
    lowered = sj.jit(f).lower(sj.to_device(X))
    (cut,) = (n for n in lowered.graph.nodes if n.prim == "slice")
    # 4 rows of 512 float16: 4096 bytes; stuck on the sliced dim they took 65,536. The
    # slice is a view, its window of X's buffer, which the product reads in place.
    layout = lowered.plan.out_type(cut).layout
    assert layout.has_gaps and math.prod(layout.valid_size) * 2 == 4 * 512 * 2
    assert lowered.plan.restickify_cost == 0  # the copy is made so: nothing else moves


def test_a_reduction_over_the_stick_comes_back_dense():
    x = sj.to_device(X)
    rows = sj.jit(lambda x: x.sum(1))(x)
    assert rows.type == _default(rows)  # not one element per stick (16 KiB of sticks)
    assert rows.type.layout.nbytes == 256 * 2


def test_an_argument_returned_as_it_is_and_a_hinted_result_keep_their_types():
    x = sj.to_device(X, dim_order=[1, 0])
    assert sj.jit(lambda x: x)(x).type == x.type
    hinted = sj.jit(lambda x: sj.with_layout(x * 2, dim_order=[1, 0]))(sj.to_device(X))
    assert hinted.type.stick_dim == 0


def test_a_loop_fed_its_results_compiles_once():
    traces = []

    def step(w, m, x):
        traces.append(1)
        g = jnp.tanh(x @ w).T @ x  # made stuck on dim 0 of w's transpose
        m = 0.9 * m + g.T
        return w - 0.1 * m, m, (x @ w).sum()

    w, m, x = rand((96, 40), jnp.float32), np.zeros((96, 40), np.float32), rand((8, 96))
    f = sj.jit(step)
    state = (w, m)
    for _ in range(3):  # host arrays first, then the SpyreArrays it returns
        *state, _ = f(*state, x)
        assert all(s.type == _default(s) for s in state)
    assert len(traces) == 1


def test_an_adamw_training_step_fed_its_outputs_compiles_once():
    """optax's adamw on a small MLP: host arrays at step 1, its own results after."""
    import optax

    opt = optax.adamw(1e-2)
    traces = []

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    def step(p, state, x, y):
        traces.append(1)  # a trace is a plan and a compilation
        value, grads = jax.value_and_grad(loss)(p, x, y)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, value

    p = {"w1": rand((24, 40), seed=4), "b1": rand((40,), seed=5), "w2": rand((40, 8), seed=6)}
    x, y = rand((16, 24), seed=7), rand((16, 8), seed=8)
    f, carry = sj.jit(step), (p, opt.init(p))
    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes dtypes
        for _ in range(3):
            *carry, _ = f(*carry, x, y)
            assert all(a.type == _default(a) for a in jax.tree.leaves(carry))
    assert len(traces) == 1
