"""jax.random inside spyrejax.jit: the same keys give the same numbers as jax.jit, bit for bit.

Keys come in as arguments (old-style ``PRNGKey`` data and new-style typed keys) or are
made inside from an int seed; shapes with and without stick padding (uint32 and float32
hold 32 per stick: 37 pads to 64, 64 fits).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, assert_matches_jax_jit, padding_is_poison

import spyrejax as sj

SHAPES = ((3, 37), (2, 64))


def _host(tree):
    return jax.tree.map(lambda x: np.asarray(sj.to_host(x)), tree)


def assert_same(f, *args):
    """``sj.jit(f)`` gives exactly what ``jax.jit(f)`` gives (the suite's one such check)."""
    assert_matches_jax_jit(f, *args, exact=True)


KEYS = {
    "PRNGKey": lambda seed: jax.random.PRNGKey(seed),
    "key": lambda seed: jax.random.key(seed),
}


def _samplers(shape, dtype=jnp.float32):
    """The samplers under test; the first three also take half-precision dtypes."""
    return {
        "uniform": lambda k: jax.random.uniform(k, shape, dtype),
        "normal": lambda k: jax.random.normal(k, shape, dtype),
        "bernoulli": lambda k: jax.random.bernoulli(k, jnp.asarray(0.3, dtype), shape),
        "randint": lambda k: jax.random.randint(k, shape, -5, 17),
        "split_fold_in": lambda k: jax.random.uniform(
            jax.random.fold_in(jax.random.split(k, 3)[1], 7), shape
        ),
    }


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("sampler", list(_samplers((1,))))
def test_key_argument_matches_jax_jit(sampler, shape):
    # Each sampler meets both key kinds: old-style key data with one shape, typed keys
    # with the other.
    kind = list(KEYS)[SHAPES.index(shape)]
    assert_same(_samplers(shape)[sampler], KEYS[kind](1234))


@pytest.mark.parametrize("kind", list(KEYS))
def test_key_made_inside_from_an_int_seed(kind):
    # The key's making (random_seed, random_wrap) is the same whatever samples from it.
    f = _samplers((3, 37))["split_fold_in"]
    assert_same(lambda seed: f(KEYS[kind](seed)), np.int32(-7))
    g = _samplers((2, 64))["normal"]
    assert_same(lambda: g(KEYS[kind](3)))  # a constant seed


@pytest.mark.parametrize("kind", list(KEYS))
def test_split_and_fold_in_keys_match(kind):
    def f(k):
        a, b = jax.random.split(k)
        c = jax.random.split(b, (2, 3))
        d = jax.random.fold_in(a, 12345)
        return [jax.random.key_data(x) for x in (a, b, c, d)]

    assert_same(f, KEYS[kind](0))


@pytest.mark.xla_fusion_bits
@pytest.mark.parametrize("kind", list(KEYS))
def test_key_captured_as_a_constant(kind):
    key = KEYS[kind](7)
    assert_same(lambda x: x + jax.random.normal(key, x.shape), np.ones((3, 37), np.float32))


def test_returned_keys_come_back_as_key_data():
    got = sj.jit(lambda k: jax.random.split(k))(jax.random.key(5))
    want = jax.random.key_data(jax.random.split(jax.random.key(5)))
    np.testing.assert_array_equal(np.asarray(sj.to_host(got)), np.asarray(want))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dropout_in_a_model_function(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], shape[1])).astype(np.float32)

    def model(params, x, key):
        h = jnp.tanh(x @ params)
        keep = jax.random.bernoulli(key, 0.9, h.shape)
        return jnp.where(keep, h / 0.9, 0.0).sum(axis=0)

    assert_same(model, w, x, jax.random.key(2))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dropout_gradient(shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], shape[1])).astype(np.float32)

    def loss(params, x, key):
        h = jnp.tanh(x @ params)
        keep = jax.random.bernoulli(key, 0.8, h.shape)
        return (jnp.where(keep, h / 0.8, 0.0) ** 2).sum()

    g = jax.grad(loss)
    got = _host(sj.jit(g)(w, x, jax.random.key(8)))
    want = jax.jit(g)(w, x, jax.random.key(8))
    assert_close(got, want, reduce_len=shape[0] * shape[1], ops=4)


