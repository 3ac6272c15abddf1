"""Lowering plain JAX functions to Spyre primitives: ``jit``, ``filter_jit``, ``explain``..."""

from ..primitives._stick import SPARSE
from ._explain import Report, explain
from ._filter_jit import FilterJit, filter_jit
from ._jit import Compiled, Lowered, SpyreJit, Traced, jit
from ._rules import RULES
from ._with_layout import with_layout

__all__ = [
    "RULES",
    "SPARSE",
    "Compiled",
    "FilterJit",
    "Lowered",
    "Report",
    "SpyreJit",
    "Traced",
    "explain",
    "filter_jit",
    "jit",
    "with_layout",
]
