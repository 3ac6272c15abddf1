"""Work division over cores: the spec's worked examples and the laws of a division."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.device import (
    Machine,
    TensorSpec,
    divide,
    elementwise_space,
    matmul_space,
    matmul_time,
    ragged_splits,
    reduce_space,
)
from spyrejax.layout import SpyreTensorLayout

F16 = np.float16


def spec(shape, order=None, dtype=F16):
    return TensorSpec.of(shape, SpyreTensorLayout(shape, dtype, order))


def add_space(shape):
    x = spec(shape)
    return elementwise_space("add", x, [x, x])


# --- the spec's worked examples ----------------------------------------------------------


def test_big_matmul_forces_a_k_split_then_distributes_m():
    space = matmul_space(spec((8192, 32768)), spec((32768, 4096)), spec((8192, 4096)))
    assert [(d.name, d.units) for d in space.dims] == [("mb", 8192), ("out", 64), ("in", 512)]
    d = divide(space, Machine.spyre())
    assert dict(d.splits) == {"mb": 16, "out": 1, "in": 2}
    assert d.how == "span" and d.committed == ("in",)
    assert [d.core_bytes(i) for i in range(3)] == [16 * 2**20, 128 * 2**20, 4 * 2**20]
    assert d.span(0) == 256 * 2**20  # the largest span within the limit


def test_the_big_matmuls_unsplit_span_is_512_mib():
    space = matmul_space(spec((8192, 32768)), spec((32768, 4096)), spec((8192, 4096)))
    with pytest.raises(sj.DeviceError, match="span"):
        divide(space, Machine.spyre(), hint={"in": 1, "mb": 32})


def test_add_of_512_by_512_splits_rows_32_ways_2048_bytes_apart():
    d = divide(add_space((512, 512)), Machine.spyre())
    assert dict(d.splits) == {"mb": 1, "out": 32}
    for i in range(3):
        assert d.offsets(i) == tuple(2048 * c for c in range(32))
        assert d.box_shape(i, 5) == (8, 16, 64)


def test_splits_2_by_3_on_12_cores_map_first_dim_fastest():
    x = spec((2, 192))  # mb: 3 sticks, out: 2 rows
    d = divide(elementwise_space("add", x, [x]), Machine.spyre(12), hint={"out": 2, "mb": 3})
    d = type(d)(d.space, {"out": 2, "mb": 3}, 12, ("out", "mb"))
    coords = [tuple(d.core_to_slice(c)[n] for n in ("out", "mb")) for c in range(12)]
    assert coords == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)] * 2


def test_100_by_150_elementwise_uses_25_cores():
    d = divide(add_space((100, 150)), Machine.spyre())
    assert dict(d.splits) == {"mb": 1, "out": 25} and d.cores_used == 25


def test_the_stick_dim_counts_in_sticks():
    d = divide(add_space((1, 150 * 64)), Machine.spyre())
    assert d.space.dim("mb").units == 150 and dict(d.splits) == {"mb": 30, "out": 1}
    assert all(d.box_shape(0, c)[-1] == 64 for c in range(30))


# --- hints --------------------------------------------------------------------------------


def test_a_hint_wins():
    d = divide(add_space((512, 512)), Machine.spyre(), hint={"mb": 8})
    assert dict(d.splits) == {"mb": 8, "out": 4} and d.how == "hint"


@pytest.mark.parametrize(
    "hint, match",
    [
        ({"mb": 0}, "positive"),
        ({"mb": 3}, "does not divide"),
        ({"mb": 8, "out": 8}, "more than 32"),
        ({"zz": 2}, "no dim 'zz'"),
        ({"out": 2.0}, "positive int"),
    ],
)
def test_bad_hints_are_named_errors(hint, match):
    with pytest.raises(sj.DeviceError, match=match):
        divide(add_space((512, 512)), Machine.spyre(), hint=hint)


def test_at_most_one_reduction_dim_may_be_split():
    x = spec((64, 128, 256))
    space = reduce_space("sum", x, spec((64,)), (1, 2))
    with pytest.raises(sj.DeviceError, match="one reduction"):
        divide(space, Machine.spyre(), hint={"mb": 2, "x": 2})


# --- laws -----------------------------------------------------------------------------------

shapes = st.lists(st.integers(1, 300), min_size=1, max_size=3).map(tuple)


def _coverage(d, operand):
    """How many active cores cover each position of an operand's device image."""
    t = d.space.operands[operand].tensor
    count = np.zeros(t.layout.device_size, np.int64)
    for c in range(d.cores_used):
        count[tuple(slice(a, b) for a, b in d.box(operand, c))] += 1
    return count


