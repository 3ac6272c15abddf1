"""Gaps: a layout placed inside a larger device buffer (issue 26, item 2).

A gap is ``(front, back)`` device positions on a dim around the range the index map
iterates (torch-spyre's SuperDSC ``backGap``, the descriptors' ``validGap_``). The
oracle is the gap-free image by spec section 4's rule (``oracles.image_by_rule``),
padded with the fill on each dim; the index map, the padding, the descriptors and both
DMA engines must agree with it bit for bit.
"""

import math
import pickle

import jax
import numpy as np
import pytest
from helpers import assert_round_trips_both_ways
from hypothesis import given
from hypothesis import strategies as st
from oracles import (
    coords_by_rule,
    gapped_image,
    image_by_rule,
    random_bits,
    run_descriptors,
    same_bits,
)

import spyrejax as sj
from spyrejax import SpyreTensorLayout

F16, F32 = np.float16, np.float32


# --- construction, printing, equality ------------------------------------------------


def test_a_kv_cache_layout_holds_100_of_4096_tokens():
    tokens = SpyreTensorLayout.row_major((100, 64), F16)
    cache = tokens.with_gap(0, back=3996)
    assert cache.device_size == (4096, 1, 64) and cache.valid_size == (100, 1, 64)
    assert cache.device_gaps == ((0, 3996), (0, 0), (0, 0)) and cache.has_gaps
    assert repr(cache) == (
        "SpyreTensorLayout(device_size=[4096, 1, 64], stride_map =[64, 64, 1], "
        "device_dtype=DataFormats.SEN169_FP16, device_gaps=[(0, 3996), (0, 0), (0, 0)])"
    )
    # A gap is not padding beyond the data: the same sizes without it differ.
    plain = SpyreTensorLayout.from_stride_map([4096, 1, 64], [64, 64, 1], F16)
    assert cache != plain and not plain.has_gaps and "device_gaps" not in repr(plain)
    assert cache == plain.__class__.from_stride_map(
        [4096, 1, 64], [64, 64, 1], F16, device_gaps=[(0, 3996), (0, 0), (0, 0)]
    )
    assert hash(cache) == hash(tokens.with_gap(0, back=3000).with_gap(0, back=996))
    assert pickle.loads(pickle.dumps(cache)) == cache
    mapping = cache.for_host((100, 64))
    assert str(mapping).endswith("device_gaps=[(0, 3996), (0, 0), (0, 0)], stick_dims=[d1])")
    assert mapping.device_coord((99, 63)) == (99, 0, 63)
    assert mapping.host_index((100, 0, 0)) is None
    # A piece of a concatenate: the second 30 rows of a 130-row buffer.
    piece = SpyreTensorLayout.row_major((30, 64), F16).with_gap(0, front=100)
    assert piece.for_host((30, 64)).device_coord((0, 5)) == (100, 0, 5)
    assert piece.for_host((30, 64)).host_index((99, 0, 5)) is None


def test_bad_gaps_are_named():
    layout = SpyreTensorLayout.row_major((5, 70), F16)
    with pytest.raises(sj.LayoutError, match="stick dim"):
        layout.with_gap(2, back=1)
    with pytest.raises(sj.LayoutError, match=">= 0"):
        layout.with_gap(0, front=-1)
    with pytest.raises(sj.LayoutError, match="not a device dim"):
        layout.with_gap(3, front=1)
    with pytest.raises(sj.LayoutError, match="longer than"):
        SpyreTensorLayout.from_stride_map([5, 64], [64, 1], F16, device_gaps=[(3, 3), (0, 0)])
    with pytest.raises(sj.LayoutError, match="one \\(front, back\\) pair"):
        SpyreTensorLayout.from_stride_map([5, 64], [64, 1], F16, device_gaps=[(0, 0)])
    # The valid range must hold the tensor: the gap does not.
    with pytest.raises(sj.LayoutError, match="too small"):
        SpyreTensorLayout.from_stride_map(
            [6, 2, 64], [70, 64, 1], F16, device_gaps=[(2, 0), (0, 0), (0, 0)]
        ).for_host((5, 70))


