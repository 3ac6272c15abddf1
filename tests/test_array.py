import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, padding_is_poison, rand

import spyrejax as sj


def test_to_device_and_back():
    x = rand((5, 100, 150), jnp.float16, np.random.default_rng(0))
    a = sj.to_device(x)
    assert isinstance(a, sj.SpyreArray)
    assert a.shape == (5, 100, 150) and a.dtype == jnp.float16 and a.ndim == 3
    assert a.layout == sj.SpyreTensorLayout(x.shape, jnp.float16)
    assert a.image.shape == (100, 3, 5, 64)
    assert padding_is_poison(a)
    np.testing.assert_array_equal(np.asarray(a), x)
    np.testing.assert_array_equal(sj.to_host(a), x)
    assert np.asarray(a, dtype=np.float32).dtype == np.float32
    b = sj.to_device(x, dim_order=[1, 0, 2])
    assert b.layout.device_size == (5, 3, 100, 64)
    c = sj.to_device(x, sj.SpyreTensorLayout(x.shape, jnp.float16, [0, 2, 1]))
    assert c.type.stick_dim == 1
    np.testing.assert_array_equal(np.asarray(c), x)


def test_numpy_arrays_go_straight_to_the_host_dma_engine(monkeypatch):
    # No jnp.asarray (a device_put copy) and no compiled transfer on the way.
    x = np.arange(512 * 300, dtype=np.float32).reshape(512, 300)

    def refuse(*args, **kwargs):
        raise AssertionError("converted or compiled on the way to the device")

    monkeypatch.setattr(sj.primitives._transfer.jnp, "asarray", refuse)
    monkeypatch.setattr(sj._dma, "_h2d", refuse)
    a = sj.to_device(x)
    monkeypatch.undo()
    np.testing.assert_array_equal(np.asarray(a), x)
    assert padding_is_poison(a)


def test_type_prints_compactly_in_jaxprs():
    x = jnp.zeros((5, 100, 150), jnp.float16)
    jaxpr = str(jax.make_jaxpr(lambda x: sj.exp(sj.to_device(x)))(x))
    assert "b:f16[5,100,150]{[100,3,5,64]/[150,64,15000,1]} = ToDevice a" in jaxpr
    assert "c:f16[5,100,150]{[100,3,5,64]/[150,64,15000,1]} = Exp b" in jaxpr
    a = sj.to_device(x)
    assert repr(a.type) == "SpyreType(f16[5,100,150]{[100,3,5,64]/[150,64,15000,1]})"
    assert jax.typeof(a) == a.type
    assert "SpyreArray(" in repr(a) and "f16[5,100,150]" in repr(a)


def test_type_value_semantics():
    x = jnp.zeros((4, 70), jnp.float32)
    t1, t2 = sj.to_device(x).type, sj.to_device(x).type
    assert t1 == t2 and hash(t1) == hash(t2)
    assert t1 != sj.to_device(x, dim_order=[1, 0]).type
    assert pickle.loads(pickle.dumps(t1)) == t1
    with pytest.raises(sj.LayoutError, match="does not match the layout's format"):
        sj.SpyreType.contiguous((4, 70), jnp.float16, t1.layout)
    with pytest.raises(AttributeError, match="immutable"):
        sj.to_device(x).image = None


def test_pass_into_and_out_of_jit_and_nested_jit():
    x = rand((4, 150), jnp.float32, np.random.default_rng(1))
    a = sj.to_device(x)

    @jax.jit
    def inner(a):
        return a * 2.0

    @jax.jit
    def outer(a):
        return inner(a) + a

    out = outer(a)
    assert isinstance(out, sj.SpyreArray) and out.layout == a.layout
    assert_close(sj.to_host(out), 3 * x, ops=2)
    made = jax.jit(lambda x: sj.to_device(x, dim_order=[1, 0]))(x)
    assert made.layout == sj.SpyreTensorLayout(x.shape, jnp.float32, [1, 0])
    # Pytrees of SpyreArrays.
    tree = jax.jit(lambda d: {"s": d["a"] + d["b"], "h": sj.to_host(d["a"])})({"a": a, "b": a})
    assert_close(sj.to_host(tree["s"]), 2 * x)


def test_control_flow_carries():
    x = rand((4, 150), jnp.float32, np.random.default_rng(2))
    a = sj.to_device(x)

    def body(c, _):
        return c * 0.5 + a, None

    out, _ = jax.lax.scan(body, a, None, length=3)
    expected = x
    for _ in range(3):
        expected = expected * 0.5 + x
    assert_close(sj.to_host(out), expected, ops=6)
    looped = jax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + a, a)
    assert_close(sj.to_host(looped), expected, ops=6)
    for pred, ref in ((True, 2 * x), (False, -x)):
        chosen = jax.jit(lambda p, a: jax.lax.cond(p, lambda a: a + a, lambda a: -a, a))(pred, a)
        assert_close(sj.to_host(chosen), ref)


def test_image_and_wrap_bridge():
    x = rand((4, 150), jnp.float32, np.random.default_rng(3))
    a = sj.to_device(x)
    img = jax.jit(sj.image)(a)
    assert img.shape == a.layout.device_size
    back = sj.primitives.wrap(img, a.type)
    np.testing.assert_array_equal(np.asarray(back), x)


def test_transfer_errors():
    x = jnp.zeros((4, 150), jnp.float32)
    a = sj.to_device(x)
    with pytest.raises(sj.LayoutError, match="not both"):
        sj.to_device(x, a.layout, dim_order=[1, 0])
    with pytest.raises(sj.SpyreTypeError, match="already on the device"):
        sj.to_device(a)
    with pytest.raises(sj.LayoutError, match="float64"):
        sj.to_device(np.zeros((4, 150)))
    with pytest.raises(sj.LayoutError, match="too small"):
        sj.to_device(x, sj.SpyreTensorLayout((2, 150), jnp.float32))
    with pytest.raises(sj.SpyreTypeError, match="needs a SpyreArray"):
        sj.to_host(x)
    with pytest.raises(sj.LayoutError, match="SpyreTensorLayout"):
        sj.to_device(x, layout=(1, 2))
