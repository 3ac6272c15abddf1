"""In-place modes of the copies: results written into windows of their destination (gaps).

A piece of a bigger tensor can be planned in its window of the destination's buffer
(``primitives._in_place.window_layout``, a layout with gaps), so the op computing it
writes it there (issue 26, item 2):

- ``concatenate`` in place: each piece in its window, joined by ``Assemble`` (a view:
  nothing moves); along a last dim of one stick a row, where the pieces cut the stick,
  each piece on its lanes of the result's sticks (``layout._lanes.lane_window``),
  joined by ``LaneAssemble``;
- ``dynamic_update_slice`` in place: the update in its window of the operand's buffer,
  which the result takes over (the operand must be read by nothing else: a fresh
  result, a donated input, or a loop's carry; ``Mode.clobbers``); at start indices known
  at trace time the window is a layout with gaps, at traced ones the update's producer
  writes it where the indices say (``UpdateAt``; ``Mode.written``);
- a constant ``pad`` in place: the operand in its window, the border filled
  (``FillAround``: it writes the border, never the operand).

The planner's side (a value had in a window's type only from its producer) is
``lowering._windows``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._errors import LayoutError
from ...layout._dtypes import has_spyre_format
from ...layout._lanes import lane_window
from ...layout._layout import SpyreTensorLayout
from ...primitives._array import SpyreType
from ...primitives._in_place import (
    assemble,
    fill_around,
    update_at,
    update_dims,
    window_layout,
    without_gaps,
)
from ...primitives._lanes import lane_assemble
from ...primitives._stick import canon, default_layout, stick_options
from .._graph import Node, Scalar, Value
from .._registry import Mode, _LaxCopy, _register
from ._shapes import _Concatenate, _Pad

__all__: list[str] = []


class _ConcatenateInPlace(_Concatenate):
    """A copy of the pieces; or, in place, the pieces written into windows of the result."""

    def modes(self, node: Node) -> list[Mode]:
        modes = super().modes(node)
        sticks = stick_options(node.outs[0].shape)
        modes += [m for s in sticks if (m := self._in_place(node, s)) is not None]
        return modes + self._on_lanes(node)

    @staticmethod
    def _offsets(node: Node) -> list[tuple[int, ...]]:
        d, start, out = node.params["dimension"], 0, []
        for v in node.ins:
            out.append(tuple(start if k == d else 0 for k in range(v.ndim)))
            start += v.shape[d]
        return out

    def _in_place(self, node: Node, stick: int) -> Mode | None:
        out = node.outs[0]
        dest = default_layout(out.shape, out.dtype, stick)
        offsets = self._offsets(node)
        try:
            takes = tuple(
                SpyreType.contiguous(v.shape, v.dtype, window_layout(dest, out.shape, v.shape, o))
                for v, o in zip(node.ins, offsets, strict=True)
            )
        except LayoutError:
            return None
        return Mode((None,) * len(node.ins), stick, "in_place", takes)

    def _on_lanes(self, node: Node) -> list[Mode]:
        """Each piece on its lanes of the result's sticks (:func:`_lane_dests`), if they cut one."""
        out, modes = node.outs[0], []
        for variant, dest in _lane_dests(node).items():
            try:
                takes = tuple(
                    SpyreType.contiguous(
                        v.shape, v.dtype, lane_window(dest, out.shape, o[-1], o[-1] + v.shape[-1])
                    )
                    for v, o in zip(node.ins, self._offsets(node), strict=True)
                )
            except LayoutError:
                continue
            modes.append(Mode((None,) * len(node.ins), out.ndim - 1, variant, takes))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        if mode.variant.startswith("in_place_lanes"):
            return [lane_assemble(args, _lane_dests(node)[mode.variant], out.shape)]
        if mode.variant != "in_place":
            return super().lower(node, args, mode)
        dest = default_layout(out.shape, out.dtype, mode.out)
        return [assemble(args, dest, out.shape, self._offsets(node))]


