"""The planner's options of a node, searched once per signature (issue 24).

A model's repeated layers give the planner nodes that differ only in their values: the
same primitive and parameters, inputs available in the same types at costs that differ
by one constant per input. Their best options are the same, so the planner searches
the first and reuses its options for the others, each total summed from the node's own
input costs as the search sums them (byte counts held exactly in floats).

The planners of one :func:`plan_graph` call (the graph's, and those of the loop bodies
and branches its rules plan, a ``scan``'s body once per carry it tries) share these
searches and the evaluations behind them (:func:`searches_shared`): a body planned for
other carry types evaluates only the nodes whose input types changed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..primitives._array import SpyreType
from ._graph import Node, Scalar, Value
from ._node_key import NodeKey
from ._registry import Mode

__all__ = ["option_total", "options_key", "searches", "searches_shared"]


def options_key(
    node: Node,
    base: NodeKey | None,
    modes: Sequence[Mode],
    avail: Mapping[Value, Mapping[SpyreType, float]],
) -> Any:
    """What a node's options depend on, or None (not cached).

    Its primitive and parameters (``base``, its :func:`node_key`), and per input the
    types it is available in (``avail``), in order, with their costs less the cheapest
    one's: every total of the node then differs by the same sum. Modes that take
    windows or clobber an input depend on the rest of the graph: not cached.
    """
    if base is None or any(m.takes is not None or m.clobbers is not None for m in modes):
        return None
    ins: list[Any] = []
    for u in node.ins:
        if isinstance(u, Scalar):
            ins.append(None)
            continue
        have = avail[u]
        least = min(have.values())
        ins.append(tuple((t, t.vma, c - least) for t, c in have.items()))
    return (base, tuple(ins))


def option_total(
    node: Node, ins: Sequence[SpyreType | None], traffic: float, avail: Mapping[Value, Any]
) -> float:
    """An option's total for ``node``: its inputs' costs in ``ins``, then its traffic."""
    pairs = zip(node.ins, ins, strict=True)
    return sum(0.0 if t is None else avail[u][t] for u, t in pairs) + traffic


_SHARED: contextvars.ContextVar[dict[bool, tuple[dict, dict]] | None] = contextvars.ContextVar(
    "spyrejax_shared_searches", default=None
)

_APART: dict[bool, tuple[dict, dict]] = {}  # searches_shared(False): never filled


@contextlib.contextmanager
def searches_shared(shared: bool = True) -> Iterator[None]:
    """Inside (the outermost block), every planner shares its caches (:func:`searches`).

    ``shared=False`` (tests): inside, every planner has caches of its own.
    """
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set({} if shared else _APART)
    try:
        yield
    finally:
        _SHARED.reset(token)


def searches(fallback: bool) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """A planner's caches: evaluations by ``evaluation_key``, options by :func:`options_key`.

    Those of the enclosing :func:`searches_shared` block (one pair per ``fallback``: a
    rule may lower otherwise), else new ones.

    Both are functions of their keys alone (a node's primitive, parameters, scalars and
    shapes, its mode and input types, or their relative costs), whatever graph the node
    is in.
    """
    shared = _SHARED.get()
    if shared is None or shared is _APART:
        return {}, {}
    return shared.setdefault(fallback, ({}, {}))
