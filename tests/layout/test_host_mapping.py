"""A layout bound to a host shape once: ``layout.for_host(shape)`` and its HostMapping."""

import dataclasses
import re

import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS
from hypothesis import given
from hypothesis import strategies as st
from oracles import (
    check_descriptors_against_coords,
    coords_by_rule,
    data_mask_by_rule,
    dot_stride_map,
    host_offsets,
    row_major,
)
from strategies import tiled_layouts

import spyrejax as sj
from spyrejax import HostMapping, SpyreTensorLayout
from spyrejax.layout._host_mapping import for_host

F16 = np.float16

# (shape, layout, host strides) over every layout class: default, dim orders, sparse,
# explicit, folded, broadcast, padded tiles, tied strides, empty, non-row-major hosts.
RULE_CASES = [  # layouts without folding: the rule's oracle gives their coordinates
    (tuple(size), SpyreTensorLayout(size, F16, order), None)
    for size, order, dsize, _ in SPEC_VECTORS
    if np.prod(size) <= 2**17 and np.prod(dsize) <= 2**20  # brute force stays fast
] + [
    ((4800,), SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16), None),
    ((60,), SpyreTensorLayout.from_stride_map([1, 60, 64], [64, 1, 1], F16), None),
    ((0, 150), SpyreTensorLayout((0, 150), F16), None),
    ((512, 256), SpyreTensorLayout((512, 256), F16, host_strides=(1, 512)), (1, 512)),
    ((3, 70), SpyreTensorLayout((3, 70), F16, [1, 0], host_strides=(1, 3)), (1, 3)),
]
EXPLICIT_CASES = [  # explicit layouts, some folded: checked by the identity and uniqueness
    (tuple(size), SpyreTensorLayout.from_stride_map(dsize, smap, F16), None)
    for size, dsize, smap in SPEC_EXPLICIT + MORE_EXPLICIT
]
CASES = RULE_CASES + EXPLICIT_CASES
IDS = [f"{list(shape)}-{list(layout.device_size)}" for shape, layout, _ in CASES]


def _all_coords(layout):
    return np.moveaxis(np.indices(layout.device_size), 0, -1)


def _mask_of(coords, layout):
    """True at each coordinate, repeated along broadcast (stride-0) device dims."""
    mask = np.zeros(layout.device_size, bool)
    mask[tuple(coords.T)] = True
    for j, (size, m) in enumerate(zip(layout.device_size, layout.stride_map, strict=True)):
        if m == 0:
            mask = np.repeat(mask.take([0], axis=j), size, axis=j)
    return mask


@pytest.mark.parametrize(("shape", "layout", "strides"), CASES, ids=IDS)
def test_mapping_agrees_with_the_oracles(shape, layout, strides):
    mapping = layout.for_host(shape, strides)
    assert (mapping.layout, mapping.shape) == (layout, shape)
    assert mapping.strides == (strides or row_major(shape))
    coords = mapping.device_coords().reshape(-1, layout.device_rank)
    assert mapping.device_coords().shape == (*shape, layout.device_rank)
    np.testing.assert_array_equal(dot_stride_map(coords, layout), host_offsets(shape, strides))
    flat = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    assert len(np.unique(flat)) == len(flat)  # every element has its own place
    if (shape, layout, strides) in RULE_CASES:
        np.testing.assert_array_equal(coords, coords_by_rule(shape, layout, strides))
        want = data_mask_by_rule(shape, layout, strides)
    else:
        want = _mask_of(coords, layout)
    # Padding iff the image of no host element.
    np.testing.assert_array_equal(mapping.data_mask(), want)
    np.testing.assert_array_equal(mapping.padding_mask(), ~want)
    grids = np.ogrid[tuple(slice(0, k) for k in layout.device_size)]
    np.testing.assert_array_equal(
        np.broadcast_to(mapping.data_positions(grids), layout.device_size), want
    )
    # host_offsets_of: dot(coord, stride_map) on data, -1 on padding.
    every = _all_coords(layout)
    offsets = np.where(want, dot_stride_map(every, layout), -1)
    np.testing.assert_array_equal(mapping.host_offsets_of(every), offsets)
    # The slabs cover all padding.
    slabs = np.zeros(layout.device_size, bool)
    for dim, start, stop in mapping.padding_slabs():
        index = [slice(None)] * layout.device_rank
        index[dim] = slice(start, stop)
        slabs[tuple(index)] = True
    assert not (~want & ~slabs).any()


