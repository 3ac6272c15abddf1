import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FLOAT_DTYPES, assert_close, padding_is_poison, rand

import spyrejax as sj
from spyrejax.lowering.program._cores import core_check

OPS = {"sum": (sj.sum, jnp.sum), "max": (sj.max, jnp.max), "min": (sj.min, jnp.min)}
OPS["mean"] = (sj.mean, jnp.mean)
AXES = [None, 0, 1, 2, (0, 2), (1, 2), -1]


def _terms(shape, axis):
    """How many elements a reduction over ``axis`` adds into each result."""
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis)
    return int(np.prod([shape[a] for a in axes]))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
def test_reductions_match_jnp(op, dtype, axis, keepdims):
    x = rand((5, 20, 150), dtype, np.random.default_rng(0))
    fn, ref_fn = OPS[op]
    a = sj.to_device(x)  # poison (NaN) in the 42 padded lanes of every row
    out = fn(a, axis, keepdims)
    ref = ref_fn(x.astype(jnp.float32), axis=axis, keepdims=keepdims).astype(dtype)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if op in ("sum", "mean") and not out.layout.is_sparse:
        assert out.type.pad is sj.PadFill.ZERO
        t = out.type
        assert (np.asarray(out.image)[t.layout.padding_mask(t.base_shape)] == 0).all()
    else:
        assert padding_is_poison(out)
    assert_close(sj.to_host(out), ref, reduce_len=_terms(x.shape, axis), ops=2)  # mean: 2


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_reductions_of_row_major_arrays(op, axis):
    # Row-major: [5, 20, T, S]; a run of tiles and lanes is reduced (or kept) as one axis.
    x = rand((5, 20, 150), jnp.float32, np.random.default_rng(2))
    fn, ref_fn = OPS[op]
    a = sj.to_device(x, sj.SpyreTensorLayout.row_major(x.shape, jnp.float32))
    out = fn(a, axis)
    if op in ("sum", "mean") and not out.layout.is_sparse:
        t = out.type
        assert (np.asarray(out.image)[t.layout.padding_mask(t.base_shape)] == 0).all()
    else:
        assert padding_is_poison(out)
    assert_close(sj.to_host(out), ref_fn(x, axis=axis), reduce_len=_terms(x.shape, axis), ops=2)
    if axis == -1:  # the stick's tiles and lanes reduce together, as one row
        hlo = jax.jit(lambda a: fn(a, axis)).lower(a).as_text()
        assert "tensor<5x20x160xf32>" in hlo


@pytest.mark.parametrize("op", OPS)
def test_large_images_reduce_in_two_stages_with_the_same_result(op):
    from spyrejax.primitives._tuning import tuned

    x = rand((5, 20, 150), jnp.float32, np.random.default_rng(1))
    fn, ref_fn = OPS[op]
    a = sj.to_device(x)
    for axis in (None, (1, 2), -1):
        fused = fn(a, axis)
        assert (
            "optimization_barrier"
            not in jax.jit(lambda a, axis=axis: fn(a, axis)).lower(a).as_text()
        )
        with tuned(staged_reduction_bytes=0):
            staged = fn(a, axis)
            hlo = jax.jit(lambda a, axis=axis: fn(a, axis)).lower(a).as_text()
        assert "optimization_barrier" in hlo and fused.type == staged.type
        n = _terms(x.shape, axis)
        assert_close(sj.to_host(staged), ref_fn(x, axis=axis), reduce_len=n, ops=2)
        assert_close(sj.to_host(staged), sj.to_host(fused), reduce_len=n, ops=2)


def test_stick_dim_reduction_is_sparse_with_the_spec_layout():
    x = rand((512, 256), jnp.float16, np.random.default_rng(1))
    out = sj.sum(sj.to_device(x), 1)
    assert out.layout == sj.SpyreTensorLayout([512], jnp.float16, [0, -1])
    assert out.layout.is_sparse and out.type.stick_dim is None
    image = np.asarray(out.image)
    assert not np.isnan(image[..., 0]).any() and np.isnan(image[..., 1:]).all()
    kept = sj.sum(sj.to_device(x), 1, keepdims=True)
    assert kept.layout.is_sparse and kept.shape == (512, 1)


def test_non_stick_reduction_stays_dense():
    x = rand((5, 100, 150), jnp.float32, np.random.default_rng(2))
    a = sj.to_device(x)
    assert a.layout.device_size == (100, 5, 5, 32)
    out = sj.sum(a, 0)
    # The reduced device dim disappears; the others keep their order.
    assert out.layout.device_size == (100, 5, 32)
    assert out.layout.stride_map == (150, 32, 1)
    assert not out.layout.is_sparse and out.type.stick_dim == 1


@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_integer_reductions_never_see_the_poison(op):
    # int32 poison is INT_MIN: a max/min that saw padding would return it.
    x = jnp.arange(-75, 75, dtype=jnp.int32).reshape(2, 75) * 3
    out = getattr(sj, op)(sj.to_device(x), 1)
    np.testing.assert_array_equal(np.asarray(out), getattr(jnp, op)(x, axis=1))