# --- the index map, padding, descriptors and both engines against the oracle ---------


@st.composite
def gapped_layouts(draw, dtypes=(F16, F32, np.int8, np.int32)):
    """A small host shape, a gap-free layout of it, and that layout with gaps."""
    dtype = draw(st.sampled_from(dtypes))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(rank))
    kind = draw(st.sampled_from(["default", "row_major", "two_sticks"]))
    if kind == "default":
        inner = SpyreTensorLayout(shape, dtype, draw(st.permutations(range(rank))))
    elif kind == "row_major":
        inner = SpyreTensorLayout.row_major(shape, dtype)
    else:
        dims = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=2, unique=True))
        inner = SpyreTensorLayout.stick_tiled(shape, dtype, dims)
    layout = inner
    for dim in draw(st.lists(st.integers(0, inner.device_rank - 2), min_size=1, max_size=2)):
        layout = layout.with_gap(dim, draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    return shape, np.dtype(dtype), inner, layout


def _want(x, inner, layout, fill):
    return gapped_image(image_by_rule(x, inner, fill), layout.device_gaps, fill)


@given(gapped_layouts())
def test_index_map_and_padding_are_the_shifted_rule(case):
    shape, _, inner, layout = case
    mapping = layout.for_host(shape)
    front = np.array([f for f, _ in layout.device_gaps])
    coords = mapping.device_coords().reshape(-1, layout.device_rank)
    np.testing.assert_array_equal(coords, coords_by_rule(shape, inner) + front)
    want = gapped_image(np.ones(inner.device_size, bool), layout.device_gaps, False)
    want &= gapped_image(inner.for_host(shape).data_mask(), layout.device_gaps, False)
    np.testing.assert_array_equal(mapping.data_mask(), want)
    # Every padding position lies in a padding slab; every element is found again.
    slabs = np.zeros(layout.device_size, bool)
    for dim, start, stop in mapping.padding_slabs():
        index = [slice(None)] * layout.device_rank
        index[dim] = slice(start, stop)
        slabs[tuple(index)] = True
    assert not (mapping.padding_mask() & ~slabs).any()
    offsets = mapping.host_offsets_of(np.moveaxis(np.indices(layout.device_size), 0, -1))
    assert sorted(offsets[offsets >= 0].tolist()) == list(range(math.prod(shape)))
    c = tuple(int(v) for v in coords[-1])
    assert mapping.host_index(c) == tuple(n - 1 for n in shape)


@given(gapped_layouts(), st.integers(0, 2**32 - 1))
def test_descriptors_place_every_element_once_inside_the_gaps(case, seed):
    shape, dtype, inner, layout = case
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    fill = sj.poison_value(dtype)
    dci = sj.generate_dci(shape, layout)
    flat = np.full(math.prod(layout.device_size), fill, dtype)
    dst, writes = run_descriptors(dci, x.reshape(-1), flat)
    assert same_bits(dst.reshape(layout.device_size), _want(x, inner, layout, fill))
    assert writes.max(initial=0) <= 1 and writes.sum() == x.size
    back = sj.generate_dci(shape, layout, host_to_device=False)
    host, _ = run_descriptors(back, dst, np.zeros(x.size, dtype))
    assert same_bits(host.reshape(shape), x)
    assert sj.DCI.from_json(dci.to_json()) == dci


@given(gapped_layouts(), st.integers(0, 2**32 - 1))
def test_both_engines_are_bit_exact_through_gaps_eager_and_jitted(case, seed):
    shape, dtype, inner, layout = case
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    assert_round_trips_both_ways(x, layout, _want(x, inner, layout, sj.poison_value(dtype)))


@pytest.mark.parametrize("dtype", sj.SUPPORTED_DTYPES, ids=str)
def test_every_dtype_moves_through_a_gap(dtype):
    shape = (3, 70, 5)
    inner = SpyreTensorLayout(shape, dtype)
    layout = inner.with_gap(0, front=1, back=2).with_gap(2, front=2)
    x = random_bits(shape, dtype, np.random.default_rng(3))
    fill = np.zeros((), dtype)[()]
    want = _want(x, inner, layout, fill)
    for image in (
        sj.dma_h2d(x, layout, pad_value=fill),
        jax.jit(lambda a: sj.dma_h2d(a, layout, pad_value=fill))(x),
    ):
        assert same_bits(image, want)
        assert same_bits(sj.dma_d2h(image, shape, layout), x)
        assert same_bits(jax.jit(lambda i: sj.dma_d2h(i, shape, layout))(image), x)


def test_dci_json_carries_valid_gap_pairs():
    layout = SpyreTensorLayout.row_major((5, 70), F16).with_gap(0, front=2, back=3)
    dci = sj.generate_dci((5, 70), layout)
    data = dci.to_dict()
    # Innermost first: [valid, gap] per device dim; the front gap is in the offsets.
    assert data["validGap_"] == [[64, 0], [2, 0], [5, 5]]
    assert data["dcsi_"][0]["offset_dst_"] == 2 * 128
    back = sj.DCI.from_dict(data)
    assert back == dci and back.device_gaps == ((2, 3), (0, 0), (0, 0))
    plain = sj.generate_dci((5, 70), SpyreTensorLayout.row_major((5, 70), F16)).to_dict()
    assert "validGap_" not in plain


def test_a_spyre_array_in_a_window_moves_and_pointwise_kernels_read_its_valid_range():
    # The DMA primitives take a window of a larger buffer; a pointwise kernel iterates
    # its valid range (the gaps are other values' slots) and writes a result without
    # gaps; a kernel that would read the gap as data refuses it by name (a LayoutError:
    # the planner moves such a value).
    layout = SpyreTensorLayout.row_major((5, 70), F16).with_gap(0, back=3)
    x = random_bits((5, 70), F16, np.random.default_rng(1))
    a = sj.to_device(x, layout)
    assert a.layout == layout and a.image.shape == (8, 2, 64)
    assert same_bits(sj.to_host(a), x)
    assert same_bits(sj.to_host(sj.restickify(a)), x)
    y = (np.arange(5 * 70, dtype=F16) / 8).reshape(5, 70)  # finite: exact doubles
    a, b = sj.to_device(y, layout), sj.to_device(y)
    for total in (a + b, jax.jit(lambda u, v: u + v)(a, b)):
        assert not total.layout.has_gaps
        assert same_bits(sj.to_host(total), y + y)
    # A reduction iterates the valid range too; a matmul refuses the window by name.
    assert same_bits(sj.to_host(a.sum(axis=0)), sj.to_host(b.sum(axis=0)))
    w = sj.to_device(np.ones((70, 64), F16))
    with pytest.raises(sj.LayoutError, match="restickify"):
        a @ w


@pytest.mark.parametrize("dim, front, back", [(0, 1, 2), (1, 2, 0), (2, 0, 1)])
def test_a_broadcast_dim_is_filled_only_inside_its_valid_range(dim, front, back):
    # Device dim 0 broadcasts (stride 0): H2D writes every copy, D2H reads one.
    inner = SpyreTensorLayout.from_stride_map([3, 5, 2, 64], [0, 70, 64, 1], F16)
    layout = inner.with_gap(dim, front, back)
    x = random_bits((5, 70), F16, np.random.default_rng(dim))
    fill = sj.poison_value(F16)
    want = _want(x, inner, layout, fill)
    padding = gapped_image(inner.for_host((5, 70)).padding_mask(), layout.device_gaps, True)
    np.testing.assert_array_equal(layout.for_host((5, 70)).data_mask(), ~padding)
    for image in (sj.dma_h2d(x, layout), jax.jit(lambda a: sj.dma_h2d(a, layout))(x)):
        assert same_bits(image, want)
        assert same_bits(sj.dma_d2h(image, (5, 70), layout), x)
