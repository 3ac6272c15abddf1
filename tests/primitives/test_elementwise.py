import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FLOAT_DTYPES, SHAPES, assert_close, padding_is_poison, rand

import spyrejax as sj

POS = {"low": 0.1, "high": 3.0}

# name: (spyrejax function, jnp reference, input ranges per operand)
UNARY = {
    "neg": (sj.neg, jnp.negative, {}),
    "abs": (sj.abs, jnp.abs, {}),
    "exp": (sj.exp, jnp.exp, {}),
    "log": (sj.log, jnp.log, POS),
    "sqrt": (sj.sqrt, jnp.sqrt, POS),
    "rsqrt": (sj.rsqrt, jax.lax.rsqrt, POS),
    "reciprocal": (sj.reciprocal, jnp.reciprocal, POS),
    "square": (sj.square, jnp.square, {}),
    "tanh": (sj.tanh, jnp.tanh, {}),
    "sigmoid": (sj.sigmoid, jax.nn.sigmoid, {}),
    "relu": (sj.relu, jax.nn.relu, {}),
    "gelu": (sj.gelu, functools.partial(jax.nn.gelu, approximate=True), {}),
    "gelu_erf": (sj.gelu_erf, functools.partial(jax.nn.gelu, approximate=False), {}),
    "silu": (sj.silu, jax.nn.silu, {}),
}
BINARY = {
    "add": (sj.add, jnp.add, {}),
    "sub": (sj.sub, jnp.subtract, {}),
    "mul": (sj.mul, jnp.multiply, {}),
    "div": (sj.div, jnp.divide, POS),
    "maximum": (sj.maximum, jnp.maximum, {}),
    "minimum": (sj.minimum, jnp.minimum, {}),
    "pow": (sj.pow, jnp.power, POS),
}
COMPARE = {
    "lt": (sj.lt, jnp.less),
    "le": (sj.le, jnp.less_equal),
    "gt": (sj.gt, jnp.greater),
    "ge": (sj.ge, jnp.greater_equal),
    "eq": (sj.eq, jnp.equal),
    "ne": (sj.ne, jnp.not_equal),
}


def _run(fn, jit, *args):
    return jax.jit(fn)(*args) if jit else fn(*args)


def _check(out, ref, layout):
    assert isinstance(out, sj.SpyreArray)
    assert out.dtype == ref.dtype
    assert out.layout == layout  # the rule: the operand's layout
    assert padding_is_poison(out)
    assert_close(sj.to_host(out), ref)


def _unary_input(name, dtype, shape):
    return rand(shape, dtype, np.random.default_rng(0), **UNARY[name][2])


def _binary_inputs(name, dtype, shape):
    rng = np.random.default_rng(1)
    ranges = BINARY[name][2]
    return rand(shape, dtype, rng, **ranges), rand(shape, dtype, rng, **ranges)


@functools.cache
def _references(dtype, shape):
    """Every ``UNARY`` and ``BINARY`` case's ``jnp`` reference at a dtype and shape, jitted.

    Keyed by op name; a binary op's entry holds its three references (two arrays, then a
    scalar on either side). Computed eagerly, each reference was a compile of its own
    (35 a dtype and shape, ~45 ms each); side by side they are one program.
    """
    c = jnp.asarray(1.5, dtype)

    def references(unary, binary):
        out = {name: UNARY[name][1](x) for name, x in unary.items()}
        for name, (x, y) in binary.items():
            ref_fn = BINARY[name][1]
            out[name] = (ref_fn(x, y), ref_fn(x, c), ref_fn(c, x))
        return out

    unary = {name: _unary_input(name, dtype, shape) for name in UNARY}
    binary = {name: _binary_inputs(name, dtype, shape) for name in BINARY}
    return jax.jit(references)(unary, binary)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, dtype, shape, jit):
    x = _unary_input(name, dtype, shape)
    a = sj.to_device(x)
    _check(_run(UNARY[name][0], jit, a), _references(dtype, shape)[name], a.layout)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", BINARY)
def test_binary(name, dtype, shape, jit):
    fn = BINARY[name][0]
    x, y = _binary_inputs(name, dtype, shape)
    a, b = sj.to_device(x), sj.to_device(y)
    both, scalar_right, scalar_left = _references(dtype, shape)[name]
    _check(_run(fn, jit, a, b), both, a.layout)
    # Scalars on either side.
    _check(_run(lambda a: fn(a, 1.5), jit, a), scalar_right, a.layout)
    _check(_run(lambda a: fn(1.5, a), jit, a), scalar_left, a.layout)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", COMPARE)
