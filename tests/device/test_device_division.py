"""Work division over cores: the spec's worked examples and the laws of a division."""

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
    for dim in d.space.dims:
        assert dim.units % d.splits[dim.name] == 0
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


def test_a_division_no_span_allows_is_refused_saying_why():
    # Granite's LM head: 49155 columns are 769 sticks (a prime), so N cannot be split,
    # and with N whole each core's box of the weight ([769, 4096, 64]) spans 403 MB,
    # over the 256 MiB limit, whatever K's split.
    a, b, out = spec([1, 4096]), spec([4096, 49155]), spec([1, 49155])
    with pytest.raises(
        sj.DeviceError, match=r"operand 1 .* spans 403,177,472 B.*out of 769 sticks: \[1\]"
    ):
        divide(matmul_space(a, b, out), Machine.spyre())
