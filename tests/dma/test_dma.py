import functools
import math
import pathlib
import shutil

import chex
import jax
import jax.extend.core
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS_MOVED
from helpers import assert_round_trips_both_ways, dma_transfers
from hypothesis import example, given
from hypothesis import strategies as st
from oracles import coords_by_rule, image_by_rule, random_bits, run_descriptors, same_bits
from strategies import dim_orders, dtypes, seeds, shapes, shapes_and_orders, tiled_layouts

import spyrejax as sj
from spyrejax import SpyreTensorLayout
from spyrejax._counts import counting
from spyrejax.dma import _boxes, _dma
from spyrejax.dma._host_dma import NATIVE_TRANSPOSE, without_kernel
from spyrejax.dma._tiling import tiling

F16 = np.float16
RNG = np.random.default_rng(0)

# What a transfer may lower to: reshapes, slices, transposes, concatenations and box
# updates. No gather, no scatter, no iota-built index arrays.
ALLOWED_PRIMITIVES = {
    "bitcast_convert_type",
    "broadcast_in_dim",
    "concatenate",
    "dynamic_update_slice",
    "jit",
    "pad",
    "pjit",
    "reshape",
    "slice",
    "squeeze",
    "transpose",
}


def test_spec_example_image():
    shape = (5, 100, 150)
    x = RNG.standard_normal(shape).astype(F16)
    layout = SpyreTensorLayout(shape, F16)
    image = np.asarray(sj.dma_h2d(x, layout))
    assert image.shape == (100, 3, 5, 64) and image.dtype == F16
    # device[i0*960 + i1*320 + i2*64 + i3] = host[i0*150 + i1*64 + i2*15000 + i3]
    np.testing.assert_array_equal(image[7, 1, 4, 5], x[4, 7, 69])
    np.testing.assert_array_equal(
        image[:, :2].transpose(2, 0, 1, 3).reshape(5, 100, 128), x[..., :128]
    )
    np.testing.assert_array_equal(image[:, 2, :, :22].transpose(1, 0, 2), x[..., 128:])
    assert np.isnan(image[:, 2, :, 22:]).all()  # padding is poison
    assert not np.isnan(image[:, :2]).any()


def test_pad_value_overrides_the_poison():
    x = np.ones((3, 70), F16)
    image = np.asarray(sj.dma_h2d(x, SpyreTensorLayout(x.shape, F16), pad_value=0))
    assert image.sum() == 3 * 70


@pytest.mark.parametrize(("dtype", "poison"), [(np.int8, -128), (np.int32, -(2**31))])
def test_integer_padding_is_the_most_negative_value(dtype, poison):
    x = np.zeros((2, 5), dtype)
    image = np.asarray(sj.dma_h2d(x, SpyreTensorLayout(x.shape, dtype)))
    assert (image[..., 5:] == poison).all() and (image[..., :5] == 0).all()


@pytest.mark.parametrize("dtype", sj.SUPPORTED_DTYPES, ids=str)
def test_round_trip_is_bit_exact_for_every_dtype(dtype):
    shape = (3, 5, 150)
    x = random_bits(shape, dtype, RNG)  # subnormals, NaN payloads, -0.0 and inf included
    for order in (None, [2, 0, 1], [0, 1, 2, -1]):
        layout = SpyreTensorLayout(shape, dtype, order)
        image = sj.dma_h2d(x, layout)
        assert image.dtype == x.dtype
        assert same_bits(sj.dma_d2h(image, shape, layout), x)


def test_nan_payloads_survive():
    payloads = np.array([0x7E01, 0xFE55, 0x7C01, 0x7FFF], dtype=np.uint16).view(F16)
    layout = SpyreTensorLayout(payloads.shape, F16)
    back = sj.dma_d2h(sj.dma_h2d(payloads, layout), payloads.shape, layout)
    assert same_bits(back, payloads)


@pytest.mark.parametrize(("size", "dsize", "smap"), SPEC_EXPLICIT + MORE_EXPLICIT)
def test_explicit_layouts_round_trip(size, dsize, smap):
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
    x = random_bits(size, F16, RNG)
    image = sj.dma_h2d(x, layout, pad_value=0)
    assert same_bits(sj.dma_d2h(image, size, layout), x)
    # The image is exactly what the descriptors say, executed literally.
    expected, _ = run_descriptors(
        sj.generate_dci(size, layout), x.reshape(-1), np.zeros(np.prod(dsize), F16)
    )
    assert same_bits(np.asarray(image).reshape(-1), expected)


