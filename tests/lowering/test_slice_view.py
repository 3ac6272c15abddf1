"""Slices as views (issue 26, item 3): a static slice seen in its window of the operand.

``x[..., D//2:]`` of a ``D``-stick tensor whose halves are whole sticks is a window of
``x``'s buffer: a layout with a front gap (the view's start offset, in device
positions), read through the gap rules by the index map, both DMA engines, pictures,
export and the cores mode. Under ``sj.jit`` such a slice is planned as a view and the
pointwise kernels read it in place (rotate-half's halves).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit, rand
from hypothesis import given
from hypothesis import strategies as st
from oracles import random_bits, same_bits

import spyrejax as sj
import spyrejax.viz as viz
from spyrejax.device._superdsc import validate_superdsc
from spyrejax.primitives._in_place import slice_view

F16 = np.float16


@st.composite
def _slices(draw):
    rank = draw(st.integers(1, 3))
    outer = [draw(st.integers(1, 6)) for _ in range(rank - 1)]
    shape = (*outer, draw(st.sampled_from([5, 64, 96, 128, 200])))
    start, limit = [], []
    for n in shape:
        a = draw(st.integers(0, n - 1))
        start.append(a)
        limit.append(draw(st.integers(a + 1, n)))
    order = draw(st.permutations(range(rank)))
    dtype = draw(st.sampled_from([np.float16, np.float32, np.int8]))
    return shape, tuple(start), tuple(limit), list(order), dtype


@given(_slices(), st.integers(0, 2**32 - 1))
def test_a_slice_view_is_its_window_bit_exact_both_ways(case, seed):
    # Refused by name where the slice cuts a device step; else the index map of the
    # window is the operand's at index + start, and the values come back bit for bit
    # eagerly and under jax.jit, from the operand's own image (nothing moves).
    shape, start, limit, order, dtype = case
    x = random_bits(shape, dtype, np.random.default_rng(seed))
    a = sj.to_device(x, sj.SpyreTensorLayout(shape, dtype, order))
    try:
        v = slice_view(a, start, limit)
    except sj.LayoutError as err:
        assert str(err).startswith("window:")
        return
    want = x[tuple(slice(s, e) for s, e in zip(start, limit, strict=True))]
    assert v.image is a.image or same_bits(v.image, a.image)
    assert same_bits(sj.to_host(v), want)
    assert same_bits(jax.jit(lambda b: sj.to_host(slice_view(b, start, limit)))(a), want)
    piece, whole = v.layout.for_host(want.shape), a.layout.for_host(shape)
    for index in itertools.islice(itertools.product(*map(range, want.shape)), 200):
        at = tuple(i + s for i, s in zip(index, start, strict=True))
        assert piece.device_coord(index) == whole.device_coord(at)


def test_a_slice_view_refuses_views_and_strided_cuts_by_name():
    a = sj.to_device(rand((4, 128), F16))
    with pytest.raises(sj.LayoutError, match="whole steps of 64"):
        slice_view(a, (0, 32), (4, 96))
    with pytest.raises(sj.LayoutError, match="is a view or a window"):
        slice_view(a.T, (0, 0), (64, 4))


def test_pictures_show_the_window_where_the_operand_has_it():
    x = np.arange(2 * 3 * 128, dtype=np.float32).astype(F16).reshape(2, 3, 128)
    v = slice_view(sj.to_device(x), (0, 0, 64), (2, 3, 128))
    pic = viz.device_memory(v, max_rows=8)
    # Device rows (h, half, t): the first half of each head is another value's slot.
    assert pic.stick[:, 0].tolist() == [-1, -1, 2, 3, -1, -1, 6, 7]
    assert pic.text[2:4, 0].tolist() == ["0", "192"]  # the piece's own host offsets


def _rotate(x):
    half = x.shape[-1] // 2
    return jnp.tanh(x[..., half:]) - x[..., :half] * 2


def _split_rotate(x):
    x1, x2 = jnp.split(x, 2, -1)
    return jnp.tanh(x2) - x1 * 2


@pytest.mark.parametrize("f", [_rotate, _split_rotate], ids=["slices", "split"])
def test_under_jit_the_halves_are_views_read_in_place(f):
    x = rand((4, 2, 128), F16, seed=3)
    report = sj.explain(f, x)
    assert report.copy_cost == 0 and not report.restickifies
    assert report.jaxpr.count("SliceView") == 2
    assert_matches_jax_jit(f, x, ops=3)
    got = sj.to_host(sj.jit(f, emulate="cores")(x))
    assert same_bits(got, sj.to_host(sj.jit(f)(x)))


def test_exported_kernels_read_the_halves_at_their_offsets():
    e = sj.export(_rotate, jax.ShapeDtypeStruct((4, 2, 128), F16))
    gaps = []
    for doc in e.superdsc:
        validate_superdsc(doc)
        ((_, body),) = doc.items()
        for op in body["dscs_"][0].values():
            for ds in op["labeledDs_"][:-1]:
                if "frontGap_" in ds:
                    gaps.append((sum(ds["frontGap_"].values()), sum(ds["backGap_"].values())))
    assert sorted(gaps) == [(0, 1), (1, 0)]


def test_the_cores_read_a_window_from_its_front_gap():
    # A piece written after another in a join and read again by a pointwise op: each
    # core's load starts at the window's front gap (it once started at the buffer's).
    def f(a, b):
        y = b + 1
        return jnp.concatenate([a * 2, y], axis=0), jnp.tanh(y)

    args = rand((64, 64), F16), rand((32, 64), F16, seed=1)
    want = [sj.to_host(v) for v in sj.jit(f)(*args)]
    got = [sj.to_host(v) for v in sj.jit(f, emulate="cores")(*args)]
    assert all(same_bits(g, w) for g, w in zip(got, want, strict=True))


def test_a_reduction_reads_a_window_and_a_matmul_has_it_moved_out():
    # Reductions iterate their operand's valid range: nothing moves. A matmul refuses a
    # window by name, so the planner copies the half, visibly (the slice's own copy,
    # which reads the half only: no restickify).
    x = rand((4, 2, 64), jnp.float32, seed=4)

    def reduced(x):
        return x[..., 32:].sum(1), x[..., :32].max(0)

    report = sj.explain(reduced, x)  # (the results return to their default layouts)
    assert report.copy_cost == 0 and not [r for r in report.restickifies if "(slice at" in r.value]
    assert report.jaxpr.count("SliceView") == 2
    assert_matches_jax_jit(reduced, x, reduce_len=4)
    cores = [sj.to_host(v) for v in sj.jit(reduced, emulate="cores")(x)]
    assert all(same_bits(c, w) for c, w in zip(cores, jax.jit(reduced)(x), strict=True))

    def product(x, w):
        return x[..., 32:] @ w

    w = rand((32, 32), jnp.float32, seed=5)
    report = sj.explain(product, x, w)
    assert [what.split(" at ")[0] for what, _ in report.copies] == ["slice"]
    assert not [r for r in report.restickifies if "(slice at" in r.value]
    assert "SliceView" not in report.jaxpr
    assert_matches_jax_jit(product, x, w, reduce_len=32)
