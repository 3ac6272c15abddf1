"""Spyre arrays across cards: spyrejax.P, SpyreType.shard/unshard and jax.shard_map.

The suite runs with 8 CPU devices (tests/conftest.py), one emulated card each.
"""

import jax
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec

import spyrejax as sj
from spyrejax.primitives._array import SpyreArray
from tests.helpers import assert_close, rand

MANUAL = frozenset({"x", "y"})


def mesh(*shape, names=("x", "y")):
    return jax.make_mesh(shape, names[: len(shape)])


def typ(shape, dtype=np.float32, **kw):
    return jax.typeof(sj.to_device(np.zeros(shape, dtype), **kw))


# -- the per-card type ----------------------------------------------------------------


def test_rows_over_four_cards_are_a_block_of_the_second_device_dim():
    t = typ((8, 256))
    assert t.layout.device_size == (8, 8, 32)
    spec = sj.P("x", None)
    local = t.shard(mesh(4), MANUAL, False, spec)
    assert local.shape == (2, 256)
    assert local.layout.device_size == (8, 2, 32)
    assert spec.to_lo() == [PartitionSpec(None, "x", None)]


def test_columns_over_four_cards_are_a_block_of_the_stick_count():
    t = typ((8, 256))
    spec = sj.P(None, "x")
    local = t.shard(mesh(4), MANUAL, False, spec)
    assert local.shape == (8, 64)
    assert local.layout.device_size == (2, 8, 32)
    assert spec.to_lo() == [PartitionSpec("x", None, None)]


def test_two_mesh_axes_split_both_dims():
    t = typ((8, 256))
    spec = sj.P("y", "x")
    local = t.shard(mesh(2, 4), MANUAL, False, spec)  # x: 2 cards, y: 4
    assert local.shape == (2, 128)
    assert local.layout.device_size == (4, 2, 32)
    assert spec.to_lo() == [PartitionSpec("x", "y", None)]
    assert local.unshard(mesh(2, 4), False, sj.P("y", "x")) == t


def test_a_split_inside_a_stick_names_the_dim_the_stick_and_the_fix():
    t = typ((8, 784), np.float16)  # 13 sticks of 64: 392 per card is 6.125 sticks
    with pytest.raises(sj.LayoutError) as err:
        t.shard(mesh(2), MANUAL, False, sj.P(None, "x"))
    msg = str(err.value)
    assert "dim 1" in msg and "6.125" in msg and "64 float16" in msg
    assert "pad dim 1 to a multiple of 128" in msg and "split another dim" in msg


def test_a_split_of_a_padded_dim_says_the_image_pads_it():
    layout = sj.SpyreTensorLayout.from_stride_map([8, 64], [64, 1], np.float16)
    t = typ((6, 64), np.float16, layout=layout)  # 6 rows in 8 device rows
    with pytest.raises(sj.LayoutError, match=r"pads it \(8 slots for 6 values\)"):
        t.shard(mesh(2), MANUAL, False, sj.P("x"))


def test_a_split_of_the_stick_dim_below_one_stick_is_refused():
    t = typ((8, 256), dim_order=[1, 0])  # dim 0 is stuck: 8 values in a 32-slot stick
    with pytest.raises(sj.LayoutError, match=r"0.0625 sticks of 32 float32"):
        t.shard(mesh(4), MANUAL, False, sj.P("x"))


def test_a_plain_partition_spec_is_refused_with_the_spyre_spelling():
    with pytest.raises(sj.SpyreTypeError, match=r"spyrejax\.P"):
        typ((8, 256)).shard(mesh(4), MANUAL, False, PartitionSpec("x"))


def test_one_spec_for_two_layouts_is_refused():
    spec = sj.P(None, "x")
    typ((8, 256)).shard(mesh(4), MANUAL, False, spec)  # the stick count is split
    with pytest.raises(sj.LayoutError, match=r"its own spyrejax\.P"):
        typ((8, 256), dim_order=[1, 0]).shard(mesh(4), MANUAL, False, spec)  # rows are


def test_a_transposed_view_splits_its_base_dim():
    x = sj.to_device(rand((8, 256)))
    t = jax.typeof(sj.transpose(x))  # [256, 8] over base [8, 256]
    spec = sj.P(None, "x")
    local = t.shard(mesh(4), MANUAL, False, spec)
    assert local.shape == (256, 2)
    assert local.is_view and local.base_shape == (2, 256)
    assert local.unshard(mesh(4), False, sj.P(None, "x")) == t