def test_broadcast_layout_repeats_the_element():
    layout = SpyreTensorLayout.from_stride_map([1, 512, 64], [64, 0, 1], F16)
    x = np.arange(60).astype(F16)
    image = np.asarray(sj.dma_h2d(x, layout))
    np.testing.assert_array_equal(image[0, :, :60], np.broadcast_to(x, (512, 60)))
    assert np.isnan(image[0, :, 60:]).all()


def test_jit_matches_eager_and_traces_once_per_layout():
    h2d = jax.jit(chex.assert_max_traces(sj.dma_h2d, n=2), static_argnames="layout")
    x = jnp.asarray(RNG.standard_normal((5, 100, 150)), jnp.bfloat16)
    a = SpyreTensorLayout(x.shape, jnp.bfloat16)
    b = SpyreTensorLayout(x.shape, jnp.bfloat16, [1, 0, 2])
    for layout in (a, b, a, b):
        assert same_bits(h2d(x, layout), sj.dma_h2d(x, layout))
    d2h = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))
    assert same_bits(d2h(h2d(x, a), x.shape, a), x)


def test_transfers_lower_to_boxes_without_index_arrays():
    shape = (64, 100, 150)
    layout = SpyreTensorLayout.from_stride_map([2, 3, 64, 100, 64], [9600, 64, 15000, 150, 1], F16)
    layout.for_host(shape)
    for fn, arg in (
        (lambda x: sj.dma_h2d(x, layout), jnp.zeros(shape, F16)),
        (lambda y: sj.dma_d2h(y, shape, layout), jnp.zeros(layout.device_size, F16)),
    ):
        closed = jax.make_jaxpr(fn)(arg)
        prims = set()
        consts = []
        _walk(closed.jaxpr, prims, consts)
        assert prims <= ALLOWED_PRIMITIVES, prims - ALLOWED_PRIMITIVES
        assert all(np.size(c) <= 1 for c in consts)


def _walk(jaxpr, prims, consts):
    for eqn in jaxpr.eqns:
        prims.add(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            consts.extend(getattr(sub, "consts", ()))
            _walk(getattr(sub, "jaxpr", sub), prims, consts)


def test_errors():
    layout = SpyreTensorLayout((4, 64), F16)
    with pytest.raises(sj.LayoutError, match=r"float32.*SEN169_FP16"):
        sj.dma_h2d(np.zeros((4, 64), np.float32), layout)
    with pytest.raises(sj.LayoutError, match="too small"):
        sj.dma_h2d(np.zeros((8, 64), F16), layout)
    with pytest.raises(sj.LayoutError, match=r"device image has shape \(4, 64\)"):
        sj.dma_d2h(np.zeros((4, 64), F16), (4, 64), layout)
    with pytest.raises(sj.LayoutError, match="SpyreTensorLayout"):
        sj.dma_h2d(np.zeros((4, 64), F16), (1, 4, 64))
    with pytest.raises(sj.LayoutError, match="float64"):
        sj.dma_h2d(np.zeros((4, 64)), layout)


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS_MOVED)
def test_spec_layouts_place_every_element_by_the_rule(size, order, dsize, smap):
    _check_dma(tuple(size), SpyreTensorLayout(size, np.int32, order))


def _check_dma(shape, layout):
    """arange through the DMA: each element once, where the rule says; padding untouched."""
    n = int(np.prod(shape))
    x = np.arange(n, dtype=np.int32).reshape(shape)
    image = np.asarray(sj.dma_h2d(x, layout))
    coords = coords_by_rule(shape, layout)
    flat = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    np.testing.assert_array_equal(image.reshape(-1)[flat], x.reshape(-1))
    written = image != np.iinfo(np.int32).min
    np.testing.assert_array_equal(written, layout.data_mask(shape))
    assert written.sum() == n
    np.testing.assert_array_equal(np.asarray(sj.dma_d2h(image, shape, layout)), x)


