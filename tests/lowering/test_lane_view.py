"""Strided slices along the stick read in place: lane-strided views (issue 26).

``x[..., k::2]`` (RoPE's interleaved pairs, also ``x.reshape(..., D/2, 2)[..., k]``) is a
:class:`LaneView`: its elements stay on lanes ``k, k + 2, ...`` of ``x``'s sticks. Pointwise
kernels read it lane by lane; every other primitive refuses it by name (the planner
moves it). Its values, through both DMA engines, are ``x``'s at the spread index.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit, rand
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import random_bits, same_bits

import spyrejax as sj
from spyrejax import primitives as sp
from spyrejax.device import divide_op
from spyrejax.layout._lanes import lane_window, laned
from spyrejax.lowering import checking_cores
from spyrejax.lowering.program._cores import CoreExecutor, dividing
from spyrejax.primitives._calls import executing
from spyrejax.primitives._lanes import lane_assemble, lane_place, lane_view

F16 = np.float16


def test_a_lane_view_holds_the_strided_slice_and_pointwise_kernels_read_it_in_place():
    x = random_bits((4, 2, 128), np.dtype(F16), np.random.default_rng(1))
    a = sj.to_device(x)
    even, odd = lane_view(a, 0, 2), lane_view(a, 1, 2)
    assert even.image is a.image or same_bits(even.image, a.image)  # nothing moves
    assert "lanes=1::2" in jax.typeof(odd).str_short()
    assert same_bits(sj.to_host(even), x[..., ::2]) and same_bits(sj.to_host(odd), x[..., 1::2])
    assert same_bits(sj.to_host(sj.restickify(odd)), x[..., 1::2])
    y = (np.arange(4 * 2 * 128, dtype=F16) / 64).reshape(4, 2, 128)  # finite, exact sums
    b, c = sj.to_device(y), sj.to_device(np.full((4, 1, 64), 2, F16))
    want = y[..., ::2] * 2 - y[..., 1::2]
    for f in (
        lambda b, c: lane_view(b, 0, 2) * c - lane_view(b, 1, 2),
        jax.jit(lambda b, c: lane_view(b, 0, 2) * c - lane_view(b, 1, 2)),
    ):
        got = f(b, c)
        assert not hasattr(got.layout, "lanes") and same_bits(sj.to_host(got), want)
    with pytest.raises(sj.LayoutError, match="does not read lane-strided views"):
        lane_view(b, 0, 2).sum(axis=0)
    with pytest.raises(sj.LayoutError, match="no multiple of 3"):
        lane_view(b, 0, 3)


@pytest.mark.parametrize("d", [64, 128])
def test_under_jit_strided_slices_and_picked_pairs_are_lane_views(d):
    def slices(x):
        return x[..., ::2] * 2 - jnp.tanh(x[..., 1::2])

    def picked(x):
        xr = x.reshape(*x.shape[:-1], d // 2, 2)
        return xr[..., 0] * 2 - jnp.tanh(xr[..., 1])

    x = rand((4, 2, d), F16, seed=3)
    for f in (slices, picked):
        report = sj.explain(f, x)
        assert report.copy_cost == 0 and not report.restickifies
        assert report.jaxpr.count("LaneView") == 2
        assert_matches_jax_jit(f, x, ops=3)
        got = sj.to_host(sj.jit(f, emulate="cores")(x))
        assert same_bits(got, sj.to_host(sj.jit(f)(x)))


def test_a_lane_view_a_reduction_reads_is_a_copy_and_gradients_flow():
    def f(x):
        return x[..., 1::2].sum(-1) + x[..., ::2].sum(-1)

    x = rand((4, 2, 128), jnp.float32, seed=4)
    assert_matches_jax_jit(f, x, reduce_len=64)
    assert "LaneView" not in sj.explain(f, x).jaxpr  # a sum refuses it: the slice copies

    def g(x):
        return (x[..., ::2] * x[..., 1::2]).sum()

    np.testing.assert_allclose(
        np.asarray(sj.to_host(sj.jit(jax.grad(g))(x))), np.asarray(jax.grad(g)(x)), rtol=1e-6
    )


def test_pieces_placed_on_their_lanes_assemble_the_interleaved_tensor():
    x = random_bits((3, 2, 64), np.dtype(F16), np.random.default_rng(2))
    y = random_bits((3, 2, 64), np.dtype(F16), np.random.default_rng(3))
    dest = sj.SpyreTensorLayout((3, 2, 128), F16)
    want = np.stack([x, y], -1).reshape(3, 2, 128)

    def join(a, b):
        pieces = [lane_place(a, laned(dest, 0, 2)), lane_place(b, laned(dest, 1, 2))]
        return lane_assemble(pieces, dest, (3, 2, 128))

    a, b = sj.to_device(x, dest.__class__((3, 2, 64), F16)), sj.to_device(y)
    for f in (join, jax.jit(join)):
        got = f(a, b)
        assert got.layout == dest and same_bits(sj.to_host(got), want)
    with pytest.raises(sj.LayoutError, match="is not lanes 0::2"):
        lane_assemble([lane_place(b, laned(dest, 1, 2))] * 2, dest, (3, 2, 128))
    with pytest.raises(sj.LayoutError, match=r"not .* read in order"):
        lane_place(
            sj.to_device(x, sj.SpyreTensorLayout.row_major((3, 2, 64), F16)), laned(dest, 0, 2)
        )


def test_lane_views_are_charged_the_sticks_of_their_buffer_once_per_op():
    # x [4, 2, 128] float16 in its default layout: 8 rows of 2 sticks of 64, 2,048 bytes.
    # The card reads a lane view as the whole sticks of its buffer, and an op reading
    # both lane sets of one stick reads it once: 2,048 bytes in both programs (the
    # product [4, 2, 64], 8 rows of one stick, writes 1,024).
    x = jnp.ones((4, 2, 128), jnp.float16)
    for f in (lambda x: x[..., ::2] * 2, lambda x: x[..., ::2] * x[..., 1::2]):
        (op,) = [o for o in sj.explain(f, x).ops if o.desc.kind == "compute"]
        assert (op.cost.read_bytes, op.cost.write_bytes) == (2048, 1024)
    # Lane windows likewise: [4, 2, 64] is 8 rows of one stick (1,024 bytes), read
    # whole for either half, once for both; the half-wide product still takes a stick
    # a row.
    x = jnp.ones((4, 2, 64), jnp.float16)
    for f in (lambda x: x[..., 32:] * 2, lambda x: x[..., 32:] * x[..., :32]):
        (op,) = [o for o in sj.explain(f, x).ops if o.desc.kind == "compute"]
        assert (op.cost.read_bytes, op.cost.write_bytes) == (1024, 1024)


@pytest.mark.parametrize(
    ("src", "dst"),
    [(jnp.bfloat16, np.float32), (F16, np.float32), (np.float32, jnp.bfloat16), (F16, np.bool_)],
)
@pytest.mark.parametrize("lanes", [(1, 2), (32, 1, 32)], ids=["1::2", "32:64"])
def test_astype_reads_a_lane_view_lane_by_lane(src, dst, lanes):
    # A conversion reads a lane view as a pointwise kernel does (its lanes in the
    # order of the piece's default layout) and writes a plain result: bfloat16's
    # pairs widened to float32 by the excess-precision rule (FMS's RoPE) are read in
    # place. Bit-exact against NumPy, eager and under jax.jit; D 80 has a partial stick.
    d = 64 if lanes[1] == 1 else 80
    if lanes[1] == 1 and np.dtype(src).itemsize == 4:
        d = 32  # a window needs a last dim within one stick
        lanes = (16, 1, 16)
    x = np.asarray(jax.random.normal(jax.random.key(3), (3, 2, d)) * 50).astype(src)
    k, s = lanes[:2]
    want = np.asarray(jnp.asarray(x[..., k::s] if s > 1 else x[..., k : k + lanes[2]]).astype(dst))
    for f in (lambda v: v.astype(dst), jax.jit(lambda v: v.astype(dst))):
        got = f(lane_view(sj.to_device(x), *lanes))
        assert not hasattr(got.layout, "lanes") and same_bits(sj.to_host(got), want)


def test_a_conversion_of_a_lane_view_is_charged_its_buffer_read_and_its_lanes_relaid():
    # x [4, 2, 128] bfloat16: 8 rows of 2 sticks, 2,048 bytes. x[..., 1::2] in float32
    # reads x's whole sticks (2,048 bytes) and writes [4, 2, 64] float32 (2,048); its
    # standard order is a relayout of the 16-bit side it converts, the lanes' 1,024
    # bytes, read and written (primitives._arranged.card_relayout_bytes), not the
    # buffer's 2,048.
    x = jnp.ones((4, 2, 128), jnp.bfloat16)
    report = sj.explain(lambda x: x[..., 1::2].astype(jnp.float32), x)
    assert report.copy_cost == 0 and "lanes=1::2" in report.jaxpr
    (op,) = [o for o in report.ops if o.desc.kind == "compute"]
    assert (op.cost.read_bytes, op.cost.write_bytes) == (2048, 2048)
    assert op.desc.space.relayout_bytes == 2 * 1024


def test_compact_of_a_lane_view_is_a_dense_copy():
    # a lane view fills every s-th lane of its sticks: compact gives full sticks again
    x = rand((4, 64), np.float32, seed=5)
    v = lane_view(sj.to_device(x), 1, 2)
    dense = sj.compact(v)
    assert dense.layout == sj.SpyreTensorLayout((4, 32), np.float32)
    assert same_bits(sj.to_host(dense), x[:, 1::2])


@pytest.mark.parametrize(
    ("shape", "dtype", "splits"),
    [
        ((64, 8, 128), F16, {"mb": 1, "x": 1, "out": 32}),
        ((7, 96), np.float32, {"mb": 2, "out": 7}),  # splits the stick: 2 lane-view tiles each
        ((2, 1, 256), F16, {"mb": 2, "x": 1, "out": 2}),
    ],
)
def test_pointwise_ops_reading_lane_views_are_divided_over_the_cores(shape, dtype, splits):
    """Each core loads its box of the buffer's sticks and reads its lanes ``k::s`` of them."""

    def f(x):
        return x[..., ::2] * 2 - jnp.tanh(x[..., 1::2])

    x = rand(shape, dtype, seed=3)
    divided = [op for op in sj.explain(f, x).ops if op.division is not None]
    assert [op.opfunc for op in divided] == ["mul", "tanh", "sub"]
    for op in divided[:2]:  # the two reading a lane view
        assert "lanes" in repr(op.division.space.inputs[0].tensor.layout)
        assert dict(op.division.splits) == splits
    with checking_cores() as check:
        want = sj.to_host(sj.jit(f)(x))
        jax.effects_barrier()
    assert check.take() == [] and not check.fallbacks
    assert dict(check.checked) == {"mul": 1, "tanh": 1, "sub": 1}
    assert same_bits(sj.to_host(sj.jit(f, emulate="cores")(x)), want)


