import json

import ml_dtypes
import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS_MOVED
from hypothesis import given
from hypothesis import strategies as st
from oracles import coords_by_rule, run_descriptors
from strategies import dim_orders, dtypes, shapes, tiled_layouts

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
    # spyre-device spec section 5: the source is the float16 host array (IEEE_FP16 = 15),
    # the destination the device format (SEN169_FP16 = 0).
    assert (data["dataformat_src_"], data["dataformat_dst_"]) == (15, 0)
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
    out = json.loads(d2h.to_json())
    assert out["input_shape_"] == [64, 5, 3, 100]
    assert (out["dataformat_src_"], out["dataformat_dst_"]) == (0, 15)  # device -> host
    assert DCI.from_json(d2h.to_json()) == d2h


def test_spec_golden_dci_json_range_one_loop_carries_its_host_stride():
    # spyre-device spec section 5: host [1, 3, 128] float16 in [3, 2, 1, 64] /
    # [128, 64, -1, 1]. The range-1 loop is host dim 0, whose stride is 3 * 128 = 384.
    layout = SpyreTensorLayout([1, 3, 128], F16)
    assert layout.device_size == (3, 2, 1, 64) and layout.stride_map == (128, 64, -1, 1)
    data = json.loads(sj.generate_dci([1, 3, 128], layout, host_dtype=F16).to_json())
    assert (data["dataformat_src_"], data["dataformat_dst_"]) == (15, 0)
    (d,) = data["dcsi_"]
    assert d["size_"] == [64, 1, 2, 3]
    assert d["stride_src_"] == [1, 384, 64, 128]
    assert d["stride_dst_"] == [1, 64, 64, 128]
    assert (d["offset_src_"], d["offset_dst_"]) == (0, 0)
    assert data["input_shape_"] == [128, 3, 1] and data["output_shape_"] == [64, 1, 2, 3]


@pytest.mark.parametrize(
    ("dtype", "src", "dst"),
    [
        (np.float16, 15, 0),  # IEEE_FP16 -> SEN169_FP16
        (ml_dtypes.bfloat16, 17, 0),  # BFLOAT16 -> SEN169_FP16
        (np.bool_, 8, 0),  # torch-spyre names a bool host tensor SENINT8
        (np.float32, 1, 1),
        (np.int32, 12, 12),
        (np.int8, 8, 8),
    ],
    ids=str,
)
def test_dataformat_src_is_the_host_format(dtype, src, dst):
    shape = (3, 40)
    layout = SpyreTensorLayout(shape, dtype)
    h2d = sj.generate_dci(shape, layout, host_dtype=dtype).to_dict()
    assert (h2d["dataformat_src_"], h2d["dataformat_dst_"]) == (src, dst)
    d2h = sj.generate_dci(shape, layout, host_dtype=dtype, host_to_device=False)
    assert (d2h.to_dict()["dataformat_src_"], d2h.to_dict()["dataformat_dst_"]) == (dst, src)
    assert DCI.from_json(d2h.to_json()) == d2h
    # The host dtype only names the source; the descriptors are the layout's.
    assert (
        sj.generate_dci(shape, layout).descriptors
        == sj.generate_dci(shape, layout, host_dtype=dtype).descriptors
    )


def test_host_dtype_must_fit_the_layout():
    layout = SpyreTensorLayout((3, 40), F16)
    with pytest.raises(sj.LayoutError, match=r"float32 does not fit.*SEN169_FP16"):
        sj.generate_dci((3, 40), layout, host_dtype=np.float32)
    with pytest.raises(sj.LayoutError, match="float64"):
        sj.generate_dci((3, 40), layout, host_dtype=np.float64)