@given(case=shapes_and_orders())
def test_property_every_element_copied_once_to_its_position(case):
    shape, order = case
    _check_dma(shape, SpyreTensorLayout(shape, np.int32, order))


@given(case=shapes_and_orders(), dtype=dtypes, seed=seeds)
def test_property_round_trip_is_bit_exact(case, dtype, seed):
    shape, order = case
    layout = SpyreTensorLayout(shape, dtype, order)
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    image = sj.dma_h2d(x, layout)
    assert same_bits(sj.dma_d2h(image, shape, layout), x)
    poison = sj.poison_value(dtype)
    pad = np.asarray(image)[layout.padding_mask(shape)]
    assert same_bits(pad, np.full(pad.shape, poison, dtype))


@pytest.mark.slow
@given(case=shapes_and_orders(), dtype=dtypes)
def test_property_long_run(case, dtype):
    # Run with HYPOTHESIS_PROFILE=long for hundreds of examples.
    shape, order = case
    layout = SpyreTensorLayout(shape, dtype, order)
    x = random_bits(shape, dtype, np.random.default_rng(0))
    assert same_bits(sj.dma_d2h(sj.dma_h2d(x, layout), shape, layout), x)


def test_float8_formats_move_as_bytes():
    x = np.linspace(-4, 4, 300).astype(ml_dtypes.float8_e4m3fn)
    layout = SpyreTensorLayout(x.shape, ml_dtypes.float8_e4m3fn)
    assert layout.device_size == (3, 128)
    assert same_bits(sj.dma_d2h(sj.dma_h2d(x, layout), x.shape, layout), x)


# --- the host engine ------------------------------------------------------------------


@given(case=shapes_and_orders(), dtype=dtypes, seed=seeds)
def test_property_host_engine_runs_descriptors_like_the_oracle(case, dtype, seed):
    # Whatever the engine choice would be: the host engine is correct for every layout.
    from spyrejax.dma._host_dma import aligned_empty, run_on_host

    shape, order = case
    layout = SpyreTensorLayout(shape, dtype, order)
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    dci = sj.generate_dci(shape, layout)
    bits = f"u{np.dtype(dtype).itemsize}"
    fill = np.zeros(int(np.prod(layout.device_size)), bits)
    want, _ = run_descriptors(dci, x.reshape(-1).view(bits), fill)
    image = aligned_empty(layout.device_size, dtype)
    image.view(bits)[...] = 0
    run_on_host(x, image, dci, host_is_src=True)
    np.testing.assert_array_equal(image.view(bits).reshape(-1), want)
    back = aligned_empty(shape, dtype)
    d2h = sj.generate_dci(shape, layout, host_to_device=False)
    run_on_host(image, back, d2h, host_is_src=False)
    assert same_bits(back, x)


def test_bfloat16_subnormals_survive_a_jitted_transfer():
    # Issue 12: XLA's CPU code moved bfloat16 through float32 (vcvtneps2bf16 on CPUs with
    # AVX512-BF16), flushing the subnormal 0x0003 to 0x0000 in this padded layout whose
    # sticks run down host columns.
    shape = (1, 3, 8, 8)
    layout = SpyreTensorLayout(shape, jnp.bfloat16, [0, 1, 3, 2])
    x = np.arange(1, 193, dtype=np.uint16).reshape(shape).view(jnp.bfloat16)  # subnormals
    image = jax.jit(sj.dma_h2d, static_argnames="layout")(x, layout)
    assert same_bits(image, sj.dma_h2d(x, layout))
    d2h = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))
    assert same_bits(d2h(image, shape, layout), x)


@given(case=shapes_and_orders(), dtype=dtypes, seed=seeds)
# Padded bfloat16 images with sticks down host columns, which a long run found flushed.
@example(case=((1, 3, 8, 8), [0, 1, 3, 2]), dtype=jnp.bfloat16, seed=0)
@example(case=((12, 16, 16), [2, 1, 0]), dtype=jnp.bfloat16, seed=0)
@example(case=((29, 39, 3), [0, 2, 1]), dtype=jnp.bfloat16, seed=0)
def test_property_eager_and_jitted_transfers_agree_bit_for_bit(case, dtype, seed):
    # Eager transfers may take the host engine, jitted ones always run in XLA; both move
    # bits, subnormals and NaN payloads included (random_bits puts them in every example).
    shape, order = case
    layout = SpyreTensorLayout(shape, dtype, order)
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    eager = sj.dma_h2d(x, layout)
    jitted = jax.jit(sj.dma_h2d, static_argnames="layout")(x, layout)
    assert same_bits(eager, jitted)
    d2h = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))
    assert same_bits(d2h(jitted, shape, layout), x)
    assert same_bits(sj.dma_d2h(eager, shape, layout), x)


