import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FLOAT_DTYPES, assert_close, rand

import spyrejax as sj


@jax.jit  # one program a shape and dtype, not an eager compile of each of its four ops
def _ref(x, y):
    out = jnp.matmul(x.astype(jnp.float32), y.astype(jnp.float32))
    return out.astype(x.dtype)


CASES = [
    ((100, 150), (150, 70)),  # k and n padded
    ((64, 64), (64, 128)),  # no padding
    ((3, 20, 150), (150, 30)),  # batch on A only
    ((2, 1, 5, 40), (3, 40, 200)),  # broadcast batch dims
    ((7, 1), (1, 9)),  # k = 1: an outer product
    ((5, 70), (70, 1)),  # n = 1: a one-lane stick
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("sa", "sb"), CASES, ids=str)
def test_matmul_matches_jnp(sa, sb, dtype, jit):
    rng = np.random.default_rng(0)
    x, y = rand(sa, dtype, rng), rand(sb, dtype, rng)
    a, b = sj.to_device(x), sj.to_device(y)
    fn = jax.jit(sj.matmul) if jit else sj.matmul
    out = fn(a, b)
    ref = _ref(x, y)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    # The rule: C gets the default layout, stuck on n.
    assert out.layout == sj.SpyreTensorLayout(ref.shape, dtype)
    assert_close(sj.to_host(out), ref, reduce_len=sa[-1])


@pytest.mark.parametrize(("sa", "sb"), CASES, ids=str)
def test_matmul_into_a_row_major_result(sa, sb):
    rng = np.random.default_rng(5)
    x, y = rand(sa, jnp.bfloat16, rng), rand(sb, jnp.bfloat16, rng)
    ref = _ref(x, y)
    layout = sj.SpyreTensorLayout.row_major(ref.shape, jnp.bfloat16)
    out = jax.jit(sj.matmul, static_argnames="layout")(
        sj.to_device(x), sj.to_device(y), layout=layout
    )
    assert out.layout == layout
    assert_close(sj.to_host(out), ref, reduce_len=sa[-1])


def test_a_row_major_product_is_written_as_the_dot_emits_it():
    rng = np.random.default_rng(6)
    x, y = rand((4, 64, 64), jnp.float32, rng), rand((4, 64, 96), jnp.float32, rng)
    a, b = sj.to_device(x), sj.to_device(y)

    def hlo(layout):
        fn = jax.jit(lambda a, b: sj.matmul(a, b, layout=layout))
        return fn.lower(a, b).as_text()

    row_major = sj.SpyreTensorLayout.row_major((4, 64, 96), jnp.float32)
    assert hlo(None).count("stablehlo.transpose") == 1  # [h, m, T, S] -> [m, T, h, S]
    assert hlo(row_major).count("stablehlo.transpose") == 0
    # A row-major product feeds a second product (as attention's scores do).
    c = sj.matmul(a, b, layout=row_major)
    d = sj.matmul(c, sj.to_device(y.transpose(0, 2, 1)))
    assert_close(sj.to_host(d), x @ y @ y.transpose(0, 2, 1), reduce_len=4 * 64 * 96, ops=2)


def test_operator_and_padding_never_leaks():
    rng = np.random.default_rng(1)
    x, y = rand((8, 150), jnp.float32, rng), rand((150, 20), jnp.float32, rng)
    a, b = sj.to_device(x), sj.to_device(y)  # both with NaN poison in the padding
    assert np.isnan(np.asarray(a.image)).any()
    assert_close(sj.to_host(a @ b), x @ y, reduce_len=150)


