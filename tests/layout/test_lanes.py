"""Laned layouts: a tensor on some lanes of its sticks (issue 26).

``x[..., offset::step]`` seen in place in ``x``'s buffer (RoPE's interleaved pairs:
``x[..., ::2]``, ``x[..., 1::2]``), and a window ``x[..., a:b]`` of an ``x`` whose last
dim lies in one stick a row (rotate-half's halves at float16 head dim 64). The oracle
is the buffer's own layout (built here from the buffer's shape, not from the laned
layout) at host index ``[..., step * j + offset]`` (``[..., a + j]``): the index map,
the padding (the buffer's padding and every other lane) and both DMA engines, eager
and under ``jax.jit``, must agree with it bit for bit.
"""

import itertools
import math
import pickle

import numpy as np
import pytest
from helpers import assert_round_trips_both_ways
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import (
    check_descriptors_against_coords,
    coords_by_rule,
    data_mask_by_rule,
    image_by_rule,
    random_bits,
)

import spyrejax as sj
from spyrejax import DCI, SpyreTensorLayout, viz
from spyrejax.layout._lanes import (
    LanedLayout,
    in_one_stick,
    lane_refusal,
    lane_text,
    lane_window,
    laned,
    parent_layout,
    window_refusal,
)

F16, F32 = np.float16, np.float32


def test_the_odd_lanes_of_a_rope_tensor_print_compare_and_refuse_what_they_cannot_hold():
    x = SpyreTensorLayout((4, 2, 128), F16)
    odd = laned(x, 1, 2)
    assert odd.device_size == x.device_size and odd.valid_size == (2, 2, 4, 32)
    assert repr(odd) == (
        "SpyreTensorLayout(device_size=[2, 2, 4, 64], stride_map =[64, 32, 128, 1], "
        "device_dtype=DataFormats.SEN169_FP16, lanes=1::2)"
    )
    assert odd != x and x != odd and odd != laned(x, 0, 2) and parent_layout(odd) == x
    assert hash(odd) == hash(laned(x, 1, 2)) and pickle.loads(pickle.dumps(odd)) == odd
    mapping = odd.for_host((4, 2, 64))
    assert str(mapping).endswith("lanes=1::2, stick_dims=[d2])")
    # Element 40 of row (3, 1) is x's element 81: tile 1, lane 17.
    assert mapping.device_coord((3, 1, 40)) == x.for_host((4, 2, 128)).device_coord((3, 1, 81))
    assert mapping.host_index((1, 1, 3, 17)) == (3, 1, 40)
    assert mapping.host_index((1, 1, 3, 16)) is None  # an even lane: another piece's
    assert mapping.padding_mask().sum() == math.prod(x.device_size) // 2
    with pytest.raises(sj.LayoutError, match=r"laned.*no gap"):
        odd.with_gap(0, front=1)
    with pytest.raises(sj.LayoutError, match="element arrangement"):
        odd.with_arrangement("FP32_TO_DL16")
    with pytest.raises(sj.LayoutError, match="not multiples of 3"):
        laned(x, 0, 3)
    with pytest.raises(sj.LayoutError, match="offset"):
        laned(x, 2, 2)
    with pytest.raises(sj.LayoutError, match="window, arranged or laned"):
        laned(x.with_gap(0, front=1), 0, 2)
    with pytest.raises(sj.LayoutError, match="row-major"):
        odd.for_host((4, 2, 64), (1, 4, 8))
    with pytest.raises(TypeError):
        LanedLayout((4, 64), F16)