def test_original_threefry_counters_match():
    """With jax_threefry_partitionable off, JAX hashes one flat counter: also exact."""

    def f(k):
        a, b = jax.random.split(k)
        return jax.random.normal(a, (3, 37)), jax.random.uniform(jax.random.fold_in(b, 3), (5,))

    with jax.threefry_partitionable(False):
        assert_same(f, jax.random.PRNGKey(11))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_categorical(shape):
    logits = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    assert_same(lambda k, lg: jax.random.categorical(k, lg), jax.random.PRNGKey(9), logits)


@pytest.mark.parametrize("n", [7, 64])
def test_permutation(n):
    assert_same(lambda k: jax.random.permutation(k, n), jax.random.key(4))


def test_uint32_round_trips_and_bit_ops_are_exact():
    x = np.random.default_rng(0).integers(0, 2**32, size=(3, 37), dtype=np.uint32)
    y = x[::-1].copy()

    def f(x, y):
        return [
            x << 7,
            x >> 9,
            jax.lax.shift_right_arithmetic(x, np.uint32(3)),
            x ^ y,
            x | y,
            x & y,
            ~x,
            x + y,
            x * y,
            jax.lax.population_count(x),
            jax.lax.bitcast_convert_type(x, jnp.float32),
            jax.lax.bitcast_convert_type(x, jnp.int32),
            x.astype(jnp.int32),
            (x >> 8).astype(jnp.float32),
        ]

    assert_same(f, x, y)
    assert_same(lambda v: jax.lax.bitcast_convert_type(v, jnp.uint32), x.view(np.float32))
    np.testing.assert_array_equal(_host(sj.to_device(x)), x)
    out = sj.bitwise_xor(sj.to_device(x), sj.to_device(y))
    assert out.type.layout.padding_mask(out.type.base_shape).any()  # 37 of 64 lanes
    assert padding_is_poison(out)  # all bits set


def test_batched_keys_under_vmap():
    x = np.ones((3, 37), np.float32)
    per_key = jax.vmap(lambda k, x: x * jax.random.normal(k, x.shape), in_axes=(0, None))
    assert_same(per_key, jax.random.split(jax.random.key(1), 4), x)
    assert_same(
        lambda k: jax.vmap(lambda kk: jax.random.uniform(kk, (5,)))(jax.random.split(k, 6)),
        jax.random.PRNGKey(0),
    )


@pytest.mark.parametrize("axis", [0, 1])
def test_sort_gradient(axis):
    """The gradient of sort scatters through a uint32 iota (sort's permutation)."""
    x = np.random.default_rng(3).standard_normal((5, 37)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal(37 if axis == 0 else 5).astype(np.float32)
    f = jax.grad(lambda x: (jnp.sort(x, axis=axis).take(0, axis=axis) * w).sum())
    got = _host(sj.jit(f)(x))
    np.testing.assert_array_equal(got, np.asarray(jax.jit(f)(x)))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
@pytest.mark.parametrize("shape", [(5, 70), (2, 64)], ids=str)
@pytest.mark.parametrize("sampler", ["uniform", "normal", "bernoulli"])
def test_half_precision_samplers_are_bit_identical(sampler, dtype, shape):
    # Their random bits are uint16 (and uint8 on the way): raw bits in 16- and 8-bit sticks.
    assert_same(_samplers(shape, dtype)[sampler], jax.random.key(3))


@pytest.mark.parametrize("dtype", [np.uint16, np.uint8], ids=str)
def test_narrow_unsigned_words_round_trip_and_wrap(dtype):
    x = (np.arange(3 * 70).reshape(3, 70) * 977).astype(dtype)
    np.testing.assert_array_equal(np.asarray(sj.to_host(sj.to_device(x))), x)

    def f(x):
        return (x >> 3) ^ (x * x) + x

    np.testing.assert_array_equal(np.asarray(sj.to_host(sj.jit(f)(x))), np.asarray(jax.jit(f)(x)))
