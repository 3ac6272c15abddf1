"""Several stick dims per tensor, and sticks over several host dims (issue 26, item 1).

The oracle places each host element by the definition of the ``N + k`` loop nest (the
other dims, then each stick group's tile, then its place in the tile), independently of
spyrejax; the index map, the padding, the descriptors and both DMA engines must agree
with it bit for bit.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_round_trips_both_ways
from hypothesis import example, given
from hypothesis import strategies as st
from oracles import random_bits, row_major, run_descriptors, same_bits

import spyrejax as sj
from spyrejax import SpyreTensorLayout
from spyrejax.dma._host_dma import host_engine_suits

F16, F32 = np.float16, np.float32


def oracle_coords(shape, groups, eps):
    """Device coordinates of every host element (row-major order), by the definition."""
    idx = np.indices(shape).reshape(len(shape), math.prod(shape))
    placed = {d for g in groups for d in g}
    cols = [idx[d] for d in range(len(shape)) if d not in placed]
    flat = []
    for g in groups:
        x = np.zeros(idx.shape[1], np.int64)
        for d in g:
            x = x * shape[d] + idx[d]
        flat.append(x)
    cols += [x // eps for x in flat] + [x % eps for x in flat]
    return np.stack(cols, axis=1) if cols else np.zeros((idx.shape[1], 0), np.int64)


def oracle_image(x, layout, groups):
    eps = layout.elems_per_stick
    coords = oracle_coords(x.shape, groups, eps)
    # Size-1 dims are dropped by the device layout (size 1 there); drop their columns.
    keep = _kept_columns(x.shape, groups, layout)
    image = np.full(layout.device_size, sj.poison_value(x.dtype), x.dtype)
    image[tuple(coords[:, keep].T)] = x.reshape(-1)
    return image


def _kept_columns(shape, groups, layout):
    """The oracle's columns, one per device dim (they line up one to one)."""
    placed = {d for g in groups for d in g}
    n = len([d for d in range(len(shape)) if d not in placed]) + 2 * len(groups)
    assert n == layout.device_rank
    return list(range(n))


# --- construction, printing, equality ------------------------------------------------


def test_two_stick_dims_give_stick_by_stick_tiles():
    layout = SpyreTensorLayout.stick_tiled((100, 150), F16, [0, 1])
    assert layout == SpyreTensorLayout.from_stride_map([2, 3, 64, 64], [9600, 64, 150, 1], F16)
    assert hash(layout) == hash(SpyreTensorLayout.stick_tiled((100, 150), F16, (0, 1)))
    assert layout != SpyreTensorLayout.stick_tiled((100, 150), F16, [1, 0])  # tiles of columns
    assert repr(layout) == (
        "SpyreTensorLayout(device_size=[2, 3, 64, 64], stride_map =[9600, 64, 150, 1], "
        "device_dtype=DataFormats.SEN169_FP16)"
    )
    mapping = layout.for_host((100, 150))
    assert mapping.stick_dims() == ((0,), (1,)) and mapping.stick_expression() == "d1"
    assert str(mapping) == (
        "SpyreTensorLayout(device_size=[2, 3, 64, 64], stride_map =[9600, 64, 150, 1], "
        "device_dtype=DataFormats.SEN169_FP16, stick_dims=[d0, d1])"
    )
    # One stick dim is the row-major tiling; 3-D with two stick dims, float32.
    assert SpyreTensorLayout.stick_tiled((5, 100, 150), F16, [2]) == SpyreTensorLayout.row_major(
        (5, 100, 150), F16
    )
    three = SpyreTensorLayout.stick_tiled((3, 70, 100), F32, [1, 2])
    assert three.device_size == (3, 3, 4, 32, 32)
    assert three.stride_map == (7000, 3200, 32, 100, 1)


