import matplotlib

matplotlib.use("Agg")

import ast
import dataclasses
import itertools
import re
from collections import defaultdict

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pytest
from cases import MORE_EXPLICIT, SPEC_EXPLICIT, SPEC_VECTORS
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.text import Text
from scipy import ndimage

import spyrejax as sj
from spyrejax import viz

F16 = np.float16
F32 = np.float32
PAD = "#d9d9d9"


def test_logical_view_labels_offsets_and_colours_by_stick():
    pic = viz.logical_view((1024, 256), dtype=F16, max_rows=4, max_cols=256)
    assert pic.shape == (4, 256)
    assert pic.note == "showing 4 of 1024 rows and 256 of 256 columns"
    assert list(pic.text[1, :3]) == ["256", "257", "258"]
    # Layout [4, 1024, 64]: element (r, c) sits in stick (c // 64, r).
    assert pic.stick[0, 0] == 0 and pic.stick[0, 63] == 0
    assert pic.stick[0, 64] == 1024 and pic.stick[2, 200] == 3 * 1024 + 2
    assert not pic.padding.any()


def test_device_memory_marks_padding_and_outlines_tiles():
    pic = viz.device_memory((5, 100, 150), dtype=F16, max_rows=15)
    assert pic.shape == (15, 64)
    assert pic.note == "showing 15 of 1500 sticks and 64 of 64 columns"
    # Sticks (0, 0, k) hold row (k, 0) of the host tensor: offsets 15000 k + lane.
    assert pic.text[3, 5] == str(3 * 15000 + 5)
    # Sticks (0, 2, k) hold lanes 128..149: 22 values, then 42 padding cells.
    assert pic.text[10, 0] == "128" and pic.text[10, 21] == "149"
    assert pic.padding[10:15, 22:].all() and not pic.padding[10:15, :22].any()
    assert pic.padding.sum() == 5 * 42
    assert pic.tile_starts == (0, 5, 10)
    assert pic.row_labels[10] == "(0, 2, 0)"


def test_host_memory_shows_interleaved_sticks():
    pic = viz.host_memory((5, 100, 150), dtype=F16, max_rows=4)
    assert pic.text[0, 0] == "0" and pic.text[2, 22] == "150"
    # Offsets 128..149 are in stick (0, 2, 0); 150 starts row 1: stick (1, 0, 0) = 15.
    assert pic.stick[2, 0] == 2 * 5 and pic.stick[2, 22] == 15


def test_pictures_of_arrays_and_layouts():
    a = sj.to_device(jnp.ones((3, 70), jnp.float32), dim_order=[1, 0])
    pic = viz.device_memory(a, max_rows=100)
    assert pic.shape == (a.layout.num_sticks, 32) == (70, 32)
    assert pic.padding.sum() == a.layout.padding_mask((3, 70)).sum()
    sparse = sj.SpyreTensorLayout((256,), F16, [0, -1])
    pic = viz.device_memory((256,), sparse, max_rows=3)
    assert list(pic.padding[0]) == [False] + [True] * 63
    with pytest.raises(sj.LayoutError, match="layout or a dtype"):
        viz.logical_view((4, 4))


def test_html_writes_offsets_and_padding():
    pic = viz.device_memory((3, 70), dtype=F16)
    text = pic._repr_html_()
    assert text.count("class='pad'") == pic.padding.sum() == 3 * 58
    assert ">69</td>" in text and ">209</td>" in text
    # Layout [2, 3, 64]: two tiles of 3 sticks; a line above the 64 cells of stick (1, 0).
    assert text.count("border-top") == 64 and "border-left" not in text
    assert text.count("<span class='tile'>") == 2 and ">tile 1</span>" in text


def test_repr_prints_the_cells_for_a_terminal():
    # print(pic) in a script: the title, then labelled rows of offsets and padding.
    lines = repr(viz.device_memory((3, 70), dtype=F16)).splitlines()
    assert lines[0] == "Picture: " + viz.device_memory((3, 70), dtype=F16).title + " (6 x 64 cells)"
    # Stick (1, 0) holds lanes 64..69 of row 0 then 58 padding cells; columns 9..61 elided.
    assert lines[4].split() == [
        "(1,",
        "0)",
        "|",
        *map(str, range(64, 70)),
        "pad",
        "pad",
        "pad",
        "...",
        "pad",
        "pad",
    ]
    big = repr(viz.device_memory((5, 100, 150), dtype=F16, max_rows=40)).splitlines()
    assert len(big) == 1 + 16 + 1 and big[13] == "  ..."  # 16 of 40 rows, then the note
    assert big[-1] == "  showing 40 of 1500 sticks and 64 of 64 columns"


