import ast
import pathlib
import pickle

import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS
from hypothesis import given
from hypothesis import strategies as st
from oracles import coords_by_rule, data_mask_by_rule, dot_stride_map, host_offsets
from strategies import dim_orders, dtypes, shapes, tiled_layouts

import spyrejax as sj
from spyrejax import DataFormats, SpyreTensorLayout

F16 = np.float16


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS)
def test_spec_default_layouts(size, order, dsize, smap):
    layout = SpyreTensorLayout(size, F16, order)
    assert list(layout.device_size) == dsize
    assert list(layout.stride_map) == smap
    assert layout.device_dtype is DataFormats.SEN169_FP16


def test_repr_is_torch_spyres():
    layout = SpyreTensorLayout([5, 100, 150], F16)
    expected = (
        "SpyreTensorLayout(device_size=[100, 3, 5, 64], stride_map =[150, 64, 15000, 1], "
        "device_dtype=DataFormats.SEN169_FP16)"
    )
    assert repr(layout) == expected
    assert str(layout) == expected
    other = SpyreTensorLayout.from_stride_map([4, 512, 64], [64, 256, 1], DataFormats.SEN169_FP16)
    assert repr(other) == (
        "SpyreTensorLayout(device_size=[4, 512, 64], stride_map =[64, 256, 1], "
        "device_dtype=DataFormats.SEN169_FP16)"
    )


def test_value_semantics():
    a = SpyreTensorLayout([5, 100, 150], F16)
    b = SpyreTensorLayout.from_stride_map((100, 3, 5, 64), (150, 64, 15000, 1), "float16")
    c = SpyreTensorLayout([5, 100, 150], F16, [1, 0, 2])
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2
    assert a != "not a layout"
    assert pickle.loads(pickle.dumps(a)) == a
    assert isinstance(a.device_size, tuple) and isinstance(a.stride_map, tuple)


def test_layout_is_frozen():
    layout = SpyreTensorLayout([8], F16)
    with pytest.raises(AttributeError, match="immutable"):
        layout.device_size = (1, 64)
    with pytest.raises(AttributeError, match="immutable"):
        del layout.stride_map


def test_dtype_changes_eps():
    assert SpyreTensorLayout([100], np.float32).device_size == (4, 32)
    assert SpyreTensorLayout([100], np.int8).device_size == (1, 128)
    assert SpyreTensorLayout([100], np.int8).device_dtype is DataFormats.SENINT8


def test_size_one_dims_never_change_device_memory():
    a = SpyreTensorLayout([512, 1, 256], F16)
    assert a.device_size == (1, 4, 512, 64)
    assert a.stride_map == (-1, 64, 256, 1)
    # A size-1 stick dim gives the sparse layout's shape.
    assert SpyreTensorLayout([256, 1], F16).device_size == (1, 256, 64)
    assert SpyreTensorLayout([256, 1], F16).stride_map == (-1, 1, -1)


def test_host_strides_build_the_stride_map():
    # A transposed host view (column-major [512, 256]) stuck on dim 1.
    layout = SpyreTensorLayout([512, 256], F16, host_strides=[1, 512])
    assert layout.device_size == (4, 512, 64)
    assert layout.stride_map == (32768, 1, 512)


def test_derived_quantities():
    layout = SpyreTensorLayout([5, 100, 150], F16)
    assert layout.device_strides == (960, 320, 64, 1)
    assert layout.device_rank == 4
    assert layout.elems_per_stick == 64
    assert layout.num_sticks == 1500
    assert layout.nbytes == 128 * 1500
    assert not layout.is_sparse
    assert SpyreTensorLayout([512, 256], F16, [0, 1, -1]).is_sparse
    assert layout.stick_dim([5, 100, 150]) == 2
    assert SpyreTensorLayout([5, 100, 150], F16, [2, 0, 1]).stick_dim([5, 100, 150]) == 1
    assert SpyreTensorLayout([512, 256], F16, [0, 1, -1]).stick_dim([512, 256]) is None