def test_a_stick_over_two_host_dims():
    # RoPE's pairs: [T, H, D/2, 2] with one stick over 2*d2 + d3 (32 pairs per stick).
    layout = SpyreTensorLayout.stick_tiled((4, 8, 64, 2), F16, [(2, 3)])
    assert layout.device_size == (4, 8, 2, 64) and layout.stride_map == (1024, 128, 64, 1)
    mapping = layout.for_host((4, 8, 64, 2))
    assert mapping.stick_expression() == "2*d2 + d3"
    assert str(mapping).endswith("stick_dims=[2*d2 + d3])")
    both = SpyreTensorLayout.stick_tiled((6, 3, 20), F32, [0, (1, 2)]).for_host((6, 3, 20))
    assert both.stick_dims() == ((0,), (1, 2))
    assert str(both).endswith("stick_dims=[d0, 20*d1 + d2])")
    # Where the group is whole sticks, its outer dim is simply the tile count.
    whole = SpyreTensorLayout.stick_tiled((6, 3, 32), F32, [0, (1, 2)]).for_host((6, 3, 32))
    assert whole.stick_dims() == ((0,), (2,))


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("extra", [(2,), (1, 2)])
def test_rope_reshape_of_a_d_stick_tensor_is_a_view(head_dim, extra):
    # torch-spyre cannot lower this ("Unexpected stick expression 32*d3 + d4"): here the
    # layout of [T, H, D] holds [T, H, D/2, 2] (and [..., D/2, 1, 2]) unchanged.
    shape = (4, 8, head_dim)
    view = (4, 8, head_dim // 2, *extra)
    layout = SpyreTensorLayout(shape, F16)
    mapping = layout.for_host(view)
    assert mapping.stick_expression() == ("2*d2 + d3" if len(extra) == 1 else "2*d2 + d4")
    np.testing.assert_array_equal(
        mapping.device_coords().reshape(-1, layout.device_rank),
        layout.for_host(shape).device_coords().reshape(-1, layout.device_rank),
    )
    x = random_bits(shape, F16, np.random.default_rng(head_dim))
    image = sj.dma_h2d(x, layout)
    assert same_bits(sj.dma_h2d(x.reshape(view), layout), image)
    assert same_bits(sj.dma_d2h(image, view, layout), x.reshape(view))


def test_bad_stick_dims_are_named():
    with pytest.raises(sj.LayoutError, match="adjacent"):
        SpyreTensorLayout.stick_tiled((4, 8, 2), F16, [(0, 2)])
    with pytest.raises(sj.LayoutError, match="disjoint"):
        SpyreTensorLayout.stick_tiled((4, 8), F16, [0, (0, 1)])
    with pytest.raises(sj.LayoutError, match="outside"):
        SpyreTensorLayout.stick_tiled((4, 8), F16, [2])
    with pytest.raises(sj.LayoutError, match="not contiguous"):
        SpyreTensorLayout.stick_tiled((4, 8), F16, [(0, 1)], host_strides=(1, 4))


# --- the index map, padding, descriptors and both engines against the oracle ---------


@st.composite
def stick_layouts(draw, dtypes=(F16, F32, np.int8, np.int32)):
    dtype = draw(st.sampled_from(dtypes))
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 70)) for _ in range(rank)]
    while math.prod(shape) > 6000:
        shape[int(np.argmax(shape))] //= 2
    dims = list(range(rank))
    groups, i = [], draw(st.integers(0, rank - 1))
    while i < rank and len(groups) < 2:  # one or two groups of one or two adjacent dims
        width = draw(st.integers(1, min(2, rank - i)))
        groups.append(tuple(dims[i : i + width]))
        i += width + draw(st.integers(0, 1))
    groups = draw(st.permutations(groups))
    layout = SpyreTensorLayout.stick_tiled(shape, dtype, groups)
    return tuple(shape), np.dtype(dtype), tuple(groups), layout


@given(stick_layouts())
def test_index_map_and_padding_are_the_loop_nest(case):
    shape, _, groups, layout = case
    mapping = layout.for_host(shape)
    coords = mapping.device_coords().reshape(-1, layout.device_rank)
    np.testing.assert_array_equal(coords, oracle_coords(shape, groups, layout.elems_per_stick))
    offsets = np.indices(shape).reshape(len(shape), -1).T @ np.array(row_major(shape))
    smap = np.array([max(m, 0) for m in layout.stride_map])
    np.testing.assert_array_equal(coords @ smap, offsets)  # spec section 3's identity
    want = np.zeros(layout.device_size, bool)
    want[tuple(coords.T)] = True
    np.testing.assert_array_equal(mapping.data_mask(), want)
    live = [g for g in groups if math.prod(shape[d] for d in g) > 1]
    assert mapping.stick_dims()[-1:] == tuple(live[-1:])


@given(stick_layouts(), st.integers(0, 2**32 - 1))
def test_descriptors_place_every_element_once(case, seed):
    shape, dtype, groups, layout = case
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    dci = sj.generate_dci(shape, layout)
    fill = sj.poison_value(dtype)
    dst, writes = run_descriptors(
        dci, x.reshape(-1), np.full(math.prod(layout.device_size), fill, dtype)
    )
    assert same_bits(dst.reshape(layout.device_size), oracle_image(x, layout, groups))
    assert writes.max(initial=0) <= 1 and writes.sum() == x.size


@given(stick_layouts(), st.integers(0, 2**32 - 1))
@example(  # one stick of both host dims: the jitted h2d's tiles are rows of 66, not 22
    ((3, 22), np.dtype(F16), ((0, 1),), SpyreTensorLayout.stick_tiled((3, 22), F16, [(0, 1)])),
    0,
)
def test_both_engines_are_bit_exact_eager_and_jitted(case, seed):
    shape, dtype, groups, layout = case
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    assert host_engine_suits(sj.generate_dci(shape, layout), dtype.itemsize)  # eager: host
    assert_round_trips_both_ways(x, layout, oracle_image(x, layout, groups))


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.int8, np.int32, np.bool_]
)
def test_every_dtype_moves_through_two_stick_dims(dtype):
    shape = (70, 3, 130)
    layout = SpyreTensorLayout.stick_tiled(shape, dtype, [0, (1, 2)])
    x = random_bits(shape, dtype, np.random.default_rng(7))
    image = sj.dma_h2d(x, layout)
    assert same_bits(image, oracle_image(x, layout, ((0,), (1, 2))))
    assert same_bits(sj.dma_d2h(image, shape, layout), x)