@st.composite
def splits(draw):
    """A dtype, shape, layout, dim and card count; the dim often fills its sticks."""
    dtype = draw(st.sampled_from([np.float16, np.float32]))
    rank = draw(st.integers(1, 3))
    sizes = st.sampled_from([1, 2, 3, 4, 8, 12, 64, 128, 256] if rank < 3 else [1, 2, 4, 8, 128])
    shape = tuple(draw(st.lists(sizes, min_size=rank, max_size=rank)))
    kind = draw(st.sampled_from(["default", "order", "row_major"]))
    if kind == "order":
        layout = sj.SpyreTensorLayout(shape, dtype, draw(st.permutations(range(rank))))
    elif kind == "row_major":
        layout = sj.SpyreTensorLayout.row_major(shape, dtype)
    else:
        layout = sj.SpyreTensorLayout(shape, dtype)
    d = draw(st.integers(0, rank - 1))
    k = draw(st.sampled_from([2, 4]))
    return dtype, shape, layout, d, k


@given(splits())
def test_unshard_of_shard_is_the_identity_and_blocks_hold_the_data(case):
    dtype, shape, layout, d, k = case
    host = (np.arange(np.prod(shape)) % 1000).reshape(shape).astype(dtype)
    x = sj.to_device(host, layout=layout)
    t = jax.typeof(x)
    parts = [None] * len(shape)
    parts[d] = "x"
    spec = sj.P(*parts)
    try:
        local = t.shard(mesh(k), MANUAL, False, spec)
    except (sj.LayoutError, sj.SpyreUnsupportedError):
        assume(False)
    assert local.unshard(mesh(k), False, sj.P(*parts)) == t
    # Each card's block of the image, read with the local type, is its block of data.
    (j,) = [i for i, p in enumerate(spec.to_lo()[0]) if p is not None]
    slabs = np.split(np.asarray(x.image), k, axis=j)
    for c, slab in enumerate(slabs):
        got = sj.to_host(SpyreArray(jax.numpy.asarray(slab), local))
        want = np.split(host, k, axis=d)[c]
        np.testing.assert_array_equal(got, want)


# -- shard_map on Spyre arrays --------------------------------------------------------


def smap(f, in_specs, out_specs, m=None):
    return jax.jit(jax.shard_map(f, mesh=m or mesh(4), in_specs=in_specs, out_specs=out_specs))


@pytest.mark.parametrize("parts", [("x", None), (None, "x")])
def test_elementwise_body_equals_the_host_function(parts):
    xh = rand((8, 256))
    out = smap(lambda a: sj.exp(a) + a, sj.P(*parts), sj.P(*parts))(sj.to_device(xh))
    assert jax.typeof(out) == typ((8, 256))
    assert_close(sj.to_host(out), np.exp(xh) + xh, ops=2, scale=np.e**2)


def test_the_body_sees_the_per_card_type():
    seen = []

    def body(a):
        seen.append(jax.typeof(a))
        return a

    smap(body, sj.P(None, "x"), sj.P(None, "x"))(sj.to_device(rand((8, 256))))
    assert seen[0].shape == (8, 64) and seen[0].layout.device_size == (2, 8, 32)


def test_matmul_body_with_rows_split_equals_the_host_product():
    xh, wh = rand((8, 256), seed=1), rand((256, 128), seed=2)
    f = smap(sj.matmul, (sj.P("x", None), sj.P()), sj.P("x", None))
    out = f(sj.to_device(xh), sj.to_device(wh))
    assert_close(sj.to_host(out), xh @ wh, reduce_len=256, scale=16)


def test_matmul_body_with_output_columns_split_equals_the_host_product():
    xh, wh = rand((8, 256), seed=1), rand((256, 128), seed=2)
    f = smap(sj.matmul, (sj.P(), sj.P(None, "x")), sj.P(None, "x"), mesh(2))
    out = f(sj.to_device(xh), sj.to_device(wh))
    assert_close(sj.to_host(out), xh @ wh, reduce_len=256, scale=16)


# -- autodiff through shard_map ---------------------------------------------------------


@pytest.mark.parametrize(
    "t",
    [typ((8, 256)), typ((8, 784), np.float16), typ(()), typ((3,), np.float16)],
    ids=["rows", "padded-sticks", "0-d", "short"],
)
def test_residuals_stack_per_card_values_and_come_back(t):
    m = mesh(4)
    spec = t.nospec(m, True, ("x",))
    whole = t.unshard(m, True, spec)
    assert np.prod(whole.layout.device_size) == 4 * np.prod(t.layout.device_size)
    assert whole.shard(m, MANUAL, True, spec) == t
    assert spec.to_tangent_spec().to_lo() == spec.to_lo()


def test_grad_through_a_fully_split_shard_map_equals_the_host_gradient():
    xh, yh = rand((8, 256), seed=1), rand((8, 256), seed=2)

    def loss(x, y):
        f = jax.shard_map(
            lambda a, b: sj.tanh(a) * b,
            mesh=mesh(4),
            in_specs=(sj.P("x"), sj.P("x")),
            out_specs=sj.P("x"),
        )
        return jax.numpy.sum(sj.to_host(f(x, y)))

    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(sj.to_device(xh), sj.to_device(yh))
    want = jax.grad(lambda a, b: jax.numpy.sum(jax.numpy.tanh(a) * b), argnums=(0, 1))(xh, yh)
    for g, w in zip(got, want, strict=True):
        assert_close(sj.to_host(g), w, ops=4)


