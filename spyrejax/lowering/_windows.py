"""The planner's rule for results written in place through gaps (issue 26, item 2).

Modes that join values written into windows of their result's buffer
(``lowering.rules._in_place``, ``_interleave``) name the exact type each input must
have (``Mode.takes``: a layout with gaps, or on some lanes of the result's sticks).
:class:`Windows` gives the planner those inputs:
a value can be had in a window's type only from its producer, writing its own fresh
result there at no extra cost (the producer's option placed: ``Mode.place``), never
from a restickify; a mode that overwrites an input's buffer (``Mode.clobbers``) or
has one written where traced indices say (``Mode.written``) runs only where nothing
else reads that input.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from ..primitives._array import SpyreType
from ..primitives._in_place import without_gaps
from ..primitives._lanes import is_laned, read_type
from ._graph import Graph, Node, Scalar, Value
from ._registry import Mode

__all__ = ["Windows"]


class Windows:
    """One planning's windows: who produces each value, who reads it, what is donated."""

    def __init__(self, graph: Graph, donated: frozenset[Value]) -> None:
        self.producer = {v: n for n in graph.nodes for v in n.outs}
        self.uses: dict[Value, int] = defaultdict(int)
        for n in graph.nodes:
            for u in n.ins:
                if isinstance(u, Value):
                    self.uses[u] += 1
        for o in graph.outputs:
            if isinstance(o, Value):
                self.uses[o] += 2  # an output is read after the program: never clobbered
        self.donated = donated

    def choices(self, planner: Any, node: Node, mode: Mode) -> list[list[Any]]:
        """Per input, the one type the mode takes (none: the mode cannot run)."""
        takes = mode.takes or (None,) * len(node.ins)
        out: list[list[Any]] = []
        for k, (u, t) in enumerate(zip(node.ins, takes, strict=True)):
            if isinstance(u, Scalar):
                out.append([(None, 0.0)])
                continue
            if k == mode.clobbers and not self._clobberable(planner, u):
                return [[] for _ in node.ins]
            if k in mode.written and not self._writable(planner, u, t):
                return [[] for _ in node.ins]
            if t is None:
                out.append(planner._candidates(u, mode.ins[k], 1))
                continue
            have = [(a, c) for a, c in planner.avail[u].items() if _same(a, t)]
            if not have and (t.layout.has_gaps or is_laned(t)):
                self._place(planner, u, t)
                have = [(a, c) for a, c in planner.avail[u].items() if _same(a, t)]
            out.append(sorted(have, key=lambda ac: ac[1])[:1])
        return out

    def _clobberable(self, planner: Any, u: Value) -> bool:
        if self.uses[u] != 1:
            return False
        if u.kind == "input":
            return u in self.donated
        made = planner.produced.get(u, {})
        return u.kind == "node" and all(o is not None and o.owns for _, o in made.values())

    def _writable(self, planner: Any, u: Value, t: SpyreType | None) -> bool:
        """Whether ``u``'s producer can write it straight into another buffer (type ``t``)."""
        if self.uses[u] != 1 or u.kind != "node" or t is None:
            return False
        made = [o for a, (_, o) in planner.produced.get(u, {}).items() if _same(a, t)]
        return bool(made) and all(o is not None and o.fresh for o in made)

    def _place(self, planner: Any, u: Value, t: SpyreType) -> None:
        """Let ``u``'s producer write it in ``t`` (a window), where it makes it fresh."""
        node = self.producer.get(u)
        if node is None:
            return
        i = node.outs.index(u)
        bare = read_type(t) if is_laned(t) else replace(t, layout=without_gaps(t.layout))
        for total, option in list(planner.options.get(node, [])):
            if i or not _same(option.outs[0], bare) or not option.fresh or option.mode.place:
                continue
            placed = planner.placed(node, option, t.layout)
            if placed is None or not _same(placed.outs[0], t):
                continue
            planner.options[node].append((total, placed))
            planner.produced[u][placed.outs[0]] = (total, placed)
            planner.avail[u][placed.outs[0]] = total
            return


def _same(a: SpyreType, b: SpyreType) -> bool:
    """Whether two types differ at most in what their padding holds."""
    return a == replace(b, pad=a.pad)
