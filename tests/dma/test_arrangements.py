"""Element arrangements as a layout property (issue 26, item 4): index map and both DMA engines.

The oracle places each element by the standard rule (tests/oracles.py), then moves it
inside its 64-element group by the golden CuTe formulas written out here: it shares no
code with spyrejax's arrangement module.
"""

import pickle

import numpy as np
import pytest
from helpers import assert_round_trips_both_ways, dma_transfers
from hypothesis import given
from hypothesis import strategies as st
from oracles import coords_by_rule, random_bits, run_descriptors, same_bits

import spyrejax as sj
from spyrejax import DCI, ElementArrangement, LayoutError, SpyreTensorLayout
from spyrejax.dma._host_dma import without_host_engine
from spyrejax.layout._dtypes import format_for_dtype, poison_value
from spyrejax.viz import device_memory

DL16_TO_FP32 = ElementArrangement.DL16_TO_FP32
FP32_TO_DL16 = ElementArrangement.FP32_TO_DL16


def golden_place(arrangement, i):
    """The issue's CuTe maps, digit by digit: ``(4,2,8):(1,32,4)`` and ``(4,8,2):(1,8,4)``."""
    if arrangement is DL16_TO_FP32:
        return i % 4 + 32 * (i // 4 % 2) + 4 * (i // 8)
    return i % 4 + 8 * (i // 4 % 8) + 4 * (i // 32)


WIDE = [d for d in sj.SUPPORTED_DTYPES if format_for_dtype(d).elems_per_stick() == 32]
NARROW = [d for d in sj.SUPPORTED_DTYPES if format_for_dtype(d).elems_per_stick() == 64]
CASES = [(d, DL16_TO_FP32) for d in WIDE] + [(d, FP32_TO_DL16) for d in NARROW]


def arranged_row_major(shape, dtype, arrangement):
    """The row-major layout of ``shape`` with an even tile count (32-bit), arranged.

    A 32-bit stick dim within one stick has no tile count to pair: the group's second
    stick is a synthetic dim (stride -1) of size 2 in the tile count's place.
    """
    plain = SpyreTensorLayout.row_major(shape, dtype)
    size, smap = list(plain.device_size), list(plain.stride_map)
    if size[-2] % 2 and plain.elems_per_stick == 32:
        size[-2] += 1  # a group is two sticks: pad the tile count to a pair
        if shape[-1] <= 32:
            smap[-2] = -1
    return SpyreTensorLayout.from_stride_map(size, smap, dtype, arrangement=arrangement)


def coords_by_oracle(shape, layout):
    """Standard coordinates by the spec's rule, then moved inside each group."""
    plain = layout.with_arrangement("STANDARD")
    coords = coords_by_rule(shape, plain).copy()
    eps = layout.elems_per_stick
    pair = len(shape) if eps == 32 else None  # row_major: the tile count is dim rank-1
    q = coords[:, -1] if pair is None else coords[:, pair - 1] % 2 * 32 + coords[:, -1]
    p = golden_place(layout.arrangement, q)
    if pair is None:
        coords[:, -1] = p
    else:
        coords[:, pair - 1] += p // 32 - coords[:, pair - 1] % 2
        coords[:, -1] = p % 32
    return coords


def image_by_oracle(x, layout, fill):
    image = np.full(layout.device_size, fill, dtype=x.dtype)
    coords = coords_by_oracle(x.shape, layout)
    image[tuple(coords.T)] = x.reshape(-1)
    return image


# --- the field -------------------------------------------------------------------------


def test_arrangement_is_a_field_of_the_layout_value():
    plain = SpyreTensorLayout.row_major((4, 64), np.float32)
    arranged = plain.with_arrangement("DL16_TO_FP32")
    assert arranged.arrangement is DL16_TO_FP32 and arranged.is_arranged
    assert plain.arrangement is ElementArrangement.STANDARD and not plain.is_arranged
    assert arranged != plain and hash(arranged) != hash(plain)
    assert arranged.with_arrangement(ElementArrangement.STANDARD) == plain
    assert pickle.loads(pickle.dumps(arranged)) == arranged
    assert repr(arranged).endswith("arrangement=DL16_TO_FP32)")
    assert "arrangement" not in repr(plain)
    assert arranged.with_gap(0, back=4).arrangement is DL16_TO_FP32


def test_arrangements_fit_their_stick_width():
    with pytest.raises(LayoutError, match="places 32-element sticks"):
        SpyreTensorLayout.row_major((4, 64), np.float16).with_arrangement(DL16_TO_FP32)
    with pytest.raises(LayoutError, match="places 64-element sticks"):
        SpyreTensorLayout.row_major((4, 64), np.float32).with_arrangement(FP32_TO_DL16)
    with pytest.raises(LayoutError, match="unknown element arrangement"):
        SpyreTensorLayout.row_major((4, 64), np.float32).with_arrangement("ODD_EVEN")
    with pytest.raises(LayoutError, match="lanes on a host dim"):  # a sparse stick
        SpyreTensorLayout((4, 64), np.float16, [0, 1, -1]).with_arrangement(FP32_TO_DL16)


def test_a_32_bit_arrangement_pairs_an_even_tile_count():
    odd = SpyreTensorLayout.row_major((4, 96), np.float32).with_arrangement(DL16_TO_FP32)
    with pytest.raises(LayoutError, match="even size"):
        odd.for_host((4, 96))
    assert arranged_row_major((4, 96), np.float32, DL16_TO_FP32).for_host((4, 96)).pair == 1


# --- the index map ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "arrangement"), [(np.float32, DL16_TO_FP32), (np.float16, FP32_TO_DL16)]
)
@pytest.mark.parametrize("shape", [(3, 64), (2, 100), (5,), (2, 3, 130), (3, 20), (2, 32)])
def test_index_map_is_the_oracle(shape, dtype, arrangement):
    layout = arranged_row_major(shape, dtype, arrangement)
    mapping = layout.for_host(shape)
    want = coords_by_oracle(shape, layout)
    assert (mapping.device_coords().reshape(-1, layout.device_rank) == want).all()
    mask = np.zeros(layout.device_size, bool)
    mask[tuple(want.T)] = True
    assert (mapping.data_mask() == mask).all()
    offsets = mapping.host_offsets_of(want)
    assert (offsets == np.arange(int(np.prod(shape)))).all()
    first, last = tuple(want[1]), tuple(want[-1])
    assert mapping.host_index(first) == tuple(np.unravel_index(1, shape))
    assert mapping.device_coord(np.unravel_index(len(want) - 1, shape)) == last
    for dim, start, stop in mapping.padding_slabs():  # the slabs cover every padding
        mask[(slice(None),) * dim + (slice(start, stop),)] = True
    assert mask.all()


@given(
    st.sampled_from([(np.float32, DL16_TO_FP32), (np.float16, FP32_TO_DL16)]),
    st.integers(1, 3),
    st.integers(1, 17).flatmap(lambda g: st.integers(max(2, 64 * g - 63), 64 * g - 1)),
)
def test_property_a_partial_last_group_is_placed_by_the_oracle(case, rows, n):
    # A stick dim of n elements that is not whole 64-groups (1000 = 15 * 64 + 40): the
    # last group is partial, its elements placed by the golden map and the rest padding.
    dtype, arrangement = case
    layout = arranged_row_major((rows, n), dtype, arrangement)
    mapping = layout.for_host((rows, n))
    want = coords_by_oracle((rows, n), layout)
    assert (mapping.device_coords().reshape(-1, layout.device_rank) == want).all()
    mask = np.zeros(layout.device_size, bool)
    mask[tuple(want.T)] = True
    assert (mapping.data_mask() == mask).all()
    assert (mapping.host_offsets_of(want) == np.arange(rows * n)).all()


@pytest.mark.parametrize("n", [2, 4, 20, 31, 32])
def test_a_stick_dim_within_one_stick_spreads_over_a_pair_and_converts_back(n):
    """Golden: a 16-bit stick of ``n <= 32`` elements becomes two fp32 sticks, runs of 4
    alternating (element ``i`` at position ``(4,2,8):(1,32,4)(i)`` of the pair); the
    conversion back (``FP32_TO_DL16``) puts every element on its own lane again."""
    layout = arranged_row_major((3, n), np.float32, DL16_TO_FP32)
    assert layout.device_size == (3, 2, 32) and layout.stride_map == (n, -1, 1)
    mapping = layout.for_host((3, n))
    assert mapping.pair == 1
    coords = mapping.device_coords()
    i = np.arange(n)
    place = golden_place(DL16_TO_FP32, i)
    for r in range(3):
        assert (coords[r, :, 0] == r).all()
        assert (coords[r, :, 1] == place // 32).all() and (coords[r, :, 2] == place % 32).all()
    back = golden_place(FP32_TO_DL16, 32 * coords[..., 1] + coords[..., 2])
    assert (back == i).all()  # the inverse law: the 16-bit stick's standard lanes
    assert mapping.data_mask().sum() == 3 * n
    assert [mapping.host_index(tuple(c)) for c in coords[1]] == [(1, k) for k in range(n)]


# --- both DMA engines, bit-exact ---------------------------------------------------------


@st.composite
def arranged_cases(draw):
    dtype, arrangement = draw(st.sampled_from(CASES))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank - 1, max_size=rank - 1)))
    # Lanes on a host dim (a size-1 stick is synthetic); a 32-bit stick dim within one stick
    # pairs its stick with a synthetic one.
    shape += (draw(st.integers(2, 200)),)
    return shape, dtype, arrangement, draw(st.integers(0, 2**32 - 1))


