"""Exact conversions of Spyre layouts to and from CuTe, XLA, Morello and tt-mlir (issue 26).

Every notation's index map is evaluated here by brute force, from its own definition
(no spyrejax code), and compared with the Spyre layout's: the device offset of every
host element. A conversion either gives the same map or is refused by name.
"""

import itertools
import math

import hypothesis
import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import coords_by_rule
from strategies import tiled_layouts

from spyrejax import (
    CuteLayout,
    LayoutConversionError,
    MetalLayout,
    MorelloLayout,
    SpyreTensorLayout,
    XlaLayout,
    from_cute,
    to_cute,
)

F16, F32 = np.float16, np.float32

# --- the oracles: device offset of every host element, row-major host order ----------


def spyre_offsets(shape, layout):
    """Spec section 4's rule where no host dims fold, else the mapping's coordinates."""
    mapping = layout.for_host(shape)
    if all(len(s.host_dims) == 1 for s in mapping.segmentation.segments):
        coords = coords_by_rule(shape, layout)
    else:
        coords = mapping.device_coords().reshape(-1, layout.device_rank)
    return np.ravel_multi_index(tuple(coords.T), layout.device_size)


def _host_index(shape):
    return np.indices(shape).reshape(len(shape), math.prod(shape))


def cute_offsets(cute, shape):
    """Each host dim's coordinate split into its mode's leaves, fastest first."""
    out = 0
    for d, x in enumerate(_host_index(shape)):
        mode = cute.shape[d], cute.stride[d]
        leaves = list(zip(_flat(mode[0]), _flat(mode[1]), strict=True))
        for k, (n, s) in enumerate(leaves):
            out = out + (x % n if k < len(leaves) - 1 else x) * s
            x = x // n
    return np.asarray(out) + np.zeros(math.prod(shape), np.int64)


def _flat(t):
    return [t] if isinstance(t, int) else [x for sub in t for x in _flat(sub)]