@st.composite
def lane_reads(draw):
    """A buffer (default or row-major layout), a piece's lanes and a split of its stick's var."""
    dtype = np.dtype(draw(st.sampled_from([F16, np.float32, np.int8])))
    step = draw(st.sampled_from([2, 4, 8]))
    shape = [draw(st.integers(1, 5)) for _ in range(draw(st.integers(0, 2)))]
    shape = (*shape, step * draw(st.integers(2, 80)))  # a piece of one element: no lane
    order = None if draw(st.booleans()) else [*draw(st.permutations(range(len(shape) - 1))), -1]
    order = order and [d % len(shape) for d in order]
    buffer = sj.SpyreTensorLayout(shape, dtype, order)
    return buffer, shape, dtype, draw(st.integers(0, step - 1)), step, draw(st.integers(1, 4))


@settings(max_examples=15, deadline=None)  # each example compiles the per-core moves
@given(lane_reads(), st.integers(0, 2**32 - 1))
def test_property_a_lane_read_per_core_is_the_whole_kernels(case, seed):
    """Every core's box of the buffer, read at lanes ``k + s * c``: the slice's values."""
    buffer, shape, dtype, offset, step, mb = case
    x = (np.random.default_rng(seed).standard_normal(shape) * 50).astype(dtype)  # finite
    v = lane_view(sj.to_device(x, buffer), offset, step)
    seen = []

    def split_the_stick(space, machine, hint=None):
        var = space.names[0]  # the innermost dim's: the stick's
        split = {var: mb} if space.dim(var).units % mb == 0 else None
        seen.append(divide_op(space, machine, split))
        return seen[-1]

    # Traced under jax.jit, as the interpreter runs the executor: the per-core moves are one
    # program, not an eager compile of each of their ops (~23 an example).
    with executing(CoreExecutor()), dividing(split_the_stick):
        got = jax.jit(lambda v: sp.elementwise("maximum", v, v))(v)
    assert len(seen) == 1 and "lanes" in repr(seen[0].space.inputs[0].tensor.layout)
    assert same_bits(sj.to_host(got), x[..., offset::step])


