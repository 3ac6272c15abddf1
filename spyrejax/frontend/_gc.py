"""Planning without cyclic garbage collections, leaving the collector the user's.

Tracing, planning and the device model allocate millions of small objects (jaxpr
equations, types, layouts, candidate plans) that stay alive until the plan is made:
Python's collector, triggered by allocation counts, walks the growing heap again and
again for no garbage (30-45% of ``explain`` of a GPT training step). For the duration
the allocation count that triggers a collection is raised out of reach
(:func:`gc_paused`); what becomes garbage meanwhile is freed by reference counting,
and cycles at the next collection.

The collector itself is never turned off or on: the user's code traced meanwhile sees
it enabled, a ``gc.disable()`` (or ``gc.set_threshold``) of its own stays, and a
collector the user turned off is left alone. Only a threshold still as spyrejax set it
is put back.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["gc_paused"]

_OUT_OF_REACH = 1 << 30  # allocations before a collection while paused: none in practice
_PAUSED: ContextVar[bool] = ContextVar("spyrejax_gc_paused", default=False)


def gc_paused[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with no automatic collection (if the collector is on)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if _PAUSED.get() or not gc.isenabled():  # paused already, or off by the user
            return fn(*args, **kwargs)
        before = gc.get_threshold()
        paused = (_OUT_OF_REACH, *before[1:])
        gc.set_threshold(*paused)
        token = _PAUSED.set(True)
        try:
            return fn(*args, **kwargs)
        finally:
            _PAUSED.reset(token)
            if gc.get_threshold() == paused:  # else the user's code set its own: kept
                gc.set_threshold(*before)

    return run
