"""How a Spyre primitive's call is evaluated: on types alone, by an executor, recorded.

Three context variables watch the calls of :class:`~spyrejax.primitives._base.SpyrePrim`:
:func:`abstract_eval` (types only: the planner evaluates lowering rules this way),
:func:`executing` (the per-core emulation runs compute primitives its own way) and
:func:`recording` (every primitive bound, with its arguments and result).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # primitives._base calls this module: the primitive for the types only
    from ._base import SpyrePrim

__all__ = [
    "abstract_calls",
    "abstract_eval",
    "current_executor",
    "current_recorder",
    "evaluating_abstractly",
    "executing",
    "recording",
    "unwatched",
    "watched",
]

_ABSTRACT: ContextVar[list[Any] | None] = ContextVar("spyrejax_abstract_eval", default=None)
_EXECUTOR: ContextVar[Callable[[Any, tuple[Any, ...]], Any] | None] = ContextVar(
    "spyrejax_executor", default=None
)
_RECORDER: ContextVar[Callable[[Any, tuple[Any, ...], Any], None] | None] = ContextVar(
    "spyrejax_recorder", default=None
)


@contextlib.contextmanager
def _setting(var: ContextVar[Any], value: Any) -> Iterator[Any]:
    """``var`` set to ``value`` inside the block (yielded), reset after it."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


@contextlib.contextmanager
def abstract_eval() -> Iterator[list[SpyrePrim]]:
    """Evaluate Spyre computations on types alone, listing the primitives they call.

    Inside the block every Spyre primitive returns :func:`abstract` values of its
    output type instead of running; the yielded list fills with the primitives in call
    order. Their constructors still check every layout rule (a ``LayoutError`` means
    the computation is infeasible on those types).
    """
    with _setting(_ABSTRACT, []) as calls:
        yield calls


def abstract_calls() -> list[Any] | None:
    """The list :func:`abstract_eval` fills, inside one; None outside (values are computed).

    A lowering that would run a computation (a loop) checks it to give types instead,
    and may add what the computation would copy (see ``SpyrePrim.role``/``moves``).
    """
    return _ABSTRACT.get()


@contextlib.contextmanager
def executing(executor: Callable[[SpyrePrim, tuple[Any, ...]], Any]) -> Iterator[None]:
    """Let ``executor`` run the primitives called inside the block (when tracing them).

    ``executor(prim, args)`` returns the primitive's result computed its own way, or
    None to bind the primitive as usual. The per-core emulation of ``spyrejax.jit(f,
    emulate="cores")`` runs compute primitives this way; while the executor runs, the
    primitives it calls itself are bound as usual.
    """
    with _setting(_EXECUTOR, executor):
        yield


@contextlib.contextmanager
def recording(recorder: Callable[[SpyrePrim, tuple[Any, ...], Any], None]) -> Iterator[None]:
    """Let ``recorder(prim, args, out)`` see every primitive bound inside the block.

    It is called once per primitive, after the primitive gave ``out`` (bound, or run by
    an executor). The primitives an executor calls itself are not recorded.
    """
    with _setting(_RECORDER, recorder):
        yield


def current_executor() -> Callable[[Any, tuple[Any, ...]], Any] | None:
    """The executor :func:`executing` installed, or None (also while it runs itself)."""
    return _EXECUTOR.get()


def evaluating_abstractly() -> bool:
    """Whether primitives run on types alone (inside :func:`abstract_eval`)."""
    return _ABSTRACT.get() is not None


def current_recorder() -> Callable[[Any, tuple[Any, ...], Any], None] | None:
    """The recorder :func:`recording` installed, or None (also while an executor runs)."""
    return _RECORDER.get()


def watched() -> bool:
    """Whether an executor, a recorder or :func:`abstract_eval` sees the calls made here."""
    return any(v.get() is not None for v in (_ABSTRACT, _EXECUTOR, _RECORDER))


@contextlib.contextmanager
def unwatched(executor: bool = True) -> Iterator[None]:
    """Calls inside the block seen by no recorder, nor (``executor``) by the executor.

    What an executor runs for a primitive, and the call an eager jit traces, are that
    primitive's own work: bound as usual, recorded once as the primitive.
    """
    with _setting(_RECORDER, None):
        if not executor:
            yield
            return
        with _setting(_EXECUTOR, None):
            yield