# --- lane windows: x[..., a:b] of a last dim in one stick a row (rotate-half at f16 D 64) ---


def test_a_lane_window_holds_the_slice_and_windows_assemble_the_concatenate():
    x = random_bits((3, 2, 64), np.dtype(F16), np.random.default_rng(6))
    a = sj.to_device(x)
    lo, hi = lane_view(a, 0, 1, 32), lane_view(a, 32, 1, 32)
    assert "lanes=32:64" in jax.typeof(hi).str_short()
    assert same_bits(sj.to_host(lo), x[..., :32]) and same_bits(sj.to_host(hi), x[..., 32:])
    assert same_bits(sj.to_host(sj.restickify(hi)), x[..., 32:])
    dest = sj.SpyreTensorLayout((3, 2, 64), F16)
    y = (np.arange(3 * 2 * 64, dtype=F16) / 64).reshape(3, 2, 64)  # finite, exact products
    b = sj.to_device(y)
    want = np.concatenate([y[..., 40:] * 2, y[..., :40]], -1)

    def rotate(b):  # the windows of b swapped: each piece written on its lanes of dest
        first = lane_place(lane_view(b, 40, 1, 24) * 2, lane_window(dest, (3, 2, 64), 0, 24))
        second = lane_place(lane_view(b, 0, 1, 40) + 0, lane_window(dest, (3, 2, 64), 24, 64))
        return lane_assemble([first, second], dest, (3, 2, 64))

    for f in (rotate, jax.jit(rotate)):
        got = f(b)
        assert got.layout == dest and same_bits(sj.to_host(got), want)
    pieces = [lane_place(lane_view(b, 0, 1, 32) + 0, lane_window(dest, (3, 2, 64), 0, 32))]
    with pytest.raises(sj.LayoutError, match="do not fill"):
        lane_assemble(pieces, dest, (3, 2, 64))
    with pytest.raises(sj.LayoutError, match="is not lanes 32:64"):
        lane_assemble(
            [pieces[0], lane_place(lane_view(b, 0, 2) + 0, laned(dest, 1, 2))], dest, (3, 2, 64)
        )
    with pytest.raises(sj.LayoutError, match="no window"):  # lanes 40-63 and 0-15 of the next
        lane_view(sj.to_device(np.ones((3, 80), F16)), 40, 1, 40)


