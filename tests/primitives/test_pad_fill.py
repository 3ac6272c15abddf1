"""Padding that holds a reduction's identity (``pad=-inf``, ``pad=0``) is reduced unmasked.

``to_device(x, pad_value=-inf)`` promises the max's identity in the padding, so a max
or a softmax reads the image as it is; every op that writes a fresh image states its own
fill, so what it makes of the padding (``-x`` turns -inf into +inf) is masked again.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand
from hypothesis import given, settings
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.lowering.program._softmax import softmax_chains
from spyrejax.primitives import wrap
from spyrejax.primitives._array import PadFill
from spyrejax.primitives._masks import data_mask, holds_identity

SHAPE = (6, 40)  # 40 float32 pad to 64: a partial last stick


def _neg_inf(x):
    return sj.to_device(x, pad_value=-np.inf)


def _lie(x, fill):
    """``x`` on the device with ``fill`` in its padding, its type promising -inf."""
    a = _neg_inf(x)
    img = np.asarray(sj.image(a)).copy()
    img[~np.asarray(data_mask(a.type))] = fill
    return wrap(jnp.asarray(img), a.type)


def test_to_device_writes_and_promises_minus_infinity():
    a = _neg_inf(rand(SHAPE))
    assert a.type.pad is PadFill.NEG_INF and "pad=-inf" in a.type.str_short()
    img = np.asarray(sj.image(a))
    assert (img[~np.asarray(data_mask(a.type))] == -np.inf).all()
    assert sj.to_device(rand(SHAPE), pad_value=1.0).type.pad is PadFill.POISON
    assert sj.to_device(np.arange(40, dtype=np.int32), pad_value=0).type.pad is PadFill.ZERO


def test_the_promise_is_read_only_for_its_identity_on_plain_images():
    a, z = _neg_inf(rand(SHAPE)), sj.to_device(rand(SHAPE), pad_value=0)
    assert holds_identity(a.type, -np.inf) and not holds_identity(a.type, 0)
    assert holds_identity(z.type, 0) and not holds_identity(z.type, -np.inf)
    assert not holds_identity(a.T.type, -np.inf)  # a view
    assert not holds_identity(sj.to_device(rand(SHAPE)).type, -np.inf)


def test_max_and_sum_trust_the_promise():
    """A type that lies shows the kernel reads the padding: +inf in it is the max."""
    x = rand(SHAPE)
    assert (np.asarray(sj.to_host(_lie(x, np.inf).max(axis=1))) == np.inf).all()
    # Told the truth, the same unmasked reductions give jax's numbers.
    np.testing.assert_array_equal(sj.to_host(_neg_inf(x).max(axis=1)), x.max(axis=1))
    np.testing.assert_array_equal(sj.to_host(_neg_inf(x).max(axis=0)), x.max(axis=0))
    z = sj.to_device(x, pad_value=0)
    assert_close(sj.to_host(z.sum(axis=1)), x.sum(axis=1), reduce_len=40)
    assert_close(sj.to_host(z.mean(axis=1)), x.mean(axis=1), reduce_len=40, ops=2)
    # A min's identity is +inf: -inf padding is masked for it.
    np.testing.assert_array_equal(sj.to_host(_neg_inf(x).min(axis=1)), x.min(axis=1))


def test_derivatives_mask_the_padding():
    """A tangent's padding holds no identity: its max and sum mask it."""
    x = rand(SHAPE)
    t = sj.to_device(rand(SHAPE, seed=1))
    for a, f in ((_neg_inf(x), "max"), (sj.to_device(x, pad_value=0), "sum")):
        _, dy = jax.jvp(lambda v, f=f: getattr(v, f)(axis=1), (a,), (t,))
        _, want = jax.jvp(lambda v, f=f: getattr(v, f)(axis=1), (x,), (rand(SHAPE, seed=1),))
        assert_close(sj.to_host(dy), want, reduce_len=40)


DESTROYERS = {
    "neg": lambda x: -x,
    "exp": jnp.exp,
    "slice": lambda x: x[:, 3:37],
    "slice rows": lambda x: x[1:5],
    "transpose": lambda x: x.T,
    "reshape": lambda x: x.reshape(3, 80),
    "set": lambda x: x.at[:, 39].set(1e3),
    "dynamic update": lambda x: jax.lax.dynamic_update_slice(x, jnp.full((6, 2), 9.0), (0, 38)),
    "concatenate": lambda x: jnp.concatenate([x, -x], axis=1),
    "where": lambda x: jnp.where(x > 0, -x, x),
}


