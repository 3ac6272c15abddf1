import json

import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS
from hypothesis import given
from hypothesis import strategies as st
from oracles import coords_by_rule, run_descriptors
from strategies import dim_orders, dtypes, shapes

import spyrejax as sj
from spyrejax import DCI, SpyreTensorLayout

F16 = np.float16


def test_spec_example_1024_by_256():
    dci = sj.generate_dci([1024, 256], SpyreTensorLayout([1024, 256], F16))
    assert len(dci) == 1
    d = dci[0]
    assert d.size == (64, 1024, 4)
    assert d.stride_src == (1, 256, 64)
    assert d.stride_dst == (1, 64, 65536)
    assert (d.offset_src, d.offset_dst) == (0, 0)


def test_spec_example_5_100_150_with_remainder():
    dci = sj.generate_dci([5, 100, 150], SpyreTensorLayout([5, 100, 150], F16))
    assert len(dci) == 2
    main, rem = dci
    assert main.size == (64, 5, 2, 100)
    assert main.stride_src == (1, 15000, 64, 150)
    assert main.stride_dst == (1, 64, 320, 960)
    assert (main.offset_src, main.offset_dst) == (0, 0)
    assert rem.size == (22, 5, 1, 100)
    assert rem.stride_src == main.stride_src and rem.stride_dst == main.stride_dst
    assert (rem.offset_src, rem.offset_dst) == (128, 640)


def test_seed_style_loop_nest():
    # Spec section 10.1: outermost first, in decreasing device-stride order.
    nest = sj.generate_dci([1024, 256], SpyreTensorLayout([1024, 256], F16))[0].loop_nest()
    assert nest.ranges == (4, 1024, 64)
    assert nest.host_strides == (64, 256, 1)
    assert nest.device_strides == (65536, 64, 1)
    code = nest.pseudocode()
    assert "for i0 in range(4):" in code
    assert "device[i0*65536 + i1*64 + i2] = host[i0*64 + i1*256 + i2]" in code


def test_d2h_swaps_source_and_destination():
    layout = SpyreTensorLayout([5, 100, 150], F16)
    h2d = sj.generate_dci([5, 100, 150], layout)
    d2h = sj.generate_dci([5, 100, 150], layout, host_to_device=False)
    for a, b in zip(h2d, d2h, strict=True):
        assert a.size == b.size
        assert (a.stride_src, a.stride_dst) == (b.stride_dst, b.stride_src)
        assert (a.offset_src, a.offset_dst) == (b.offset_dst, b.offset_src)
        assert a.loop_nest() == b.loop_nest()
    assert "host[128 + i0*150" in d2h.pseudocode()


def test_each_padded_host_dim_doubles_the_descriptors():
    # Both host dims are tiled by 64 with a partial last tile: 2^2 descriptors,
    # main first, then the inner dim's remainder, the outer's, and both.
    layout = SpyreTensorLayout.from_stride_map([2, 3, 64, 64], [9600, 64, 150, 1], F16)
    dci = sj.generate_dci([100, 150], layout)
    assert [d.size for d in dci] == [
        (64, 64, 2, 1),
        (22, 64, 1, 1),
        (64, 36, 2, 1),
        (22, 36, 1, 1),
    ]
    assert [d.offset_src for d in dci] == [0, 128, 9600, 9728]
    assert sum(d.num_elements for d in dci) == 100 * 150


def test_json_uses_torch_spyre_field_names():
    dci = sj.generate_dci([5, 100, 150], SpyreTensorLayout([5, 100, 150], F16), name="x")
    data = json.loads(dci.to_json())
    assert data["dsName_"] == "x"
    assert data["isHostToSen_"] == 1
    assert data["dataformat_src_"] == data["dataformat_dst_"] == 0
    assert data["input_shape_"] == [150, 100, 5]
    assert data["output_shape_"] == [64, 5, 3, 100]
    assert data["dcsi_"][1] == {
        "size_": [22, 5, 1, 100],
        "stride_src_": [1, 15000, 64, 150],
        "stride_dst_": [1, 64, 320, 960],
        "offset_src_": 128,
        "offset_dst_": 640,
    }
    assert DCI.from_json(dci.to_json()) == dci
    d2h = sj.generate_dci(
        [5, 100, 150], SpyreTensorLayout([5, 100, 150], F16), host_to_device=False
    )
    assert json.loads(d2h.to_json())["input_shape_"] == [64, 5, 3, 100]
    assert DCI.from_json(d2h.to_json()) == d2h


