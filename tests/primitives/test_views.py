import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj


@pytest.fixture
def arr():
    x = rand((5, 100, 150), jnp.float32, np.random.default_rng(0))
    return x, sj.to_device(x)


def _same_image(view, base):
    return view.image is base.image or np.array_equal(
        np.asarray(view.image), np.asarray(base.image), equal_nan=True
    )


def test_transpose_is_a_view(arr):
    x, a = arr
    for perm in [(2, 0, 1), (1, 0, 2), None]:
        t = sj.transpose(a, perm)
        np.testing.assert_array_equal(np.asarray(t), jnp.transpose(x, perm))
        assert t.layout == a.layout and _same_image(t, a)
    assert a.T.shape == (150, 100, 5)
    assert a.transpose(0, 2, 1).type.stick_dim == 1  # the stick stays with its host dim
    jaxpr = str(jax.make_jaxpr(lambda a: a.T)(a))
    assert "view=[5,100,150]:[1,150,15000]" in jaxpr


def test_reshape_views(arr):
    x, a = arr
    for shape in [(500, 150), (5, 100, 10, 15), (-1, 150), (1, 5, 100, 150)]:
        r = sj.reshape(a, shape)
        np.testing.assert_array_equal(np.asarray(r), jnp.reshape(x, shape))
        assert r.layout == a.layout
    np.testing.assert_array_equal(np.asarray(a.reshape(500, 150)), x.reshape(500, 150))
    # A transposed view merges copy-free only where NumPy's would.
    t = sj.transpose(a, (0, 2, 1))
    with pytest.raises(sj.LayoutError, match=r"needs a copy.*restickify"):
        sj.reshape(t, (5, 15000))
    moved = sj.restickify(t, dim_order=[1, 2, 0])  # stuck on dim 0: dims 1 and 2 are unpadded
    np.testing.assert_array_equal(
        np.asarray(sj.reshape(moved, (5, 15000))), x.transpose(0, 2, 1).reshape(5, -1)
    )
    # Merging the padded stick dim (150 -> 160 lanes) with another would interleave padding.
    with pytest.raises(sj.LayoutError, match="merges a padded dim") as err:
        sj.reshape(a, (5, 15000))
    assert "reshape_copy(x, (5, 15000))" in str(err.value)  # what to do instead
    np.testing.assert_array_equal(
        np.asarray(sj.primitives.reshape_copy(a, (5, 15000))), x.reshape(5, 15000)
    )
    with pytest.raises(sj.LayoutError, match="cannot reshape"):
        sj.reshape(a, (7, -1))
    with pytest.raises(sj.LayoutError, match="bad shape"):
        sj.reshape(a, (-1, -1))


def test_reshape_that_splits_an_unpadded_stick_folds_its_dims():
    # float16: one 64-lane stick spans two rows of 32 after the reshape.
    x = jnp.arange(8 * 256, dtype=jnp.float16).reshape(8, 256) / 256
    r = sj.to_device(x).reshape(8, 8, 32)
    assert r.type.dims[-1] == sj.layout._devdims.DevDim((1, 2), 1, 64)
    np.testing.assert_array_equal(np.asarray(r + 1.0), x.reshape(8, 8, 32) + 1)
    with pytest.raises(sj.LayoutError, match="folds reduced and kept dims"):
        r.sum(2)
    summed = sj.restickify(r).sum(2)
    want = x.astype(np.float32).reshape(8, 8, 32).sum(2).astype(np.float16)
    assert_close(np.asarray(summed), want, reduce_len=32)


def test_squeeze_and_expand_dims(arr):
    x, a = arr
    e = sj.expand_dims(a, (0, 2))
    assert e.shape == (1, 5, 1, 100, 150)
    np.testing.assert_array_equal(np.asarray(e), jnp.expand_dims(x, (0, 2)))
    np.testing.assert_array_equal(np.asarray(sj.squeeze(e)), x)
    np.testing.assert_array_equal(np.asarray(e.squeeze(2)), jnp.expand_dims(x, 0))
    with pytest.raises(sj.LayoutError, match=r"axes \[1\] .* do not have size 1"):
        sj.squeeze(e, 1)


def test_broadcast_to_and_use_in_arithmetic(arr):
    x, _ = arr
    row = sj.to_device(x[0, 0])
    b = sj.broadcast_to(row, (7, 150))
    np.testing.assert_array_equal(np.asarray(b), np.broadcast_to(x[0, 0], (7, 150)))
    assert b.image.shape == row.image.shape  # no data moved
    c = sj.to_device(x[0, :7])
    assert_close(np.asarray(c + b), x[0, :7] + x[0, 0])
    with pytest.raises(sj.LayoutError, match="cannot broadcast"):
        sj.broadcast_to(row, (7, 151))


def test_views_compose_with_ops(arr):
    x, a = arr
    out = sj.exp(sj.transpose(a, (1, 0, 2))) + sj.to_device(x, dim_order=[1, 0, 2]).reshape(
        5, 100, 150
    ).transpose(1, 0, 2)
    assert_close(np.asarray(out), np.exp(x.transpose(1, 0, 2)) + x.transpose(1, 0, 2), ops=2)


