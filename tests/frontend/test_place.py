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
    """Placed only where every reader is a product reading it as its weight."""

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
    assert "'b'" not in message  # b @ x.T: x.T is an argument's view, b the lhs
    # einsum("mk,nk->mn", x, v): both operands arguments, each contracted over its last
    # dim by the product (vmapped W @ x too): which is the weight is not known, both named.
    for name in "vx":
        assert f"(parameter '{name}'): its product's other operand is an argument too" in message


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


def test_a_cast_lhs_weight_is_named_as_a_cast_rhs_weight_is():
    """``W.astype(bf16) @ h.astype(bf16)``: W is the product's weight, converted first."""
    big_w = sj.to_device(rand((24, 40), seed=1))
    x = sj.to_device(rand((40, 8)))
    with pytest.warns(sj.SpyrePlacementWarning) as caught:
        placed = sj.jit(
            lambda w, x: w.astype(jnp.bfloat16) @ jnp.tanh(x).astype(jnp.bfloat16)
        ).place(big_w, x)
    assert placed[0] is big_w and placed[1] is x
    (message,) = (str(w.message) for w in caught)
    assert "(parameter 'w'): it is converted to bfloat16 before its product" in message
    assert "'x'" not in message  # tanh(x) is computed: x is no product's operand


def test_a_weight_read_as_w_t_or_as_the_lhs_is_placed_where_its_product_reads_it():
    """``h @ w.T`` reads w's transpose as B row-major, ``W @ h.T`` reads W as A row-major."""

    def f(x, w, big_w):
        h = jnp.tanh(x)
        return h @ w.T, big_w @ h.T

    x, w, big_w = rand((24, 100)), rand((72, 100), seed=1), rand((40, 100), seed=2)
    jf = sj.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyrePlacementWarning)
        px, pw, pbig = jf.place(*(sj.to_device(a) for a in (x, w, big_w)))
    assert _row_major(pbig) and not _row_major(pw) and not _row_major(px)
    transposed = sj.SpyreTensorLayout.row_major([100, 72], np.float32, host_strides=[1, 100])
    assert jax.typeof(pw).layout == transposed
    # Only h is relaid (stuck on its 24 rows as W @ h.T's B); both weights read in place.
    assert sj.explain(jf, px, pw, pbig).restickify_cost == 24 * 128
    assert sj.explain(jf, *(sj.to_device(a) for a in (x, w, big_w))).restickify_cost > 24 * 128
    for got, want in zip(jf(px, pw, pbig), f(x, w, big_w), strict=True):
        assert_close(sj.to_host(got), want, reduce_len=100, ops=2)


def test_an_equinox_mlp_has_its_weights_placed():
    """``Linear`` computes ``W @ x``; under ``vmap`` each weight is a product's lhs."""
    eqx = pytest.importorskip("equinox")
    sizes, keys = [20, 40, 48, 30], jax.random.split(jax.random.key(0), 3)
    layers = [eqx.nn.Linear(sizes[j], sizes[j + 1], key=keys[j]) for j in range(3)]

    def f(layers, x):
        def one(x):
            for layer in layers[:-1]:
                x = jax.nn.relu(layer(x))
            return layers[-1](x)

        return jax.vmap(one)(x)

    x = rand((8, 20), seed=4)
    jf = sj.jit(f)
    on_device = jax.tree.map(sj.to_device, (layers, x))
    with pytest.warns(sj.SpyrePlacementWarning) as caught:
        placed, px = jf.place(*on_device)
    assert [_row_major(layer.weight) for layer in placed] == [False, True, True]
    # The first layer's W @ x reads two arguments alike: both are named, not guessed.
    (message,) = (str(w.message) for w in caught)
    assert "[0].weight" in message and "(parameter 'x')" in message
    assert_close(sj.to_host(jf(placed, px)), jax.jit(f)(layers, x), reduce_len=48, ops=3)


def test_a_weight_split_into_heads_is_placed_for_its_product_as_written():
    # (x @ w).reshape(T, H, 80) is planned as a product over heads (lowering._heads:
    # dot_general(x, w.reshape(K, H, 80))), so w's one reader is that reshape; place
    # reads the product as written, which reads w in place row-major (the per-head
    # product relays it in LX as it loads it).
    def f(x, w):
        q = (x @ w).reshape(4, 2, 80)
        return jnp.concatenate([-q[..., 40:], q[..., :40]], -1) * 2.0

    x = rand((4, 160), jnp.float16, seed=1)
    w = rand((160, 160), jnp.float16, seed=2, low=-0.1, high=0.1)
    jf = sj.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.SpyrePlacementWarning)
        px, pw = jf.place(sj.to_device(x), sj.to_device(w))
    assert _row_major(pw) and not _row_major(px)
    report = sj.explain(f, px, pw)
    assert report.jaxpr.count("= LoadRelayout") == 1 and report.copy_cost == 0
    assert [r.in_lx for r in report.restickifies] == [True]
    assert_close(sj.to_host(jf(px, pw)), f(x, w), reduce_len=160, ops=2)