@pytest.mark.parametrize(("shape", "layout", "strides"), CASES, ids=IDS)
def test_mapping_descriptors_place_every_element_by_its_map(shape, layout, strides):
    mapping = layout.for_host(shape, strides)
    n = int(np.prod(shape))
    offsets = host_offsets(shape, strides)  # host offset of each element, row-major order
    host = np.full(int(offsets.max(initial=-1)) + 1, -1, np.int64)
    host[offsets] = np.arange(n)
    coords = mapping.device_coords().reshape(-1, layout.device_rank)
    writes = check_descriptors_against_coords(
        mapping.dci(), mapping.dci(host_to_device=False), host, coords, layout.device_size
    )
    np.testing.assert_array_equal(writes > 0, mapping.data_mask().reshape(-1))


@pytest.mark.parametrize(("shape", "layout", "strides"), CASES, ids=IDS)
def test_layout_methods_delegate_to_the_mapping(shape, layout, strides):
    mapping = layout.for_host(shape, strides)
    assert layout.stick_dim(shape, strides) == mapping.stick_dim()
    assert layout.dim_map(shape, strides) == mapping.dim_map()
    assert layout.dim_order(shape, strides) == mapping.dim_order()
    coords = layout.device_coords(shape, strides)
    np.testing.assert_array_equal(coords, mapping.device_coords())
    index = np.moveaxis(np.indices(shape), 0, -1)
    np.testing.assert_array_equal(layout.device_coords_of(index, shape, strides), coords)
    np.testing.assert_array_equal(mapping.device_coords_of(index), coords)
    every = _all_coords(layout)
    np.testing.assert_array_equal(
        layout.host_offsets_of(every, shape, strides), mapping.host_offsets_of(every)
    )
    np.testing.assert_array_equal(layout.padding_mask(shape, strides), mapping.padding_mask())
    np.testing.assert_array_equal(layout.data_mask(shape, strides), mapping.data_mask())
    for idx in list(np.ndindex(shape))[:: max(1, int(np.prod(shape)) // 50)]:
        assert layout.device_coord(idx, shape, strides) == mapping.device_coord(idx)
        assert mapping.device_coord(idx) == tuple(coords[idx])
    for c in list(np.ndindex(layout.device_size))[:: max(1, every.size // 1000)]:
        assert layout.host_index(c, shape, strides) == mapping.host_index(c)
    assert sj.generate_dci(shape, layout, host_strides=strides) == mapping.dci()
    assert sj.generate_dci(
        shape, layout, host_strides=strides, host_to_device=False, host_dtype=F16, name="x"
    ) == mapping.dci(host_to_device=False, host_dtype=F16, name="x")


@given(case=tiled_layouts(), data=st.data())
def test_property_mapping_follows_the_rule(case, data):
    shape, layout = case
    mapping = layout.for_host(shape)
    coords = mapping.device_coords().reshape(-1, layout.device_rank)
    np.testing.assert_array_equal(coords, coords_by_rule(shape, layout))
    want = data_mask_by_rule(shape, layout)
    np.testing.assert_array_equal(mapping.data_mask(), want)
    for flat in data.draw(st.lists(st.integers(0, want.size - 1), max_size=10)):
        coord = np.unravel_index(flat, layout.device_size)
        index = mapping.host_index(coord)
        assert (index is not None) == want[coord]
        offset = mapping.host_offsets_of(np.array(coord))
        assert offset == (dot_stride_map(np.array(coord), layout) if want[coord] else -1)
        if index is not None:
            pairs = zip(layout.stride_map, coord, strict=True)
            zeroed = [0 if m == 0 else int(c) for m, c in pairs]
            assert mapping.device_coord(index) == tuple(zeroed)


# -- the mapping object -------------------------------------------------------------


def test_for_host_is_cached_by_value():
    shape = (5, 100, 150)
    layout = SpyreTensorLayout(shape, F16)
    mapping = layout.for_host(shape)
    assert isinstance(mapping, HostMapping)
    assert layout.for_host([5, 100, 150]) is mapping
    assert layout.for_host(np.array(shape)) is mapping  # NumPy ints are canonicalised
    assert layout.for_host(shape, (15000, 150, 1)) is mapping  # the row-major strides
    # An equal layout built another way binds to the same object.
    twin = SpyreTensorLayout.from_stride_map([100, 3, 5, 64], [150, 64, 15000, 1], F16)
    assert twin.for_host(shape) is mapping


def test_mapping_is_a_frozen_hashable_value():
    layout = SpyreTensorLayout((40, 60), F16)
    a, b = layout.for_host((40, 60)), layout.for_host((40, 60), (1, 40))
    c = SpyreTensorLayout((40, 60), F16, [1, 0]).for_host((40, 60))
    assert a == layout.for_host((40, 60)) and hash(a) == hash(layout.for_host([40, 60]))
    assert a != b and a != c and a != layout
    assert len({a, b, c, layout.for_host((40, 60))}) == 3
    assert {a: 1}[layout.for_host((40, 60))] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.shape = (60, 40)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.layout
    assert "shape=(40, 60)" in repr(a) and "strides=(60, 1)" in repr(a)


def test_for_host_validates_once():
    # Count the mappings the layout core builds and validates (its one cache's misses);
    # an odd layout nothing else uses.
    built = for_host.cache_info().misses
    shape = (7, 130)
    layout = SpyreTensorLayout.from_stride_map([7, 3, 64], [130, 64, 1], F16)
    mapping = layout.for_host(shape)
    for _ in range(3):
        assert layout.for_host(list(shape)) is mapping
        layout.device_coord((6, 129), shape)
        layout.host_index((6, 2, 1), shape)
        layout.padding_mask(shape)
        layout.dim_map(shape)
        sj.generate_dci(shape, layout)
        mapping.device_coords()
        mapping.padding_slabs()
        mapping.dci(host_to_device=False)
    assert for_host.cache_info().misses == built + 1


BAD = [
    ((60,), SpyreTensorLayout.from_stride_map([0, 64], [64, 1], F16), None, "size-0 device dim"),
    ((200,), SpyreTensorLayout.from_stride_map([2, 64], [64, 1], F16), None, "too small"),
    ((40, 60), SpyreTensorLayout.from_stride_map([38, 64], [64, 1], F16), (61, 1), "contiguous"),
    ((5, -1), SpyreTensorLayout((5,), F16), None, "sizes must be >= 0"),
    ((5, 3), SpyreTensorLayout((5, 3), F16), (3,), "one entry per dim"),
    ("ab", SpyreTensorLayout((5,), F16), None, "sequence of ints"),
]


@pytest.mark.parametrize(("shape", "layout", "strides", "match"), BAD)
def test_for_host_and_every_delegate_raise_the_same_layout_error(shape, layout, strides, match):
    with pytest.raises(sj.LayoutError, match=match) as first:
        layout.for_host(shape, strides)
    message = re.escape(str(first.value))
    with pytest.raises(sj.LayoutError, match=message):
        layout.for_host(shape, strides)  # failures are not cached: it raises every time
    coord = (0,) * layout.device_rank
    calls = [
        lambda: layout.stick_dim(shape, strides),
        lambda: layout.dim_map(shape, strides),
        lambda: layout.dim_order(shape, strides),
        lambda: layout.device_coords(shape, strides),
        lambda: layout.device_coords_of(np.zeros((1, 2), int), shape, strides),
        lambda: layout.host_offsets_of(np.zeros((1, layout.device_rank), int), shape, strides),
        lambda: layout.device_coord((0, 0), shape, strides),
        lambda: layout.host_index(coord, shape, strides),
        lambda: layout.padding_mask(shape, strides),
        lambda: layout.data_mask(shape, strides),
        lambda: sj.generate_dci(shape, layout, host_strides=strides),
    ]
    for call in calls:
        with pytest.raises(sj.LayoutError, match=message):
            call()


def test_mapping_methods_check_their_arguments():
    mapping = SpyreTensorLayout((3, 150), F16).for_host((3, 150))
    with pytest.raises(sj.LayoutError, match=r"host index \[3, 0\] is outside shape \[3, 150\]"):
        mapping.device_coord((3, 0))
    with pytest.raises(sj.LayoutError, match=r"device coordinate \[0, 3, 0\] is outside shape"):
        mapping.host_index((0, 3, 0))
    with pytest.raises(sj.LayoutError, match="does not fit the layout's device format"):
        mapping.dci(host_dtype=np.float32)


def test_mapping_answers_the_seed_example():
    # Spec sections 4 and 6: the (5, 100, 150) default layout.
    mapping = SpyreTensorLayout((5, 100, 150), F16).for_host((5, 100, 150))
    assert mapping.device_coord((4, 7, 69)) == (7, 1, 4, 5)  # 69 = 64 + 5
    assert mapping.host_index((7, 1, 4, 5)) == (4, 7, 69)
    assert mapping.host_index((0, 2, 0, 30)) is None  # lane 158 of a 150-wide row
    assert mapping.padding_mask().sum() == 100 * 5 * (192 - 150)
    assert mapping.stick_dim() == 2 and mapping.dim_map() == (1, 2, 0, 2)
    assert mapping.dim_order() == (0, 1, 2)
    assert mapping.padding_slabs() == ((1, 2, 3),)  # the last tile holds the padding
    main, rest = mapping.dci()
    assert (main.size, main.stride_src, main.stride_dst) == (
        (64, 5, 2, 100),
        (1, 15000, 64, 150),
        (1, 64, 320, 960),
    )
    assert (rest.size, rest.offset_src, rest.offset_dst) == ((22, 5, 1, 100), 128, 640)


def _check_data_box(mapping, runs, box):
    """The box at the origin holds data only; past an exact bound lies padding only."""
    size = mapping.layout.device_size
    want = mapping.data_mask().reshape([int(np.prod([size[j] for j in r])) for r in runs])
    inside = tuple(slice(0, b) for b, _ in box)
    assert want[inside].all()
    for axis, (bound, exact) in enumerate(box):
        past = [slice(None)] * len(runs)
        past[axis] = slice(bound, None)
        assert not exact or not want[tuple(past)].any()


@pytest.mark.parametrize(("shape", "layout", "strides"), CASES, ids=IDS)
def test_data_box_holds_data_only(shape, layout, strides):
    mapping = layout.for_host(shape, strides)
    runs = [(j,) for j in range(layout.device_rank)]
    box = mapping.data_box(runs)
    if box is not None and mapping.size:
        _check_data_box(mapping, runs, box)


def test_data_box_of_a_partial_last_stick():
    # Default layout [T, rows, S]: the last tile holds data past the bound (not exact).
    mapping = SpyreTensorLayout((7, 2000), np.float32).for_host((7, 2000))
    assert mapping.layout.device_size == (63, 7, 32)
    runs = [(0,), (1,), (2,)]
    assert mapping.data_box(runs) == ((62, False), (7, True), (32, True))
    _check_data_box(mapping, runs, mapping.data_box(runs))
    # Row-major [rows, T, S] with tiles and lanes merged: the data end at 2000, exactly.
    row_major = SpyreTensorLayout.row_major((7, 2000), np.float32).for_host((7, 2000))
    assert row_major.data_box([(0,), (1, 2)]) == ((7, True), (2000, True))
    _check_data_box(row_major, [(0,), (1, 2)], ((7, True), (2000, True)))
    assert row_major.data_box([(0, 1), (2,)]) is None  # a run that starts off its check