@pytest.mark.parametrize("cards", [4, 8])
def test_grad_of_replicated_weights_sums_the_cards_gradients(cards):
    """A data-parallel step on Spyre arrays: weights on every card, rows split. Where
    the replicated weights meet per-card rows a pvary is inserted, whose transpose sums
    the cards' gradients."""
    xh, yh = rand((16, 256), seed=1), rand((16, 64), seed=2)
    w1h, w2h = rand((256, 128), seed=3, low=-0.1, high=0.1), rand((128, 64), seed=4)

    def body(w1, w2, x):
        return sj.matmul(sj.tanh(sj.matmul(x, w1)), w2)

    def loss(w1, w2, x, y):
        specs = (sj.P(), sj.P(), sj.P("x"))
        f = jax.shard_map(body, mesh=mesh(cards), in_specs=specs, out_specs=sj.P("x"))
        return jax.numpy.mean((sj.to_host(f(w1, w2, x)) - y) ** 2)

    def host_loss(w1, w2, x, y):
        return jax.numpy.mean((jax.numpy.tanh(x @ w1) @ w2 - y) ** 2)

    args = [sj.to_device(a) for a in (w1h, w2h, xh)]
    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args, yh)
    want = jax.grad(host_loss, argnums=(0, 1, 2))(w1h, w2h, xh, yh)
    for g, w in zip(got, want, strict=True):
        assert_close(sj.to_host(g), w, reduce_len=256 * 16, ops=8, scale=0.1)


def test_grad_through_psum_equals_the_host_gradient():
    xh, wh = rand((8, 256), seed=1), rand((256, 64), seed=2, low=-0.1, high=0.1)

    def loss(w, x):
        f = jax.shard_map(
            lambda w, x: sj.psum(sj.tanh(sj.matmul(x, w)), "x"),
            mesh=mesh(4),
            in_specs=(sj.P(), sj.P("x")),
            out_specs=sj.P(),
        )
        return jax.numpy.sum(sj.to_host(f(w, x)))

    def host_loss(w, x):
        return jax.numpy.sum(jax.numpy.tanh(x @ w))

    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(sj.to_device(wh), sj.to_device(xh))
    want = jax.grad(host_loss, argnums=(0, 1))(wh, xh)
    for g, w in zip(got, want, strict=True):
        assert_close(sj.to_host(g), w, reduce_len=256 * 8, ops=4, scale=8)


# Each collective inside a body, on Spyre arrays and (the reference) on plain arrays.
PERM = tuple((i, (i + 1) % 4) for i in range(4))
BODIES = {
    "all_gather": (
        lambda a: sj.all_gather(a, "x", axis=1),
        lambda a: jax.lax.all_gather(a, "x", axis=1, tiled=True),
        ("x", None),
    ),
    "psum_scatter": (
        lambda a: sj.psum_scatter(a, "x", scatter_dimension=0),
        lambda a: jax.lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True),
        (None, "x"),
    ),
    "all_to_all": (
        lambda a: sj.all_to_all(a, "x", 0, 1),
        lambda a: jax.lax.all_to_all(a, "x", 0, 1, tiled=True),
        (None, "x"),
    ),
    "ppermute": (
        lambda a: sj.ppermute(a, "x", PERM),
        lambda a: jax.lax.ppermute(a, "x", PERM),
        ("x",),
    ),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_grad_through_each_collective_equals_jax_on_plain_arrays(name):
    spyre_body, plain_body, parts = BODIES[name]
    auto = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))

    def loss(x, body, spec, m, wrap):
        f = jax.shard_map(
            lambda a: wrap.tanh(body(a)), mesh=m, in_specs=spec(*parts), out_specs=spec("x")
        )
        out = f(x)
        out = sj.to_host(out) if wrap is sj else out
        weights = jax.numpy.cos(jax.numpy.arange(out.size, dtype=out.dtype)).reshape(out.shape)
        return jax.numpy.sum(out * weights)

    grad = jax.jit(jax.grad(loss), static_argnums=(1, 2, 3, 4))
    xh = rand((8, 256), seed=1)
    got = grad(sj.to_device(xh), spyre_body, sj.P, mesh(4), sj)
    want = grad(xh, plain_body, PartitionSpec, auto, jax.numpy)
    assert_close(sj.to_host(got), want, ops=4, scale=4)


def test_grad_through_shard_map_without_check_vma_is_refused():
    def loss(x):
        f = jax.shard_map(
            sj.tanh, mesh=mesh(4), in_specs=sj.P("x"), out_specs=sj.P("x"), check_vma=False
        )
        return jax.numpy.sum(sj.to_host(f(x)))

    with pytest.raises(sj.SpyreUnsupportedError, match="check_vma=True"):
        jax.jit(jax.grad(loss))(sj.to_device(rand((8, 256))))