def test_reductions_of_views():
    x = rand((6, 150), jnp.float32, np.random.default_rng(3))
    a = sj.to_device(x)
    assert_close(sj.to_host(sj.sum(a.T, 0)), x.T.sum(0), reduce_len=150)
    b = sj.broadcast_to(sj.to_device(x[0]), (4, 150))
    assert_close(sj.to_host(sj.sum(b, 0)), 4 * x[0], reduce_len=4)
    assert_close(sj.to_host(sj.mean(b, 0)), x[0], reduce_len=4, ops=2)


def test_methods_and_errors():
    x = rand((6, 150), jnp.float32, np.random.default_rng(4))
    a = sj.to_device(x)
    assert_close(sj.to_host(a.sum(1)), x.sum(1), reduce_len=150)
    np.testing.assert_array_equal(sj.to_host(jax.jit(lambda a: a.max())(a)), x.max())  # exact
    with pytest.raises(sj.LayoutError, match="axis 2 is out of range"):
        sj.sum(a, 2)
    with pytest.raises(sj.LayoutError, match="repeated axis"):
        sj.sum(a, (1, -1))
    with pytest.raises(sj.SpyreTypeError, match="float array"):
        sj.mean(sj.to_device(jnp.ones((3,), jnp.int32)))
    with pytest.raises(sj.SpyreTypeError, match="needs a SpyreArray"):
        sj.sum(x)
    with pytest.raises(sj.SpyreTypeError, match="unknown reduction 'prod'"):
        sj.primitives.reduce("prod", a)


@pytest.mark.parametrize("shape", [(3, 150), (4, 64)])  # with and without stick padding
@pytest.mark.parametrize("axis", [0, 1, None])
def test_any_and_all_ignore_padding(shape, axis):
    rng = np.random.default_rng(0)
    x = rng.random(shape) > 0.3
    a = sj.to_device(x)
    np.testing.assert_array_equal(np.asarray(sj.any(a, axis)), x.any(axis))
    np.testing.assert_array_equal(np.asarray(sj.all(a, axis)), x.all(axis))
    ones = sj.to_device(np.ones(shape, bool))  # padding must not make all() false
    assert np.asarray(sj.all(ones, axis)).all() and not np.asarray(sj.any(~ones, axis)).any()
    with pytest.raises(sj.SpyreTypeError, match="needs a bool array"):
        sj.any(sj.to_device(x.astype(np.float32)), axis)


def test_every_reduction_is_public_and_a_method():
    import inspect

    for op in sj.primitives.REDUCTIONS_TABLE:
        fn = getattr(sj, op.name)
        assert list(inspect.signature(fn).parameters) == ["x", "axis", "keepdims"]
        assert callable(getattr(sj.SpyreArray, op.name))


def _layouts(shape, dtype):
    return {
        "default": sj.SpyreTensorLayout(shape, dtype),
        "row_major": sj.SpyreTensorLayout.row_major(shape, dtype),
    }