def test_engine_choice_follows_stick_granularity():
    from spyrejax.dma._dci import Descriptor
    from spyrejax.dma._host_dma import SMALL_ELEMENTS, host_engine_suits

    big = (512, 4096)
    assert SMALL_ELEMENTS < 512 * 4096
    default = sj.generate_dci(big, SpyreTensorLayout(big, F16))  # whole sticks per run
    column = sj.generate_dci(big, SpyreTensorLayout(big, F16, [1, 0]))  # sticks down columns
    partial = (512, 4000)  # 62 whole sticks and a half stick per row
    tail = sj.generate_dci(partial, SpyreTensorLayout(partial, F16))
    assert host_engine_suits(default, 2)
    assert host_engine_suits(tail, 2)
    assert host_engine_suits(column, 2) == NATIVE_TRANSPOSE  # element transposes: C kernel
    assert host_engine_suits(sj.generate_dci((40, 60), SpyreTensorLayout((40, 60), F16, [1, 0])), 2)
    gather = Descriptor((64, 4096), (2, 256), (1, 64), 0, 0)  # no loop contiguous in src
    assert not host_engine_suits([gather], 2)
    with without_kernel():  # as if built without a C compiler
        assert host_engine_suits(default, 2)
        assert not host_engine_suits(column, 2)


def test_eager_transfers_hand_over_aligned_buffers_without_copies():
    # The host engine writes a 64-byte aligned image that the CPU client adopts.
    shape = (256, 512)
    layout = SpyreTensorLayout(shape, F16)
    x = np.arange(np.prod(shape), dtype=F16).reshape(shape)
    image = sj.dma_h2d(x, layout)
    assert image.unsafe_buffer_pointer() % 64 == 0
    np.testing.assert_array_equal(np.asarray(sj.dma_d2h(image, shape, layout)), x)


def test_host_engine_fills_padding_and_rejects_bad_descriptors():
    from spyrejax.dma._dci import Descriptor

    layout = SpyreTensorLayout((3, 100), F16)  # 100 -> 128: 28 padding lanes per row
    image = np.asarray(sj.dma_h2d(np.ones((3, 100), F16), layout, pad_value=7))
    assert (image[1, :, 36:] == 7).all() and (image[0] == 1).all()
    from spyrejax.dma._host_dma import run_on_host

    d = Descriptor((4,), (1,), (1,), 0, 0, True)
    with pytest.raises(sj.LayoutError, match="C-contiguous"):
        run_on_host(np.zeros(8, F16), np.zeros((4, 4), F16).T, [d], host_is_src=True)
    with pytest.raises(sj.LayoutError, match="widths differ"):
        run_on_host(np.zeros(8, F16), np.zeros(8, np.float32), [d], host_is_src=True)
    outside = Descriptor((64,), (1,), (1,), 0, 100, True)
    with pytest.raises(sj.LayoutError, match="inside the buffer"):
        sj.dma._dma._validate([outside], (64,), (128,))


needs_kernel = pytest.mark.skipif(
    not NATIVE_TRANSPOSE, reason="spyrejax was built without its C transpose kernel"
)
TRANSPOSED = (512, 260)  # sticks run down columns: element transposes, a partial last tile


def _transposed_case():
    layout = SpyreTensorLayout(TRANSPOSED, F16, [1, 0])
    x = (np.arange(np.prod(TRANSPOSED)) % 2048).astype(F16).reshape(TRANSPOSED)
    return x, layout, jax.jit(sj.dma_h2d, static_argnames="layout")(x, layout)


