"""A view its producer's cores write (LanePlace, LaneAssemble) is divided as the producer.

``_cores.producer_splits`` maps the producer's splits through the tensor's device dims:
a matmul and an elementwise space name a 3-D tensor's dims differently.
"""

import numpy as np
import pytest

from spyrejax.device import Machine, TensorSpec, divide_op, elementwise_space, matmul_space
from spyrejax.layout import SpyreTensorLayout
from spyrejax.lowering.program._cores import producer_splits


def spec(shape):
    return TensorSpec.of(shape, SpyreTensorLayout(shape, np.float16))


def boxes(div, operand):
    return sorted({div.box(operand, c) for c in range(div.cores_used)})


@pytest.mark.parametrize("hint", [{"x": 2, "mb": 2, "out": 4}, {"x": 4, "mb": 1, "out": 2}])
def test_a_batched_matmuls_boxes_are_the_writes_boxes(hint):
    # The matmul names [B, M, N] x, mb, out (batch, rows, columns); the write's
    # elementwise space names them mb, x, out (mb the first dim): by name, the batch
    # split would land on the rows.
    machine = Machine.spyre()
    out = spec((4, 64, 256))
    made = divide_op(matmul_space(spec((4, 64, 128)), spec((4, 128, 256)), out), machine, hint)
    write = elementwise_space("lane_place", out, [out])
    splits = producer_splits(made, write)
    assert splits is not None
    div = divide_op(write, machine, splits)
    assert boxes(div, 0) == boxes(made, 2)  # each core writes the box it computed
    assert boxes(divide_op(write, machine, None), 0) != boxes(made, 2)  # not by chance
    by_name = {n: made.splits[n] for n in write.names}
    assert boxes(divide_op(write, machine, by_name), 0) != boxes(made, 2)


def test_a_write_of_another_tensor_gives_no_hint():
    # The write's first operand is not walked as the producer's result (another rank):
    # no splits to follow, the device model's own division.
    machine = Machine.spyre()
    x = spec((4, 64, 256))
    made = divide_op(elementwise_space("add", x, [x, x]), machine, None)
    other = spec((256, 256))
    assert producer_splits(made, elementwise_space("lane_place", other, [other])) is None