def _check_laws(d, machine):
    assert d.cores_used <= machine.cores
    for dim in d.space.dims:  # even, or ragged with no empty slice
        s = d.splits[dim.name]
        assert dim.units % s == 0 or (dim.name in d.ragged and s in ragged_splits(dim.units, s))
    # the active cores take every slice combination exactly once
    seen = {tuple(sorted(d.core_to_slice(c).items())) for c in range(d.cores_used)}
    assert len(seen) == d.cores_used
    # the output's boxes tile its image, once per slice of the reduced dims
    reps = math.prod(d.splits[x.name] for x in d.space.dims if x.reduced)
    out = len(d.space.operands) - 1
    assert (_coverage(d, out) == reps).all()
    assert all(d.span(i, c) <= machine.span_limit for i in range(out + 1) for c in range(3))


@given(shapes, st.sampled_from([1, 2, 3, 12, 32]))
def test_elementwise_divisions_tile_the_space(shape, cores):
    m = Machine.spyre(cores)
    _check_laws(divide(add_space(shape), m), m)


@given(shapes, st.data())
def test_reduction_divisions_tile_the_space(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    x = spec(shape)
    out_shape = shape[:axis] + shape[axis + 1 :]
    out = TensorSpec.of(
        out_shape,
        SpyreTensorLayout(out_shape, F16) if out_shape else SpyreTensorLayout((), F16),
    )
    if axis == len(shape) - 1 or not out_shape:
        return  # sparse results: covered by the jit-level tests
    m = Machine.spyre()
    _check_laws(divide(reduce_space("sum", x, out, (axis,)), m), m)


@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300), st.sampled_from([4, 32]))
def test_matmul_divisions_tile_the_space(m_, k, n, cores):
    m = Machine.spyre(cores)
    space = matmul_space(spec((m_, k)), spec((k, n)), spec((m_, n)))
    d = divide(space, m)
    _check_laws(d, m)
    a_count = _coverage(d, 0)
    assert (a_count == d.splits["out"]).all()  # A is read by each N slice


def test_granites_lm_head_splits_its_prime_vocabulary_raggedly():
    # 49155 columns are 769 sticks (a prime): no even N split, and with N whole each
    # core's box of the weight ([769, 4096, 64]) spans 403 MB, over the 256 MiB limit,
    # whatever K's split. Pass 1 takes the ragged N split of largest span: 2 slices of
    # 385 sticks, the second one stick short.
    a, b, out = spec([4, 4096]), spec([4096, 49155]), spec([4, 49155])
    m = Machine.spyre()
    d = divide(matmul_space(a, b, out), m)
    assert d.how == "span" and d.ragged == ("out",) and d.splits["out"] == 2
    assert d.chunk("out") == 385 * 64
    owners = {d.core_to_slice(c)["out"]: c for c in range(d.cores_used)}
    assert d.extent("out", owners[0]) == 385 * 64 and d.extent("out", owners[1]) == 49155 - 385 * 64
    assert d.box_shape(1, owners[1])[0] == 384  # the weight's box stops at its last stick
    assert max(d.span(1, c) for c in range(d.cores_used)) == 385 * 4096 * 128 <= m.span_limit
    _check_laws(d, m)


