"""The planner's options of a node, searched once per signature (issue 24).

An :class:`Option` is one way to run a node: a mode, its input types, what it gives and
what it costs (``option_total``: its inputs' totals and its device bytes, a chain's
values kept in LX at their LX traffic).

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
from dataclasses import dataclass
from typing import Any

from .. import primitives as sp
from ..primitives._array import SpyreType
from ._graph import Node, Scalar, Value
from ._node_key import NodeKey
from ._registry import Mode
from ._traffic import chain_bytes

__all__ = ["Option", "option_total", "options_key", "searches", "searches_shared"]


@dataclass(frozen=True, eq=False)
class Option:
    """One way to run a node: a mode, the input types it reads, the types it gives.

    Attributes:
        mode: the rule's mode.
        ins: the type each input is read in (None for scalars).
        outs: each output's type, as the Spyre primitives give it.
        copies: the copying primitives the lowering calls (restickifies, slices...,
            host calls, which move no elements between layouts: DMA bytes, and
            collectives, whose elements go between cards).
        fresh: whether its (first) output is a buffer of its own that the lowering
            writes (not a view of an input's): it can be written into a window of a
            larger buffer instead.
        owns: whether nothing else reads its (first) output's buffer: it is fresh, or
            an update in place took over its input's (it can be updated in place).
        traffic: the device bytes the lowering reads and writes (``_traffic.traffic``):
            what the planner minimises.
        view: whether its lowering is shape views only: its outputs are its input's
            image (no memory of their own) even where typed as no view (``canonical``).
        io: the bytes of ``traffic`` its chain kernels read of each input and write of
            its result (``_traffic.chain_io``): LX traffic where a chain keeps them.
    """

    mode: Mode
    ins: tuple[SpyreType | None, ...]
    outs: tuple[SpyreType, ...]
    copies: tuple[sp.SpyrePrim, ...] = ()
    fresh: bool = False
    owns: bool = False
    traffic: int = 0
    view: bool = False
    io: tuple[tuple[float, ...], float] = ((), 0.0)

    @property
    def out(self) -> SpyreType:
        """The first output's type (the only one of most nodes)."""
        return self.outs[0]

    @property
    def cost(self) -> int:
        """Elements the node's own lowering moves."""
        return sum(p.moves for p in self.copies)


def options_key(
    node: Node,
    base: NodeKey | None,
    modes: Sequence[Mode],
    avail: Mapping[Value, Mapping[SpyreType, float]],
    inside: frozenset[int],
) -> Any:
    """What a node's options depend on, or None (not cached).

    Its primitive and parameters (``base``, its :func:`node_key`), which of its inputs
    and results a chain keeps in LX (``inside``: ``_traffic.chained``), and per input the
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
    kept = tuple(id(v) in inside for v in (*node.ins, *node.outs[:1]))
    return (base, kept, tuple(ins))


def option_total(
    node: Node, option: Option, avail: Mapping[Value, Any], inside: frozenset[int]
) -> float:
    """An option's total for ``node``: its inputs' costs, then its traffic.

    Less what it saves on the values a chain keeps in LX (``inside``,
    ``_traffic.chain_bytes`` of the option's ``chain_io``).
    """
    pairs = zip(node.ins, option.ins, strict=True)
    total = sum(0.0 if t is None else avail[u][t] for u, t in pairs) + option.traffic
    return total - chain_bytes(node.ins, node.outs, option.io, inside)


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