def test_comparisons_give_bool_in_the_operands_layout(name, dtype, shape):
    fn, ref_fn = COMPARE[name]
    rng = np.random.default_rng(2)
    x = rand(shape, dtype, rng)
    y = x.at[0].set(rand(shape[1:], dtype, rng))  # equal elements too
    a, b = sj.to_device(x), sj.to_device(y)
    out = fn(a, b)
    assert out.dtype == np.bool_ and out.layout == a.layout
    np.testing.assert_array_equal(np.asarray(out), ref_fn(x, y))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_where(dtype):
    rng = np.random.default_rng(3)
    x, y = rand((3, 150), dtype, rng), rand((3, 150), dtype, rng)
    a, b = sj.to_device(x), sj.to_device(y)
    _check(sj.where(a > b, a, b), jnp.where(x > y, x, y), a.layout)
    _check(sj.where(a > 0, a, 0.0), jnp.where(x > 0, x, jnp.asarray(0, dtype)), a.layout)


def test_broadcasting_including_along_the_stick_dim():
    rng = np.random.default_rng(4)
    x = rand((4, 150), jnp.float32, rng)
    row, col, scalar_like = x[1], x[:, :1], x[:1, :1]
    a = sj.to_device(x)
    for other in (row, col, scalar_like, x[None]):
        b = sj.to_device(other)
        out = a + b
        assert_close(sj.to_host(out), x + other)
        assert padding_is_poison(out)
    # Two operands that both broadcast: a fresh default layout.
    out = sj.to_device(col) * sj.to_device(row)
    assert out.shape == (4, 150) and out.type.stick_dim == 1
    assert_close(sj.to_host(out), col * row)


def test_operands_with_other_device_dim_orders_need_no_restickify():
    x = rand((5, 100, 150), jnp.float32, np.random.default_rng(5))
    a = sj.to_device(x)
    b = sj.to_device(x, dim_order=[1, 0, 2])  # same stick dim, other tile order
    assert a.layout != b.layout
    for out, first in ((a + b, a), (b + a, b)):
        assert out.layout == first.layout
        assert_close(sj.to_host(out), 2 * x)
    jaxpr = str(jax.make_jaxpr(lambda a, b: a + b)(a, b))
    assert "Restickify" not in jaxpr


def test_row_major_operands_compute_on_whole_rows():
    rng = np.random.default_rng(6)
    x, bias = rand((4, 5, 150), jnp.float32, rng), rand((150,), jnp.float32, rng)
    a = sj.to_device(x, sj.SpyreTensorLayout.row_major(x.shape, jnp.float32))
    row_max = sj.max(a, -1, keepdims=True)  # sparse: one lane per stick
    out = sj.exp(a - row_max) + sj.to_device(bias)
    assert out.layout == a.layout and padding_is_poison(out)
    want = jnp.exp(x - x.max(-1, keepdims=True)) + bias
    assert_close(sj.to_host(out), want, ops=3)  # subtract, exp, add
    # Tiles and lanes [.., 5, 32] merge into one axis of 160: the shape a dot emits.
    hlo = jax.jit(lambda a: sj.exp(a)).lower(a).as_text()
    assert "stablehlo.exponential" in hlo and "tensor<4x5x160xf32>" in hlo
    default = jax.jit(lambda a: sj.exp(a)).lower(sj.to_device(x)).as_text()
    assert "tensor<4x5x160xf32>" not in default  # [5, T, 4, S]: nothing to merge


def test_different_stick_dims_are_a_layout_error_naming_the_fix():
    x = rand((4, 150), jnp.float32, np.random.default_rng(6))
    a, b = sj.to_device(x), sj.to_device(x, dim_order=[1, 0])
    with pytest.raises(sj.LayoutError, match=r"add: operand 1 .* stuck on dim 0.*restickify"):
        sj.add(a, b)
    # The fix works.
    assert_close(sj.to_host(a + sj.restickify(b)), 2 * x)


def test_elementwise_errors():
    a = sj.to_device(jnp.ones((4, 150), jnp.float32))
    with pytest.raises(sj.LayoutError, match="do not broadcast"):
        a + sj.to_device(jnp.ones((3, 150), jnp.float32))
    with pytest.raises(sj.SpyreTypeError, match=r"dtypes differ \(float16, float32\)"):
        a + sj.to_device(jnp.ones((4, 150), jnp.float16))
    with pytest.raises(sj.SpyreTypeError, match="host array"):
        sj.add(a, jnp.ones((4, 150), jnp.float32))
    with pytest.raises(sj.SpyreTypeError, match="unknown elementwise op 'foo'"):
        sj.primitives.elementwise("foo", a)
    with pytest.raises(sj.SpyreTypeError, match="takes 2 operands, got 1"):
        sj.primitives.elementwise("add", a)
    with pytest.raises(sj.SpyreTypeError, match="condition must be bool"):
        sj.where(a, a, a)
    with pytest.raises(sj.SpyreTypeError, match="at least one"):
        sj.primitives.elementwise("add", 1.0, 2.0)


def test_integer_ops_mask_padding_explicitly():
    x = jnp.arange(-70, 80, dtype=jnp.int32).reshape(1, 150)
    a = sj.to_device(x)
    out = sj.relu(a)  # relu(INT_MIN) would be 0, not poison, without the mask
    np.testing.assert_array_equal(np.asarray(out), jax.nn.relu(x))
    assert padding_is_poison(out)