# -- the index map ------------------------------------------------------------------


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS)
def test_spec_layouts_coords_follow_the_rule(size, order, dsize, smap):
    layout = SpyreTensorLayout(size, F16, order)
    coords = layout.device_coords(size).reshape(-1, layout.device_rank)
    _assert_equal(coords, coords_by_rule(tuple(size), layout))
    _assert_equal(dot_stride_map(coords, layout), host_offsets(tuple(size)))


def _assert_equal(got, want):
    """``np.testing.assert_array_equal``, run for its report only where the arrays differ.

    Its checks take seconds on the 16M-element vector's coordinates; ``np.array_equal``
    (same shape, same values) decides in a fraction of that.
    """
    if not np.array_equal(got, want):
        np.testing.assert_array_equal(got, want)


def test_aliasing_padding_is_detected():
    # Spec section 4: the padded coordinate (0, 7, 0, 63) has dot(c, stride_map) = 511,
    # the offset of the real element (0, 1, 11).
    layout = SpyreTensorLayout.from_stride_map(
        [256, 8, 128, 64], [500, 64, 100000, 1], DataFormats.SEN169_FP16
    )
    shape = [100, 200, 500]
    assert np.dot((0, 7, 0, 63), layout.stride_map) == 511
    assert layout.host_index((0, 7, 0, 63), shape) is None
    assert layout.padding_mask(shape)[0, 7, 0, 63]
    assert layout.device_coord((0, 1, 11), shape) == (1, 0, 0, 11)
    assert layout.host_index((1, 0, 0, 11), shape) == (0, 1, 11)
    assert layout.data_mask(shape).sum() == 100 * 200 * 500


def test_host_index_and_device_coord_invert_each_other():
    layout = SpyreTensorLayout([5, 100, 150], F16)
    shape = (5, 100, 150)
    for index in [(0, 0, 0), (4, 99, 149), (2, 50, 64), (3, 7, 127), (1, 1, 128)]:
        coord = layout.device_coord(index, shape)
        assert layout.host_index(coord, shape) == index
        assert np.dot(coord, layout.stride_map) == np.dot(index, (15000, 150, 1))
    assert layout.host_index((0, 2, 0, 22), shape) is None  # lane 150 of a row: padding
    with pytest.raises(sj.LayoutError, match="outside shape"):
        layout.device_coord((5, 0, 0), shape)
    with pytest.raises(sj.LayoutError, match="device coordinate"):
        layout.host_index((0, 3, 0, 0), shape)


def test_padding_mask_of_a_partial_stick():
    layout = SpyreTensorLayout([3, 150], F16)
    mask = layout.padding_mask([3, 150])
    assert mask.shape == (3, 3, 64)
    assert not mask[:2].any()
    assert not mask[2, :, :22].any()
    assert mask[2, :, 22:].all()


def test_sparse_layout_keeps_lane_zero_only():
    layout = SpyreTensorLayout([512, 256], F16, [0, 1, -1])
    mask = layout.data_mask([512, 256])
    assert mask[:, 0, :, 0].all()
    assert mask.sum() == 512 * 256


@pytest.mark.parametrize(("size", "dsize", "smap"), SPEC_EXPLICIT + MORE_EXPLICIT)
def test_explicit_layouts_identity(size, dsize, smap):
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
    coords = layout.device_coords(size).reshape(-1, layout.device_rank)
    assert (coords < np.array(dsize)).all()
    np.testing.assert_array_equal(dot_stride_map(coords, layout), host_offsets(tuple(size)))
    # Every host element lands on its own data position...
    flat = np.ravel_multi_index(tuple(coords.T), dsize)
    assert len(np.unique(flat)) == len(flat)
    data = layout.data_mask(size)
    assert data.reshape(-1)[flat].all()
    # ...and every data position is one of them, broadcast copies included.
    copies = np.prod([n for n, s in zip(dsize, smap, strict=True) if s == 0], dtype=np.int64)
    assert data.sum() == len(flat) * copies