def test_a_ragged_matmul_reads_its_short_slice_short():
    # Granite's head, N in 385 + 384 sticks: the weight's DDR bytes per pass through LX
    # are its own 769 sticks', not two full slices' (770), with A kept in LX.
    a, b, out = spec([4, 4096]), spec([4096, 49155]), spec([4, 49155])
    m = Machine.spyre()
    d = divide(matmul_space(a, b, out), m)
    assert d.ragged == ("out",)
    t = matmul_time(d, m, frozenset({0}))
    assert t.read_bytes == 769 * 4096 * 128 * t.passes[1] == b.nbytes * t.passes[1]


def test_an_even_split_that_fits_is_kept_over_a_ragged_one():
    # 49152 columns, 768 sticks: N = 2 divides; the same division as 49155's but even.
    a, b, out = spec([4, 4096]), spec([4096, 49152]), spec([4, 49152])
    d = divide(matmul_space(a, b, out), Machine.spyre())
    assert d.ragged == () and d.splits["out"] == 2


@pytest.mark.parametrize(
    "units, limit, want", [(769, 4, [2, 3, 4]), (10, 8, [3, 4]), (5, 4, [2, 3])]
)
def test_ragged_splits_leave_no_slice_empty(units, limit, want):
    # 10 units: 6, 7 and 8 slices of 2 would leave the last ones empty (5 slices hold all
    # 10), so only 3 (4, 4, 2) and 4 (3, 3, 3, 1) are ragged splits; 5 and 2 divide it.
    assert ragged_splits(units, limit) == want


@given(st.integers(1, 40), st.integers(1, 700), st.integers(1, 700), st.sampled_from([4, 32]))
def test_a_small_span_limit_forces_legal_divisions_that_tile_the_space(m_, k, n, cores):
    # A span limit of a few sticks forces pass 1 on small shapes (ragged where no even
    # split fits): the division's laws hold, or the refusal is a named error.
    m = dataclasses.replace(Machine.spyre(cores), span_limit=8 * 4096)
    space = matmul_space(spec((m_, k)), spec((k, n)), spec((m_, n)))
    try:
        d = divide(space, m)
    except sj.DeviceError as e:
        assert "no division" in str(e)
        return
    _check_laws(d, m)
    assert all(d.span(i, c) <= m.span_limit for i in range(3) for c in range(d.cores_used))


def test_a_division_no_span_allows_is_refused_saying_why():
    # A 1 x 2^21 fp16 row: its one device dim past the stick is the row of sticks, and a
    # span limit under one stick's row cannot be met by any split, even or ragged.
    m = dataclasses.replace(Machine.spyre(), span_limit=64)
    with pytest.raises(sj.DeviceError, match=r"no division .*even or ragged.*spans") as e:
        divide(add_space((4, 4096)), m)
    # The refusal lists the ragged splits it tried too, not only the even ones: 64 sticks
    # over at most 32 cores.
    assert f"even {[1, 2, 4, 8, 16, 32]}, ragged {ragged_splits(64, 32)}" in str(e.value)
    assert ragged_splits(64, 32)[:3] == [3, 5, 6]


@pytest.mark.parametrize("tokens", [4, 512])
def test_explain_of_granites_lm_head_streams_its_weights(tokens):
    # Decode (batch 4) and prefill (512 tokens): a division, and a time no faster than
    # streaming the 403 MB of weights at the model's DDR rate; decode, whose matmul is
    # nothing but that stream, within 10% of it.
    import jax

    x = jax.ShapeDtypeStruct((tokens, 4096), F16)
    w = jax.ShapeDtypeStruct((4096, 49155), F16)
    r = sj.explain(lambda x, w: x @ w, x, w)
    (op,) = [o for o in r.ops if o.division is not None]
    assert op.division.ragged == ("out",) and op.division.cores_used == 32
    stream = 4096 * 49155 * 2 / Machine.spyre().ddr_bw
    assert stream <= op.time_s
    if tokens == 4:
        assert op.time_s <= 1.1 * stream