def test_jit_traces_once_per_layout():
    x = rand((4, 150), jnp.float32, np.random.default_rng(7))
    f = jax.jit(chex.assert_max_traces(lambda a, b: sj.exp(a) * b + 1.0, n=2))
    a, b = sj.to_device(x), sj.to_device(x)
    for _ in range(3):
        f(a, b)
    c = sj.to_device(x, layout=sj.SpyreTensorLayout((4, 150), jnp.float32, [0, 1]))
    f(c, c)  # the same layout: no new trace
    d = sj.to_device(x.reshape(4, 150), dim_order=[0, 1, -1])  # sparse: another layout
    with pytest.raises(sj.LayoutError):
        f(d, a)
    f2 = jax.jit(chex.assert_max_traces(lambda a: a * 2.0, n=2))
    f2(a)
    f2(sj.to_device(x.T, dim_order=[0, 1]))  # new shape: second trace
    f2(a)


def test_where_needs_an_array_value():
    c = sj.to_device(jnp.ones((2, 64), jnp.float16)) > 0
    with pytest.raises(sj.SpyreTypeError, match="at least one value operand"):
        sj.where(c, 1.0, 2.0)


def test_operators_on_values_and_tracers():
    rng = np.random.default_rng(8)
    x, y = rand((4, 150), jnp.float32, rng), rand((4, 150), jnp.float32, rng)
    w = rand((150, 150), jnp.float32, rng)

    def spy(a, b, m):
        out = (-a + b) * 2.0 - b / 3.0 + 1.0 - a**2.0
        out = out @ m + (a > b).astype(jnp.float32) + (2.0 - a) + (1.0 / (b * b + 1.0))
        return out.sum(1) + out.max(1) + out.min(1) + out.mean(1) + out.T.T.reshape(4, 150).sum(1)

    def ref(a, b, m):
        out = (-a + b) * 2.0 - b / 3.0 + 1.0 - a**2.0
        out = out @ m + (a > b).astype(jnp.float32) + (2.0 - a) + (1.0 / (b * b + 1.0))
        return out.sum(1) + out.max(1) + out.min(1) + out.mean(1) + out.T.T.reshape(4, 150).sum(1)

    args = (sj.to_device(x), sj.to_device(y), sj.to_device(w))
    want = ref(x, y, w)
    for fn in (spy, jax.jit(spy)):
        # About ten rounded ops; each result sums a 150-term product over 150 columns.
        assert_close(sj.to_host(fn(*args)), want, ops=10, reduce_len=150 * 150)
    ops = [
        (lambda a, b: a <= b, jnp.less_equal),
        (lambda a, b: a >= b, jnp.greater_equal),
        (lambda a, b: a == b, jnp.equal),
        (lambda a, b: a != b, jnp.not_equal),
        (lambda a, b: a < b, jnp.less),
        (lambda a, b: abs(a) ** b, lambda a, b: jnp.abs(a) ** b),
        (lambda a, b: 2.0**b, lambda a, b: 2.0**b),
    ]
    for op, ref_op in ops:
        for fn in (op, jax.jit(op)):
            assert_close(np.asarray(fn(args[0], args[1])), ref_op(x, y), ops=2)


def test_a_chain_of_merging_kernels_reshapes_each_operand_once():
    # [256] float32 is [8, 32] on the device: each kernel merges the tiles and sticks
    # into one axis; the next kernel reads the merged result, not a reshape of a reshape.
    rng = np.random.default_rng(12)
    x, y = rand((256,), jnp.float32, rng), rand((256,), jnp.float32, rng)
    a, b = sj.to_device(x), sj.to_device(y)
    f = jax.jit(lambda a, b: (sj.exp(a) * b + b) * 3)
    # a and b in (b twice: two readers), the result out; 10 with a pair per kernel
    assert f.lower(a, b).as_text().count("stablehlo.reshape") == 4
    assert_close(sj.to_host(f(a, b)), (np.exp(x) * y + y) * 3, ops=4)


def test_padding_of_results_is_left_as_computed_unless_the_debug_option_poisons_it():
    x = rand((4, 150), jnp.float32, np.random.default_rng(11))
    a = sj.to_device(x, pad_value=0)  # padding 0: what the kernel leaves there shows
    f = jax.jit(lambda a: sj.exp(a) * 2)
    pad = a.layout.padding_mask(a.type.base_shape)
    with sj.poison_padding(False):
        out, hlo = f(a), f.lower(a).as_text()
    assert "select" not in hlo  # no pass of its own, nothing to split a fusion
    assert (np.asarray(out.image)[pad] == 2).all() and out.type.pad is sj.PadFill.POISON
    with sj.poison_padding(True):
        poisoned = f(a)
    assert padding_is_poison(poisoned)
    np.testing.assert_array_equal(sj.to_host(out), sj.to_host(poisoned))
    assert_close(sj.to_host(out), np.exp(x) * 2, ops=2)
