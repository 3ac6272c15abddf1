"""The ``interleave`` node: ``stack([a_0, ..., a_(s-1)], -1).reshape(..., s * n)``.

``lowering._distribute`` makes it of RoPE's stack of the rotated pairs. Two ways to
build it: a copy (the pieces stacked in the layout whose stick walks the pair dims
together, then the reshape back, a view), or in place: each piece written by its
producer on lanes ``k::s`` of the result's sticks (``primitives._lanes``: ``LanePlace``
by the planner's windows, ``LaneAssemble`` here), so nothing moves.
"""

from __future__ import annotations

from typing import Any

import jax

from ... import primitives as sp
from ...layout._lanes import lane_refusal, laned
from ...primitives._array import SpyreType
from ...primitives._lanes import lane_assemble
from ...primitives._stick import default_layout, dim_order_for, grouped_layout
from ...primitives._views import reshape_is_view
from .._graph import Node
from .._registry import Mode, Rule, _register

__all__: list[str] = []


class _Interleave(Rule):
    def modes(self, node: Node) -> list[Mode]:
        out, n = node.outs[0], len(node.ins)
        last = out.ndim - 1
        modes = [Mode((None,) * n, last, "copy")]
        dest = default_layout(out.shape, out.dtype, last)
        if lane_refusal(dest, n, node.ins[0].shape) is not None:
            return modes
        takes = tuple(
            SpyreType.contiguous(a.shape, a.dtype, laned(dest, k, n))
            for k, a in enumerate(node.ins)
        )
        return [*modes, Mode((None,) * n, last, "in_place", takes)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        last = out.ndim - 1
        if mode.variant == "in_place":
            return [lane_assemble(args, default_layout(out.shape, out.dtype, last), out.shape)]
        a = node.ins[0]
        pairs = (*a.shape, len(args))
        pieces = [sp.expand_dims(x, (a.ndim,)) for x in args]
        grouped = grouped_layout(pairs, out.dtype)
        if grouped is None:  # no stick fills the pairs (a partial last stick): stuck on n
            order = [*range(a.ndim - 1), a.ndim, a.ndim - 1]
            stacked = sp.concatenate(pieces, a.ndim, dim_order=order)
        else:
            stacked = sp.concatenate(pieces, a.ndim, layout=grouped)
        if reshape_is_view(jax.typeof(stacked), out.shape):  # the pairs' stick holds [..., D]
            return [sp.reshape(stacked, out.shape)]
        # The grouped stick spans more dims than the pairs and a padded one, or none.
        return [sp.reshape_copy(stacked, out.shape, dim_order=dim_order_for(out.shape, last))]


_register(_Interleave(), "interleave")