@st.composite
def laned_cases(draw, dtypes=(F16, F32, np.int8, np.int32)):
    """A buffer layout and a piece's lanes: strided (a last dim ``step * n``) or a window.

    A window cuts ``[a, b)`` out of a last dim of at most one stick, not the whole stick,
    or (a tile window) out of one stick of a last dim of up to three sticks.
    """
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    eps = 128 // dtype.itemsize
    window = draw(st.booleans())
    step = 1 if window else draw(st.sampled_from([s for s in (2, 4) if eps % s == 0]))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 5)) for _ in range(rank - 1)]
    if window:
        shape.append(draw(st.integers(2, draw(st.sampled_from([eps, 3 * eps])))))
        n = shape[-1]
        a = draw(st.integers(0, n - 2).filter(lambda a: a % eps < eps - 1))
        end = min(n, (a // eps + 1) * eps)  # inside a's stick
        b = draw(st.integers(a + 2, end).filter(lambda b: b - a < eps))
    else:
        shape.append(step * draw(st.integers(2, 80)))  # a last dim of 1 is walked by no lane
    shape = tuple(shape)
    if draw(st.booleans()):
        order = [*draw(st.permutations(range(rank - 1))), rank - 1]
        buffer = SpyreTensorLayout(shape, dtype, order)
    else:
        buffer = SpyreTensorLayout.row_major(shape, dtype)
    if window:
        piece = (*shape[:-1], b - a)
        layout = lane_window(buffer, shape, a, b)
        assert lane_text(layout) == f"{a}:{b}" and (layout.tile is None) == (n <= eps)
        return buffer, shape, layout, piece, dtype
    offset = draw(st.integers(0, step - 1))
    piece = (*shape[:-1], shape[-1] // step)
    return buffer, shape, laned(buffer, offset, step), piece, dtype


def _start(layout):
    """The buffer's last-dim index of the piece's first element (a tile window's from its
    tile: the strategy checks it against the drawn start through the printed lanes)."""
    offset, tile = layout.lanes[0], layout.tile
    return offset if tile is None else offset + tile[1] * layout.device_size[-1]


def _spread(piece_index, layout):
    """Piece index ``[..., j]`` as the buffer's ``[..., offset + step * j]``."""
    step = layout.lanes[1]
    out = np.array(piece_index)
    out[..., -1] = step * out[..., -1] + _start(layout)
    return out


def _coords(buffer, shape, layout, piece):
    """The oracle: per piece index, the buffer's rule at the spread index."""
    want_all = coords_by_rule(shape, buffer).reshape(*shape, buffer.device_rank)
    index = np.moveaxis(np.indices(piece), 0, -1)
    return want_all[tuple(np.moveaxis(_spread(index, layout), -1, 0))]


@given(laned_cases())
def test_index_map_and_padding_are_the_buffers_at_the_spread_index(case):
    buffer, shape, layout, piece, _ = case
    mapping = layout.for_host(piece)
    want = _coords(buffer, shape, layout, piece)
    np.testing.assert_array_equal(mapping.device_coords(), want)
    mapped = np.zeros(layout.device_size, bool)  # brute force: where the piece's elements are
    mapped[tuple(want.reshape(-1, layout.device_rank).T)] = True
    np.testing.assert_array_equal(mapping.data_mask(), data_mask_by_rule(shape, buffer) & mapped)
    offsets = mapping.host_offsets_of(np.moveaxis(np.indices(layout.device_size), 0, -1))
    assert sorted(offsets[offsets >= 0].tolist()) == list(range(math.prod(piece)))
    last = tuple(n - 1 for n in piece)
    assert mapping.host_index(mapping.device_coord(last)) == last
    # The padding is exactly the device elements no host index maps to (brute force).
    np.testing.assert_array_equal(mapping.padding_mask(), ~mapped)


@pytest.mark.parametrize("dtype", [F16, F32, np.int8], ids=str)
def test_lane_refusal_is_the_predicate_of_placing_pieces_in_lanes(dtype):
    # The planner asks lane_refusal before it places an interleave's pieces on lanes
    # k::s of the default layout of [..., s * n]: it must say None exactly where
    # building the pieces' types succeeds (a step dividing the stick, pieces with a
    # last dim a lane walks), and name the reason otherwise.
    for step, piece in itertools.product((2, 3, 4), [(1,), (3,), (8,), (2, 1), (4, 32), (2, 3, 1)]):
        out = (*piece[:-1], piece[-1] * step)
        dest = SpyreTensorLayout(out, dtype)
        refusal = lane_refusal(dest, step, piece)
        try:
            for k in range(step):
                laned(dest, k, step).for_host(piece)
        except sj.LayoutError:
            assert refusal is not None, (step, piece)
        else:
            assert refusal is None, (step, piece, refusal)


@given(laned_cases())
def test_descriptors_place_every_element_at_the_spread_index(case):
    """DCI of a lane view: the lane loop steps ``step`` lanes from lane ``offset``."""
    buffer, shape, layout, piece, _ = case
    n = math.prod(piece)
    coords = _coords(buffer, shape, layout, piece).reshape(-1, layout.device_rank)
    d2h = sj.generate_dci(piece, layout, host_to_device=False)
    h2d = sj.generate_dci(piece, layout)
    writes = check_descriptors_against_coords(
        h2d, d2h, np.arange(n, dtype=np.int64), coords, layout.device_size
    )
    assert writes.sum() == n and DCI.from_json(d2h.to_json()) == d2h


def test_a_lane_views_descriptor_steps_over_the_other_lanes():
    odd = laned(SpyreTensorLayout((4, 2, 128), F16), 1, 2)  # device [2, 2, 4, 64]
    (d,) = sj.generate_dci((4, 2, 64), odd)
    assert d.size == (32, 4, 2, 2) and d.offset_dst == 1  # lane 1, then every other lane
    assert d.stride_dst == (2, 64, 256, 512) and d.stride_src == (1, 128, 32, 64)


def _want(x, buffer, shape, layout, fill):
    whole = np.full(shape, fill, x.dtype)
    index = np.moveaxis(np.indices(x.shape), 0, -1)
    whole[tuple(np.moveaxis(_spread(index, layout), -1, 0))] = x
    return image_by_rule(whole, buffer, fill)


@settings(max_examples=25)  # each example compiles both transfers under jax.jit
@given(laned_cases(), st.integers(0, 2**32 - 1))
def test_both_engines_are_bit_exact_through_lanes_eager_and_jitted(case, seed):
    buffer, shape, layout, piece, dtype = case
    x = random_bits(piece, dtype, np.random.default_rng(seed))
    fill = sj.poison_value(dtype)
    assert_round_trips_both_ways(x, layout, _want(x, buffer, shape, layout, fill))


@pytest.mark.parametrize("dtype", sj.SUPPORTED_DTYPES, ids=str)
def test_every_dtype_moves_through_lanes(dtype):
    shape = (3, 5, 256)
    buffer = SpyreTensorLayout(shape, dtype)
    layout = laned(buffer, 1, 2)
    x = random_bits((3, 5, 128), np.dtype(dtype), np.random.default_rng(4))
    fill = sj.poison_value(dtype)
    assert_round_trips_both_ways(x, layout, _want(x, buffer, shape, layout, fill))
    # a window: lanes 3 to 3 + 13 of a 20-element row (one stick in every dtype)
    shape = (3, 5, 20)
    buffer = SpyreTensorLayout(shape, dtype)
    layout = lane_window(buffer, shape, 3, 16)
    x = random_bits((3, 5, 13), np.dtype(dtype), np.random.default_rng(5))
    assert_round_trips_both_ways(x, layout, _want(x, buffer, shape, layout, fill))


def test_the_device_memory_picture_shows_the_lanes():
    layout = laned(SpyreTensorLayout((2, 128), F16), 1, 2)
    picture = viz.device_memory((2, 64), layout)
    assert "lanes 1::2" in picture.title
    assert list(picture.text[0][:4]) == ["", "0", "", "1"]  # the odd lanes hold the piece


@pytest.mark.parametrize(("offset", "step"), [(0, 2), (1, 2), (3, 4)])
def test_a_kernels_lane_mask_is_the_layouts(offset, step):
    # Kernels build masks on JAX coordinates (``primitives._masks``): their arithmetic
    # and ordering are lax ops, their ``==`` Python's (a coordinate is an object), so
    # the lanes are picked by ordered comparisons; the mask is the NumPy one.
    import jax.numpy as jnp

    from spyrejax.primitives._array import SpyreType
    from spyrejax.primitives._masks import _Coord, data_mask

    buffer = SpyreTensorLayout((3, 80), F32)  # 80 = 2.5 sticks: a partial last stick
    layout = laned(buffer, offset, step)
    t = SpyreType.contiguous((3, 80 // step), F32, layout)
    want = layout.for_host(t.shape).data_mask()
    assert want.sum() == 3 * 80 // step
    np.testing.assert_array_equal(np.asarray(data_mask(t)), want)
    c = _Coord(jnp.arange(4))
    assert c == c and c != _Coord(c.x) and c != 0 and len({c, c}) == 1


def test_rotate_halfs_halves_at_float16_head_dim_64_are_lane_windows():
    # x [T, H, 64] in float16: one 64-lane stick a row. Its halves x[..., :32] and
    # x[..., 32:] are lanes 0:32 and 32:64 of those sticks (not whole sticks: no
    # SliceView), printed, compared and refused like strided lanes.
    x = SpyreTensorLayout((4, 2, 64), F16)
    lo, hi = lane_window(x, (4, 2, 64), 0, 32), lane_window(x, (4, 2, 64), 32, 64)
    assert hi.device_size == x.device_size and hi.valid_size == (2, 1, 4, 32)
    assert repr(hi).endswith("lanes=32:64)") and repr(lo).endswith("lanes=0:32)")
    assert lo != hi and hash(hi) == hash(lane_window(x, (4, 2, 64), 32, 64))
    assert pickle.loads(pickle.dumps(hi)) == hi and hi != laned(x, 0, 2)
    mapping = hi.for_host((4, 2, 32))
    assert mapping.device_coord((3, 1, 5)) == x.for_host((4, 2, 64)).device_coord((3, 1, 37))
    assert mapping.host_index((1, 0, 3, 37)) == (3, 1, 5)
    assert mapping.host_index((1, 0, 3, 31)) is None  # the other half's lane
    assert parent_layout(hi) == x
    with pytest.raises(sj.LayoutError, match="as many"):
        hi.for_host((4, 2, 16))
    for start, stop, why in [
        (0, 64, "whole stick"),
        (3, 4, "one lane"),
        (0, 70, "no window"),
    ]:
        assert why in window_refusal(x, (4, 2, 64), start, stop)
    # A slice straddling two sticks of a longer last dim is none (rotate-half's halves at
    # float16 head dim 80: lanes 40-63 of one stick and 0-15 of the next).
    assert "no window" in window_refusal(SpyreTensorLayout((4, 80), F16), (4, 80), 40, 80)
    assert "window, arranged" in window_refusal(x.with_gap(0, front=1), (4, 2, 64), 0, 32)
    with pytest.raises(sj.LayoutError, match="window of 64"):
        LanedLayout.make(x.device_size, x.stride_map, F16, 8, 1, 64)


def test_a_kernels_lane_window_mask_is_the_layouts():
    from spyrejax.primitives._array import SpyreType
    from spyrejax.primitives._masks import data_mask

    buffer = SpyreTensorLayout((3, 24), F32)  # 24 of a 32-lane stick: lanes 24-31 padding
    layout = lane_window(buffer, (3, 24), 4, 20)
    t = SpyreType.contiguous((3, 16), F32, layout)
    want = layout.for_host(t.shape).data_mask()
    assert want.sum() == 3 * 16 and not want[..., :4].any() and not want[..., 20:].any()
    np.testing.assert_array_equal(np.asarray(data_mask(t)), want)


def test_rotate_halfs_quarters_at_float16_head_dim_80_are_tile_windows():
    # x [4, 2, 80] in float16: a row is a stick and 16 lanes of the next (device dim 1
    # holds the stick tiles). The half x[..., 40:80] straddles them (no window); cut at
    # the stick boundary, x[..., 40:64] is lanes 40-63 of tile 0 and x[..., 64:80]
    # lanes 0-15 of tile 1: tile windows, printed by their positions in the row.
    x = SpyreTensorLayout((4, 2, 80), F16)  # device [2, 2, 4, 64]
    rows = x.for_host((4, 2, 80))
    hi, tail = lane_window(x, (4, 2, 80), 40, 64), lane_window(x, (4, 2, 80), 64, 80)
    assert repr(hi).endswith("lanes=40:64)") and repr(tail).endswith("lanes=64:80)")
    assert (hi.tile, tail.tile) == ((1, 0), (1, 1)) and hi.lanes == (40, 1)
    assert x.tile is None  # a field of every layout: None but for tile windows
    assert tail.lanes == (0, 1) and hi != lane_window(x, (4, 2, 80), 0, 24)
    assert pickle.loads(pickle.dumps(tail)) == tail and hash(tail) != hash(hi)
    assert parent_layout(tail) == SpyreTensorLayout((4, 2, 128), F16)  # every tile's stick
    mapping = tail.for_host((4, 2, 16))
    assert mapping.device_coord((3, 1, 5)) == rows.device_coord((3, 1, 69)) == (1, 1, 3, 5)
    assert mapping.host_index((1, 1, 3, 5)) == (3, 1, 5)
    assert mapping.host_index((1, 0, 3, 5)) is None  # tile 0's lane 5: x[..., 5]
    assert mapping.data_mask().sum() == 4 * 2 * 16
    (d,) = sj.generate_dci((4, 2, 16), tail)
    assert d.offset_dst == 256  # tile 1 (device stride 4 x 64), lane 0
    assert "no window" in window_refusal(x, (4, 2, 80), 40, 80)
    assert in_one_stick(40, 64, 64) and in_one_stick(64, 80, 64)  # the one predicate
    assert not in_one_stick(40, 80, 64) and not in_one_stick(63, 65, 64)
    with pytest.raises(sj.LayoutError, match="no device dim"):  # tiles walked, not synthetic
        LanedLayout.make(x.device_size, (16, 64, 32, 1), F16, 0, 1, 16, (1, 1))
    fill = sj.poison_value(F16)
    v = random_bits((4, 2, 16), np.dtype(F16), np.random.default_rng(6))
    whole = np.full((4, 2, 80), fill, F16)
    whole[..., 64:] = v
    assert_round_trips_both_ways(v, tail, image_by_rule(whole, x, fill))