def test_folded_layout_maps_through_the_flat_offset():
    layout = SpyreTensorLayout.from_stride_map([38, 64], [64, 1], F16)
    assert layout.device_coord((1, 10), [40, 60]) == (1, 6)  # offset 70 = 1 * 64 + 6
    assert layout.padding_mask([40, 60]).sum() == 38 * 64 - 2400


# -- legacy dim_map -----------------------------------------------------------------


def test_dim_map_of_the_seed_example():
    layout = SpyreTensorLayout([128, 256, 512], F16)
    assert layout.dim_map([128, 256, 512]) == (1, 2, 0, 2)
    rebuilt = SpyreTensorLayout.from_dim_map([128, 256, 512], [1, 2, 0, 2], [256, 8, 128, 64], F16)
    assert rebuilt == layout
    # The same dim_map with padding: the spec's aliasing layout.
    padded = SpyreTensorLayout.from_dim_map([100, 200, 500], [1, 2, 0, 2], [256, 8, 128, 64], F16)
    assert padded.stride_map == (500, 64, 100000, 1)


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS)
def test_dim_map_round_trips(size, order, dsize, smap):
    layout = SpyreTensorLayout(size, F16, order)
    dim_map = layout.dim_map(size)
    assert SpyreTensorLayout.from_dim_map(size, dim_map, dsize, F16) == layout


def test_sparse_dim_map_marks_synthetic_dims():
    layout = SpyreTensorLayout([512, 256], F16, [0, 1, -1])
    assert layout.dim_map([512, 256]) == (1, -1, 0, -1)


def test_dim_map_errors():
    with pytest.raises(sj.LayoutError, match="same length"):
        SpyreTensorLayout.from_dim_map([4, 64], [1, 0], [1, 4, 64], F16)
    with pytest.raises(sj.LayoutError, match="outside range"):
        SpyreTensorLayout.from_dim_map([4, 64], [1, 2, 1], [1, 4, 64], F16)
    with pytest.raises(sj.LayoutError, match=r"unmapped"):
        SpyreTensorLayout.from_dim_map([4, 64], [1, 1, 1], [1, 1, 64], F16)


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "order", "match"),
    [
        ([4, 8], [0], r"dim_order \[0\]"),
        ([4, 8], [0, 0], r"dim_order \[0, 0\]"),
        ([4, 8], [0, 1, 2], r"dim_order \[0, 1, 2\]"),
        ([4, 8], [0, 1, -1, -1], "permutation"),
        ([4, 8], [-1, 0, 1], "permutation"),
        ([4, 8], "ab", "dim_order"),
    ],
)
def test_bad_dim_order(size, order, match):
    with pytest.raises(sj.LayoutError, match=match):
        SpyreTensorLayout(size, F16, order)


@pytest.mark.parametrize(
    ("size", "match"),
    [
        ([4, -1], r"sizes must be >= 0, got size \[4, -1\]"),
        ([-3], r"\[-3\]"),
        ([2.5], "ints"),
        ([1] * 9, "at most 8"),
        (3, "ints"),
    ],
)
def test_bad_size(size, match):
    with pytest.raises(sj.LayoutError, match=match):
        SpyreTensorLayout(size, F16)


def test_bad_dtype():
    with pytest.raises(sj.LayoutError, match="float64"):
        SpyreTensorLayout([4], np.float64)


def test_bad_host_strides():
    with pytest.raises(sj.LayoutError, match="one entry per dim"):
        SpyreTensorLayout([4, 8], F16, host_strides=[1])
    with pytest.raises(sj.LayoutError, match="positive"):
        SpyreTensorLayout([4, 8], F16, host_strides=[8, 0])


@pytest.mark.parametrize(
    ("dsize", "smap", "match"),
    [
        ([4, 32], [64, 1], "stick size 64"),
        ([4, 64], [64], "same length"),
        ([-1, 64], [64, 1], r"must be >= 0, got device_size \[-1, 64\]"),
        ([4, 64], [-2, 1], "must be >= -1"),
        ([], [], "at least one"),
    ],
)
def test_bad_explicit_layout(dsize, smap, match):
    with pytest.raises(sj.LayoutError, match=match):
        SpyreTensorLayout.from_stride_map(dsize, smap, F16)