def test_tile_windows_hold_the_quarters_and_assemble_a_row_of_two_sticks():
    # x [3, 2, 80] in float16: a stick and 16 lanes a row. Its quarters cut at the half
    # (40) and at the stick boundary (64) each lie in one stick: tile windows of x, and
    # written on their windows of the result's sticks they make the rotated row.
    y = (np.arange(3 * 2 * 80, dtype=F16) / 64).reshape(3, 2, 80)  # finite, exact products
    b = sj.to_device(y)
    assert same_bits(sj.to_host(lane_view(b, 40, 1, 24)), y[..., 40:64])
    assert same_bits(sj.to_host(sj.restickify(lane_view(b, 64, 1, 16))), y[..., 64:])
    dest = sj.SpyreTensorLayout((3, 2, 80), F16)
    want = np.concatenate([y[..., 40:] * 2, y[..., :40]], -1)
    cuts = [(40, 0, 24), (64, 24, 16), (0, 40, 24), (24, 64, 16)]  # (from, to, lanes)

    def rotate(b):
        pieces = []
        for src, at, n in cuts:
            v = lane_view(b, src, 1, n) * (2 if at < 40 else 1)
            pieces.append(lane_place(v, lane_window(dest, (3, 2, 80), at, at + n)))
        return lane_assemble(pieces, dest, (3, 2, 80))

    for f in (rotate, jax.jit(rotate)):
        got = f(b)
        assert got.layout == dest and same_bits(sj.to_host(got), want)


