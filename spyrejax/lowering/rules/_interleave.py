"""The ``interleave`` node: ``stack([a_0, ..., a_(s-1)], -1).reshape(..., s * n)``.

``lowering._distribute`` makes it of RoPE's stack of the rotated pairs. Two ways to
build it: a copy (the pieces stacked in the layout whose stick walks the pair dims
together, then the reshape back, a view), or in place: each piece written by its
producer on lanes ``k::s`` of the result's sticks (``primitives._lanes``: ``LanePlace``
by the planner's windows, ``LaneAssemble`` here), so nothing moves.
"""

from __future__ import annotations

from typing import Any

from ... import primitives as sp
from ..._errors import LayoutError
from ...layout._lanes import laned
from ...primitives._array import SpyreType
from ...primitives._lanes import lane_assemble
from ...primitives._stick import default_layout, dim_order_for, grouped_layout
from .._graph import Node
from .._registry import Mode, Rule, _register

__all__: list[str] = []


class _Interleave(Rule):
    def modes(self, node: Node) -> list[Mode]:
        out, n = node.outs[0], len(node.ins)
        last = out.ndim - 1
        modes = [Mode((None,) * n, last, "copy")]
        dest = default_layout(out.shape, out.dtype, last)
        try:
            takes = tuple(
                SpyreType.contiguous(a.shape, a.dtype, laned(dest, k, n))
                for k, a in enumerate(node.ins)
            )
        except LayoutError:
            return modes
        return [*modes, Mode((None,) * n, last, "in_place", takes)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        last = out.ndim - 1
        if mode.variant == "in_place":
            return [lane_assemble(args, default_layout(out.shape, out.dtype, last), out.shape)]
        a = node.ins[0]
        pairs = (*a.shape, len(args))
        pieces = [sp.expand_dims(x, (a.ndim,)) for x in args]
        stacked = sp.concatenate(pieces, a.ndim, layout=grouped_layout(pairs, out.dtype))
        try:
            return [sp.reshape(stacked, out.shape)]  # the pairs' stick is [..., D]'s
        except LayoutError:  # the grouped stick spans more dims than the pairs
            return [sp.reshape_copy(stacked, out.shape, dim_order=dim_order_for(out.shape, last))]


_register(_Interleave(), "interleave")