@pytest.mark.parametrize(
    ("size", "dsize", "smap", "match"),
    [
        ([20, 64], [1, 10, 64], [64, 64, 1], "too small"),
        ([200], [3, 64], [64, 1], "too small"),
        ([10, 64], [10, 1, 64], [64, -1, 2], "does not reach every element of host dim"),
        ([8, 64], [8, 64], [64, -1], r"does not reach every element of host dim\(s\) \(1,\)"),
        ([128], [2, 3, 64], [64, 16, 1], "the 64 elements of a step of device dim 0"),
        # Rows of 100 split at 70: the stick must hold 70 elements.
        ([200], [2, 2, 64], [100, 70, 1], r"need 70 along device dim 2 \(step 1\), which has 64"),
        ([60], [0, 64], [64, 1], "size-0 device dim"),
    ],
)
def test_layout_that_cannot_hold_the_host_shape(size, dsize, smap, match):
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
    with pytest.raises(sj.LayoutError, match=match):
        layout.for_host(size)


def test_fold_across_non_contiguous_host_dims_is_an_error():
    layout = SpyreTensorLayout.from_stride_map([38, 64], [64, 1], F16)
    with pytest.raises(sj.LayoutError, match="not contiguous"):
        layout.for_host([40, 60], host_strides=[61, 1])


def test_layout_error_is_a_value_error():
    assert issubclass(sj.LayoutError, ValueError)
    assert issubclass(sj.SpyreUnsupportedError, NotImplementedError)


# -- properties -----------------------------------------------------------------------


@given(shape=shapes(max_elements=5000), data=st.data(), dtype=dtypes)
def test_default_layouts_follow_the_rule(shape, data, dtype):
    order = data.draw(dim_orders(len(shape)))
    layout = SpyreTensorLayout(shape, dtype, order)
    eps = layout.device_size[-1]
    assert eps == sj.format_for_dtype(dtype).elems_per_stick()
    coords = layout.device_coords(shape).reshape(-1, layout.device_rank)
    np.testing.assert_array_equal(coords, coords_by_rule(shape, layout))
    np.testing.assert_array_equal(dot_stride_map(coords, layout), host_offsets(shape))
    flat = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    assert len(np.unique(flat)) == len(flat)
    data_mask = layout.data_mask(shape).reshape(-1)
    assert data_mask[flat].all() and data_mask.sum() == len(flat)
    # Only the tile-count dim is padded; every other dim keeps its host size.
    full_order = list(range(len(shape))) if order is None else list(order)
    stick = full_order[-1] if full_order else -1
    tiles = 1 if stick == -1 or shape[stick] == 1 else -(-shape[stick] // eps)
    expected = [n for d, n in enumerate(shape) if n > 1 and d != stick] + [tiles]
    assert sorted(n for n in layout.device_size[:-1] if n > 1) == sorted(
        n for n in expected if n > 1
    )
    assert np.prod(layout.device_size[:-1]) * eps >= np.prod(shape)


# -- import direction -----------------------------------------------------------------

CORE = [
    "_errors.py",
    "layout/_dtypes.py",
    "layout/_segments.py",
    "layout/_layout.py",
    "layout/_devdims.py",
    "dma/_dci.py",
    "dma/_host_dma.py",
]


@pytest.mark.parametrize("name", CORE)
def test_layout_core_does_not_import_jax(name):
    source = (pathlib.Path(sj.__file__).parent / name).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module)
    assert not {m for m in imported if m == "jax" or m.startswith("jax.")}


# -- padding slabs ----------------------------------------------------------------------


def _slab_mask(layout, shape):
    mask = np.zeros(layout.device_size, bool)
    for dim, start, stop in layout.for_host(shape).padding_slabs():
        index = [slice(None)] * layout.device_rank
        index[dim] = slice(start, stop)
        mask[tuple(index)] = True
    return mask