def test_matplotlib_figure_draws_offsets_and_grey_padding():
    pic = viz.device_memory((2, 70), dtype=F16)
    fig = pic.figure()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("pad") == pic.padding.sum() == 2 * 58
    assert "69" in labels and "139" in labels
    image = ax.images[0].get_array()
    np.testing.assert_array_equal(image[2, 10], to_rgb("#d9d9d9"))  # stick (1, 0), lane 10: pad
    assert not np.allclose(image[0, 0], to_rgb("#d9d9d9"))
    plt.close(fig)
    three = viz.figure((5, 100, 150), dtype=F16)
    assert len(three.axes) == 3
    plt.close(three)


def test_loop_nest_code():
    code = viz.loop_nest((1024, 256), dtype=F16)
    assert "device[i0*65536 + i1*64 + i2] = host[i0*64 + i1*256 + i2]" in code
    dci = sj.generate_dci((5, 100, 150), sj.SpyreTensorLayout((5, 100, 150), F16))
    assert viz.loop_nest(dci) == dci.pseudocode()


# -- colours, labels and tile boundaries, checked against the layout ---------------------

LAYOUTS = (
    [
        (tuple(size), sj.SpyreTensorLayout(tuple(size), F16, order))
        for size, order, _, _ in SPEC_VECTORS
    ]
    + [
        (tuple(size), sj.SpyreTensorLayout.from_stride_map(dev, smap, F16))
        for size, dev, smap in SPEC_EXPLICIT + MORE_EXPLICIT
    ]
    + [
        ((3, 70), sj.SpyreTensorLayout((3, 70), F32, [1, 0])),  # a stick per host column
        ((4, 5, 150), sj.SpyreTensorLayout((4, 5, 150), F16, [2, 0, 1])),  # sticks down rows
    ]
)
VIEWS = {
    "logical": lambda shape, layout: viz.logical_view(shape, layout, max_rows=12, max_cols=70),
    "host": lambda shape, layout: viz.host_memory(shape, layout, max_rows=12),
    "device": lambda shape, layout: viz.device_memory(shape, layout, max_rows=12),
}


def expected_cells(view, shape, layout, pic):
    """Per drawn cell, from the layout alone: (stick coords, tile coords), or None.

    Stick coords are a cell's device coordinates without the lane, tile coords without
    the lane and the stick's place in its tile (spec 2: a tile is ``device_size[-2]``
    sticks); padding keeps its tile, cells with no data have no stick.
    """
    rows, cols = pic.shape
    stick = np.full((rows, cols), None, object)
    tile = np.full((rows, cols), None, object)
    if view == "device":
        for r, label in enumerate(pic.row_labels):
            if r in pic.gap_rows:
                continue
            coords = ast.literal_eval(label)  # the row label names the stick
            for lane in range(cols):
                index = layout.host_index((*coords, lane), shape)
                assert pic.padding[r, lane] == (index is None)
                if index is not None:
                    assert pic.text[r, lane] == str(np.ravel_multi_index(index, shape))
                    stick[r, lane] = coords
                tile[r, lane] = coords[:-1]
        return stick, tile
    width = shape[-1] if view == "logical" and shape else layout.elems_per_stick
    for r, c in np.ndindex(rows, cols):
        offset = r * width + c  # row-major host offset drawn in the cell
        if offset >= max(np.prod(shape, dtype=int), 1):
            assert pic.text[r, c] == ""
            continue
        assert pic.text[r, c] == str(offset)
        coords = layout.device_coord(np.unravel_index(offset, shape), shape)
        stick[r, c], tile[r, c] = coords[:-1], coords[:-2]
    return stick, tile


