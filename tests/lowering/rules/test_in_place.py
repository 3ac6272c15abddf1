"""Results written in place through gaps under ``sj.jit`` (issue 26, item 2).

A ``concatenate`` of computed pieces and a ``dynamic_update_slice`` (a KV cache grown
over decode steps) write each piece into its window of the destination's buffer: the
producers' results are planned in a layout with gaps that is a window of it, so
``explain`` shows no copy for them, and the values are ``jax.jit``'s.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit, rand
from hypothesis import given
from hypothesis import strategies as st
from oracles import random_bits, same_bits

import spyrejax as sj
from spyrejax.device._superdsc import validate_superdsc
from spyrejax.primitives._in_place import _piece_bits, _remember_piece, window_layout

F16 = np.float16


def _copies(report, prim):
    return sum(cost for what, cost in report.copies if what.startswith(prim))


# --- the window: a piece's layout inside the destination's buffer --------------------


@st.composite
def _pieces(draw):
    rank = draw(st.integers(1, 3))
    outer = [draw(st.integers(1, 9)) for _ in range(rank - 1)]
    shape = (*outer, draw(st.sampled_from([5, 64, 70, 128, 200])))
    piece, offsets = [], []
    for n in shape:
        p = draw(st.integers(1, n))
        piece.append(p)
        offsets.append(draw(st.integers(0, n - p)))
    order = draw(st.permutations(range(rank)))
    dtype = draw(st.sampled_from([np.float16, np.float32, np.int8]))
    return shape, tuple(piece), tuple(offsets), list(order), dtype


@given(_pieces())
def test_a_window_puts_every_element_where_the_destination_does(case):
    shape, piece, offsets, order, dtype = case
    dest = sj.SpyreTensorLayout(shape, dtype, order)
    try:
        window = window_layout(dest, shape, piece, offsets)
    except sj.LayoutError as err:
        assert str(err).startswith("window:")  # refused by name, never approximated
        return
    assert window.device_size == dest.device_size
    assert window.valid_size == sj.SpyreTensorLayout(piece, dtype, order).device_size
    d, w = dest.for_host(shape), window.for_host(piece)
    for index in itertools.product(*map(range, piece)):
        at = tuple(i + o for i, o in zip(index, offsets, strict=True))
        assert w.device_coord(index) == d.device_coord(at)


def test_a_window_along_the_stick_dim_needs_whole_sticks():
    dest = sj.SpyreTensorLayout((8, 256), F16)
    assert window_layout(dest, (8, 256), (8, 128), (0, 128)).device_gaps[0] == (2, 0)
    with pytest.raises(sj.LayoutError, match="whole steps of 64"):
        window_layout(dest, (8, 256), (8, 32), (0, 32))
    small = sj.SpyreTensorLayout((10, 6), F16)
    with pytest.raises(sj.LayoutError, match="stick dim alone"):
        window_layout(small, (10, 6), (10, 3), (0, 3))


# --- concatenate ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(100, 64), (30, 64)], 0),  # along the sequence
        ([(2, 4, 48, 64), (2, 4, 16, 64)], 2),  # a KV cache's sequence dim
        ([(8, 64), (8, 128), (8, 64)], 1),  # along the stick dim: whole sticks
        ([(3, 5, 70), (3, 2, 70)], 1),
    ],
)
def test_a_concatenate_of_computed_pieces_writes_them_in_place(shapes, axis):
    def f(*xs):
        return jnp.concatenate([x * 2 + 1 for x in xs], axis=axis)

    args = [rand(s, F16, seed=k) for k, s in enumerate(shapes)]
    report = sj.explain(f, *args)
    assert report.copy_cost == 0 and report.restickify_cost == 0
    assert "Assemble" in report.jaxpr and "gaps=" in report.jaxpr
    assert_matches_jax_jit(f, *args, exact=True)


@pytest.mark.plain_program  # under --emulate-check the writes also run per core
def test_bfloat16_pieces_are_joined_from_their_own_bits():
    # A piece padded into its window leaves a bfloat16 pad fenced (dma._dma.from_bits),
    # which kept XLA from folding the join's slice of it: each piece was written padded
    # to the whole buffer, then copied (the placed Llama block's RoPE, issue 24). The
    # join now reads the pieces' own bits, a concatenate: no pad is left to run.
    def f(a, b):
        return jnp.concatenate([-a, -b], axis=0)

    rng = np.random.default_rng(3)
    args = random_bits((100, 64), jnp.bfloat16, rng), random_bits((30, 64), jnp.bfloat16, rng)
    assert "Assemble" in sj.explain(f, *args).jaxpr
    device_args = [sj.to_device(x) for x in args]
    assert " pad(" not in sj.jit(f).lower(*device_args).compile().as_text()
    assert same_bits(sj.to_host(sj.jit(f)(*device_args)), -np.concatenate(args))


def test_a_concatenate_that_cannot_be_written_in_place_is_a_copy():
    # A piece ending inside a stick of a row of two sticks: no window holds the second
    # piece, and no lane window either (a row is more than a stick), so the result's 8
    # rows of two sticks are copied.
    def f(a, b):
        return jnp.concatenate([a * 2, b * 2], axis=1)

    args = rand((8, 32), F16), rand((8, 64), F16, seed=1)
    report = sj.explain(f, *args)
    assert _copies(report, "concatenate") == 8 * 2 * 64
    assert_matches_jax_jit(f, *args, exact=True)
    # Half sticks of a row of one stick are lane windows: each piece written on its
    # lanes of the result's sticks (primitives._lanes), nothing copied.
    args = rand((8, 32), F16), rand((8, 32), F16, seed=1)
    report = sj.explain(f, *args)
    assert report.copy_cost == 0 and "LaneAssemble" in report.jaxpr
    assert_matches_jax_jit(f, *args, exact=True)


def test_inputs_are_copied_into_a_concatenate_but_a_computed_piece_may_be_shared():
    # An input is no fresh result: it cannot be written in place, so the join copies.
    def f(a, b):
        y = a * 2
        return jnp.concatenate([y, b], axis=0), y + 1

    args = rand((16, 64), F16), rand((16, 64), F16, seed=1)
    assert sj.explain(f, *args).copy_cost > 0
    assert_matches_jax_jit(f, *args, exact=True)


def test_a_piece_that_is_also_a_result_is_returned_without_gaps():
    def f(a, b):
        y = a * 2
        return jnp.concatenate([y, b * 3], axis=0), y

    args = rand((16, 64), F16), rand((8, 64), F16, seed=1)
    assert sj.explain(f, *args).copy_cost == 0
    joined, y = sj.jit(f)(*args)
    assert not jax.typeof(y).layout.has_gaps and not jax.typeof(joined).layout.has_gaps
    assert_matches_jax_jit(f, *args, exact=True)


def test_a_piece_read_again_by_a_pointwise_op_is_read_in_its_window():
    # y is written into its window of the join's buffer; tanh reads it there (its
    # valid range), so nothing moves it out again.
    def f(a, b):
        y = a * 2
        return jnp.concatenate([y, b + 1], axis=0), jnp.tanh(y) + 1

    args = rand((100, 64), F16), rand((30, 64), F16, seed=1)
    report = sj.explain(f, *args)
    assert report.restickify_cost == report.copy_cost == 0 and "Place" in report.jaxpr
    assert_matches_jax_jit(f, *args, ops=2)


# --- dynamic_update_slice: a KV cache --------------------------------------------------

B, H, S, D = 1, 2, 64, 64


def _decode(cache, ks):
    def body(c, xs):
        t, k = xs
        return jax.lax.dynamic_update_slice(c, jnp.tanh(k), (0, 0, t, 0)), None

    return jax.lax.scan(body, cache, (jnp.arange(S), ks))[0]


def test_a_kv_cache_grown_over_64_decode_steps_is_never_copied():
    cache = np.zeros((B, H, S, D), F16)
    ks = rand((S, B, H, 1, D), F16)
    report = sj.explain(_decode, cache, ks)
    assert report.copy_cost == 0 and not report.copies
    body = report.jaxpr[report.jaxpr.index("scan") :]
    assert "UpdateAt" in body and "LaxCopy" not in body
    assert_matches_jax_jit(_decode, cache, ks, exact=True)


def test_a_donated_cache_fed_back_through_sj_jit_calls_is_updated_in_place():
    def step(cache, k, pos):
        return jax.lax.dynamic_update_slice(cache, k * 2, (0, 0, pos, 0))

    donated = sj.jit(step, static_argnums=2, donate_argnums=0)
    kept = sj.jit(step, static_argnums=2)
    cache, want = sj.to_device(np.zeros((B, H, S, D), F16)), np.zeros((B, H, S, D), F16)
    for pos in range(3):
        k = rand((B, H, 1, D), F16, seed=pos)
        report = sj.explain(donated, cache, k, pos)
        assert report.copy_cost == 0 and "gaps=1:" in report.jaxpr
        # Without donation the caller keeps the old cache: the update copies it.
        assert _copies(sj.explain(kept, cache, k, pos), "dynamic_update_slice") >= B * H * S * D
        cache = donated(cache, k, pos)
        want = jax.jit(step, static_argnums=2)(want, k, pos)
    np.testing.assert_array_equal(sj.to_host(cache), want)


def test_an_update_of_a_value_read_again_is_a_copy():
    def f(x, u):
        y = x * 2
        return jax.lax.dynamic_update_slice(y, u * 3, (1, 0)), y

    args = rand((8, 64), F16), rand((2, 64), F16, seed=1)
    assert _copies(sj.explain(f, *args), "dynamic_update_slice") > 0
    assert_matches_jax_jit(f, *args, exact=True)


# --- pad -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, config, value",
    [
        ((20, 64), ((3, 5), (0, 0)), 0.0),
        ((20, 256), ((0, 0), (64, 0)), 1.5),  # along the stick dim: whole sticks
        ((20, 20, 64), ((1, 2), (0, 0), (0, 0)), -2.0),
    ],
)
def test_a_pad_of_a_computed_value_writes_only_the_border(shape, config, value):
    def f(a):
        return jnp.pad(jnp.tanh(a), config, constant_values=value)

    a = rand(shape, F16)
    report = sj.explain(f, a)
    assert "FillAround" in report.jaxpr
    out = jax.eval_shape(f, a).shape
    assert _copies(report, "pad") == math.prod(out) - math.prod(shape)  # the border only
    assert_matches_jax_jit(f, a, exact=True)


def test_a_pad_with_interior_or_negative_padding_is_a_copy():
    def f(a):
        return jax.lax.pad(jnp.tanh(a), jnp.float16(0), ((1, -1, 1), (0, 0, 0)))

    a = rand((6, 64), F16)
    assert "FillAround" not in sj.explain(f, a).jaxpr
    assert_matches_jax_jit(f, a, exact=True)


# --- export ----------------------------------------------------------------------------


def test_the_producers_of_a_concatenate_export_their_gaps():
    def f(a, b):
        return jnp.concatenate([a * 2, b + 1], axis=0)

    e = sj.export(f, jax.ShapeDtypeStruct((128, 64), F16), jax.ShapeDtypeStruct((64, 64), F16))
    gaps = []
    for doc in e.superdsc:
        validate_superdsc(doc)
        ((_, body),) = doc.items()
        for op in body["dscs_"][0].values():
            out = op["labeledDs_"][-1]
            gaps.append((sum(out["frontGap_"].values()), sum(out["backGap_"].values())))
    assert sorted(gaps) == [(0, 64), (128, 0)]


def test_a_remembered_piece_of_another_shape_than_its_window_raises():
    """A join trusts a padded image's piece by identity: the shape is checked, not trusted."""
    window = sj.SpyreTensorLayout.row_major((4, 64), F16)
    img = np.zeros(window.device_size, np.uint16)

    def join(img, bits):
        _remember_piece(img, bits)
        return _piece_bits(img, window)

    jax.eval_shape(join, img, img)  # the piece's own shape: read back
    with pytest.raises(sj.SpyreInternalError, match="valid range"):
        jax.eval_shape(join, img, img[:3])