@pytest.mark.parametrize(("size", "dsize", "smap"), SPEC_EXPLICIT + MORE_EXPLICIT)
def test_padding_slabs_cover_the_padding_of_explicit_layouts(size, dsize, smap):
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, np.float16)
    pad = layout.padding_mask(size)
    assert not (pad & ~_slab_mask(layout, size)).any()


@given(shape=shapes(max_elements=5000), data=st.data())
def test_property_padding_slabs_cover_the_padding(shape, data):
    layout = SpyreTensorLayout(shape, np.float16, data.draw(dim_orders(len(shape))))
    pad, slabs = layout.padding_mask(shape), _slab_mask(layout, shape)
    assert not (pad & ~slabs).any()
    if not pad.any():
        assert not slabs.any()


def test_padding_slab_of_a_partial_stick_is_the_last_tile():
    layout = SpyreTensorLayout((3, 150), np.float16)  # device [3, 3, 64]: 150 = 2*64 + 22
    mask = _slab_mask(layout, (3, 150))
    assert mask[2].all() and not mask[:2].any()


# -- the row-major layout -------------------------------------------------------------


def test_row_major_layout_keeps_host_order():
    layout = SpyreTensorLayout.row_major((5, 100, 150), F16)
    assert layout.device_size == (5, 100, 3, 64)
    assert layout.stride_map == (15000, 150, 64, 1)
    assert layout.stick_dim((5, 100, 150)) == 2
    # Same size and stick as the default layout; only the device dims' order differs.
    default = SpyreTensorLayout((5, 100, 150), F16)
    assert sorted(layout.device_size) == sorted(default.device_size)
    assert SpyreTensorLayout.row_major((150,), F16) == SpyreTensorLayout((150,), F16)
    assert SpyreTensorLayout.row_major((), F16) == SpyreTensorLayout((), F16)
    with pytest.raises(sj.LayoutError, match="size"):
        SpyreTensorLayout.row_major((-1, 4), F16)


def test_row_major_in_a_dim_order_is_the_transposed_view_of_a_row_major_value():
    """``order``: ``x.transpose(order)`` row-major over ``x``'s elements (``w.T`` of ``w``)."""
    got = SpyreTensorLayout.row_major((2, 72, 100), F16, order=(0, 2, 1))
    want = SpyreTensorLayout.row_major((2, 100, 72), F16, host_strides=(7200, 1, 100))
    assert got == want
    assert want.stride_map == (7200, 1, 100 * 64, 100)  # rows of w.T: w's columns
    for bad in ((0, 1), (0, 2, 1, -1)):
        with pytest.raises(sj.LayoutError, match="order"):
            SpyreTensorLayout.row_major((2, 72, 100), F16, order=bad)
    with pytest.raises(sj.LayoutError, match="order"):
        SpyreTensorLayout.row_major((72, 100), F16, order=(1, 0), host_strides=(100, 1))


@given(shape=shapes(max_elements=5000), dtype=dtypes)
def test_row_major_layouts_follow_the_rule(shape, dtype):
    layout = SpyreTensorLayout.row_major(shape, dtype)
    coords = layout.device_coords(shape).reshape(-1, layout.device_rank)
    np.testing.assert_array_equal(dot_stride_map(coords, layout), host_offsets(shape))
    flat = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    if len(shape) >= 1 and shape[-1] > 1:  # stuck on the last dim: host order is device order
        assert (np.diff(flat) > 0).all()
    data_mask = layout.data_mask(shape).reshape(-1)
    assert data_mask[flat].all() and data_mask.sum() == len(flat) == len(np.unique(flat))


# -- padded tiles inside larger tiles, equal strides, empty tensors -------------------

# The example: host [4800] (40 rows of 120) as 14 tiles of 3 rows, each row two
# sticks, the second holding 56 values and 8 padding lanes.
PADDED_TILES = ((4800,), [3, 2, 14, 64], [120, 64, 360, 1])


