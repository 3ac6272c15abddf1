import copy
import operator
import pickle
import types
import warnings
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, dma_transfers, padding_is_poison, rand

import spyrejax as sj
from spyrejax.primitives._array import PadFill


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


def test_numpy_arrays_go_straight_to_the_host_dma_engine():
    # No jnp.asarray (a device_put copy) and no compiled transfer on the way: the host
    # engine is given the NumPy array itself.
    x = np.arange(512 * 300, dtype=np.float32).reshape(512, 300)
    with dma_transfers() as transfers:
        a = sj.to_device(x)
    assert transfers == [("h2d", "host", "numpy")]
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


def test_type_equality_ignores_metadata_and_interning_keeps_it():
    x = jnp.zeros((4, 70), jnp.float32)
    t = sj.to_device(x).type
    same, other = replace(t), sj.to_device(x, dim_order=[1, 0]).type
    varying = replace(t, vma=frozenset({"cards"}))
    assert same == t and same is not t and varying == t and hash(varying) == hash(t)
    assert t != other and t != replace(t, pad=PadFill.ZERO) and t != "f32[4,70]"
    # Equal types with the same metadata are one object; other metadata, another.
    assert same.interned() is t.interned() and replace(t).interned() is t.interned()
    assert varying.interned() is not t.interned()
    assert varying.interned().vma == frozenset({"cards"}) and t.interned().vma == frozenset()


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


def test_to_device_takes_what_jax_device_put_takes():
    # A JAX user's first transfer: NumPy's float64 and int64, a list, a Python scalar.
    # With x64 off they are held as jax.device_put holds them, float32 and int32.
    x = np.linspace(-1, 1, 4 * 70).reshape(4, 70)  # float64
    a = sj.to_device(x)
    assert a.dtype == jnp.float32 and a.type == sj.to_device(jnp.asarray(x)).type
    np.testing.assert_array_equal(np.asarray(a), x.astype(np.float32))
    i = sj.to_device(np.arange(70))  # int64
    assert i.dtype == jnp.int32 and sj.to_host(i).dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(i), np.arange(70))
    assert sj.to_device([[1.0, 2.5]]).dtype == jnp.float32
    assert float(sj.to_device(2.5)) == 2.5
    # Narrowing an integer checks every value, where jax.device_put wraps 2**40 to 0.
    with pytest.raises(sj.LayoutError, match=r"to_device's array.*1099511627776"):
        sj.to_device(np.array([3, 2**40]))


def test_transfer_errors():
    x = jnp.zeros((4, 150), jnp.float32)
    a = sj.to_device(x)
    with pytest.raises(sj.LayoutError, match="not both"):
        sj.to_device(x, a.layout, dim_order=[1, 0])
    with pytest.raises(sj.SpyreTypeError, match="already on the device"):
        sj.to_device(a)
    with pytest.raises(sj.LayoutError, match=r"complex64 .*\.real and \.imag"):
        sj.to_device(np.zeros((4, 150), np.complex64))
    with pytest.raises(sj.LayoutError, match="too small"):
        sj.to_device(x, sj.SpyreTensorLayout((2, 150), jnp.float32))
    assert sj.to_host(x) is x  # a host array is already on the host
    with pytest.raises(sj.SpyreTypeError, match="needs a SpyreArray, got str"):
        sj.to_host("x")
    with pytest.raises(sj.LayoutError, match="SpyreTensorLayout"):
        sj.to_device(x, layout=(1, 2))


def test_arrays_in_padded_tile_and_equal_stride_layouts():
    # Small integers: sums and maxima are exact, so the kernels' padding masks show.
    x = (np.arange(4800) % 97 - 48).astype(np.float32)
    # Rows of 120 in sticks of 32 (the fourth holds 24 values), 3 rows a tile.
    tiles = sj.SpyreTensorLayout.from_stride_map([3, 4, 14, 32], [120, 32, 360, 1], np.float32)
    # Element i in lane 0 of stick i: two device dims step the host by 1.
    ties = sj.SpyreTensorLayout.from_stride_map([1, 4800, 32], [32, 1, 1], np.float32)
    for layout in (tiles, ties):
        a = sj.to_device(x, layout)
        assert a.layout == layout and padding_is_poison(a)
        np.testing.assert_array_equal(sj.to_host(a), x)
        through_jit = jax.jit(lambda x, layout=layout: sj.to_host(sj.to_device(x, layout)))(x)
        np.testing.assert_array_equal(through_jit, x)
        assert float(np.asarray(sj.sum(a))) == x.sum()
        assert float(np.asarray(sj.max(a))) == x.max()
        np.testing.assert_array_equal(np.asarray(a + a), 2 * x)
    rows = sj.reshape(sj.to_device(x, tiles), (40, 120))  # a view: rows 3 a tile
    np.testing.assert_array_equal(np.asarray(sj.sum(rows, 1)), x.reshape(40, 120).sum(1))
    np.testing.assert_array_equal(np.asarray(sj.max(rows, 0)), x.reshape(40, 120).max(0))
    assert sj.to_device(x, ties).layout.is_sparse
    np.testing.assert_array_equal(np.asarray(sj.compact(sj.to_device(x, ties))), x)