@pytest.mark.parametrize("layout", ["default", "row_major"])
@pytest.mark.parametrize("axis", [-1, None, 0], ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
def test_padded_reductions_keep_nan_and_inf_of_the_data(op, dtype, axis, layout):
    # A partial last stick (2000 = 62 full sticks + 16 lanes for float32, 31 + 16 for
    # halves): NaN and +-inf at data positions, in the full tiles and in the partial one,
    # reach the result as in NumPy; the poison in the padding does not. (NaN through max
    # and min is left out: XLA's CPU backend, jax.jit included, drops it in its YNNPACK
    # reductions of long rows, depending on where it sits.)
    x = np.array(rand((6, 2000), jnp.float32, np.random.default_rng(5)))
    x[3, 7], x[3, 1999] = np.inf, -np.inf  # sum: NaN; max: inf; min: -inf
    x[4, 1995], x[5, 3] = np.inf, -np.inf
    if op in ("sum", "mean"):
        x[1, 5], x[2, 1990] = np.nan, np.nan  # a full tile, the partial one
    x = jnp.asarray(x, dtype)
    fn, _ = OPS[op]
    a = sj.to_device(x, _layouts(x.shape, dtype)[layout])
    f = jax.jit(lambda a: fn(a, axis))
    out = sj.to_host(f(a))
    np_fn = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[op]
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, as it should be
        want = np_fn(np.asarray(x, np.float32), axis=axis).astype(dtype)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    np.testing.assert_array_equal(np.asarray(out)[np.isinf(want)], np.asarray(want)[np.isinf(want)])
    finite = np.isfinite(np.asarray(want, np.float32))
    assert_close(np.asarray(out)[finite], np.asarray(want)[finite], reduce_len=2000, ops=2)
    hlo = f.lower(a).as_text()
    # The stick's padding is windowed out, or (half-float sums of tiles and lanes apart)
    # the lanes are reduced first and the box of the lane sums is sliced.
    lanes_first = op in ("sum", "mean") and np.dtype(dtype).itemsize == 2
    assert axis == 0 or "reduce_window" in hlo or lanes_first


@pytest.mark.parametrize("op", ["max", "min", "sum"])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int8, jnp.uint8])
def test_padded_integer_reductions_are_windowed_and_exact(op, dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(6)
    x = rng.integers(info.min // 2, info.max // 2, (5, 300), endpoint=True).astype(dtype)
    x[0, 299], x[1, 0] = info.max, info.min  # extremes in the partial tile and a full one
    # Sums wrap around as jax.jit's do (exact in any order, modulo 2 ** bits).
    a = sj.to_device(jnp.asarray(x))
    f = jax.jit(lambda a: getattr(sj, op)(a, 1))
    want = getattr(jnp, op)(jnp.asarray(x), axis=1).astype(dtype)  # jnp.sum widens int8
    np.testing.assert_array_equal(np.asarray(sj.to_host(f(a))), want)
    assert "reduce_window" in f.lower(a).as_text()


def test_windowed_reductions_select_only_the_partial_tile():
    # The default layout's last tile is masked on its own: no select over the image.
    a = sj.to_device(rand((64, 2000), jnp.float32, np.random.default_rng(7)))
    hlo = jax.jit(lambda a: sj.max(a, 1)).lower(a).as_text()
    image = "x".join(str(n) for n in a.layout.device_size)
    assert "reduce_window" in hlo
    assert not any(f"tensor<{image}xi1>" in line for line in hlo.splitlines() if "select" in line)


def _softmax(x):
    return jax.nn.softmax(x, axis=-1)


def _layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def _attention(q, k, v):
    t = q.shape[-2]
    s = jnp.einsum("hqd,hkd->hqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)


@pytest.mark.parametrize(
    "fn, shapes, dtype, reduce_len",
    [
        (_softmax, [(9, 200)], jnp.float32, 200),
        (_softmax, [(9, 200)], jnp.bfloat16, 200),
        (_layer_norm, [(7, 100), (100,), (100,)], jnp.bfloat16, 200),
        (_layer_norm, [(7, 100), (100,), (100,)], jnp.float32, 200),
        (_attention, [(2, 40, 20)] * 3, jnp.float32, 40 * 20),
    ],
    ids=["softmax-f32", "softmax-bf16", "layer-norm-bf16", "layer-norm-f32", "attention"],
)
def test_padded_programs_match_jax_jit_with_undefined_padding(fn, shapes, dtype, reduce_len):
    # The production path (no poison written into padding): whatever the elementwise
    # kernels leave in padding, the reductions and matmuls mask what they read.
    args = [rand(s, dtype, np.random.default_rng(i)) for i, s in enumerate(shapes)]
    want = jax.jit(fn)(*args)
    with sj.poison_padding(False):
        got = sj.to_host(sj.jit(fn)(*args))
    assert_close(got, want, reduce_len=reduce_len, ops=8)


@pytest.mark.parametrize("axis", [-1, 0, None], ids=str)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=lambda d: np.dtype(d).name)
def test_mean_of_a_half_float_sums_the_narrow_image(dtype, axis):
    # jnp's mean widens a half float to float32 before its sum: spyrejax.jit sums the
    # narrow image in float32 instead, so no float32 image re-cut into 32-lane sticks (a
    # transpose) is written when the stick dim is reduced; kept (axis 0), it widens first.
    x = rand((6, 1000), dtype, np.random.default_rng(3))
    f = sj.jit(lambda x: (x.mean(axis), jnp.sum(x, axis, dtype=jnp.float32)))
    got = jax.tree.map(sj.to_host, f(sj.to_device(x)))
    want = jax.jit(f.__wrapped__)(x)
    assert_close(got, want, reduce_len=1000, ops=3)
    # The program's text, not the check's: under --emulate-check (make test-cores) the
    # compiled program also holds each divided op's per-core run, which moves sticks.
    if core_check() is None:
        hlo = f.lower(sj.to_device(x)).compile().as_text()
        assert ("transpose(" in hlo) == (axis == 0)


def _variance(x):
    return ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1)


def _sum_of_exp(x):  # exp(0) = 1: the map must see the values before padding is zeroed
    return jnp.sum(jnp.exp(x.astype(jnp.float32) * 0.5), -1)


@pytest.mark.parametrize("poison", [True, False], ids=["poison", "undefined"])
@pytest.mark.parametrize("fn", [_variance, _sum_of_exp])
def test_sums_of_maps_of_a_widened_half_float_read_the_narrow_image(fn, poison):
    # The variance of a bfloat16 layer norm squares x - m in float32 (XLA's excess
    # precision, kept by the graph): convert, integer_pow, sum. spyrejax.jit maps and sums
    # the narrow image in one reduction, so no float32 image re-cut into 32-lane sticks
    # (a transpose) is written; the values are jax.jit's.
    x = rand((70, 1000), jnp.bfloat16, np.random.default_rng(4))
    f = sj.jit(fn)
    with sj.poison_padding(poison):
        got = sj.to_host(f(sj.to_device(x)))
        hlo = f.lower(sj.to_device(x)).compile().as_text()
    assert_close(got, jax.jit(fn)(x), reduce_len=1000, ops=4)
    if core_check() is None:  # the program's text, not the check's (see above)
        assert "transpose(" not in hlo
