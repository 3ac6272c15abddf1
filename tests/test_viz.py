import matplotlib

matplotlib.use("Agg")

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_rgb

import spyrejax as sj
from spyrejax import viz

F16 = np.float16


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
    assert text.count("border-top") == 1  # layout [2, 3, 64]: two tiles of 3 sticks


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
