"""``SpyreJit.place``: weights moved once into the layout their products read in place."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj
from spyrejax.primitives._array import PadFill


def _mlp(x, w1, w2):
    return jax.nn.relu(x @ w1) @ w2


def _row_major(a):
    t = jax.typeof(a)
    return t.layout == sj.SpyreTensorLayout.row_major(t.shape, t.dtype) and t.pad is PadFill.ZERO


def test_weights_placed_row_major_and_the_rest_as_given():
    x, w1, w2 = rand((24, 100)), rand((100, 72), seed=1), rand((72, 40), seed=2)
    f = sj.jit(_mlp)
    dx, d1, d2 = (sj.to_device(a) for a in (x, w1, w2))
    px, p1, p2 = f.place(dx, d1, d2)
    assert px is dx  # the lhs of a product keeps its layout
    assert _row_major(p1) and _row_major(p2)
    assert_close(sj.to_host(f(px, p1, p2)), _mlp(x, w1, w2), reduce_len=100, ops=2)
    np.testing.assert_array_equal(sj.to_host(p1), w1)  # the same values, another layout
    # Placed weights stay placed (a fixed point); a host weight is moved into the layout.
    assert all(a is b for a, b in zip(f.place(px, p1, p2), (px, p1, p2), strict=True))
    _, h1, _ = f.place(dx, w1, d2)
    assert _row_major(h1)


def test_a_weight_read_otherwise_is_left_as_it_is():
    """Placed only where every reader is a product reading it as ``x @ w``."""

    def f(x, w, v, b):
        return (x @ w) + w[0], jnp.einsum("mk,nk->mn", x, v), jnp.dot(b, x.T)

    x, w, v = rand((8, 40)), rand((40, 40), seed=1), rand((24, 40), seed=2)
    b = rand((5, 40), seed=3)
    args = tuple(sj.to_device(a) for a in (x, w, v, b))
    with pytest.warns(sj.SpyrePlacementWarning) as caught:
        placed = sj.jit(f).place(*args)
    assert all(p is a for p, a in zip(placed, args, strict=True))
    (message,) = (str(w.message) for w in caught)
    assert "(parameter 'w'): it is also read by slice" in message
    assert "(parameter 'v'): its product contracts it in another dim order" in message
    assert "'x'" not in message and "'b'" not in message  # no product's rhs


def test_params_in_a_pytree_with_static_arguments():
    def f(p, x, act):
        return act(x @ p["w"]) + p["b"]

    p = {"w": sj.to_device(rand((32, 48), seed=1)), "b": sj.to_device(rand((48,), seed=2))}
    x = sj.to_device(rand((4, 32)))
    jf = sj.jit(f, static_argnums=2)
    q, y, act = jf.place(p, x, jax.nn.gelu)
    assert _row_major(q["w"]) and q["b"] is p["b"] and y is x and act is jax.nn.gelu
    assert_close(sj.to_host(jf(q, y, act)), sj.to_host(jf(p, x, act)), reduce_len=32, ops=2)


def test_place_says_which_operands_of_products_it_left_and_why():
    """A float32 x with bfloat16 weights: the weights are converted first, nothing placed."""

    def f(x, w, v, b):
        return x @ w.astype(jnp.float32) + (x @ v) + b, v[0]

    x, v = rand((8, 40)), rand((40, 24), seed=2)
    w = rand((40, 24), seed=1).astype(jnp.bfloat16)
    b = rand((24,), seed=3)
    args = tuple(sj.to_device(a) for a in (x, w, v, b))
    with pytest.warns(sj.SpyrePlacementWarning) as caught:
        placed = sj.jit(f).place(*args)
    assert all(p is a for p, a in zip(placed, args, strict=True))
    (message,) = (str(w.message) for w in caught)
    assert "(parameter 'w'): it is converted to float32 before its product" in message
    assert "(parameter 'v'): it is also read by slice" in message  # v[0] reads it too
    assert "'x'" not in message and "'b'" not in message  # x is the lhs; b no operand


def test_place_of_weights_it_places_warns_of_nothing():
    x, w = sj.to_device(rand((8, 40))), sj.to_device(rand((40, 24), seed=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyrePlacementWarning)
        _, pw = sj.jit(lambda x, w: x @ w).place(x, w)
    assert _row_major(pw)


def test_a_cast_activation_is_no_weight_it_names():
    """``x.astype(bf16) @ w``: the cast value is the lhs; w is placed, x not named."""
    x = sj.to_device(rand((8, 40)))
    w = sj.to_device(rand((40, 24), seed=1).astype(jnp.bfloat16))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyrePlacementWarning)
        px, pw = sj.jit(lambda x, w: x.astype(jnp.bfloat16) @ w).place(x, w)
    assert px is x and _row_major(pw)