@needs_kernel
def test_large_element_transposes_run_on_the_kernel():
    x, layout, jitted = _transposed_case()
    with counting() as counts:
        image = sj.dma_h2d(x, layout)
        assert counts["dma.kernel_transpose"] and same_bits(image, jitted)
        assert same_bits(sj.dma_d2h(image, TRANSPOSED, layout), x)
    calls = counts["dma.kernel_transpose"]
    assert calls == 2 * len(sj.generate_dci(TRANSPOSED, layout).descriptors)


def test_without_the_kernel_large_element_transposes_run_in_xla():
    x, layout, jitted = _transposed_case()
    with without_kernel(), dma_transfers() as transfers:  # as if built without a C compiler
        image = sj.dma_h2d(x, layout)
        back = sj.dma_d2h(image, TRANSPOSED, layout)
    assert [engine for _, engine, _ in transfers] == ["xla", "xla"]
    assert same_bits(image, jitted)
    assert same_bits(back, x)


@needs_kernel
@pytest.mark.parametrize("shape", [(1200, 1024), (1200, 1000), (600, 8, 250)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
def test_streamed_stick_runs_match_numpy_and_xla(shape, dtype):
    # Images of at least STREAM_BYTES take the C kernel's streaming stores (runs of whole
    # and partial sticks, unaligned host rows included); the NumPy engine (built without
    # the kernel) and XLA (inside jax.jit) must give the same bits both ways.
    from spyrejax.dma import _host_dma

    layout = SpyreTensorLayout(shape, dtype)
    assert math.prod(layout.device_size) * np.dtype(dtype).itemsize >= _host_dma.STREAM_BYTES
    x = random_bits(shape, dtype, np.random.default_rng(len(shape)))
    jitted = jax.jit(sj.dma_h2d, static_argnames="layout")(x, layout)
    streamed = sj.dma_h2d(x, layout)
    back = sj.dma_d2h(streamed, shape, layout)
    with without_kernel():
        assert same_bits(streamed, jitted) and same_bits(streamed, sj.dma_h2d(x, layout))
        assert same_bits(back, x) and same_bits(sj.dma_d2h(jitted, shape, layout), x)


def test_the_kernel_is_built_wherever_a_c_compiler_is():
    # The extension is optional, so a failed build would only show as slow transfers.
    if shutil.which("cc") or shutil.which("gcc"):
        assert NATIVE_TRANSPOSE


def test_the_ffi_handler_is_built_wherever_a_cpp_compiler_and_jaxlib_headers_are():
    # Optional too (spyrejax/dma/_tiles.cc): a failed build would only show as slow d2h.
    from spyrejax.dma._ffi import FFI_D2H

    headers = pathlib.Path(jax.ffi.include_dir(), "xla", "ffi", "api", "ffi.h")
    if (shutil.which("c++") or shutil.which("g++")) and headers.is_file():
        assert FFI_D2H


# --- padded tiles, equal strides, empty tensors ---------------------------------------

# Dtypes whose bits XLA moves untouched inside a jit on every CPU (see issue 12 for
# bfloat16 NaN payloads), so both engines can be compared bit for bit.
BIT_EXACT_IN_JIT = (np.float16, np.float32, np.int8, np.int32)


def _round_trip_both_engines(x, layout):
    """Host -> device -> host eagerly on the host engine and inside jax.jit (XLA).

    Both images must be the rule's (each element at its coordinate, padding poison),
    and both transfers back must give ``x`` bit for bit.
    """
    from spyrejax.dma._host_dma import host_engine_suits

    assert host_engine_suits(sj.generate_dci(x.shape, layout), x.dtype.itemsize)
    want = image_by_rule(x, layout, sj.poison_value(x.dtype))
    return np.asarray(assert_round_trips_both_ways(x, layout, want))


def test_padded_tiles_round_trip_through_both_engines():
    layout = SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16)
    x = random_bits((4800,), F16, RNG)
    image = _round_trip_both_engines(x, layout)
    # The same device memory as host [40, 120], whose dims each tile evenly.
    assert same_bits(image, _round_trip_both_engines(x.reshape(40, 120), layout))
    # The second stick of rows 0..38 (13 whole tiles) holds their columns 64..119.
    second = x[: 13 * 360].reshape(13, 3, 120)[..., 64:].transpose(1, 0, 2)
    assert same_bits(image[:, 1, :13, :56], second)


@pytest.mark.parametrize(
    ("dsize", "smap"),
    [([1, 60, 64], [64, 1, 1]), ([1, 1, 60, 64], [-1, 3840, 1, 1]), ([1, 60, 64], [60, 1, 1])],
)
def test_equal_strides_round_trip_through_both_engines(dsize, smap):
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
    x = random_bits((60,), F16, RNG)
    image = _round_trip_both_engines(x, layout)
    assert same_bits(image[..., 0].reshape(60), x)  # element i in lane 0 of stick i


def test_gapped_transfers_lower_to_boxes_without_index_arrays():
    shape = (4700,)  # the last row is partial, so a gapped box ends inside a step
    layout = SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16)
    for fn, arg in (
        (lambda x: sj.dma_h2d(x, layout), jnp.zeros(shape, F16)),
        (lambda y: sj.dma_d2h(y, shape, layout), jnp.zeros(layout.device_size, F16)),
    ):
        closed = jax.make_jaxpr(fn)(arg)
        prims, consts = set(), []
        _walk(closed.jaxpr, prims, consts)
        assert prims <= ALLOWED_PRIMITIVES, prims - ALLOWED_PRIMITIVES
        assert all(np.size(c) <= 1 for c in consts)
    _round_trip_both_engines(random_bits(shape, F16, RNG), layout)