def regions(keys):
    """4-connected regions of equal non-None keys: a list of (key, boolean mask)."""
    out = []
    for key in {k for k in keys.flat if k is not None}:
        same = np.vectorize(lambda k, key=key: k == key, otypes=[bool])(keys)
        labels, n = ndimage.label(same)
        out += [(key, labels == i) for i in range(1, n + 1)]
    return out


def tile_index(layout, coords):
    return int(np.ravel_multi_index(coords, layout.device_size[:-2])) if coords else 0


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize(
    "shape,layout", LAYOUTS, ids=lambda v: str(list(v)) if isinstance(v, tuple) else ""
)
def test_same_colour_iff_same_stick_and_labels_name_the_sticks(view, shape, layout):
    pic = VIEWS[view](shape, layout)
    stick, _ = expected_cells(view, shape, layout, pic)
    data = stick != None  # noqa: E711
    assert ((pic.stick >= 0) == data).all()
    colours = pic.colours
    assert (colours[pic.padding] == PAD).all() and PAD not in colours[data]
    sticks = {stick[rc] for rc in zip(*np.nonzero(data), strict=True)}
    assert pic.labelled == (len(sticks) > len(viz.PALETTE))
    # Each stick has one colour; with few enough sticks, each colour one stick.
    colours_of, sticks_of = defaultdict(set), defaultdict(set)
    for rc in zip(*np.nonzero(data), strict=True):
        colours_of[stick[rc]].add(colours[rc])
        sticks_of[colours[rc]].add(stick[rc])
    assert all(len(c) == 1 for c in colours_of.values())
    if len(sticks) <= 36:
        assert all(len(s) == 1 for s in sticks_of.values())
    if not pic.labelled:
        assert not pic.stick_labels
        return
    # Many sticks: each region of one stick carries a label naming it, so (colour, label)
    # tells the sticks apart even where colours repeat.
    anchors = {(r, c): name for r, c0, c1, name in pic.stick_labels for c in range(c0, c1 + 1)}
    found = defaultdict(set)
    for key, mask in regions(stick):
        names = {anchors[rc] for rc in zip(*np.nonzero(mask), strict=True) if rc in anchors}
        if pic.rows_are_sticks:
            names |= {pic.row_labels[r] for r in np.nonzero(mask)[0]}
        assert names == {str(key)}
        found[(colours[mask][0], str(key))].add(key)
    assert all(len(keys) == 1 for keys in found.values())
    assert len(pic.stick_labels) == (0 if pic.rows_are_sticks else len(regions(stick)))


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize(
    "shape,layout", LAYOUTS, ids=lambda v: str(list(v)) if isinstance(v, tuple) else ""
)
def test_tile_boundaries_are_drawn_where_the_tiles_change(view, shape, layout):
    pic = VIEWS[view](shape, layout)
    _, tile = expected_cells(view, shape, layout, pic)
    top, left = np.zeros(pic.shape, bool), np.zeros(pic.shape, bool)
    rows = [r for r in range(pic.shape[0]) if r not in pic.gap_rows]
    for above, r in itertools.pairwise(rows):  # across a gap row, its neighbours meet
        for c in range(pic.shape[1]):
            a, b = tile[above, c], tile[r, c]
            top[r, c] = a is not None and b is not None and a != b
    for r, c in np.ndindex(pic.shape[0], pic.shape[1] - 1):
        a, b = tile[r, c], tile[r, c + 1]
        left[r, c + 1] = a is not None and b is not None and a != b
    got_top, got_left = pic.tile_edges
    np.testing.assert_array_equal(got_top, top)
    np.testing.assert_array_equal(got_left, left)
    # One label per region of one tile, at its first cell in reading order.
    want = {
        (*map(int, np.argwhere(mask)[0]), f"tile {tile_index(layout, key)}")
        for key, mask in regions(tile)
    }
    assert set(pic.tile_labels) == want and len(pic.tile_labels) == len(want)


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize(
    "shape,layout", LAYOUTS[-4:], ids=lambda v: str(list(v)) if isinstance(v, tuple) else ""
)
def test_html_and_matplotlib_draw_the_colours_lines_and_labels(view, shape, layout):
    pic = VIEWS[view](shape, layout)
    top, left = pic.tile_edges
    tiles = {(r, c): t for r, c, t in pic.tile_labels}
    sticks = {(r, c0): name for r, c0, _, name in pic.stick_labels}
    cells = re.findall(r"<td[^>]*style='([^']*)'>(.*?)</td>", pic._repr_html_())
    assert len(cells) == pic.shape[0] * pic.shape[1]
    for (r, c), (style, inner) in zip(np.ndindex(pic.shape), cells, strict=True):
        assert f"background:{pic.colours[r, c]};" in style
        assert ("border-top" in style) == top[r, c] and ("border-left" in style) == left[r, c]
        tags = re.findall(r"<span class='(\w+)'>(.*?)</span>", inner)
        want = [("tile", tiles.get((r, c))), ("stick", sticks.get((r, c)))]
        assert tags == [(k, v.replace("'", "&#x27;")) for k, v in want if v]
    fig = pic.figure(numbers=False)
    ax = fig.axes[0]
    image = ax.images[0].get_array()
    for r, c in np.ndindex(pic.shape):
        np.testing.assert_allclose(image[r, c], to_rgb(pic.colours[r, c]))
    lines = [
        seg
        for coll in ax.collections
        if isinstance(coll, LineCollection)
        for seg in coll.get_segments()
    ]
    assert len(lines) == top.sum() + left.sum()
    drawn = {tuple(np.round(seg, 2).ravel()) for seg in lines}
    assert {(c - 0.5, r - 0.5, c + 0.5, r - 0.5) for r, c in np.argwhere(top)} <= drawn
    assert {(c - 0.5, r - 0.5, c - 0.5, r + 0.5) for r, c in np.argwhere(left)} <= drawn
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted([t for *_, t in pic.tile_labels] + [n for *_, n in pic.stick_labels])
    plt.close(fig)