def test_padded_tiles_inside_larger_tiles():
    shape, dsize, smap = PADDED_TILES
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
    # Spec section 4: x = 360 * tile + 120 * row + 64 * stick + lane.
    assert layout.device_coord((121,), shape) == (1, 0, 0, 1)
    assert layout.device_coord((239,), shape) == (1, 1, 0, 55)  # row 1, column 119
    assert layout.device_coord((4799,), shape) == (0, 1, 13, 55)  # row 39 = 13 * 3 + 0
    assert layout.host_index((1, 1, 0, 55), shape) == (239,)
    pad = layout.padding_mask(shape)
    assert pad[:, 1, :, 56:].all() and not pad[:, 1, :13, :56].any() and not pad[:, 0, :13].any()
    assert pad[1:, :, 13].all()  # tile 13 holds row 39 only
    assert pad.sum() == 40 * 8 + 2 * 128  # 8 lanes per row, and the 2 rows past row 39
    # Padding needs a test at each level: lane 56 of a row's second stick has
    # dot(c, stride_map) = 120, the offset of the real element 120 (row 1, lane 0).
    assert np.dot((0, 1, 0, 56), smap) == 120
    assert layout.host_index((0, 1, 0, 56), shape) is None
    assert layout.device_coord((120,), shape) == (1, 0, 0, 0)
    # The same memory as host [40, 120], where each host dim tiles evenly.
    np.testing.assert_array_equal(pad, layout.padding_mask((40, 120)))
    np.testing.assert_array_equal(
        layout.device_coords(shape).reshape(40, 120, 4), layout.device_coords((40, 120))
    )


def test_equal_strides_put_one_element_per_stick():
    # torch-spyre's tie: the non-stick dim iterates, the stick gets one element.
    for dsize, smap in [([1, 60, 64], [64, 1, 1]), ([1, 1, 60, 64], [-1, 3840, 1, 1])]:
        layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
        assert layout.is_sparse
        lead = (0,) * (len(dsize) - 2)
        for i in (0, 1, 59):
            assert layout.device_coord((i,), [60]) == (*lead, i, 0)
            assert layout.host_index((*lead, i, 0), [60]) == (i,)
            assert layout.host_index((*lead, i, 1), [60]) is None
        mask = layout.data_mask([60])
        assert mask[..., 0].all() and not mask[..., 1:].any()
        assert layout.stick_dim([60]) is None
        assert layout.dim_map([60])[-1] == -1  # the stick only ever holds coordinate 0
        # The data positions of the canonical sparse layout.
        sparse = SpyreTensorLayout([60], F16, [0, -1])
        np.testing.assert_array_equal(mask.reshape(60, 64), sparse.data_mask([60]).reshape(60, 64))
    # Two non-stick dims tied: the outer one takes the whole quotient.
    layout = SpyreTensorLayout.from_stride_map([4, 4, 64], [64, 64, 1], F16)
    assert layout.device_coord((200,), [256]) == (3, 0, 8)
    assert not layout.is_sparse


@pytest.mark.parametrize(
    ("size", "order", "dsize", "smap"),
    [
        # Spec section 2 with a size-0 host dim: it keeps its size (0) and stride.
        ([0], None, [0, 64], [64, 1]),
        ([0, 150], None, [3, 0, 64], [64, 150, 1]),
        ([150, 0], None, [0, 150, 64], [64, 1, 1]),  # strides as PyTorch's: (1, 1)
        ([2, 0, 3], [2, 1, 0], [0, 1, 3, 64], [3, 192, 1, 3]),
    ],
)
def test_empty_tensors_have_layouts_of_zero_bytes(size, order, dsize, smap):
    layout = SpyreTensorLayout(size, F16, order)
    assert (list(layout.device_size), list(layout.stride_map)) == (dsize, smap)
    assert layout.nbytes == 0
    assert layout.device_coords(size).shape == (*size, len(dsize))
    assert layout.padding_mask(size).all()  # no position holds data