EMPTY = [((0,), None), ((0, 150), None), ((150, 0), [1, 0]), ((3, 0, 5), [0, 1, 2, -1])]


@pytest.mark.parametrize(("shape", "order"), EMPTY)
@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16, np.int32], ids=str)
def test_empty_tensors_transfer(shape, order, dtype):
    x = np.zeros(shape, dtype)
    layout = SpyreTensorLayout(shape, dtype, order)
    assert layout.nbytes == 0  # an empty tensor takes no device memory
    image = sj.dma_h2d(x, layout)
    assert image.shape == layout.device_size and image.dtype == x.dtype
    assert same_bits(image, np.full(layout.device_size, sj.poison_value(dtype), dtype))
    jitted = jax.jit(sj.dma_h2d, static_argnames="layout")(x, layout)
    assert same_bits(jitted, image)
    for back in (
        sj.dma_d2h(image, shape, layout),
        jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))(jitted, shape, layout),
    ):
        assert back.shape == shape and back.dtype == x.dtype
    a = sj.to_device(x, dim_order=order)
    assert a.layout == layout and a.shape == shape
    assert sj.to_host(a).shape == shape and np.asarray(a).shape == shape
    through_jit = jax.jit(lambda x: sj.to_host(sj.to_device(x, dim_order=order)))(x)
    assert through_jit.shape == shape and through_jit.dtype == x.dtype


@given(data=st.data())
def test_property_tiled_layouts_round_trip_through_both_engines(data):
    dtype = data.draw(st.sampled_from(BIT_EXACT_IN_JIT))
    shape, layout = data.draw(tiled_layouts(dtype))
    x = random_bits(shape, dtype, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))
    _round_trip_both_engines(x, layout)


@st.composite
def empty_shapes(draw):
    shape = list(draw(shapes(min_rank=1, max_rank=4, max_size=40)))
    shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)


@given(shape=empty_shapes(), data=st.data())
def test_property_empty_tensors_round_trip_through_both_engines(shape, data):
    dtype = data.draw(st.sampled_from(BIT_EXACT_IN_JIT))
    layout = SpyreTensorLayout(shape, dtype, data.draw(dim_orders(len(shape))))
    assert layout.nbytes == 0
    _round_trip_both_engines(np.zeros(shape, dtype), layout)


@functools.partial(jax.jit, static_argnums=1)
def _tiled_and_boxed(x, layout):
    """Traced transfers both ways, tiled and through the descriptors' boxes (as bits).

    Jitted: one compiled program per example instead of an eager dispatch (and a small
    compile) for each of the descriptors' boxes, about five times less CPU.
    """
    mapping = layout.for_host(x.shape)
    bits = _dma.as_bits(jnp.asarray(x))
    fill = _dma._fill(sj.poison_value(x.dtype), np.dtype(x.dtype))
    boxed = _boxes.execute(
        bits, jnp.full(layout.device_size, fill, bits.dtype), mapping.dci(host_to_device=True)
    )
    tiled = _dma._h2d_values(bits, mapping, fill)
    back = _boxes.execute(boxed, jnp.zeros(x.shape, bits.dtype), mapping.dci(host_to_device=False))
    return (tiled, _dma._d2h_values(boxed, mapping)), (boxed, back)