def xla_offsets(xla, shape):
    """Pad, reshape and transpose an array of element ids, tile by tile, then read it."""
    a = np.arange(math.prod(shape)).reshape(shape).transpose(xla.minor_to_major[::-1])
    for tile in xla.tiles:
        k = len(tile)
        lead, minor = a.shape[: a.ndim - k], a.shape[a.ndim - k :]
        pad = [(0, 0)] * len(lead) + [(0, -n % t) for n, t in zip(minor, tile, strict=True)]
        a = np.pad(a, pad, constant_values=-1)
        split = [x for n, t in zip(a.shape[len(lead) :], tile, strict=True) for x in (n // t, t)]
        a = a.reshape(*lead, *split)
        r = len(lead)
        a = a.transpose(
            *range(r), *(r + 2 * i for i in range(k)), *(r + 2 * i + 1 for i in range(k))
        )
    flat = a.reshape(-1)
    out = np.empty(math.prod(shape), np.int64)
    out[flat[flat >= 0]] = np.nonzero(flat >= 0)[0]
    return out


def morello_offsets(layout, shape):
    """Morello's buffer indexing expression, physical dim by physical dim."""
    packed = [
        math.prod(n for d2, k, n in layout.dims if d2 == d and k != "Dynamic")
        for d in range(len(shape))
    ]
    rest = list(shape)
    index = _host_index(shape)
    out = np.zeros(index.shape[1], np.int64)
    for d, kind, n in layout.dims:
        size = rest[d] // packed[d] if kind == "Dynamic" else n
        if kind != "Dynamic":
            packed[d] //= n
        prev, rest[d] = rest[d], rest[d] // size
        term = index[d] % prev
        if kind == "OddEven":
            term = ((term % n) // 2 + ((term % n) % 2) * (n // 2)) // rest[d]
        else:
            term = term // rest[d]
        out = out * size + term
    return out


def metal_offsets(m, shape):
    """Align, collapse, shard over the grid, tile: row-major (grid, shard tiles, tile)."""
    aligned = [-(-n // a) * a for n, a in zip(shape, m.dim_alignments, strict=True)]
    index = _host_index(shape)
    rows = []
    for a, b in m.collapsed_intervals:
        r = 0
        for d in range(a, b):
            r = r * aligned[d] + index[d]
        rows.append(r)
    physical = [math.prod(aligned[a:b]) for a, b in m.collapsed_intervals]
    shard = [p // g for p, g in zip(physical, m.grid, strict=True)]
    digits = [(r // s, g) for r, s, g in zip(rows, shard, m.grid, strict=True)]
    tile = m.tile or ()
    inner = []
    for p, (r, s) in enumerate(zip(rows, shard, strict=True)):
        t = tile[p - len(rows) + 2] if tile and p >= len(rows) - 2 else 1
        digits.append(((r % s) // t, s // t))
        if t > 1 or (tile and p >= len(rows) - 2):
            inner.append((r % t, t))
    out = 0
    for x, n in digits + inner:
        out = out * n + x
    return out


# --- cases -----------------------------------------------------------------------------

CASES = (
    [
        (tuple(size), SpyreTensorLayout(size, F16, order))
        for size, order, dsize, _ in SPEC_VECTORS
        if 0 < math.prod(size) <= 2**17 and math.prod(dsize) <= 2**20
    ]
    + [
        (tuple(size), SpyreTensorLayout.from_stride_map(dsize, smap, F16))
        for size, dsize, smap in SPEC_EXPLICIT + MORE_EXPLICIT
        if math.prod(size) > 0
    ]
    + [
        ((100, 150), SpyreTensorLayout.from_stride_map([2, 3, 64, 64], [9600, 64, 150, 1], F16)),
        ((100, 150), SpyreTensorLayout.from_stride_map([3, 2, 64, 64], [64, 9600, 150, 1], F16)),
        ((5, 100, 150), SpyreTensorLayout.row_major((5, 100, 150), F16)),
        ((8, 64), SpyreTensorLayout.from_stride_map([8, 2, 32], [64, 1, 2], F32)),  # odd-even
        ((4800,), SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16)),
        # Several stick dims, and sticks over a group of host dims (item 1).
        ((4, 8, 64, 2), SpyreTensorLayout.stick_tiled((4, 8, 64, 2), F16, [(2, 3)])),
        ((4, 8, 64, 2), SpyreTensorLayout((4, 8, 128), F16)),  # RoPE's view of a D-stick tensor
        ((6, 3, 20), SpyreTensorLayout.stick_tiled((6, 3, 20), F32, [0, (1, 2)])),
        ((70, 100), SpyreTensorLayout.stick_tiled((70, 100), F32, [1, 0])),
    ]
)
IDS = [f"{list(s)}-{list(lay.device_size)}-{list(lay.stride_map)}" for s, lay in CASES]


def _via(kind, shape, layout):
    """Convert out and back: ``(notation, its oracle offsets, the layout back)``."""
    mapping = layout.for_host(shape)
    dtype = layout.device_dtype
    if kind == "cute":
        c = to_cute(mapping)
        assert CuteLayout.parse(str(c)) == c
        return c, cute_offsets(c, shape), from_cute(c, shape, dtype)
    if kind == "xla":
        x = XlaLayout.from_spyre(mapping)
        assert XlaLayout.parse(str(x)) == x
        return x, xla_offsets(x, shape), x.to_spyre(shape, dtype)
    if kind == "morello":
        m = MorelloLayout.from_spyre(mapping)
        return m, morello_offsets(m, shape), m.to_spyre(shape, dtype)
    m = MetalLayout.from_spyre(mapping)
    return m, metal_offsets(m, shape), m.to_spyre(dtype)


KINDS = ["cute", "xla", "morello", "metal"]


def _check_round_trip(kind, shape, layout):
    """Refused by name, or: the notation's map is the layout's, and so is the layout back."""
    try:
        notation, theirs, back = _via(kind, shape, layout)
    except LayoutConversionError as e:
        return str(e)
    ours = spyre_offsets(shape, layout)
    np.testing.assert_array_equal(theirs, ours, err_msg=f"{kind}: {notation}")
    np.testing.assert_array_equal(spyre_offsets(shape, back), ours, err_msg=str(back))
    again, _, back2 = _via(kind, shape, back)  # a fixpoint: the same notation again
    assert (again, back2) == (notation, back)
    return None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("shape", "layout"), CASES, ids=IDS)
def test_cases_convert_exactly_or_are_refused(kind, shape, layout):
    _check_round_trip(kind, shape, layout)


@pytest.mark.parametrize(
    ("kind", "shape", "layout", "want"),
    [
        ("cute", (1024, 256), SpyreTensorLayout((1024, 256), F16), "(1024,(64,4)):(64,(1,65536))"),
        (
            "cute",
            (5, 100, 150),
            SpyreTensorLayout((5, 100, 150), F16),
            "(5,100,(64,3)):(64,960,(1,320))",
        ),
        (
            "cute",
            (40, 60),
            SpyreTensorLayout.from_stride_map([38, 64], [64, 1], F16),
            "(40,60):(60,1)",
        ),
        (
            "cute",
            (8, 64),
            SpyreTensorLayout.from_stride_map([8, 2, 32], [64, 1, 2], F32),
            "(8,(2,32)):(64,(32,1))",
        ),
        ("xla", (1024, 256), SpyreTensorLayout((1024, 256), F16), "{0,1:T(64,1)}"),
        (
            "xla",
            (100, 150),
            SpyreTensorLayout.from_stride_map([2, 3, 64, 64], [9600, 64, 150, 1], F16),
            "{1,0:T(64,64)}",
        ),
        (
            "morello",
            (1024, 256),
            SpyreTensorLayout((1024, 256), F16),
            "[(1, Dynamic), (0, Dynamic), (1, Packed(64))]",
        ),
        (
            "morello",
            (8, 64),
            SpyreTensorLayout.from_stride_map([8, 2, 32], [64, 1, 2], F32),
            "[(0, Dynamic), (1, OddEven(64))]",
        ),
    ],
)
def test_golden_conversions(kind, shape, layout, want):
    notation, theirs, _ = _via(kind, shape, layout)
    assert str(notation) == want
    np.testing.assert_array_equal(theirs, spyre_offsets(shape, layout))


def test_golden_metal_layout():
    layout = SpyreTensorLayout.from_stride_map([2, 3, 64, 64], [9600, 64, 150, 1], F16)
    m = MetalLayout.from_spyre(layout.for_host((100, 150)))
    assert str(m) == (
        "#ttcore.metal_layout<logical_shape = 100x150, dim_alignments = 64x64, "
        "collapsed_intervals = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64>, undef, dram>"
    )
    assert m.tensor_type("f16") == "tensor<1x1x2x3x!ttcore.tile<64x64, f16>, #layout>"
    tt = MetalLayout((64, 64), (32, 32), ((0, 1), (1, 2)), (1, 1), (32, 32))
    assert tt.to_spyre(F32) == SpyreTensorLayout.from_stride_map(
        [2, 2, 32, 32], [2048, 32, 64, 1], F32
    )


@pytest.mark.parametrize(
    ("kind", "shape", "layout", "match"),
    [
        (
            "cute",
            (60,),
            SpyreTensorLayout.from_stride_map([1, 512, 64], [64, 0, 1], F16),
            "broadcast",
        ),
        (
            "cute",
            (4800,),
            SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16),
            "do not nest",
        ),
        ("xla", (512, 256), SpyreTensorLayout((512, 256), F16, [0, 1, -1]), "walks no host dim"),
        ("xla", (40, 60), SpyreTensorLayout.from_stride_map([38, 64], [64, 1], F16), "folded"),
        ("morello", (5, 100, 150), SpyreTensorLayout((5, 100, 150), F16), "padding"),
        (
            "metal",
            (100, 150),
            SpyreTensorLayout.from_stride_map([3, 2, 64, 64], [64, 9600, 150, 1], F16)
            .for_host((100, 150))
            .layout,
            None,
        ),
        (
            "metal",
            (8, 64),
            SpyreTensorLayout.from_stride_map([8, 2, 32], [64, 1, 2], F32),
            "not grid",
        ),
        ("metal", (150,), SpyreTensorLayout((150,), F16), "rank >= 2"),
    ],
)
def test_named_refusals(kind, shape, layout, match):
    if match is None:  # column-major tiles merge into rows here: expressible after all
        assert _check_round_trip(kind, shape, layout) is None
        return
    with pytest.raises(LayoutConversionError, match=match):
        _via(kind, shape, layout)


@pytest.mark.parametrize("kind", ["cute", "xla", "morello", "metal"])
def test_an_element_arrangement_is_refused_by_name(kind):
    # Its groups permute the lanes of each stick pair: (0, 8) sits where 4 would in
    # the standard order, which no converted stride states (a dropped arrangement would
    # convert to the standard map: a wrong index map, silently).
    layout = SpyreTensorLayout.row_major((4, 64), F32).with_arrangement("DL16_TO_FP32")
    assert layout.for_host((4, 64)).device_coord((0, 8)) == (0, 0, 4)
    with pytest.raises(LayoutConversionError, match="DL16_TO_FP32 arrangement"):
        _via(kind, (4, 64), layout)


def test_refusals_of_notations_spyre_cannot_hold():
    with pytest.raises(LayoutConversionError, match="not whole sticks"):
        XlaLayout.parse("{1,0:T(8,128)(2,1)}").to_spyre((16, 256), F16)  # pairs of rows
    with pytest.raises(LayoutConversionError, match="does not divide"):
        MorelloLayout(((0, "Dynamic", 0), (1, "Packed", 48))).to_spyre((4, 64), F16)
    with pytest.raises(LayoutConversionError, match="cuts logical dim"):
        MetalLayout((4, 48, 64), (1, 1, 1), ((0, 2), (2, 3)), (1, 1), (32, 64)).to_spyre(F16)
    with pytest.raises(LayoutConversionError, match="overlap"):
        from_cute(CuteLayout.parse("(4,64):(32,1)"), (4, 64), F16)
    with pytest.raises(LayoutConversionError, match="not an XLA"):
        XlaLayout.parse("{1,0:T(8,*)}")


# --- Hypothesis: random layouts of every notation --------------------------------------


@settings(max_examples=60)
@given(tiled_layouts(max_elements=600, max_device_elements=20_000), st.sampled_from(KINDS))
def test_random_spyre_layouts_convert_exactly_or_are_refused(case, kind):
    shape, layout = case
    refused = _check_round_trip(kind, shape, layout)
    if any(s == 0 and n > 1 for n, s in zip(layout.device_size, layout.stride_map, strict=True)):
        assert refused is not None  # one host element at many places: no function


@st.composite
def xla_layouts(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(rank))
    order = tuple(draw(st.permutations(range(rank))))
    tiles, width = [], rank
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.integers(1, width))
        tile = [draw(st.sampled_from([1, 2, 3, 4, 8])) for _ in range(k)]
        tiles.append(tile)
        width = k
    if draw(st.booleans()):  # the innermost tile dim a whole stick
        (tiles[-1] if tiles else tiles.append([1]) or tiles[-1])[-1] = 32
    return shape, XlaLayout(order, tuple(map(tuple, tiles)))


@settings(max_examples=80)
@given(xla_layouts())
def test_random_xla_layouts(case):
    shape, xla = case
    _check_converted("xla", shape, xla, xla_offsets)


def _check_converted(kind, shape, peer, peer_offsets):
    """A peer layout in Spyre's terms places every element where its own definition does
    (or is refused for sticks that are not whole), and converts back to the same notation."""
    try:
        layout = peer.to_spyre(shape, F32)
    except LayoutConversionError as e:
        assert "not whole sticks" in str(e)
        return
    np.testing.assert_array_equal(spyre_offsets(shape, layout), peer_offsets(peer, shape))
    _check_round_trip(kind, shape, layout)


@st.composite
def morello_layouts(draw):
    rank = draw(st.integers(1, 3))
    shape, per_dim = [], []
    for d in range(rank):
        packs = draw(st.lists(st.sampled_from([2, 4, 8]), max_size=2))
        odd = 2 * draw(st.sampled_from([1, 2, 16])) if draw(st.booleans()) else None
        base = draw(st.integers(1, 5))
        shape.append(base * math.prod(packs) * (odd or 1))
        dims = [(d, "Dynamic", 0)] + [(d, "Packed", p) for p in packs]
        per_dim.append(dims + ([(d, "OddEven", odd)] if odd else []))
    last = draw(st.integers(0, rank - 1))
    if draw(st.booleans()):  # a whole stick innermost
        shape[last] *= 32
        per_dim[last] = [x for x in per_dim[last] if x[1] != "OddEven"] + [(last, "Packed", 32)]
    hypothesis.assume(math.prod(shape) <= 20_000)
    order = []
    while any(per_dim):
        d = draw(st.sampled_from([d for d in range(rank) if per_dim[d]]))
        order.append(per_dim[d].pop(0))
    return tuple(shape), MorelloLayout(tuple(order))


@settings(max_examples=80)
@given(morello_layouts())
def test_random_morello_layouts(case):
    shape, m = case
    _check_converted("morello", shape, m, morello_offsets)


@st.composite
def metal_layouts(draw):
    rank = draw(st.integers(2, 3))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(rank))
    align = tuple(draw(st.sampled_from([1, 4, 8, 32])) for _ in range(rank))
    cuts = sorted(draw(st.sets(st.integers(1, rank - 1), min_size=1)))
    bounds = [0, *cuts, rank]
    intervals = tuple(itertools.pairwise(bounds))
    tile = (draw(st.sampled_from([1, 4, 8])), 32) if draw(st.booleans()) else None
    aligned = [-(-n // a) * a for n, a in zip(shape, align, strict=True)]
    physical = [math.prod(aligned[a:b]) for a, b in intervals]
    grid = tuple(draw(st.sampled_from([g for g in (1, 2, 3) if p % g == 0])) for p in physical)
    return shape, MetalLayout(shape, align, intervals, grid, tile)


@settings(max_examples=80)
@given(metal_layouts())
def test_random_metal_layouts(case):
    shape, m = case
    try:
        layout = m.to_spyre(F32)
    except LayoutConversionError as e:
        assert any(w in str(e) for w in ("not whole sticks", "does not divide", "unevenly"))
        return
    np.testing.assert_array_equal(spyre_offsets(shape, layout), metal_offsets(m, shape))
    _check_round_trip("metal", shape, layout)