def test_results_convert_to_host_values_like_jax_arrays():
    y = sj.jit(lambda x: x * 2)(jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3))
    zero = sj.to_device(np.float32(0.0))
    s = sj.jit(lambda x: x.sum())(jnp.arange(6, dtype=jnp.int32))
    assert float(y[1, 2]) == 10.0 and float(sj.to_device(np.float32(2.5))) == 2.5
    assert int(s) == 15 and s.item() == 15 and [1, 2][sj.to_device(np.int32(1))] == 2
    assert bool(zero) is False and bool(sj.to_device(np.float32(-1.0))) is True
    assert f"{sj.to_device(np.float32(1 / 3)):.3f}" == "0.333"
    assert len(y) == 2 and [r.tolist() for r in y] == [[0, 2, 4], [6, 8, 10]]
    assert y.tolist() == [[0, 2, 4], [6, 8, 10]] and y[:, 1:].tolist() == [[2, 4], [8, 10]]
    assert float(jnp.mean(y)) == 5.0 and float(jnp.max(y)) == 10.0  # via __jax_array__
    assert jax.block_until_ready(y) is y
    with pytest.raises(TypeError, match="one element"):
        float(y)
    with pytest.raises(TypeError, match="0-d"):
        len(zero)
    with pytest.raises(TypeError, match="integer arrays"):
        [1, 2][zero]


