import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, compiles, rand

import spyrejax as sj
from spyrejax.primitives import SpyrePrim, recording

RNG = np.random.default_rng(0)
X = rand((6, 150), jnp.float32, RNG)
Y = rand((6, 150), jnp.float32, RNG)
W = rand((150, 40), jnp.float32, RNG)

# Pairs (spyrejax version on host arrays, plain JAX version).
FUNCTIONS = {
    "elementwise": (
        lambda x, y: sj.to_host(
            sj.tanh(sj.to_device(x)) * sj.sigmoid(sj.to_device(y)) + sj.exp(sj.to_device(x) / 4.0)
        ),
        lambda x, y: jnp.tanh(x) * jax.nn.sigmoid(y) + jnp.exp(x / 4.0),
    ),
    "activations": (
        lambda x, y: sj.to_host(
            sj.gelu(sj.to_device(x)) + sj.silu(sj.to_device(y)) - sj.relu(sj.to_device(x))
        ),
        lambda x, y: jax.nn.gelu(x) + jax.nn.silu(y) - jax.nn.relu(x),
    ),
    "where_max": (
        lambda x, y: sj.to_host(
            sj.where(sj.to_device(x) > 0, sj.maximum(sj.to_device(x), sj.to_device(y)), 0.5)
        ),
        lambda x, y: jnp.where(x > 0, jnp.maximum(x, y), 0.5),
    ),
    "reductions": (
        lambda x, y: sj.to_host(sj.sum(sj.to_device(x), 1) + sj.max(sj.to_device(y), 1)),
        lambda x, y: jnp.sum(x, 1) + jnp.max(y, 1),
    ),
    "mean_axis0": (
        lambda x, y: sj.to_host(sj.mean(sj.to_device(x) * sj.to_device(y), 0)),
        lambda x, y: jnp.mean(x * y, 0),
    ),
    "matmul": (
        lambda x, y: sj.to_host(sj.to_device(x) @ sj.to_device(W) + 1.0),
        lambda x, y: x @ W + 1.0,
    ),
    "views_and_restickify": (
        lambda x, y: sj.to_host(sj.restickify(sj.to_device(x).T) * 2.0).T,
        lambda x, y: 2.0 * x,
    ),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_grad_matches_plain_jax(name):
    spy, ref = FUNCTIONS[name]

    def loss(f):
        return lambda x, y: jnp.sum(f(x, y) ** 2)

    got = jax.grad(loss(spy), argnums=(0, 1))(X, Y)
    want = jax.grad(loss(ref), argnums=(0, 1))(X, Y)
    # At most a product of 150 terms forward and of 40 back, and a few rounded ops.
    assert_close(got, want, reduce_len=150 * 40, ops=6)
    jitted = jax.jit(jax.grad(loss(spy), argnums=(0, 1)))(X, Y)
    assert_close(jitted, want, reduce_len=150 * 40, ops=6)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vmap_matches_plain_jax(name):
    spy, ref = FUNCTIONS[name]
    xb = jnp.stack([X, 2 * X, -X])
    yb = jnp.stack([Y, Y, 3 * Y])
    want = jax.vmap(ref)(xb, yb)
    assert_close(jax.vmap(spy)(xb, yb), want, reduce_len=150, ops=4)
    # One argument batched, the other not.
    want = jax.vmap(ref, in_axes=(0, None))(xb, Y)
    assert_close(jax.vmap(spy, in_axes=(0, None))(xb, Y), want, reduce_len=150, ops=4)


def test_vmap_of_a_batch_dim_that_is_not_first():
    xb = jnp.stack([X, 2 * X], axis=1)  # (6, 2, 150)
    out = jax.vmap(lambda x: sj.to_host(sj.exp(sj.to_device(x))), in_axes=1)(xb)
    assert_close(out, jnp.exp(jnp.moveaxis(xb, 1, 0)))


def test_vmap_over_spyre_arrays_maps_any_dim():
    xb = jnp.stack([X, 2 * X, 3 * X])
    a = sj.to_device(xb, dim_order=[1, 0, 2])  # batch is the outermost device dim
    out = jax.vmap(lambda a: a * 2.0)(a)
    assert isinstance(out, sj.SpyreArray) and out.shape == xb.shape
    assert_close(sj.to_host(out), 2 * xb)
    made = jax.vmap(sj.to_device)(xb)
    assert made.layout.device_size[0] == 3
    np.testing.assert_array_equal(sj.to_host(made), xb)  # a transfer: exact
    # A batch dim that is not outermost is restickified first (tests/primitives/test_mapping.py).
    assert_close(sj.to_host(jax.vmap(lambda a: a * 2.0)(sj.to_device(xb))), 2 * xb)
    moved = jax.vmap(lambda a: a * 2.0, in_axes=1)(a)
    assert_close(sj.to_host(moved), 2 * jnp.moveaxis(xb, 1, 0))


def test_primitive_without_a_batch_rule_names_itself_and_vmap():
    class NoBatch(SpyrePrim):
        def __init__(self, aval, *, k):
            self.in_avals, self.out_aval, self.params = (aval,), aval, {"k": k}
            super().__init__()

        def kernel(self, img):
            return img * self.k

    def f(x):
        a = sj.to_device(x)
        return sj.to_host(NoBatch(jax.typeof(a), k=2.0)(a))

    assert_close(f(X), 2 * X)
    with pytest.raises(
        sj.SpyreUnsupportedError, match="primitive NoBatch does not support the transformation"
    ):
        jax.vmap(f)(jnp.stack([X, X]))


def test_jvp_and_forward_mode():
    spy, ref = FUNCTIONS["elementwise"]
    tx, ty = jnp.ones_like(X), jnp.zeros_like(Y)
    got = jax.jvp(spy, (X, Y), (tx, ty))
    want = jax.jvp(ref, (X, Y), (tx, ty))
    assert_close(got, want, ops=4)


def _bits(tree):
    return [np.asarray(sj.to_host(v)).view(np.uint32) for v in jax.tree.leaves(tree)]


def test_eager_autodiff_runs_each_rule_as_one_program():
    # Outside jax.jit, jax.vjp and jax.jvp apply each primitive's rule to concrete values:
    # each rule runs as one program keyed like the primitive's eager call (not its jnp ops
    # compiled one by one, ~20 programs for a matmul's transpose). Shapes no other test
    # uses, so the first call compiles: at most one program a primitive and rule.
    x, w = rand((7, 131), seed=3), rand((131, 45), seed=4)
    a, b = sj.to_device(x), sj.to_device(w)

    def f(a, b):
        return sj.tanh(a @ b)

    def vjp(a, b):
        out, back = jax.vjp(f, a, b)
        return out, back(out)

    def jvp(a, b):
        return jax.jvp(f, (a, b), (a, b))

    prims = 2  # the matmul and the tanh
    other = sj.to_device(np.asarray(x) * 0.5)
    for how in (vjp, jvp):
        with compiles() as first:
            got = how(a, b)
        # forward calls (vjp) or rules (jvp), and transposes (vjp)
        assert len(first) <= 2 * prims, first
        with compiles() as again:
            how(other, b)
        assert again == []  # the same types: every program reused
        want = jax.jit(how)(a, b)
        for g, j in zip(_bits(got), _bits(want), strict=True):
            np.testing.assert_array_equal(g, j)  # the rule's program is jax.jit's


def test_an_eager_call_on_new_types_is_recorded_once():
    # The eager jit traces the primitive again inside its program: a recorder sees the
    # call once, with the concrete result, on the first call of new types as on repeats.
    a = sj.to_device(rand((5, 77), seed=8))  # a shape no other test uses: a fresh key
    seen = []
    with recording(lambda prim, args, out: seen.append((type(prim).__name__, out))):
        sj.tanh(a)
        sj.tanh(a)
    assert [name for name, _ in seen] == ["Tanh", "Tanh"], seen
    assert all(not isinstance(out, jax.core.Tracer) for _, out in seen)