@given(case=shapes_and_orders(), dtype=dtypes, seed=seeds)
def test_property_tiled_transfers_move_what_the_descriptors_move(case, dtype, seed):
    # Default layouts, dense and sparse, tile their host dims: a traced transfer is one
    # transpose, reshape and slice or pad, with the descriptors' bits and padding.
    shape, order = case
    layout = SpyreTensorLayout(shape, dtype, order)
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    if np.prod(shape):
        assert tiling(layout.for_host(shape)) is not None
    (tiled, tiled_back), (boxed, back) = _tiled_and_boxed(x, layout)
    assert same_bits(tiled, boxed)
    assert same_bits(tiled_back, back)


@given(data=st.data())
def test_property_explicit_layouts_tile_only_where_the_boxes_agree(data):
    shape, layout = data.draw(tiled_layouts(np.float16))
    x = random_bits(shape, np.float16, np.random.default_rng(0))
    (tiled, tiled_back), (boxed, back) = _tiled_and_boxed(x, layout)
    assert same_bits(tiled, boxed)
    assert same_bits(tiled_back, back)


def _prims(fn, arg):
    return sorted(e.primitive.name for e in jax.make_jaxpr(fn)(arg).jaxpr.eqns)


def test_a_partial_last_stick_transfers_in_one_pass():
    layout = SpyreTensorLayout((1000, 80), np.float32)  # 80 = 2 sticks of 32 and 16
    image = jnp.zeros(layout.device_size, np.float32)
    host = jnp.zeros((1000, 80), np.float32)
    from spyrejax.dma._ffi import FFI_D2H, without_handler

    # A kernel's write is one pad, reshape and transpose (XLA fuses it with the producer);
    # a transfer of its own is the FFI handler's one call where it was built, else the same.
    assert _prims(lambda x: _dma.h2d_values(x, layout), host) == ["pad", "reshape", "transpose"]
    with without_handler():
        assert _prims(lambda x: sj.dma_h2d(x, layout), host) == ["pad", "reshape", "transpose"]
    own_write = _prims(lambda x: sj.dma_h2d(x, layout), host)
    assert own_write == (["custom_jvp_call"] if FFI_D2H else ["pad", "reshape", "transpose"])
    # A kernel's read stays one transpose (XLA fuses it with what reads the values) ...
    kernel_read = _prims(lambda y: _dma.d2h_values(y, (1000, 80), layout), image)
    assert kernel_read == ["reshape", "slice", "transpose"]
    # ... a transfer of its own copies each tile's sticks into its columns: no transpose,
    # in the FFI handler where it was built (one call), else in XLA's loop over tiles.
    own = _prims(lambda y: sj.dma_d2h(y, (1000, 80), layout), image)
    assert own == (
        ["custom_jvp_call"]
        if FFI_D2H
        else ["broadcast_in_dim", "dynamic_update_slice", "jit", "scan", "slice"]
    )
    with without_handler():
        looped = _prims(lambda y: sj.dma_d2h(y, (1000, 80), layout), image)
    assert looped == ["broadcast_in_dim", "dynamic_update_slice", "jit", "scan", "slice"]


@pytest.mark.parametrize(
    ("shape", "layout_of"),
    [
        ((5, 150), SpyreTensorLayout),  # 3 tiles, 22 lanes of the last
        ((2, 3, 150), SpyreTensorLayout.row_major),  # tiles inside the rows
        ((7, 65), SpyreTensorLayout),  # one lane of the last tile
        ((2, 150), functools.partial(SpyreTensorLayout, dim_order=[1, 0])),  # not by tiles
    ],
)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8, jnp.bfloat16], ids=str)
def test_jitted_d2h_of_a_partial_last_stick_moves_bits(shape, layout_of, dtype):
    layout = layout_of(shape, dtype)
    x = random_bits(shape, dtype, np.random.default_rng(3))
    image = sj.dma_h2d(x, layout)
    d2h = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))
    assert same_bits(d2h(image, shape, layout), x)
    kernel_read = jax.jit(lambda y: _dma.from_bits(_dma.d2h_bits(y, shape, layout), dtype))
    assert same_bits(kernel_read(image), x)