def _lane_dests(node: Node) -> dict[str, SpyreTensorLayout]:
    """The layouts a concatenate along a last dim of one stick a row may be built on lanes in.

    The default layout of the result's shape stuck on its last dim, and (rank 3 or
    more) the default layout of its last two dims merged, over the result's shape: the
    layout of ``(x @ w).reshape(T, H, D)``, whose halves RoPE's rotate-half reads.
    """
    out = node.outs[0]
    last = out.ndim - 1
    if node.params["dimension"] != last or not has_spyre_format(out.dtype):
        return {}
    dests = {"in_place_lanes": default_layout(out.shape, out.dtype, last)}
    if out.ndim >= 3:
        merged = SpyreTensorLayout((*out.shape[:-2], out.shape[-2] * out.shape[-1]), out.dtype)
        dests["in_place_lanes_merged"] = merged
    return dests


_register(_ConcatenateInPlace(), "concatenate")


class _UpdateSlice(_LaxCopy):
    """``dynamic_update_slice``: a copy; or, at start indices known at trace time, in place.

    In place, the update is written into its window of the operand's buffer (its producer
    writes it there: a layout with gaps) and the result is that buffer: nothing moves.
    The operand's buffer is overwritten, so the planner offers it only where nothing
    reads the operand afterwards (``Mode.clobbers``).
    """

    def modes(self, node: Node) -> list[Mode]:
        modes = super().modes(node)
        x, update, *index = node.ins
        if not isinstance(x, Value) or not isinstance(update, Value):
            return modes
        start = self._start(node)
        for s in stick_options(x.shape):
            dest = default_layout(x.shape, x.dtype, s)
            try:
                if start is None:
                    update_dims(dest, x.shape, update.shape)
                window = window_layout(dest, x.shape, update.shape, start or [0] * x.ndim)
            except LayoutError:
                continue
            if start is None:  # written where the traced indices say: no gaps to plan
                window = without_gaps(window)
            takes = (
                SpyreType.contiguous(x.shape, x.dtype, dest),
                SpyreType.contiguous(update.shape, update.dtype, window),
                *([None] * len(index)),
            )
            ins, out = (None,) * len(node.ins), canon(x.shape, s)
            variant, written = ("in_place", ()) if start else ("in_place_at", (1,))
            modes.append(Mode(ins, out, variant, takes, clobbers=0, written=written))
        return modes

    @staticmethod
    def _start(node: Node) -> tuple[int, ...] | None:
        """The start indices if all are known at trace time, clamped as JAX clamps them."""
        x, update, *index = node.ins
        if not isinstance(x, Value) or not isinstance(update, Value):
            return None
        if not all(isinstance(i, Scalar) for i in index):
            return None
        return tuple(
            min(max(int(i.value), 0), n - p)
            for i, n, p in zip(index, x.shape, update.shape, strict=True)
        )

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        if mode.variant == "in_place_at":
            starts = [
                np.asarray(a.value, np.int32) if isinstance(a, Scalar) else a for a in args[2:]
            ]
            return [update_at(args[0], args[1], starts)]
        if mode.variant != "in_place":
            return super().lower(node, args, mode)
        x, start = node.ins[0], self._start(node)
        dest = default_layout(x.shape, x.dtype, mode.out)
        return [assemble([args[1]], dest, x.shape, [start], base=args[0])]


_register(_UpdateSlice(), "dynamic_update_slice")


class _PadInPlace(_Pad):
    """``pad``: a copy; or, with no interior padding and none cut, the operand in place."""

    def modes(self, node: Node) -> list[Mode]:
        modes = super().modes(node)
        x, out, config = node.ins[0], node.outs[0], node.params["padding_config"]
        if not isinstance(x, Value) or any(lo < 0 or hi < 0 or mid for lo, hi, mid in config):
            return modes
        for s in stick_options(out.shape):
            dest = default_layout(out.shape, out.dtype, s)
            try:
                window = window_layout(dest, out.shape, x.shape, [lo for lo, _, _ in config])
            except LayoutError:
                continue
            takes = (SpyreType.contiguous(x.shape, x.dtype, window), None)
            modes.append(Mode((None, None), s, "in_place", takes))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        if mode.variant != "in_place":
            return super().lower(node, args, mode)
        out, config = node.outs[0], node.params["padding_config"]
        dest = default_layout(out.shape, out.dtype, mode.out)
        value = args[1].value if isinstance(args[1], Scalar) else args[1]
        return [fill_around(args[0], value, dest, out.shape, [lo for lo, _, _ in config])]


_register(_PadInPlace(), "pad")
