"""Lowering plain JAX functions to Spyre primitives: ``jit``, ``filter_jit``, ``explain``..."""

from ..primitives._stick import SPARSE
from . import (
    _collectives,  # noqa: F401  (registers shard_map and collectives in RULES)
    _control,  # noqa: F401  (registers the control-flow rules)
    _conv,  # noqa: F401  (registers the convolution and pooling rules)
    _random,  # noqa: F401  (registers the random family's rules)
)
from ._cores import CoreCheck, Mismatch, checking_cores
from ._device import with_division
from ._explain import Report, explain
from ._export import Export, export
from ._filter_jit import FilterJit, filter_jit
from ._interpret import device_program
from ._jit import Compiled, Lowered, SpyreJit, Traced, jit
from ._rules import RULES
from ._with_layout import with_layout

__all__ = [
    "RULES",
    "SPARSE",
    "Compiled",
    "CoreCheck",
    "Export",
    "FilterJit",
    "Lowered",
    "Mismatch",
    "Report",
    "SpyreJit",
    "Traced",
    "checking_cores",
    "device_program",
    "explain",
    "export",
    "filter_jit",
    "jit",
    "with_division",
    "with_layout",
]