def test_zero_padding_fact_skips_the_mask():
    rng = np.random.default_rng(2)
    x, y = rand((8, 150), jnp.float32, rng), rand((150, 20), jnp.float32, rng)
    a = sj.to_device(x, pad_value=0)
    b = sj.to_device(y, pad_value=0)
    assert "pad=0" in a.type.str_short()
    lowered = jax.jit(sj.matmul).lower
    masked_hlo = lowered(sj.to_device(x), sj.to_device(y)).as_text()
    zero_hlo = lowered(a, b).as_text()
    assert masked_hlo.count("stablehlo.select") == 2  # A's and B's padding masked
    assert zero_hlo.count("stablehlo.select") == 0
    assert_close(sj.to_host(a @ b), x @ y, reduce_len=150)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("sa", "sb"), [((8, 150), (150, 70)), ((2, 5, 100), (2, 100, 40))], ids=str
)
def test_a_row_major_weight_is_read_in_place(sa, sb, dtype):
    # B's k (150, 100) is not whole sticks: A's k is cut to its data inside the copy XLA
    # makes of A anyway, instead of padding B (a copy of all of B) to A's k.
    rng = np.random.default_rng(7)
    x, y = rand(sa, dtype, rng), rand(sb, dtype, rng)
    a = sj.to_device(x)
    b = sj.to_device(y, layout=sj.SpyreTensorLayout.row_major(sb, dtype), pad_value=0)
    pet = jnp.float32 if dtype == jnp.bfloat16 else None
    fn = jax.jit(lambda a, b: sj.matmul(a, b, preferred_element_type=pet))
    hlo = fn.lower(a, b).as_text()
    assert "stablehlo.pad" not in hlo.split("dot_general")[0]  # B goes to the dot as it is
    assert hlo.count("stablehlo.select") == 1  # A's padding only
    out = fn(a, b)
    ref = jnp.matmul(x.astype(jnp.float32), y.astype(jnp.float32))
    assert_close(sj.to_host(out), ref.astype(out.dtype), reduce_len=sa[-1])
    # The cotangents are finite: B's padding never meets the poison of dC's.
    grads = jax.grad(lambda a, b: jnp.sum(sj.to_host(a @ b)), argnums=(0, 1))(
        sj.to_device(x), sj.to_device(y, layout=b.layout)
    )
    for g in grads:
        assert np.isfinite(np.asarray(sj.to_host(g), np.float32)).all()


def test_layout_rule_errors():
    rng = np.random.default_rng(3)
    x, y = rand((8, 150), jnp.float32, rng), rand((150, 20), jnp.float32, rng)
    a, b = sj.to_device(x), sj.to_device(y)
    with pytest.raises(sj.LayoutError, match=r"A .* must be stuck on k \(dim 1\)"):
        sj.matmul(sj.to_device(x, dim_order=[1, 0]), b)
    with pytest.raises(sj.LayoutError, match=r"B .* must be stuck on n \(dim 1\).*restickify"):
        sj.matmul(a, sj.to_device(y, dim_order=[1, 0]))
    with pytest.raises(sj.LayoutError, match="contracting dims differ"):
        sj.matmul(a, a)
    with pytest.raises(sj.LayoutError, match="rank >= 2"):
        sj.matmul(sj.to_device(x[0]), b)
    with pytest.raises(sj.LayoutError, match="do not broadcast"):
        sj.matmul(
            sj.to_device(rand((2, 8, 150), jnp.float32, rng)),
            sj.to_device(rand((3, 150, 20), jnp.float32, rng)),
        )
    with pytest.raises(sj.SpyreTypeError, match="dtypes differ"):
        sj.matmul(a, sj.to_device(y.astype(jnp.float16)))
    with pytest.raises(sj.SpyreTypeError, match="host array"):
        sj.matmul(a, y)
    with pytest.raises(sj.LayoutError, match=r"not stuck on n \(dim 1\) of the result \[8, 20\]"):
        sj.matmul(a, b, layout=sj.SpyreTensorLayout((8, 20), jnp.float32, [1, 0]))
    with pytest.raises(sj.LayoutError, match="too small"):
        sj.matmul(a, b, layout=sj.SpyreTensorLayout((8, 10), jnp.float32))
    # The fixes the messages name work.
    out = sj.matmul(a, sj.restickify(sj.to_device(y, dim_order=[1, 0])))
    assert_close(sj.to_host(out), x @ y, reduce_len=150)


def test_layouts_the_kernel_cannot_contract_are_errors():
    rng = np.random.default_rng(4)
    f32 = sj.DataFormats.IEEE_FP32
    a = sj.to_device(rand((8, 128), jnp.float32, rng))
    # B stuck on n, but with k split over two device dims.
    b_tiled_k = sj.SpyreTensorLayout.from_stride_map([2, 64, 1, 32], [1280, 20, 32, 1], f32)
    b = sj.to_device(rand((128, 20), jnp.float32, rng), b_tiled_k)
    with pytest.raises(sj.LayoutError, match="one untiled device dim"):
        sj.matmul(a, b)
    # A with its m dim padded to 16: the result's m has 8.
    a_padded_m = sj.SpyreTensorLayout.from_stride_map([4, 16, 32], [32, 128, 1], f32)
    a2 = sj.to_device(rand((8, 128), jnp.float32, rng), a_padded_m)
    with pytest.raises(sj.LayoutError, match="tile their dims unlike the result"):
        sj.matmul(a2, sj.to_device(rand((128, 20), jnp.float32, rng)))
    # A whose two batch dims are folded into one device dim.
    folded = sj.SpyreTensorLayout.from_stride_map([6, 2, 32], [40, 32, 1], f32)
    a3 = sj.to_device(rand((2, 3, 40), jnp.float32, rng), folded)
    with pytest.raises(sj.LayoutError, match="folded dims"):
        sj.matmul(a3, sj.to_device(rand((40, 5), jnp.float32, rng)))
    with pytest.raises(sj.LayoutError, match="folds reduced and kept dims"):
        sj.sum(a3, 0)


