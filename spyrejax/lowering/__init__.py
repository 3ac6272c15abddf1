"""Lowering plain JAX functions to Spyre primitives: the graph, the rules, the plan, its run.

The graph of a traced function (``_graph``), the rule registry (``_registry``) and the
planner (``_planner``) are here; ``rules/`` holds the rules by family, ``program/`` runs a
plan (the interpreter) and applies the device model to it. The front end that uses them
(``spyrejax.jit``) is ``spyrejax.frontend``; the reports, ``spyrejax.report``.
"""

from ..primitives._stick import SPARSE
from . import rules  # noqa: F401  (registers every family's rules in RULES)
from ._registry import RULES
from .program import CoreCheck, Mismatch, checking_cores, device_program, with_division
from .rules import with_layout

__all__ = [
    "RULES",
    "SPARSE",
    "CoreCheck",
    "Mismatch",
    "checking_cores",
    "device_program",
    "with_division",
    "with_layout",
]
