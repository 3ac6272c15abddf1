"""Lowering plain JAX functions to Spyre primitives: ``jit``, ``with_layout``, ``explain``."""

from ..primitives._stick import SPARSE
from . import _collectives  # noqa: F401  (registers shard_map and collectives in RULES)
from ._explain import Report, explain
from ._jit import Compiled, Lowered, SpyreJit, Traced, jit
from ._rules import RULES
from ._with_layout import with_layout

__all__ = [
    "RULES",
    "SPARSE",
    "Compiled",
    "Lowered",
    "Report",
    "SpyreJit",
    "Traced",
    "explain",
    "jit",
    "with_layout",
]