def test_bad_json():
    with pytest.raises(sj.LayoutError, match="not valid JSON"):
        DCI.from_json("{")
    with pytest.raises(sj.LayoutError, match="dcsi_"):
        DCI.from_json(
            '{"isHostToSen_": 1, "input_shape_": [], "output_shape_": [], "dataformat_src_": 0}'
        )


def test_broadcast_dims_write_every_copy_and_read_one():
    layout = SpyreTensorLayout.from_stride_map([1, 512, 64], [64, 0, 1], F16)
    (h2d,) = sj.generate_dci([60], layout)
    (d2h,) = sj.generate_dci([60], layout, host_to_device=False)
    assert h2d.size == (60, 512, 1) and h2d.stride_src == (1, 0, 64)
    assert d2h.size == (60, 1, 1)


def test_layout_too_small_is_an_error():
    with pytest.raises(sj.LayoutError, match="too small"):
        sj.generate_dci([20, 64], SpyreTensorLayout([10, 64], F16))


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS)
def test_spec_layouts_descriptors_place_every_element_by_the_rule(size, order, dsize, smap):
    layout = SpyreTensorLayout(size, F16, order)
    _check_placement(tuple(size), layout, coords_by_rule(tuple(size), layout))


@pytest.mark.parametrize(("size", "dsize", "smap"), SPEC_EXPLICIT + MORE_EXPLICIT)
def test_explicit_layouts_descriptors_round_trip(size, dsize, smap):
    layout = SpyreTensorLayout.from_stride_map(dsize, smap, F16)
    host = np.arange(np.prod(size), dtype=np.int64)
    image, writes = run_descriptors(
        sj.generate_dci(size, layout), host, np.full(np.prod(dsize), -1)
    )
    assert (writes <= 1).all() or 0 in smap  # broadcast dims write copies, others once
    np.testing.assert_array_equal(image >= 0, layout.data_mask(size).reshape(-1))
    d2h = sj.generate_dci(size, layout, host_to_device=False)
    back, back_writes = run_descriptors(d2h, image, np.full(host.shape, -1))
    np.testing.assert_array_equal(back, host)
    assert (back_writes == 1).all()


def test_host_strides_describe_a_transposed_host_view():
    # Host tensor [512, 256] stored column-major (a transposed view).
    shape, strides = (512, 256), (1, 512)
    layout = SpyreTensorLayout(shape, F16, host_strides=strides)
    x = np.arange(512 * 256).reshape(shape)
    flat = np.asfortranarray(x).reshape(-1, order="F")  # memory order of the view
    dci = sj.generate_dci(shape, layout, host_strides=strides)
    image, writes = run_descriptors(dci, flat, np.full(layout.device_size, -1).reshape(-1))
    assert (writes == 1).all()
    coords = layout.device_coords(shape, strides).reshape(-1, 3)
    flat_pos = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    np.testing.assert_array_equal(image[flat_pos], x.reshape(-1))
    # The rule's coordinates are the transposed view's: row i of x is host offset i.
    assert layout.device_coord((3, 70), shape, strides) == (1, 3, 6)


def _check_placement(shape, layout, coords):
    """Brute-force the descriptors: every host element lands once, where the rule says."""
    n = int(np.prod(shape))
    host = np.arange(n, dtype=np.int64)
    dev_cells = int(np.prod(layout.device_size))
    image, writes = run_descriptors(sj.generate_dci(shape, layout), host, np.full(dev_cells, -1))
    flat_pos = np.ravel_multi_index(tuple(coords.T), layout.device_size)
    np.testing.assert_array_equal(image[flat_pos], host)
    assert (writes <= 1).all()
    np.testing.assert_array_equal(writes == 1, layout.data_mask(shape).reshape(-1))


@given(shape=shapes(max_elements=5000), data=st.data(), dtype=dtypes)
def test_descriptors_follow_the_rule(shape, data, dtype):
    layout = SpyreTensorLayout(shape, dtype, data.draw(dim_orders(len(shape))))
    _check_placement(shape, layout, coords_by_rule(shape, layout))


@given(shape=shapes(max_elements=5000), data=st.data(), dtype=dtypes, h2d=st.booleans())
def test_json_round_trips(shape, data, dtype, h2d):
    layout = SpyreTensorLayout(shape, dtype, data.draw(dim_orders(len(shape))))
    dci = sj.generate_dci(shape, layout, host_to_device=h2d, name="t")
    assert DCI.from_json(dci.to_json()) == dci
    assert DCI.from_dict(json.loads(json.dumps(dci.to_dict()))) == dci