def test_the_1024_by_256_pictures_show_where_tile_1_starts():
    # Layout [4, 1024, 64] (spec 11): tile t is the stick of host columns 64t..64t+63 of
    # every one of the 1024 rows, so tiles change every 64 columns of the host grid.
    logical = viz.logical_view((1024, 256), dtype=F16, max_rows=6, max_cols=256)
    top, left = logical.tile_edges
    assert not top.any() and [int(c) for c in np.flatnonzero(left.any(0))] == [64, 128, 192]
    assert left[:, [64, 128, 192]].all()
    assert logical.tile_labels == tuple((0, 64 * t, f"tile {t}") for t in range(4))
    # Host memory, a stick a row: row r holds host row r // 4, columns of tile r % 4.
    host = viz.host_memory((1024, 256), dtype=F16, max_rows=8)
    top, left = host.tile_edges
    assert top[1:].all() and not top[0].any() and not left.any()
    assert host.tile_labels == tuple((r, 0, f"tile {r % 4}") for r in range(8))
    # Device memory: 8 sticks would all be in tile 0, so it shows 4 of each tile.
    device = viz.device_memory((1024, 256), dtype=F16, max_rows=8)
    assert device.row_labels == (
        *(f"(0, {k})" for k in range(4)),
        "… 1020 sticks",
        *(f"(1, {k})" for k in range(4)),
    )
    assert device.gap_rows == (4,) and device.tile_starts == (0, 5)
    assert "(the first 4 of tile 0 and 4 of tile 1)" in device.note
    top, left = device.tile_edges
    assert top[5].all() and top.sum() == 64 and not left.any()
    assert device.tile_labels == ((0, 0, "tile 0"), (5, 0, "tile 1"))
    assert "<span class='tile'>tile 1</span>" in device._repr_html_()
    fig = device.figure(numbers=False)
    assert "tile 1" in [t.get_text() for t in fig.axes[0].texts]
    plt.close(fig)
    # Eight sticks, all different colours.
    for pic in (host, device):
        assert len(set(pic.colours[pic.stick >= 0])) == len(pic.sticks_shown) == 8


