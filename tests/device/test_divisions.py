"""An op's division is searched once per geometry in a process (``device.divide_alike``).

The planner's charge of a matmul and the device plan of the program it lowers read the
same division: a product's matmul pass (tens of milliseconds) runs once, whoever asks.
"""

import dataclasses

import numpy as np

from spyrejax._counts import counting
from spyrejax.device import (
    Machine,
    TensorSpec,
    divide_alike,
    divide_op,
    divisions_apart,
    matmul_space,
)
from spyrejax.layout import SpyreTensorLayout


def _product(prefix: str, m: int = 96):
    def spec(shape, name):
        return TensorSpec.of(shape, SpyreTensorLayout(shape, np.float16), name=prefix + name)

    return matmul_space(spec((m, 256), "a"), spec((256, 320), "b"), spec((m, 320), "c"))


def test_a_geometry_is_divided_once_and_each_op_keeps_its_names():
    machine = Machine.spyre()
    with divisions_apart(), counting() as counts:
        first = divide_alike(_product("x_"), None, machine)
        again = divide_alike(_product("y_"), None, machine)  # another op, same geometry
        other = divide_alike(_product("z_", m=160), None, machine)
    assert counts["device.divide"] == 2  # x_ and z_: y_ repeats x_'s geometry
    assert again.splits == first.splits and again.how == first.how
    assert [o.tensor.name for o in again.space.operands] == ["y_a", "y_b", "y_c"]
    assert again._cache is first._cache  # the per-core boxes: computed once
    assert dataclasses.replace(again, space=first.space) == first
    assert other.space.dims != first.space.dims
    # the same division as a search of its own
    assert divide_op(_product("y_"), machine).splits == again.splits


def test_a_hint_or_another_machine_is_another_division():
    machine = Machine.spyre()
    split = {"mb": 2}
    with divisions_apart(), counting() as counts:
        plain = divide_alike(_product("x_"), None, machine)
        hinted = divide_alike(_product("x_"), split, machine)
        halved = divide_alike(_product("x_"), None, dataclasses.replace(machine, cores=16))
    assert counts["device.divide"] == 3
    assert hinted.splits["mb"] == 2 and hinted.how == "hint"
    assert halved.cores == 16 and plain.cores == 32


def test_divisions_apart_gives_the_kept_divisions_back():
    machine = Machine.spyre()
    kept = divide_alike(_product("x_"), None, machine)
    with divisions_apart(), counting() as counts:
        divide_alike(_product("x_"), None, machine)
    assert counts["device.divide"] == 1  # none kept inside the block
    with counting() as counts:
        assert divide_alike(_product("x_"), None, machine).splits == kept.splits
    assert counts["device.divide"] == 0  # kept again after it