@pytest.mark.parametrize(
    ("shape", "order", "range_one"),
    [
        # (host dims, dim order, {device dim: host stride of its range-1 loop})
        ((3, 1, 128), None, {0: 128}),  # the size-1 host dim 1
        ((1, 3, 1, 128), None, {1: 128, 3: 384}),  # o[2] = dim 2, o[0] = dim 0
        ((300, 1), None, {0: 64, 2: 1}),  # a size-1 stick dim: tile hs*eps, stick hs
        ((300,), [0, -1], {0: 300, 2: 300}),  # synthetic: a new outermost dim's stride
        ((), None, {0: 1, 1: 1}),
    ],
)
def test_range_one_loops_never_carry_minus_one(shape, order, range_one):
    layout = SpyreTensorLayout(shape, F16, order)
    for h2d in (True, False):
        for d in sj.generate_dci(shape, layout, host_to_device=h2d):
            host = (d.stride_src if h2d else d.stride_dst)[::-1]  # device dims' order
            assert -1 not in host
            assert {j: host[j] for j in range_one} == range_one
            assert all(d.size[::-1][j] == 1 for j in range_one)


def test_bad_json():
    with pytest.raises(sj.LayoutError, match="not valid JSON"):
        DCI.from_json("{")
    with pytest.raises(sj.LayoutError, match="dcsi_"):
        DCI.from_json(
            '{"isHostToSen_": 1, "input_shape_": [], "output_shape_": [], "dataformat_src_": 0, '
            '"dataformat_dst_": 0}'
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


@pytest.mark.parametrize(("size", "order", "dsize", "smap"), SPEC_VECTORS_MOVED)
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


def test_padded_tiles_take_a_descriptor_per_stick_of_a_row():
    # Host [4800] in [3, 2, 14, 64] / [120, 64, 360, 1] (device strides 1792, 896, 64, 1):
    # 4800 = 13 tiles of 360 + one row of 120. The 13 tiles x 3 rows move as two loop
    # nests, one per stick of a row (64 lanes, then 56 at host 64 / device 896); the
    # last row (host 4680, device 13 * 64 = 832) the same way.
    layout = SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16)
    dci = sj.generate_dci([4800], layout)
    assert [d.size for d in dci] == [(64, 13, 1, 3), (56, 13, 1, 3), (64, 1, 1, 1), (56, 1, 1, 1)]
    assert [(d.offset_src, d.offset_dst) for d in dci] == [
        (0, 0),
        (64, 896),
        (4680, 832),
        (4744, 832 + 896),
    ]
    assert all(d.stride_src == (1, 360, 64, 120) for d in dci)
    assert all(d.stride_dst == (1, 64, 896, 1792) for d in dci)
    _check_placement((4800,), layout, coords_by_rule((4800,), layout))


def test_equal_strides_move_one_element_per_stick():
    layout = SpyreTensorLayout.from_stride_map([1, 60, 64], [64, 1, 1], F16)
    (d,) = sj.generate_dci([60], layout)
    assert d.size == (1, 60, 1)  # the stick loop runs once: lane 0 of each stick
    assert d.stride_src == (1, 1, 64) and d.stride_dst == (1, 64, 3840)
    _check_placement((60,), layout, coords_by_rule((60,), layout))


def test_an_empty_tensor_has_no_descriptors():
    for shape in [(0,), (0, 150), (150, 0)]:
        layout = SpyreTensorLayout(shape, F16)
        for h2d in (True, False):
            dci = sj.generate_dci(shape, layout, host_to_device=h2d)
            assert len(dci) == 0 and dci.to_dict()["dcsi_"] == []
            assert DCI.from_json(dci.to_json()) == dci


@given(case=tiled_layouts())
def test_property_tiled_layouts_descriptors_follow_the_rule(case):
    shape, layout = case
    _check_placement(shape, layout, coords_by_rule(shape, layout))
    host = np.arange(int(np.prod(shape)), dtype=np.int64)
    image, _ = run_descriptors(
        sj.generate_dci(shape, layout), host, np.full(int(np.prod(layout.device_size)), -1)
    )
    d2h = sj.generate_dci(shape, layout, host_to_device=False)
    back, writes = run_descriptors(d2h, image, np.full(host.shape, -1))
    np.testing.assert_array_equal(back, host)
    assert (writes == 1).all()
    for dci in (d2h, sj.generate_dci(shape, layout)):
        assert all(-1 not in d.stride_src + d.stride_dst for d in dci)
        assert DCI.from_json(dci.to_json()) == dci