def test_device_memory_shows_the_first_sticks_when_tiles_are_small_or_one():
    assert viz.device_memory((5, 100, 150), dtype=F16, max_rows=15).gap_rows == ()
    one_tile = viz.device_memory((1, 2000), dtype=F16, max_rows=4)  # [32, 1, 64]: tiles of 1
    assert one_tile.row_labels == ("(0, 0)", "(1, 0)", "(2, 0)", "(3, 0)")
    column = viz.device_memory((100, 64), dtype=F16, max_rows=4)  # [1, 100, 64]: one tile
    assert column.gap_rows == () and column.shape == (4, 64)
    with pytest.raises(sj.LayoutError, match="max_rows must be at least 1, got 0"):
        viz.device_memory((100, 64), dtype=F16, max_rows=0)


def test_shared_colours_match_a_stick_across_pictures():
    host, device = viz.share_colours(
        viz.host_memory((1024, 256), dtype=F16, max_rows=8),
        viz.device_memory((1024, 256), dtype=F16, max_rows=8),
    )
    # Host row 1 (offsets 64..127) is stick (1, 0): device row 5.
    assert host.colour(1, 0) == device.colour(5, 0) != device.colour(1, 0)
    assert host.colour(4, 0) == device.colour(1, 0)  # stick (0, 1): host row 4
    for pic in (host, device):  # still one colour per stick and one stick per colour
        pairs = {(int(s), pic.colours[rc]) for rc, s in np.ndenumerate(pic.stick) if s >= 0}
        assert len(pairs) == len({s for s, _ in pairs}) == len({c for _, c in pairs})
    with pytest.raises(sj.LayoutError, match=r"sticks \[1, 2, 3\] .* not in colour_sticks"):
        _ = dataclasses.replace(device, colour_sticks=(0, 1024, 1025, 1026, 1027)).colours
    with pytest.raises(sj.LayoutError, match="sorted and distinct"):
        _ = dataclasses.replace(device, colour_sticks=(1, 0)).colours
    with pytest.raises(sj.LayoutError, match="pictures of one layout"):
        viz.share_colours(host, viz.device_memory((5, 100, 150), dtype=F16))


def _linear(colour):
    """Linear-light sRGB channels of a hex colour."""
    c = np.array(to_rgb(colour))
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(colour):
    """CIELAB of an sRGB hex colour (D65)."""
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = m @ _linear(colour) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_stick_colours_are_distinguishable_and_readable():
    assert viz.stick_colours(12) == viz.PALETTE
    colours = viz.stick_colours(36)
    # CIELAB distance > 10 between any two stick colours and the padding grey: apart at
    # a glance (a just-noticeable difference is about 2.3).
    for a, b in itertools.combinations((*colours, PAD), 2):
        assert np.linalg.norm(_lab(a) - _lab(b)) > 10, (a, b)
    assert viz.stick_colours(37)[36] == colours[0]  # past 36 the colours repeat
    # Numbers stay readable on every shade (WCAG contrast >= 4.5 with black or white).
    html = viz.logical_view((36, 64), dtype=F16, max_rows=36, max_cols=1)._repr_html_()
    for fill, text in re.findall(r"background:(#\w+);color:(#\w+)", html):
        hi, lo = sorted((0.2126, 0.7152, 0.0722) @ _linear(c) for c in (fill, text))[::-1]
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (fill, text)
    with pytest.raises(sj.LayoutError, match="must be >= 0, got -1"):
        viz.stick_colours(-1)


def test_pictures_of_padded_tiles_inside_larger_tiles():
    # Host [4800] as rows of 120 in two sticks, the second holding 56 values.
    layout = sj.SpyreTensorLayout.from_stride_map([3, 2, 14, 64], [120, 64, 360, 1], F16)
    dev = viz.device_memory((4800,), layout, max_rows=14 * 2 + 3)
    # Sticks (0, 1, t) hold lanes 64..119 of row 3 t: 56 values, then 8 padding cells.
    assert dev.row_labels[14] == "(0, 1, 0)"
    assert dev.text[14, 0] == "64" and dev.text[14, 55] == "119"
    assert dev.padding[14:28, 56:].all() and not dev.padding[14:28, :56].any()
    assert not dev.padding[:14].any()
    logical = viz.logical_view((4800,), layout, max_cols=130)
    # Offsets 0..63 and 64..119 are two sticks of row 0; offset 120 starts row 1.
    assert logical.stick[0, 0] == logical.stick[0, 63] != logical.stick[0, 64]
    assert logical.stick[0, 64] == logical.stick[0, 119] != logical.stick[0, 120]


