"""The device model: machine profiles, work division over cores, LX plans, cost, SuperDSC.

Pure Python/NumPy planning on layout types (spyre-device spec), below the primitives: it
imports none. Each divided primitive builds its own iteration space (``SpyrePrim.space``),
its op record's facts included; the integration with ``spyrejax.jit`` programs lives in
:mod:`spyrejax.lowering`.
"""

from ._calibrate import Calibration, calibrate
from ._cost import OpCost, op_cost, transfer_cost
from ._division import WorkDivision, divide, ragged_splits, validate_hint
from ._divisions import divide_alike, divide_op, divisions_apart
from ._fusion import Fusion, find_fusions
from ._lx import Buffer, LXPlan, Stream, place, stream
from ._machine import Machine, default_machine
from ._matmul_cost import MatmulTime, matmul_time
from ._percore import core_dci
from ._plan import plan_program
from ._program import DeviceOp, DeviceProgram, FusedGroup, OpDesc, Region
from ._space import (
    Fold,
    IterDim,
    Operand,
    OpSpace,
    TensorSpec,
    elementwise_space,
    matmul_space,
    reduce_space,
)

__all__ = [
    "Buffer",
    "Calibration",
    "DeviceOp",
    "DeviceProgram",
    "Fold",
    "FusedGroup",
    "Fusion",
    "IterDim",
    "LXPlan",
    "Machine",
    "MatmulTime",
    "OpCost",
    "OpDesc",
    "OpSpace",
    "Operand",
    "Region",
    "Stream",
    "TensorSpec",
    "WorkDivision",
    "calibrate",
    "core_dci",
    "default_machine",
    "divide",
    "divide_alike",
    "divide_op",
    "divisions_apart",
    "elementwise_space",
    "find_fusions",
    "matmul_space",
    "matmul_time",
    "op_cost",
    "place",
    "plan_program",
    "ragged_splits",
    "reduce_space",
    "stream",
    "transfer_cost",
    "validate_hint",
]