def test_empty_tensor_layout_errors():
    with pytest.raises(sj.LayoutError, match=r"sizes must be >= 0, got size \[0, -2\]"):
        SpyreTensorLayout([0, -2], F16)
    # A size-0 device dim holds nothing, so only an empty tensor fits it.
    layout = SpyreTensorLayout.from_stride_map([0, 64], [64, 1], F16)
    assert layout.nbytes == 0 and layout.padding_mask([0]).shape == (0, 64)
    with pytest.raises(sj.LayoutError, match="size-0 device dim"):
        layout.for_host([5])
    with pytest.raises(sj.LayoutError, match="outside shape"):
        SpyreTensorLayout([0, 4], F16).device_coord((0, 0), [0, 4])


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS)
def test_dim_order_reads_the_spec_layouts_back(size, order, dsize, smap):
    layout = SpyreTensorLayout(size, F16, order)
    got = layout.dim_order(size)
    assert SpyreTensorLayout(size, F16, got or None) == layout
    if order is not None:
        assert list(got) == order


def test_dim_order_of_layouts_that_are_not_default():
    assert SpyreTensorLayout.row_major((5, 100, 150), F16).dim_order((5, 100, 150)) is None
    folded = SpyreTensorLayout.from_stride_map([38, 64], [64, 1], F16)
    assert folded.dim_order((40, 60)) is None
    # Size-1 dims take no memory: they fill their places in increasing order.
    assert SpyreTensorLayout((1, 3, 1, 128), F16, [2, 1, 0, 3]).dim_order((1, 3, 1, 128)) == (
        0,
        1,
        2,
        3,
    )


@given(case=tiled_layouts(), data=st.data())
def test_property_tiled_layouts_follow_the_rule(case, data):
    shape, layout = case
    coords = layout.device_coords(shape).reshape(-1, layout.device_rank)
    np.testing.assert_array_equal(coords, coords_by_rule(shape, layout))
    np.testing.assert_array_equal(dot_stride_map(coords, layout), host_offsets(shape))
    # Padding iff the image of no host element (brute force), and the slabs cover it.
    data_mask = data_mask_by_rule(shape, layout)
    np.testing.assert_array_equal(layout.data_mask(shape), data_mask)
    assert not (~data_mask & ~_slab_mask(layout, shape)).any()
    # host_index inverts device_coord on data positions and finds nothing on padding.
    for flat in data.draw(st.lists(st.integers(0, data_mask.size - 1), max_size=10)):
        coord = np.unravel_index(flat, layout.device_size)
        index = layout.host_index(coord, shape)
        assert (index is not None) == data_mask[coord]
        if index is not None:
            broadcast = [m == 0 for m in layout.stride_map]
            want = tuple(0 if b else int(c) for b, c in zip(broadcast, coord, strict=True))
            assert layout.device_coord(index, shape) == want


@pytest.mark.parametrize(
    ("device_size", "stride_map", "shape"),
    [
        ([38, 64], [64, 1], (38, 2, 32)),  # host dims 1 and 2 folded under one stick dim
        ([2, 64], [64, 1], (3, 40)),  # rows of 40 run on in sticks of 64: two dims walk it
    ],
)
def test_fold_index_is_the_host_mappings_index_map(device_size, stride_map, shape):
    from spyrejax.layout._devdims import device_dims, fold_index

    layout = sj.SpyreTensorLayout.from_stride_map(device_size, stride_map, np.float16)
    strides = tuple(int(s) for s in np.cumprod((1, *shape[:0:-1]))[::-1])
    folds = fold_index(layout, shape, shape, strides)
    tags = device_dims(layout, shape, shape, strides)
    assert any(f is not None for f in folds)
    coords = layout.for_host(shape).device_coords()
    index = np.indices(shape)
    for j, (f, d) in enumerate(zip(folds, tags, strict=True)):
        assert (f is not None) == (len(d.dims) > 1)
        if f is not None:
            assert (f.dims, f.ratio) == (d.dims, d.ratio)
            np.testing.assert_array_equal(f.coord([index[k] for k in f.dims]), coords[..., j])