def test_pictures_of_equal_strides_and_empty_tensors():
    layout = sj.SpyreTensorLayout.from_stride_map([1, 60, 64], [64, 1, 1], F16)
    dev = viz.device_memory((60,), layout, max_rows=60)
    assert [dev.text[i, 0] for i in (0, 1, 59)] == ["0", "1", "59"]  # lane 0 of stick i
    assert dev.padding[:, 1:].all() and not dev.padding[:, 0].any()
    for shape in [(0,), (0, 150), (150, 0)]:
        for draw in (viz.device_memory, viz.logical_view, viz.host_memory):
            pic = draw(shape, dtype=F16)
            assert pic.text.size == 0 and pic._repr_html_()


# --- pictures of the device model -----------------------------------------------------------


def _rgb_distance(a: str, b: str) -> float:
    return float(np.linalg.norm(np.subtract(to_rgb(a), to_rgb(b))))


@pytest.mark.parametrize("n", [1, 2, 12, 13, 32])
def test_core_colours_are_distinct_and_readable(n):
    colours = viz.core_colours(n)
    assert len(colours) == n
    for a, b in itertools.combinations(colours, 2):
        assert _rgb_distance(a, b) > 0.1, (a, b)
    for c in colours:  # black text stays readable: no dark fills (luma above 0.25)
        assert 0.299 * to_rgb(c)[0] + 0.587 * to_rgb(c)[1] + 0.114 * to_rgb(c)[2] > 0.25


def test_core_ownership_of_32_cores_has_a_colour_and_a_legend_entry_per_core():
    r = sj.explain(
        lambda a, b: a + b,
        jax_struct((2048, 512), F16),
        jax_struct((2048, 512), F16),
    )
    pic = viz.core_ownership(r.ops[0].division)
    assert pic.cores() == tuple(range(32))
    colours = pic.colours()
    assert len(set(colours.values())) == 32
    fig = pic.figure()
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [f"core {c}" for c in range(32)]
    image = ax.images[0].get_array()
    grid = pic.rows()
    for c in (0, 17, 31):  # every stick a core owns is drawn in that core's colour
        rows, cols = np.nonzero(grid == c)
        np.testing.assert_allclose(image[rows, cols], np.tile(to_rgb(colours[c]), (len(rows), 1)))
    page = pic._repr_html_()
    assert all(f"core {c}</span>" in page for c in range(32))
    plt.close(fig)


def test_core_labels_sit_on_a_stick_of_their_own_core():
    owner = np.repeat(np.arange(24), 4).reshape(8, 12)
    owner[0, 0] = -1
    pic = viz.CoreMap(owner, (owner >= 0).astype(int), "toy")
    fig = pic.figure()
    ax = fig.axes[0]
    texts = {t.get_text(): t.get_position() for t in ax.texts}
    assert set(texts) == {str(c) for c in range(24)}
    for c, (x, y) in texts.items():
        assert owner[round(y), round(x)] == int(c)
    np.testing.assert_array_equal(ax.images[0].get_array()[0, 0], (1.0, 1.0, 1.0))
    plt.close(fig)


def _overlaps(boxes):
    return [
        (i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if a.overlaps(b)
    ]


@pytest.mark.parametrize("count", [3, 40])
def test_roofline_labels_never_overlap(count):
    # Points on top of each other: every label would be drawn at the same place.
    names = tuple(f"{k}_matmul" for k in range(count))
    intensity = np.full(count, 50.0) * (1 + 1e-3 * np.arange(count))
    achieved = np.full(count, 1e12) * (1 + 1e-3 * np.arange(count))
    roof = viz.Roofline(names, intensity, achieved, peak=2e13, bandwidth=2e11)
    fig = roof.figure()
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if t.get_text() in names]
    assert sorted(t.get_text() for t in labels) == sorted(names)
    # The texts themselves (an Annotation's own extent includes its leader line).
    boxes = [Text.get_window_extent(t, renderer) for t in labels]
    assert not _overlaps(boxes)
    plt.close(fig)


def jax_struct(shape, dtype):
    import jax

    return jax.ShapeDtypeStruct(shape, dtype)