def test_plain_jax_jit_of_a_jnp_function_on_spyre_arrays_warns_it_runs_on_the_host():
    """Operators are Spyre primitives; jnp functions read the host values: warned."""
    x = jnp.asarray(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8))
    a = sj.to_device(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        on_device = jax.jit(lambda a: (a + 1).sum(0))(a)  # operators and methods: no warning
    assert isinstance(on_device, sj.SpyreArray)
    f = jax.jit(lambda a: jnp.sin(a) * 2)
    with pytest.warns(sj.SpyreFallbackWarning, match=r"test_array.py:\d+ .* runs on the host"):
        got = f(a)
    assert_close(got, jax.jit(lambda x: jnp.sin(x) * 2)(x), ops=2)  # sin, then * 2


def test_a_jax_array_method_it_lacks_names_the_ways_to_it():
    a = sj.to_device(np.arange(8 * 70, dtype=np.float32).reshape(8, 70))
    with pytest.raises(sj.SpyreAttributeError, match=r"no 'argmax', a jax.Array") as err:
        a.argmax()
    message = str(err.value)
    assert "sj.jit(lambda a: a.argmax(...))(a)" in message
    assert "sj.to_host(a).argmax(...)" in message and "reshape" in message  # its own
    assert isinstance(err.value, AttributeError) and err.value.name == "argmax"
    with pytest.raises(sj.SpyreAttributeError, match=r"sj.to_host\(a\).nbytes \("):
        a.nbytes  # noqa: B018  (a property: no call in the advice)
    assert not hasattr(a, "clip") and getattr(a, "not_jax", None) is None
    # What the message advises runs: the method in spyrejax.jit, or on the host values.
    assert int(sj.to_host(sj.jit(lambda a: a.argmax())(a))) == 8 * 70 - 1
    assert int(sj.to_host(a).argmax()) == 8 * 70 - 1


def test_copy_and_deepcopy_as_for_a_jax_array():
    a = sj.to_device(np.arange(70, dtype=np.float32))
    assert copy.copy(a) is a  # immutable
    b = copy.deepcopy({"w": a})["w"]  # copy.deepcopy(model) of weights on the device
    assert b.type == a.type and b.image is not a.image
    np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_a_host_operand_beside_a_spyre_array_raises_the_same_in_both_orders():
    """``x + a`` as ``a + x``: no silent read to the host, one error naming both fixes."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = sj.to_device(x)
    for host in (jnp.asarray(x), x):  # a jax.Array, a NumPy array
        for op, first, second in [
            ("add", lambda h: h + a, lambda h: a + h),
            ("mul", lambda h: h * a, lambda h: a * h),
            ("lt|gt", lambda h: h < a, lambda h: a > h),  # h < a is a > h
            ("matmul", lambda h: h @ a.T, lambda h: a @ h.T),
        ]:
            for pos, f in enumerate([first, second]):
                with pytest.raises(sj.SpyreTypeError, match=rf"^({op}): operand .*host array") as e:
                    f(host)
                assert "spyrejax.to_device" in str(e.value) and "spyrejax.to_host" in str(e.value)
                if op in ("add", "mul"):
                    assert f"operand {pos}" in str(e.value)
    # Under a plain jax.jit, a traced host array and a traced Spyre array alike.
    j = jnp.asarray(x)
    for f in (lambda j, a: j + a, lambda j, a: a + j):
        with pytest.raises(sj.SpyreTypeError, match=r"add: operand .* host array"):
            jax.jit(f)(j, a)
    # What the message advises runs; scalars mix; a jnp function reads the host values.
    np.testing.assert_array_equal(np.asarray(sj.to_device(x) + a), 2 * x)
    np.testing.assert_array_equal(x + sj.to_host(a), 2 * x)
    assert isinstance(2.0 + a, sj.SpyreArray) and isinstance(a * 2, sj.SpyreArray)
    np.testing.assert_array_equal(jnp.add(j, a), 2 * x)


def test_integer_operators_beside_a_host_operand_raise_as_add_does():
    # ^, <<, >> are the device's ops (>> arithmetic, logical on unsigned, as jax.Array's);
    # // and % have no eager Spyre op: a host operand is refused as + refuses it, in both
    # orders, and Spyre operands by name, pointing to spyrejax.jit (plain TypeErrors).
    x = np.array([[-7, 7, 5, -5]], np.int32)
    a = sj.to_device(x)
    np.testing.assert_array_equal(np.asarray(a ^ 3), x ^ 3)
    np.testing.assert_array_equal(np.asarray(1 << a.astype(np.uint32)), 1 << x.astype(np.uint32))
    np.testing.assert_array_equal(np.asarray(a >> 1), x >> 1)  # arithmetic: -7 >> 1 == -4
    u = x.view(np.uint32)
    np.testing.assert_array_equal(np.asarray(sj.to_device(u) >> 1), u >> 1)  # logical
    ops = [(operator.floordiv, "//"), (operator.mod, "%"), (operator.xor, "bitwise_xor")]
    ops += [(operator.lshift, "shift_left"), (operator.rshift, "shift_right_arithmetic")]
    for host in (jnp.asarray(x), x):
        for op, name in ops:
            for pos, pair in enumerate([(host, a), (a, host)]):
                with pytest.raises(sj.SpyreTypeError, match=rf"^{name}: operand {pos} .*host"):
                    op(*pair)
    for f in (lambda a: a // a, lambda a: 2 % a):
        with pytest.raises(sj.SpyreUnsupportedError, match=r"no eager .* spyrejax.jit"):
            f(a)
    np.testing.assert_array_equal(sj.to_host(sj.jit(lambda a, b: a // b)(a, x)), x // x)


def test_a_jax_without_the_array_operators_spyrejax_reads_fails_at_import_saying_why():
    # spyrejax._jax finds jax.Array's operators by their names (_operator_add...): renamed
    # by a JAX, the set would be empty and host operands converted silently.
    from spyrejax._jax import _ARRAY_OPERATORS, _operators_of

    assert {c.co_name for c in _ARRAY_OPERATORS} >= {"_operator_add", "_operator_floordiv"}
    with pytest.raises(ImportError, match=r"array_methods has no _operator_\* functions"):
        _operators_of(types.ModuleType("jax._src.numpy.array_methods"))


def test_a_jax_array_method_under_a_plain_jax_jit_names_the_ways_to_it():
    a = sj.to_device(np.arange(8 * 70, dtype=np.float32).reshape(8, 70))
    for method in (lambda a: a.argmax(), lambda a: a.clip(0, 1)):
        with pytest.raises(
            sj.SpyreAttributeError, match=r"traced by jax.jit has no '(argmax|clip)'"
        ) as err:
            jax.jit(method)(a)
        message = str(err.value)
        assert "spyrejax.jit(f) in place of jax.jit(f)" in message and "reshape" in message
        assert f"sj.to_host(a).{err.value.name}(...)" in message and "tolist" not in message
    # What the message advises runs.
    assert int(sj.to_host(sj.jit(lambda a: a.argmax())(a))) == 8 * 70 - 1
    assert int(jax.jit(lambda a: sj.to_host(a).argmax())(a)) == 8 * 70 - 1


def test_jax_device_put_of_a_spyre_array_names_what_to_call():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = sj.to_device(x)
    for call in (lambda: jax.device_put(a), lambda: jax.device_put({"w": a}, jax.devices()[0])):
        with pytest.raises(
            sj.SpyreUnsupportedError, match=r"device_put does not take a Spyre"
        ) as e:
            call()
        assert isinstance(e.value, NotImplementedError) and "f32[2,3]" in str(e.value)
        assert "spyrejax.to_host(a)" in str(e.value) and "spyrejax.device_put" in str(e.value)
    np.testing.assert_array_equal(jax.device_put(sj.to_host(a)), x)  # as advised
    assert jax.typeof(a) == a.type  # JAX's other readers of the type are untouched