@given(arranged_cases())
def test_property_dma_round_trips_bit_exact(case):
    shape, dtype, arrangement, seed = case
    layout = arranged_row_major(shape, dtype, arrangement)
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    want = image_by_oracle(x, layout, poison_value(np.dtype(dtype)))
    assert_round_trips_both_ways(x, layout, want)


@pytest.mark.parametrize(("dtype", "arrangement"), CASES)
def test_each_dtype_on_the_host_and_the_xla_engine(dtype, arrangement):
    shape = (3, 70)
    layout = arranged_row_major(shape, dtype, arrangement)
    x = random_bits(shape, dtype, np.random.default_rng(1))
    want = image_by_oracle(x, layout, poison_value(np.dtype(dtype)))
    with dma_transfers() as seen:
        host = sj.dma_h2d(x, layout)
        back = sj.dma_d2h(host, shape, layout)
        with without_host_engine():
            xla = sj.dma_h2d(x, layout)
            xla_back = sj.dma_d2h(xla, shape, layout)
    assert [e for _, e, _ in seen] == ["host", "host", "xla", "xla"]
    assert same_bits(host, want) and same_bits(xla, want)
    assert same_bits(back, x) and same_bits(xla_back, x)


def test_arranged_images_are_the_standard_ones_regrouped():
    """The arrangement moves elements inside groups only: the same values, permuted."""
    x = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
    layout = arranged_row_major(x.shape, np.float32, DL16_TO_FP32)
    image = np.asarray(sj.dma_h2d(x, layout))
    assert (image[1, 0, :8] == [64, 65, 66, 67, 72, 73, 74, 75]).all()  # runs of 4 alternate
    assert (image[1, 1, :4] == [68, 69, 70, 71]).all()
    assert sorted(image.reshape(-1)) == sorted(x.reshape(-1))


