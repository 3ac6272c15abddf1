import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FLOAT_DTYPES, assert_close, padding_is_poison, rand
from oracles import random_bits, same_bits

import spyrejax as sj


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_restickify_moves_the_stick(dtype):
    x = rand((5, 100, 150), dtype, np.random.default_rng(0))
    a = sj.to_device(x)
    r = sj.restickify(a, dim_order=[0, 2, 1])
    assert r.layout == sj.SpyreTensorLayout(x.shape, dtype, [0, 2, 1])
    assert r.type.stick_dim == 1
    np.testing.assert_array_equal(np.asarray(r), x)
    assert padding_is_poison(r)
    eps = sj.format_for_dtype(dtype).elems_per_stick()
    assert sj.restickify_cost(a.type) == 100 * -(-150 // eps) * 5 * eps


def test_restickify_to_an_explicit_layout_and_of_views():
    x = rand((40, 60), jnp.float16, np.random.default_rng(1))
    folded = sj.SpyreTensorLayout.from_stride_map([38, 64], [64, 1], jnp.float16)
    r = sj.restickify(sj.to_device(x), folded)
    assert r.layout == folded
    np.testing.assert_array_equal(np.asarray(r), x)
    t = sj.restickify(sj.to_device(x).T)
    assert t.layout == sj.SpyreTensorLayout((60, 40), jnp.float16) and not t.type.is_view
    np.testing.assert_array_equal(np.asarray(t), x.T)


def test_a_transpose_plus_x_costs_one_restickify():
    # Spec section 7: a.T + x needs one restickify of S*S elements.
    s = 128
    rng = np.random.default_rng(2)
    a_host, x_host = rand((s, s), jnp.float16, rng), rand((s, s), jnp.float16, rng)
    a, x = sj.to_device(a_host), sj.to_device(x_host)
    with pytest.raises(sj.LayoutError, match="restickify"):
        a.T + x
    moved = sj.restickify(a.T)
    assert sj.restickify_cost(a.T.type) == s * s
    assert_close(sj.to_host(moved + x), a_host.T + x_host)


def test_compact_makes_a_sparse_result_dense():
    x = rand((300, 256), jnp.float32, np.random.default_rng(3))
    s = sj.sum(sj.to_device(x), 1)
    assert s.layout.is_sparse
    c = sj.compact(s)
    assert c.layout == sj.SpyreTensorLayout((300,), jnp.float32) and not c.layout.is_sparse
    assert s.layout.nbytes == 300 * 128  # one element per stick
    assert c.layout.nbytes == 10 * 128  # 32 per stick
    assert_close(sj.to_host(c), x.sum(1), reduce_len=256)
    dense = sj.to_device(x)
    assert sj.compact(dense) is dense


@pytest.mark.parametrize(
    ("src", "dst", "keeps_layout"),
    [
        (jnp.float16, jnp.bfloat16, True),
        (jnp.float32, jnp.int32, True),
        (jnp.float16, jnp.float32, False),
        (jnp.float32, jnp.float16, False),
        (jnp.float32, jnp.int8, False),
    ],
    ids=str,
)
def test_astype(src, dst, keeps_layout):
    x = rand((5, 100, 150), src, np.random.default_rng(4), low=-50, high=50)
    a = sj.to_device(x, dim_order=[2, 0, 1])  # stuck on dim 1
    out = a.astype(dst)
    assert out.dtype == np.dtype(dst)
    same_geometry = (out.layout.device_size, out.layout.stride_map) == (
        a.layout.device_size,
        a.layout.stride_map,
    )
    assert same_geometry == keeps_layout
    assert out.type.stick_dim == 1  # a rebuilt layout keeps the stick dim
    assert out.layout == sj.SpyreTensorLayout(x.shape, dst, [2, 0, 1])  # and the dim order
    assert out.layout.elems_per_stick == sj.format_for_dtype(dst).elems_per_stick()
    np.testing.assert_array_equal(np.asarray(out), x.astype(dst))
    assert padding_is_poison(out)


CONVERSIONS = [
    (jnp.bfloat16, jnp.float32),
    (jnp.float32, jnp.bfloat16),
    (jnp.float16, jnp.float32),
    (jnp.float32, jnp.float16),
    (jnp.int8, jnp.float32),
]


def _views(a):
    return {"image": a, "transposed view": a.T, "sparse": sj.max(a, -1, keepdims=True)}


@pytest.mark.parametrize(("src", "dst"), CONVERSIONS, ids=str)
@pytest.mark.parametrize(
    ("shape", "dim_order"),
    [((37, 970), None), ((5, 100, 150), [2, 0, 1]), ((70, 40), [1, 0]), ((4, 1), None)],
    ids=str,
)
def test_astype_between_stick_sizes_writes_the_image_a_transfer_writes(src, dst, shape, dim_order):
    # A new stick size re-cuts the sticks on the image; every bit of the result, the
    # padding included, is what converting the values and writing them would give.
    rng = np.random.default_rng(7)
    if src == jnp.int8:
        x = rng.integers(-128, 128, size=shape).astype(np.int8)
    else:
        x = random_bits(shape, src, rng)
    a = sj.to_device(x, dim_order=dim_order)
    for name, v in _views(a).items():
        if name == "sparse" and src == jnp.int8:
            continue
        out = sj.astype(v, dst)
        values = jax.jit(lambda h: h.astype(dst))(np.asarray(v))
        want = sj.dma_h2d(np.asarray(values), out.layout)
        assert same_bits(out.image, want), name


def test_astype_keeps_the_whole_dim_order():
    x = rand((5, 7, 150), jnp.float32, np.random.default_rng(5))
    a = sj.to_device(x, dim_order=[2, 1, 0])
    out = a.astype(jnp.float16)
    assert out.layout == sj.SpyreTensorLayout(x.shape, jnp.float16, [2, 1, 0])
    assert out.layout.dim_order(x.shape) == (2, 1, 0)
    np.testing.assert_array_equal(np.asarray(out), x.astype(jnp.float16))
    # A row-major layout stays row-major; a transposed view converts as laid out.
    rm = sj.to_device(x, sj.SpyreTensorLayout.row_major(x.shape, jnp.float32))
    assert rm.astype(jnp.float16).layout == sj.SpyreTensorLayout.row_major(x.shape, jnp.float16)
    t = a.T.astype(jnp.float16)
    assert t.layout == sj.SpyreTensorLayout((150, 7, 5), jnp.float16)
    np.testing.assert_array_equal(np.asarray(t), x.T.astype(jnp.float16))
    # A view of a row-major value with its outer dims permuted (GQA's probabilities,
    # [g, b, k, t, s] of scores laid out [b, k, g, t, s]) keeps their device order.
    p = rm.transpose(1, 0, 2).astype(jnp.float16)
    assert p.layout.device_size == (5, 7, 3, 64) and padding_is_poison(p)
    np.testing.assert_array_equal(np.asarray(p), x.transpose(1, 0, 2).astype(jnp.float16))


def test_astype_of_a_size_one_stick_gives_the_canonical_layout():
    # (4, 1) float32 is stuck on its size-1 dim: [1, 4, 32] / [-1, 1, -1]. In float16
    # it is the canonical [1, 4, 64] / [-1, 1, -1], with no extra synthetic dim.
    x = rand((4, 1), jnp.float32, np.random.default_rng(6))
    a = sj.to_device(x)
    assert a.layout.device_size == (1, 4, 32)
    out = a.astype(jnp.float16)
    assert out.layout.device_size == (1, 4, 64) and out.layout.stride_map == (-1, 1, -1)
    assert out.layout == sj.SpyreTensorLayout((4, 1), jnp.float16)
    np.testing.assert_array_equal(np.asarray(out), x.astype(jnp.float16))
    assert padding_is_poison(out)


def test_astype_of_a_sparse_array_stays_sparse():
    s = sj.sum(sj.to_device(jnp.ones((70, 100), jnp.float16)), 1)
    out = sj.astype(s, jnp.float32)
    assert out.layout == sj.SpyreTensorLayout((70,), jnp.float32, [0, -1])
    np.testing.assert_array_equal(np.asarray(out), np.full(70, 100, np.float32))


def test_errors():
    a = sj.to_device(jnp.ones((4, 150), jnp.float16))
    with pytest.raises(sj.LayoutError, match="not both"):
        sj.restickify(a, a.layout, dim_order=[1, 0])
    with pytest.raises(sj.LayoutError, match=r"got \[1, 0\] \(a dim order goes in dim_order=\)"):
        sj.restickify(a, [1, 0])
    with pytest.raises(sj.LayoutError, match="too small"):
        sj.restickify(a, layout=sj.SpyreTensorLayout((4, 64), jnp.float16))
    with pytest.raises(sj.LayoutError, match="does not fit dtype"):
        sj.restickify(a, layout=sj.SpyreTensorLayout((4, 150), jnp.float32))
    with pytest.raises(sj.LayoutError, match="float64"):
        sj.astype(a, jnp.float64)
    assert sj.astype(a, jnp.float16) is a
    jaxpr = str(jax.make_jaxpr(lambda a: sj.restickify(a, dim_order=[1, 0]))(a))
    assert "Restickify[cost=768]" in jaxpr


def test_reshape_copy_moves_data_into_the_new_shape():
    x = jnp.arange(5 * 150, dtype=jnp.float32).reshape(5, 150)
    a = sj.to_device(x)
    with pytest.raises(sj.LayoutError, match="merges a padded dim"):
        sj.reshape(a, (750,))
    r = sj.primitives.reshape_copy(a, (750,))
    assert r.layout == sj.SpyreTensorLayout((750,), jnp.float32)
    np.testing.assert_array_equal(np.asarray(r), x.reshape(-1))
    t = sj.primitives.reshape_copy(a, (25, -1), dim_order=[1, 0])
    assert t.type.stick_dim == 0
    np.testing.assert_array_equal(np.asarray(t), x.reshape(25, 30))
    g = jax.grad(lambda x: sj.to_host(sj.primitives.reshape_copy(sj.to_device(x), (750,))).sum())(x)
    np.testing.assert_array_equal(g, np.ones_like(x))
    with pytest.raises(sj.LayoutError, match="cannot reshape"):
        sj.primitives.reshape_copy(a, (7, 100))


def test_slice_concatenate_and_pad_copies():
    x = jnp.arange(5 * 150, dtype=jnp.float32).reshape(5, 150)
    a = sj.to_device(x)
    s = sj.primitives.slice_copy(a, (1, 10), (4, 80))
    np.testing.assert_array_equal(np.asarray(s), x[1:4, 10:80])
    assert s.layout == sj.SpyreTensorLayout((3, 70), jnp.float32)
    c = sj.primitives.concatenate([a, a], axis=0)
    np.testing.assert_array_equal(np.asarray(c), jnp.concatenate([x, x], axis=0))
    c = sj.primitives.concatenate([a, a, a], axis=-1, dim_order=[1, 0])
    np.testing.assert_array_equal(np.asarray(c), jnp.concatenate([x, x, x], axis=-1))
    assert c.layout == sj.SpyreTensorLayout((5, 450), jnp.float32, [1, 0])
    p = sj.primitives.pad(a, -1.0, [(1, 0, 0), (0, 2, 1)])
    np.testing.assert_array_equal(np.asarray(p), jax.lax.pad(x, -1.0, [(1, 0, 0), (0, 2, 1)]))
    with pytest.raises(sj.LayoutError, match="outside shape"):
        sj.primitives.slice_copy(a, (0, 0), (6, 10))
    with pytest.raises(sj.LayoutError, match="differ off dim 0"):
        sj.primitives.concatenate([a, s], axis=0)
    with pytest.raises(sj.LayoutError, match="does not fit"):
        sj.primitives.pad(a, 0.0, [(1, 0, 0)])


FLOAT_FORMATS = [d for d in sj.SUPPORTED_DTYPES if jnp.issubdtype(d, jnp.floating)]


@pytest.mark.parametrize("order", [None, [1, 0]], ids=["stick_dim_1", "stick_dim_0"])
@pytest.mark.parametrize("dtype", FLOAT_FORMATS, ids=str)
def test_copies_and_views_keep_every_bit_eagerly_and_under_jit(dtype, order):
    # Subnormals, NaN payloads, -0.0 and inf: copies move elements, never compute on them.
    x = random_bits((6, 150), dtype, np.random.default_rng(5))
    bits = x.view(f"u{x.itemsize}")
    config = [(1, 0, 0), (2, 3, 1)]
    want = {
        "restickify": x,
        "restickify_view": x.T,
        "view": x.T,
        "slice": x[1:5, 3:140],
        "concatenate": np.concatenate([x, x], 0),
        "pad": np.asarray(jax.lax.pad(bits, bits.dtype.type(0), config)).view(dtype),
        "reshape": x.reshape(3, 300),
        "astype": x,
    }

    def copies(a):
        p = sj.primitives
        return {
            "restickify": sj.to_host(sj.restickify(a, dim_order=[1, 0])),
            "restickify_view": sj.to_host(sj.restickify(a.T)),
            "view": sj.to_host(a.T),
            "slice": sj.to_host(p.slice_copy(a, (1, 3), (5, 140))),
            "concatenate": sj.to_host(p.concatenate([a, a], 0)),
            "pad": sj.to_host(p.pad(a, 0, config)),
            "reshape": sj.to_host(p.reshape_copy(a, (3, 300))),
            "astype": sj.to_host(sj.astype(a, dtype)),
        }

    a = sj.to_device(x, dim_order=order)
    for how, got in (("eager", copies(a)), ("jit", jax.jit(copies)(a))):
        for name, value in got.items():
            assert same_bits(value, want[name]), (how, name)


def test_a_pad_into_whole_sticks_keeps_bfloat16_subnormals():
    # The pad selects. With the source's sticks down its columns, XLA's CPU code flushed
    # bfloat16 subnormals there when the bitcast back from bits was fused into it, even
    # though the result, (7, 64) in whole sticks, has no padding of its own.
    x = random_bits((6, 60), jnp.bfloat16, np.random.default_rng(7))
    a = sj.to_device(x, dim_order=[1, 0])
    config = [(1, 0, 0), (2, 2, 0)]
    out = jax.jit(lambda a: sj.primitives.pad(a, 0, config))(a)
    assert out.layout.device_size == (1, 7, 64)
    bits = x.view(np.uint16)
    assert same_bits(
        sj.to_host(out), np.asarray(jax.lax.pad(bits, np.uint16(0), config)).view(x.dtype)
    )


@pytest.mark.parametrize("dtype", FLOAT_FORMATS, ids=str)
def test_planned_copies_keep_every_bit(dtype):
    x = random_bits((6, 150), dtype, np.random.default_rng(6))

    def fn(x):
        return (
            jnp.concatenate([x[1:5], x[:4]], 0).T,
            jnp.pad(x, ((1, 0), (2, 3))),
            x.reshape(3, 300),
        )

    zero = np.zeros((), x.dtype)
    padded = np.concatenate([np.broadcast_to(zero, (1, 150)), x], 0)
    padded = np.concatenate(
        [np.broadcast_to(zero, (7, 2)), padded, np.broadcast_to(zero, (7, 3))], 1
    )
    want = (np.concatenate([x[1:5], x[:4]], 0).T, padded, x.reshape(3, 300))
    for got, expected in zip(sj.jit(fn)(x), want, strict=True):
        assert same_bits(sj.to_host(got), expected)


def _stacked(shape, dtype):
    """The stacked layout of ``shape[1:]``'s default slices (a scan's weights)."""
    inner = sj.SpyreTensorLayout(shape[1:], dtype)
    step = int(np.prod(shape[1:]))
    return sj.SpyreTensorLayout.from_stride_map(
        (shape[0], *inner.device_size), (step, *inner.stride_map), dtype
    )


@pytest.mark.parametrize("poison", [True, False], ids=["poison", "no_poison"])
@pytest.mark.parametrize("dtype", FLOAT_FORMATS, ids=str)
def test_a_restickify_permuting_device_dims_is_the_dma_bit_for_bit(dtype, poison):
    # Stacked weights [3, 40, 70] (stack dim inside the default layout) into the stacked
    # layout of their slices: the same (size, stride) pairs, so one transpose of the image.
    x = random_bits((3, 40, 70), dtype, np.random.default_rng(8))
    a = sj.to_device(x)
    target = _stacked(x.shape, dtype)
    perm = a.layout.permutation_to(target)
    assert perm is not None
    assert (target.padding_mask(x.shape) == a.layout.padding_mask(x.shape).transpose(perm)).all()
    with sj.poison_padding(poison):
        got = jax.jit(lambda a: sj.restickify(a, target))(a)
    assert got.layout == target and same_bits(sj.to_host(got), x)
    # The source's padding is poison (a transfer wrote it), so the image is the DMA's.
    assert padding_is_poison(got)


def test_permutation_to_only_when_the_pairs_say_it():
    f32 = jnp.float32
    base = sj.SpyreTensorLayout((3, 40, 70), f32)
    assert base.permutation_to(base) == (0, 1, 2, 3)
    assert base.permutation_to(_stacked((3, 40, 70), f32)) == (2, 1, 0, 3)
    # Another stick dim changes the pairs; a format, a gap or a repeated stride refuses.
    assert base.permutation_to(sj.SpyreTensorLayout((3, 40, 70), f32, [0, 2, 1])) is None
    assert base.permutation_to(sj.SpyreTensorLayout((3, 40, 70), jnp.float16)) is None
    assert base.permutation_to(base.with_gap(0, back=2)) is None
    sparse = sj.SpyreTensorLayout.from_stride_map([1, 60, 64], [64, 1, 1], jnp.float16)
    assert sparse.permutation_to(sparse) is None