@pytest.mark.parametrize("op", DESTROYERS)
def test_ops_that_remake_the_padding_are_masked_again(op):
    x = rand(SHAPE)

    def f(a):
        y = DESTROYERS[op](a)
        return jnp.max(y, axis=-1), jnp.max(y, axis=0), jax.nn.softmax(y, axis=-1)

    got = sj.jit(f)(_neg_inf(x))
    assert all(jax.typeof(g).pad is not PadFill.NEG_INF for g in got)
    assert_close(jax.tree.map(sj.to_host, got), jax.jit(f)(x), reduce_len=80, ops=6)


@settings(max_examples=5, deadline=None)
@given(st.lists(st.sampled_from(sorted(DESTROYERS)), min_size=1, max_size=3))
def test_chains_of_ops_on_minus_infinity_padding(ops):
    def f(a):
        for op in ops:
            a = DESTROYERS[op](a)
            a = a if a.shape[-1] > 1 else a.T
        return jnp.max(a, axis=-1), jax.nn.softmax(a, axis=-1)

    x = rand(SHAPE)
    got = jax.tree.map(sj.to_host, sj.jit(f)(_neg_inf(x)))
    assert_close(got, jax.jit(f)(x), reduce_len=160, ops=12)


def _softmax(x):
    return jax.nn.softmax(x, axis=-1)


def test_a_returned_softmax_of_minus_infinity_padding_is_one_kernel():
    x = np.array(rand(SHAPE))
    x[2] = -np.inf  # a line of -inf is NaN, as in jax.jit
    a = _neg_inf(x)
    lowered = sj.jit(_softmax).lower(a)
    (chain,) = softmax_chains(lowered.graph, lowered.plan).values()
    assert chain.t.pad is PadFill.NEG_INF
    got = np.asarray(sj.to_host(sj.jit(_softmax)(a)))
    assert_close(got, jax.jit(_softmax)(x), reduce_len=40, ops=5)
    assert np.isnan(got[2]).all() and not np.isnan(np.delete(got, 2, axis=0)).any()
    # Without the promise a returned softmax runs op by op (a select would be a pass).
    lowered = sj.jit(_softmax).lower(sj.to_device(x))
    assert softmax_chains(lowered.graph, lowered.plan) == {}


def test_place_gives_a_softmax_input_minus_infinity_padding():
    f = sj.jit(lambda x, w: jax.nn.softmax(x, axis=-1) @ w)
    x, w = rand(SHAPE), rand((40, 24), seed=1)
    px, pw = f.place(sj.to_device(x), sj.to_device(w))
    assert px.type.pad is PadFill.NEG_INF and pw.type.pad is PadFill.ZERO
    assert px.type.layout == sj.to_device(x).type.layout
    assert f.place(px, pw)[0] is px  # placed stays placed
    assert_close(sj.to_host(f(px, pw)), f(sj.to_device(x), pw), reduce_len=40, ops=6)
    # Read by a product too, or returned: left as it is.
    g = sj.jit(lambda x: (jnp.max(x, axis=1), x @ x.T))
    assert g.place(px)[0] is px and jax.typeof(g.place(sj.to_device(x))[0]).pad is PadFill.POISON
    h = sj.jit(lambda x: (jnp.max(x), x))
    assert h.place(sj.to_device(x))[0].type.pad is PadFill.POISON


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn])
def test_minus_infinity_padding_for_every_float_type_that_has_infinity(dtype):
    """bfloat16 and float8_e5m2 take -inf padding; float8_e4m3fn has no infinity
    (-inf is NaN there), so it keeps its poison and its max stays masked."""
    x = rand(SHAPE).astype(dtype)
    f = sj.jit(lambda x: jnp.max(x, axis=1))
    (px,) = f.place(sj.to_device(x))
    has_inf = dtype != jnp.float8_e4m3fn
    assert px.type.pad is (PadFill.NEG_INF if has_inf else PadFill.POISON)
    expect = np.asarray(jnp.max(x, axis=1), np.float32)
    np.testing.assert_array_equal(np.asarray(sj.to_host(f(px)), np.float32), expect)


@pytest.mark.parametrize("reduce", [jnp.max, jnp.min])
def test_max_and_min_of_a_padded_float8_e4m3fn_array_are_its_values(reduce):
    """float8_e4m3fn has no infinity: the identity of max / min is its lowest / largest
    finite value (-inf there is NaN, and the padding's masks wrote NaN into every row)."""
    x = rand((6, 40)).astype(jnp.float8_e4m3fn)
    got = sj.jit(lambda v: reduce(v, axis=1))(x)
    np.testing.assert_array_equal(
        np.asarray(got, np.float32), np.asarray(reduce(x, axis=1), np.float32)
    )