def test_view_errors(arr):
    _, a = arr
    with pytest.raises(sj.LayoutError, match="repeated axis"):
        sj.transpose(a, (0, 0, 1))
    with pytest.raises(sj.LayoutError, match="not a permutation"):
        sj.transpose(a, (0, 1))
    with pytest.raises(sj.LayoutError, match="out of range"):
        sj.transpose(a, (0, 1, 3))
    with pytest.raises(sj.SpyreTypeError, match="needs a SpyreArray"):
        sj.transpose(jnp.ones((2, 2)))


def test_reshape_splits_a_device_dim_that_covers_whole_dims():
    # Stuck on dim 0, the 128 columns are one device dim; (64, 128) -> (64, 4, 32)
    # splits it into 4 x 32 by a reshape of the image: no fold, no copy.
    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    a = sj.restickify(sj.to_device(x), dim_order=[1, 0])
    assert a.layout.device_size == (2, 128, 32)
    r = a.reshape(64, 4, 32)
    assert r.layout.device_size == (2, 4, 32, 32)
    assert r.layout.stride_map == (4096, 32, 1, 128)
    assert all(len(d.dims) == 1 for d in r.type.dims if d.is_data)
    np.testing.assert_array_equal(np.asarray(r), x.reshape(64, 4, 32))
    np.testing.assert_array_equal(np.asarray(r.sum(1)), x.reshape(64, 4, 32).sum(1))


@pytest.mark.parametrize(
    ("make", "view"),
    [
        (lambda: rand((8, 256), jnp.float16), lambda a: a.reshape(8, 8, 32)),
        (lambda: rand((8, 256), jnp.float16), lambda a: a.reshape(8, 8, 32).transpose(1, 0, 2)),
        (lambda: rand((32, 64)), lambda a: a.T.reshape(4, 16, 32)),
        (lambda: rand((6, 320)), lambda a: a.reshape(6, 4, 5, 16)),
        (lambda: rand((4, 60)), lambda a: a.reshape(4, 3, 20)),
        (lambda: rand((5, 100, 150)), lambda a: a.transpose(0, 2, 1)),
    ],
)
def test_the_per_core_lx_index_of_a_view_is_the_layouts_index_map(make, view):
    """Brute force: every point core 0 reads sits where the base's own index map puts it."""
    from spyrejax.device import default_machine, divide_op, elementwise_space
    from spyrejax.device._coremaps import lx_index
    from spyrejax.lowering._spaces import type_spec as _spec

    t = view(sj.to_device(make())).type
    spec = _spec(t, "x")
    div = divide_op(elementwise_space("neg", spec, [spec]), default_machine())
    got = lx_index(div, 0)  # iteration order: the last logical dim first
    box = div.box(0, 0)
    mapping = t.layout.for_host(t.base_shape)
    n = len(t.shape)
    chunks = [min(div.chunk(name), t.shape[n - 1 - a]) for a, name in enumerate(div.space.names)]
    for point in np.ndindex(*chunks):
        index = point[::-1]  # logical index
        offset = sum(i * s for i, s in zip(index, t.strides, strict=True))
        coord = mapping.device_coord(np.unravel_index(offset, t.base_shape))
        local = [c - a for c, (a, _) in zip(coord, box, strict=True)]
        assert all(0 <= c < b - a for c, (a, b) in zip(coord, box, strict=True))
        want = np.ravel_multi_index(local, [b - a for a, b in box])
        assert got[point] == want, (index, coord)


def test_a_view_of_an_arranged_array_keeps_its_arrangement_when_made_plain():
    # canonical() states a view over its own shape where the image is the same; the
    # default layout of [1, 4, 64] float32 has the same device dims as a DL16_TO_FP32
    # [4, 64] row-major image, but not the same element order inside its sticks.
    from spyrejax.layout import SpyreTensorLayout
    from spyrejax.primitives._array import SpyreType

    layout = SpyreTensorLayout.row_major((4, 64), np.float32).with_arrangement("DL16_TO_FP32")
    base = SpyreType.contiguous((4, 64), np.float32, layout)
    view = SpyreType((1, 4, 64), base.dtype, layout, base.base_shape, (1, 64, 1), base.pad)
    plain = view.canonical()
    assert plain.layout.arrangement == layout.arrangement

    def offsets(layout: SpyreTensorLayout, shape: tuple[int, ...]) -> np.ndarray:
        coords = layout.for_host(shape).device_coords().reshape(-1, len(layout.device_size))
        return np.ravel_multi_index(tuple(coords.T), layout.device_size)

    assert np.array_equal(offsets(plain.layout, (1, 4, 64)), offsets(layout, (4, 64)))
    default = SpyreTensorLayout((1, 4, 64), np.float32)  # what it was made (standard order)
    assert not np.array_equal(offsets(default, (1, 4, 64)), offsets(layout, (4, 64)))