@pytest.mark.parametrize("dtype", [F16, np.float32], ids=str)
def test_under_jit_halves_of_one_stick_are_lane_windows_and_their_concatenate_is_in_place(dtype):
    # float16 D 64 (float32 D 32): one stick a row, cut in half. The halves are lane
    # windows of x, and the concatenate of the computed halves writes each on its
    # lanes of the result: nothing copies, per core too.
    d = 128 // np.dtype(dtype).itemsize

    def f(x):
        h = d // 2
        return jnp.concatenate([jnp.tanh(x[..., h:]), x[..., :h] * 2], -1) + x

    x = rand((4, 2, d), dtype, seed=8)
    report = sj.explain(f, x)
    assert report.copy_cost == 0 and not report.restickifies
    # the sum with x runs half by half too: x is read on both windows twice
    assert report.jaxpr.count("= LaneView") == 4 and "LaneAssemble" in report.jaxpr
    assert f"lanes={d // 2}:{d}" in report.jaxpr
    assert_matches_jax_jit(f, x, ops=3)
    got = sj.to_host(sj.jit(f, emulate="cores")(x))
    assert same_bits(got, sj.to_host(sj.jit(f)(x)))


def test_windows_of_a_stick_with_padding_lanes_assemble_per_core():
    # [5, 24] float32: 24 of a stick's 32 lanes. The windows 20:24 and 0:20 of x are
    # computed and written on lanes 0:4 and 4:24 of the result; a core's box reaches
    # the padding lanes 24-31, which no piece owns (and no core stores).
    def f(x):
        return jnp.concatenate([x[..., 20:] + 1, x[..., :20] * 2], -1)

    x = rand((5, 24), np.float32, seed=9)
    report = sj.explain(f, x)
    assert report.copy_cost == 0 and "lanes=4:24" in report.jaxpr
    assert_matches_jax_jit(f, x, ops=2)
    got = sj.to_host(sj.jit(f, emulate="cores")(x))
    assert same_bits(got, sj.to_host(sj.jit(f)(x)))


def test_a_join_over_a_long_last_dim_is_copied_once_not_cut_a_part_a_stick():
    # Cutting an op's pieces at every stick boundary serves a head dim of a few sticks
    # (rotate-half at D 80); over eight fp16 sticks it made 31 equations and 50 s of
    # planning (1,024 lanes did not finish): past lowering._distribute._MAX_PARTS the
    # join is copied once, as before tile windows.
    x = rand((8, 512), jnp.float16, seed=1)
    y = rand((8, 412), jnp.float16, seed=2)

    def f(x, y):
        return jnp.concatenate([x[..., :100], y], -1) * 2

    report = sj.explain(f, x, y)
    assert report.jaxpr.count(" = ") <= 4
    assert report.copy_cost <= 3 * x.size  # the join and its pieces, once each
    assert_matches_jax_jit(f, x, y)


def test_a_broadcast_that_widens_a_windowed_dim_is_not_rewritten_to_the_window_alone():
    # broadcast_in_dim(c[:, 16:32], (4, 1, 16), (0, 2)) of a [1, 128] c inserts a dim
    # and widens c's row dim 1 -> 4: the window of c reshaped would have 1 row, not 4
    # (the rewrite once gave a [1, 1, 16] slice where the equation said [4, 1, 16]).
    def f(x, c):
        return x * jax.lax.broadcast_in_dim(c[:, 16:32], (4, 1, 16), (0, 2))

    x = rand((4, 1, 16), F16, seed=3)
    c = rand((1, 128), F16, seed=4)
    assert_matches_jax_jit(f, x, c)
