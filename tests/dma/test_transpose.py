"""The host DMA engine's element-transpose kernel (``spyrejax.dma._transpose``, C).

The oracle is NumPy: the kernel's copy between two strided views must equal
``dst_view[...] = src_view`` bit for bit, and must not touch a byte outside the
destination view.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import random_bits

_transpose = pytest.importorskip(
    "spyrejax.dma._transpose", reason="spyrejax was built without its C transpose kernel"
)

WIDTHS = (1, 2, 4, 8)


def _strided(buf, item, shape, strides, offset):
    return np.ndarray(shape, f"u{item}", buf, offset, strides)


def _run(shape, src_order, dst_order, item, rng, *, pad=(0, 0), gap=(0, 0)):
    """Copy between views laid out in the given memory orders; compare with NumPy.

    ``pad`` adds bytes before each view, ``gap`` extra elements to each view's
    outermost dim (so rows are farther apart than their length).
    """
    views = []
    for order, before, extra in zip((src_order, dst_order), pad, gap, strict=True):
        dims = [shape[k] for k in order]
        dims[0] += extra
        strides_in_order = [int(np.prod(dims[i + 1 :])) * item for i in range(len(dims))]
        strides = [0] * len(shape)
        for position, k in enumerate(order):
            strides[k] = strides_in_order[position]
        buf = random_bits((before + int(np.prod(dims)) * item,), np.uint8, rng)
        views.append((buf, tuple(strides), before))
    (src_buf, s_strides, s_off), (dst_buf, d_strides, d_off) = views
    src = _strided(src_buf, item, shape, s_strides, s_off)
    src[...] = random_bits(shape, f"u{item}", rng)
    want = dst_buf.copy()
    _strided(want, item, shape, d_strides, d_off)[...] = src
    _transpose.transpose(dst_buf, d_off, d_strides, src_buf, s_off, s_strides, shape, item)
    np.testing.assert_array_equal(dst_buf, want)  # the view copied, nothing else touched


def _is_transpose(shape, src_order, dst_order):
    big = [k for k in range(len(shape)) if shape[k] > 1]
    inner = [k for k in src_order if shape[k] > 1], [k for k in dst_order if shape[k] > 1]
    return bool(big) and inner[0][-1] != inner[1][-1]


@pytest.mark.parametrize("item", WIDTHS)
@pytest.mark.parametrize(
    "shape", [(16, 16), (3, 5), (17, 33), (64, 64), (2, 70, 9), (5, 1, 130, 7)]
)
def test_every_transposing_order_matches_numpy(shape, item):
    rng = np.random.default_rng(len(shape) * 10 + item)
    for dst_order in itertools.permutations(range(len(shape))):
        src_order = tuple(range(len(shape)))
        if _is_transpose(shape, src_order, dst_order):
            _run(shape, src_order, dst_order, item, rng)


@pytest.mark.parametrize("item", WIDTHS)
def test_stick_shaped_transposes_both_ways(item):
    # The DMA case: host rows -> device sticks of 128 bytes and back, partial last tile.
    lanes, rng = 128 // item, np.random.default_rng(item)
    for cols in (lanes, lanes - 3):
        shape = (3, 40, cols)  # tiles, columns, lanes
        _run(shape, (0, 2, 1), (0, 1, 2), item, rng)  # host -> device
        _run(shape, (0, 1, 2), (0, 2, 1), item, rng)  # device -> host


@given(
    shape=st.lists(st.integers(1, 40), min_size=2, max_size=4),
    data=st.data(),
    item=st.sampled_from(WIDTHS),
)
def test_property_kernel_matches_numpy(shape, data, item):
    n = len(shape)
    src_order = tuple(data.draw(st.permutations(range(n))))
    dst_order = tuple(data.draw(st.permutations(range(n))))
    pad = (data.draw(st.integers(0, 9)), data.draw(st.integers(0, 9)))
    gap = (data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if _is_transpose(shape, src_order, dst_order):
        _run(tuple(shape), src_order, dst_order, item, rng, pad=pad, gap=gap)
    else:
        with pytest.raises(ValueError, match="not an element transpose"):
            _run(tuple(shape), src_order, dst_order, item, rng, pad=pad, gap=gap)


def _args(**changes):
    src, dst = np.zeros(64, np.uint8), np.zeros(64, np.uint8)
    args = dict(
        dst=dst, dst_offset=0, dst_strides=(16, 2), src=src, src_offset=0, src_strides=(2, 8)
    )
    args.update(shape=(4, 8), itemsize=2)
    args.update(changes)
    return tuple(args.values())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dst_offset": 2}, "dst view spans bytes 2..65, outside its 64-byte buffer"),
        ({"src_offset": -2}, "src view spans"),
        ({"src_strides": (2, -8)}, "src stride -8 of dim 1 is negative"),
        ({"itemsize": 3}, "itemsize must be 1, 2, 4 or 8, got 3"),
        ({"shape": (64,), "dst_strides": (1,), "src_strides": (1,)}, "expected 2 to 32 dims"),
        ({"shape": (4, -8)}, "negative size -8"),
        ({"dst_strides": (16,)}, "dst_strides: expected 2 entries, got 1"),
        ({"dst_strides": (2, 8)}, "not an element transpose"),
    ],
)
def test_bad_arguments_raise_before_writing(changes, message):
    args = _args(**changes)
    with pytest.raises(ValueError, match=message):
        _transpose.transpose(*args)
    assert not args[0].any()


def test_readonly_destination_and_empty_views():
    src = np.arange(64, dtype=np.uint8)
    src.flags.writeable = False
    readonly = np.zeros(64, np.uint8)
    readonly.flags.writeable = False
    with pytest.raises((TypeError, BufferError)):
        _transpose.transpose(readonly, 0, (16, 2), src, 0, (2, 8), (4, 8), 2)
    dst = np.zeros(64, np.uint8)
    _transpose.transpose(dst, 0, (16, 2), src, 0, (2, 8), (0, 8), 2)  # nothing to copy
    _transpose.transpose(dst, 10**9, (16, 2), src, 0, (2, 8), (4, 0), 2)
    assert not dst.any()
    _transpose.transpose(dst, 0, (16, 2), src, 0, (2, 8), (4, 8), 2)  # read-only src is fine
    np.testing.assert_array_equal(
        dst.view(np.uint16).reshape(4, 8), src.view(np.uint16).reshape(8, 4).T
    )


# --- copy_runs: descriptors that move contiguous runs ------------------------------------


def _runs_case(rng, sizes, run, *, stream, pad=(0, 0)):
    """copy_runs between a packed source and a destination walked in reversed loop order.

    Returns the destination buffer and the NumPy oracle's (the same view assigned).
    """
    n = len(sizes)
    src_strides = [run * int(np.prod(sizes[k + 1 :])) for k in range(n)]
    dst_strides = [run * int(np.prod(sizes[:k])) for k in range(n)]  # loop order reversed
    total = run * int(np.prod(sizes))
    src = random_bits((pad[0] + total,), np.uint8, rng)
    dst = random_bits((pad[1] + total,), np.uint8, rng)
    want = dst.copy()
    view = np.dtype(f"V{run}")
    src_view = np.ndarray(sizes, view, src, pad[0], src_strides)
    np.ndarray(sizes, view, want, pad[1], dst_strides)[...] = src_view
    _transpose.copy_runs(dst, pad[1], dst_strides, src, pad[0], src_strides, sizes, run, stream)
    return dst, want


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("run", [1, 2, 16, 48, 64, 128, 130])
def test_copy_runs_matches_numpy(run, stream):
    # Runs of every length (streaming stores only for multiples of 16 at aligned places;
    # the others fall back to ordinary copies), at aligned and unaligned offsets.
    rng = np.random.default_rng(run)
    for sizes in ((), (5,), (3, 7), (2, 3, 4)):
        for pad in ((0, 0), (3, 16), (16, 5)):
            dst, want = _runs_case(rng, sizes, run, stream=stream, pad=pad)
            np.testing.assert_array_equal(dst, want)


@given(
    sizes=st.lists(st.integers(1, 9), max_size=4),
    run=st.sampled_from([2, 16, 32, 64, 128, 96]),
    pad=st.tuples(st.sampled_from([0, 16, 64, 7]), st.sampled_from([0, 16, 64, 7])),
    stream=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_copy_runs_matches_numpy(sizes, run, pad, stream, seed):
    dst, want = _runs_case(np.random.default_rng(seed), tuple(sizes), run, stream=stream, pad=pad)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dst_offset": 1}, "dst view spans bytes 1..64, outside its 64-byte buffer"),
        ({"src_strides": (-16,)}, "src stride -16 of dim 0 is negative"),
        ({"run": 0}, "run must be at least 1 byte, got 0"),
        ({"shape": (-1,)}, "negative size -1"),
        ({"dst_strides": (16, 16)}, "dst_strides: expected 1 entries, got 2"),
    ],
)
def test_copy_runs_bad_arguments_raise_before_writing(changes, message):
    src, dst = np.ones(64, np.uint8), np.zeros(64, np.uint8)
    args = dict(dst=dst, dst_offset=0, dst_strides=(16,), src=src, src_offset=0)
    args.update(src_strides=(16,), shape=(4,), run=16, stream=True)
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        _transpose.copy_runs(*args.values())
    assert not dst.any()
