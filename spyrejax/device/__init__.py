"""The device model: machine profiles, work division over cores, LX plans, cost, SuperDSC.

Pure Python/NumPy planning on layout types (spyre-device spec); the integration with
``spyrejax.jit`` programs lives in :mod:`spyrejax.lowering`.
"""

from ._division import (
    IterDim,
    Operand,
    OpSpace,
    TensorSpec,
    WorkDivision,
    divide,
    elementwise_space,
    matmul_space,
    reduce_space,
    validate_hint,
)
from ._machine import Machine

__all__ = [
    "IterDim",
    "Machine",
    "OpSpace",
    "Operand",
    "TensorSpec",
    "WorkDivision",
    "divide",
    "elementwise_space",
    "matmul_space",
    "reduce_space",
    "validate_hint",
]