# Device -> host of a partial last stick inside jax.jit runs tile by tile: the FFI handler
# of spyrejax.dma._tiles on the CPU backend where it was built, else XLA's loop.
@pytest.mark.parametrize("dtype", [F16, np.float32, ml_dtypes.bfloat16, np.int8])
@pytest.mark.parametrize("shape", [(37, 200), (5, 130)])
def test_jitted_d2h_by_tiles_is_bit_exact_with_and_without_the_handler(dtype, shape):
    from spyrejax.dma._ffi import FFI_D2H, without_handler

    layout = SpyreTensorLayout(shape, dtype)
    x = random_bits(shape, dtype, np.random.default_rng(5))
    image = sj.dma_h2d(x, layout)
    d2h = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))
    hlo = d2h.lower(image, shape, layout).compile().as_text()
    assert ("custom-call" in hlo) == FFI_D2H  # the handler is what runs where it was built
    assert same_bits(d2h(image, shape, layout), x)
    with without_handler():  # XLA's loop (a fresh trace: the shape's static args differ)
        looped = jax.jit(lambda im: sj.dma_d2h(im, shape, layout))(image)
    assert same_bits(looped, x)


# Host -> device of a partial last stick inside jax.jit: the same tiles the other way, the
# last tile's padding lanes holding the fill (the poison value, or pad_value).
@pytest.mark.parametrize("dtype", [F16, np.float32, ml_dtypes.bfloat16, np.int8])
@pytest.mark.parametrize("shape", [(37, 200), (5, 130), (4, 1000)])
def test_jitted_h2d_by_tiles_is_bit_exact_with_and_without_the_handler(dtype, shape):
    from spyrejax.dma._ffi import FFI_D2H, without_handler

    layout = SpyreTensorLayout(shape, dtype)
    x = random_bits(shape, dtype, np.random.default_rng(6))
    eager = sj.dma_h2d(x, layout)  # the host engine or XLA's program, no handler
    h2d = jax.jit(sj.dma_h2d, static_argnames=("layout", "pad_value"))
    hlo = h2d.lower(jnp.asarray(x), layout).compile().as_text()
    assert ("custom-call" in hlo) == FFI_D2H
    assert same_bits(h2d(jnp.asarray(x), layout), eager)
    filled = h2d(jnp.asarray(x), layout, pad_value=3)
    assert same_bits(filled, sj.dma_h2d(x, layout, pad_value=3))
    with without_handler():
        looped = jax.jit(lambda y: sj.dma_h2d(y, layout))(jnp.asarray(x))
    assert same_bits(looped, eager)


def test_jitted_h2d_by_tiles_differentiates_and_vmaps():
    shape = (6, 200)
    layout = SpyreTensorLayout(shape, np.float32)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    w_image = sj.dma_h2d(w, layout, pad_value=0)
    grad = jax.jit(jax.grad(lambda y: (sj.dma_h2d(y, layout, pad_value=0) * w_image).sum()))(x)
    np.testing.assert_array_equal(np.asarray(grad), w)  # linear: w read back from its places
    both = jax.jit(jax.vmap(lambda y: sj.dma_h2d(y, layout)))(jnp.stack([x, x * 2]))
    assert same_bits(both[1], sj.dma_h2d(x * 2, layout))


def test_jitted_d2h_by_tiles_differentiates_and_vmaps():
    shape = (6, 200)  # 4 sticks a row, the last partly filled: the tile-by-tile transfer
    layout = SpyreTensorLayout(shape, np.float32)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    image = sj.dma_h2d(x, layout)
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    grad = jax.jit(jax.grad(lambda im: (sj.dma_d2h(im, shape, layout) * w).sum()))(image)
    # The transfer is linear: its gradient is w placed in the image, zero in the padding.
    assert same_bits(grad, sj.dma_h2d(w, layout, pad_value=0))
    images = jnp.stack([image, image * 2])
    both = jax.jit(jax.vmap(lambda im: sj.dma_d2h(im, shape, layout)))(images)
    np.testing.assert_array_equal(np.asarray(both), np.stack([x, x * 2]))