@pytest.mark.parametrize("m,k,n", [(5, 40, 28), (4, 256, 128)])  # with and without padding
def test_int8_products_accumulate_in_int32(m, k, n):
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    out = sj.matmul(sj.to_device(a), sj.to_device(b), preferred_element_type=jnp.int32)
    assert out.dtype == np.int32
    want = a.astype(np.int64) @ b.astype(np.int64)  # |sum| < 2**31: no wrap-around
    np.testing.assert_array_equal(np.asarray(out), want)
    wrapped = sj.matmul(sj.to_device(a), sj.to_device(b))  # int8 result wraps, as in XLA
    np.testing.assert_array_equal(np.asarray(wrapped), want.astype(np.int8))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_products_into_float32_are_not_rounded_to_the_operands(dtype):
    rng = np.random.default_rng(1)
    m, k, n = 6, 4096, 70
    a = jnp.asarray(rng.standard_normal((m, k)), dtype)
    b = jnp.asarray(rng.standard_normal((k, n)) / 4, dtype)
    out = sj.matmul(sj.to_device(a), sj.to_device(b), preferred_element_type=jnp.float32)
    assert out.dtype == np.float32
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    exact = a64 @ b64  # half products are exact in float32; only the sums round
    # Rounding errors of a float32 sum of k terms grow like sqrt(k) times the terms' rms:
    # far below one half ulp of the result (what rounding to the operands' dtype costs).
    bound = 8 * np.sqrt(k) * np.finfo(np.float32).eps * np.sqrt(a64**2 @ b64**2)
    assert (np.abs(np.asarray(out, np.float64) - exact) <= bound).all()
    half_ulp = np.abs(exact) * float(jnp.finfo(dtype).eps) / 2
    large = np.abs(exact) > 8  # where the check can tell the two apart
    assert large.sum() > exact.size // 4 and (bound < half_ulp)[large].all()


def test_preferred_element_type_must_keep_the_kind():
    a = sj.to_device(jnp.ones((4, 8), jnp.float32))
    b = sj.to_device(jnp.ones((8, 3), jnp.float32))
    with pytest.raises(sj.SpyreTypeError, match="preferred_element_type int32"):
        sj.matmul(a, b, preferred_element_type=jnp.int32)


@pytest.mark.parametrize("per_group", [1, 2])
@pytest.mark.parametrize(
    ("m", "k", "n", "dtype", "pet"),
    [
        (4, 150, 200, jnp.float32, None),  # k and n padded, 7 tiles of n
        (3, 100, 256, jnp.bfloat16, jnp.float32),
        (5, 70, 384, jnp.float16, None),
        (2, 40, 512, jnp.int8, jnp.int32),
    ],
    ids=str,
)
def test_large_weights_are_contracted_tile_group_by_tile_group(m, k, n, dtype, pet, per_group):
    from spyrejax.primitives._tuning import tuned

    rng = np.random.default_rng(7)
    if jnp.issubdtype(dtype, jnp.integer):
        x = jnp.asarray(rng.integers(-128, 128, (m, k)), dtype)
        y = jnp.asarray(rng.integers(-128, 128, (k, n)), dtype)
    else:
        x, y = rand((m, k), dtype, rng), rand((k, n), dtype, rng)
    a, b = sj.to_device(x), sj.to_device(y)  # padding holds poison
    stick = b.layout.elems_per_stick
    tile_bytes = -(-k // stick) * stick * stick * 4  # every case accumulates in 4 bytes
    # Shrink the thresholds so these small weights take the loop (real ones: >= 16 MiB).
    fn = jax.jit(lambda a, b: sj.matmul(a, b, preferred_element_type=pet))
    with tuned(tile_loop_min_bytes=0, tile_group_bytes=per_group * tile_bytes):
        assert "stablehlo.while" in fn.lower(a, b).as_text()
        out = fn(a, b)
    want = _ref(x, y) if pet is None else jnp.matmul(x, y, preferred_element_type=pet)
    if jnp.issubdtype(dtype, jnp.integer):
        np.testing.assert_array_equal(np.asarray(sj.to_host(out)), np.asarray(want))
    else:
        assert_close(sj.to_host(out), want, reduce_len=k)
