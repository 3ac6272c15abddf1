"""The ``jax.jit``-compatible front end: ``spyrejax.jit``, ``filter_jit`` and their stages.

A call's arguments (``_arguments``), its cached lowerings (``_cache``), the stages
``Traced`` -> ``Lowered`` -> ``Compiled`` (``_jit``), and what tracing needs around the
planner: 64-bit values (``_x64``), ``jax.vmap`` (``_vmap``), outer derivatives
(``_outer_ad``), the paused garbage collector (``_gc``).
"""

from ._filter_jit import FilterJit, filter_jit
from ._jit import Compiled, Lowered, SpyreJit, Traced, jit

__all__ = ["Compiled", "FilterJit", "Lowered", "SpyreJit", "Traced", "filter_jit", "jit"]