def test_device_memory_picture_shows_the_arrangement():
    layout = arranged_row_major((2, 64), np.float32, DL16_TO_FP32)
    picture = device_memory((2, 64), layout)
    assert "(DL16_TO_FP32)" in picture.title
    assert list(picture.text[0, :6]) == ["0", "1", "2", "3", "8", "9"]
    assert list(picture.text[1, :4]) == ["4", "5", "6", "7"]


def _descriptors_place_by_oracle(shape, layout, coords):
    """Brute force: the DCI writes every element once where the oracle says, and reads it back."""
    n, cells = int(np.prod(shape)), int(np.prod(layout.device_size))
    host = np.arange(n, dtype=np.int64)
    image, writes = run_descriptors(sj.generate_dci(shape, layout), host, np.full(cells, -1))
    flat = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    np.testing.assert_array_equal(image[flat], host)
    assert writes.sum() == n and (writes <= 1).all()
    d2h = sj.generate_dci(shape, layout, host_to_device=False)
    back, reads = run_descriptors(d2h, image, np.full(n, -1))
    np.testing.assert_array_equal(back, host)
    assert (reads == 1).all()
    assert DCI.from_json(d2h.to_json()) == d2h


@given(arranged_cases())
def test_property_descriptors_place_every_element_by_the_oracle(case):
    shape, dtype, arrangement, _ = case
    layout = arranged_row_major(shape, dtype, arrangement)
    _descriptors_place_by_oracle(shape, layout, coords_by_oracle(shape, layout))


def test_descriptors_loop_over_the_digits_of_a_group():
    """A 32-bit group's index digits (4, 2, 8) move 1 lane, 1 tile and 4 lanes; a group 2 tiles."""
    layout = arranged_row_major((2, 64), np.float32, DL16_TO_FP32)  # device [2, 2, 32]
    (d,) = sj.generate_dci((2, 64), layout)
    assert d.size == (4, 2, 8, 1, 2) and d.stride_src == (1, 4, 8, 64, 64)
    assert d.stride_dst == (1, 32, 4, 64, 64)
    (d,) = sj.generate_dci((2, 64), arranged_row_major((2, 64), np.float16, FP32_TO_DL16))
    assert d.size == (4, 8, 2, 1, 2) and d.stride_dst == (1, 8, 4, 64, 64)


@pytest.mark.parametrize(
    ("device_size", "stride_map", "shape"),
    [
        ([2, 2, 32], [32, 64, 1], (128,)),  # the pair is the outer dim, a tile count inside it
        ([2, 2, 64], [64, 128, 1], (256,)),
        ([3, 4, 32], [100, 32, 1], (3, 100)),  # a tile count of 4 for 100: its last pair padding
    ],
)
def test_descriptors_of_explicit_arranged_layouts_give_the_host_mapping(
    device_size, stride_map, shape
):
    dtype = np.float32 if device_size[-1] == 32 else np.float16
    arrangement = DL16_TO_FP32 if dtype == np.float32 else FP32_TO_DL16
    layout = SpyreTensorLayout.from_stride_map(
        device_size, stride_map, dtype, arrangement=arrangement
    )
    coords = layout.for_host(shape).device_coords().reshape(-1, len(device_size))
    _descriptors_place_by_oracle(shape, layout, coords)


def test_a_whole_tile_of_padding_reads_back_inside_jax_jit():
    """A tile count padded past the partial tile (as an arrangement's pair pads it)."""
    layout = SpyreTensorLayout.from_stride_map([3, 4, 32], [70, 32, 1], np.float32)
    x = random_bits((3, 70), np.float32, np.random.default_rng(2))
    with without_host_engine():
        assert same_bits(sj.dma_d2h(sj.dma_h2d(x, layout), (3, 70), layout), x)
