"""Lowering rules of shape ops, slices, concatenation and padding.

Broadcasts, reshapes, transposes, squeezes, ``expand_dims`` and ``iota``; ``slice``,
``concatenate`` and ``pad``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import primitives as sp
from ..._errors import SpyreUnsupportedError
from ...layout._dtypes import format_for_dtype, has_spyre_format
from ...layout._lanes import in_one_stick
from ...primitives._in_place import slice_view
from ...primitives._lanes import lane_slice_params, lane_view, lane_window_params
from ...primitives._stick import (
    SPARSE,
    canon,
    dim_order_for,
    grouped_layout,
    stick_options,
)
from .._graph import Node, Scalar
from .._registry import Mode, Rule, _arg, _carried_modes, _register

# --- shape ops -------------------------------------------------------------------------


class _BroadcastInDim(Rule):
    def modes(self, node: Node) -> list[Mode]:
        """A view of the input; a broadcast scalar is also a constant built in any stick."""
        x, out = node.ins[0], node.outs[0]
        if isinstance(x, Scalar) or not x.shape:
            fills = [Mode((None,), s, "fill") for s in stick_options(out.shape)]
            return [Mode((None,), SPARSE), *(fills if isinstance(x, Scalar) else [])]
        bdims = tuple(node.params["broadcast_dimensions"])
        return _carried_modes(node, lambda t: bdims[t])

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        x = args[0]
        out = node.outs[0]
        if mode.variant == "fill":
            dim_order = dim_order_for(out.shape, mode.out)
            return [sp.full(out.shape, x.value, out.dtype, dim_order=dim_order)]
        if isinstance(x, Scalar):
            x = sp.to_device(np.asarray(x.value, dtype=out.dtype))
        bdims = tuple(node.params["broadcast_dimensions"])
        missing = tuple(d for d in range(out.ndim) if d not in bdims)
        if missing:
            x = sp.expand_dims(x, missing)
        return [sp.broadcast_to(x, out.shape)]


_register(_BroadcastInDim(), "broadcast_in_dim")


class _Reshape(Rule):
    def modes(self, node: Node) -> list[Mode]:
        """A view of the input in any stick, or a copy into any stick.

        ``dimensions`` (JAX emits it in the gradient of a grouped convolution) is a
        transpose first: a view.
        """
        x, out = node.ins[0], node.outs[0]
        modes = []
        for t in stick_options(x.shape):
            modes.append(Mode((t,), SPARSE, "view"))
            modes.extend(Mode((t,), s, "copy") for s in stick_options(out.shape))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        x = args[0]
        if node.params.get("dimensions") is not None:
            x = sp.transpose(x, tuple(node.params["dimensions"]))
        if mode.variant == "view":  # a LayoutError when the layout allows no view
            return [sp.reshape(x, out.shape)]
        dim_order = dim_order_for(out.shape, mode.out)
        return [sp.reshape_copy(x, out.shape, dim_order=dim_order)]


_register(_Reshape(), "reshape")


class _Transpose(Rule):
    def modes(self, node: Node) -> list[Mode]:
        perm = tuple(node.params["permutation"])
        return _carried_modes(node, perm.index)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.transpose(args[0], tuple(node.params["permutation"]))]


_register(_Transpose(), "transpose")


class _Squeeze(Rule):
    def modes(self, node: Node) -> list[Mode]:
        dims = tuple(node.params["dimensions"])
        return _carried_modes(node, lambda t: None if t in dims else t - sum(d < t for d in dims))

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.squeeze(args[0], tuple(node.params["dimensions"]))]


_register(_Squeeze(), "squeeze")


class _ExpandDims(Rule):
    def modes(self, node: Node) -> list[Mode]:
        dims = set(node.params["dimensions"])
        kept = [d for d in range(node.outs[0].ndim) if d not in dims]
        return _carried_modes(node, kept.__getitem__)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.expand_dims(args[0], tuple(node.params["dimensions"]))]


_register(_ExpandDims(), "expand_dims")


class _Iota(Rule):
    def modes(self, node: Node) -> list[Mode]:
        return [Mode((), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        return [
            sp.iota(
                out.dtype,
                out.shape,
                node.params["dimension"],
                dim_order=dim_order_for(out.shape, mode.out),
            )
        ]


_register(_Iota(), "iota")


# --- copies: slice and concatenate --------------------------------------------------


class _Slice(Rule):
    def modes(self, node: Node) -> list[Mode]:
        """A copy into any stick; with unit strides, also a view: its window of the operand.

        The view reads the operand in a default layout stuck on any of its dims, and is
        a window of that buffer where the slice cuts whole device steps
        (``primitives._in_place.slice_view``; else the planner finds it refused). A
        strided slice of the last dim, or a part of a last dim in one stick a row, is
        also a lane view (``primitives._lanes``).
        """
        out = node.outs[0]
        modes = [Mode((None,), s) for s in stick_options(out.shape)]
        strides = node.params.get("strides")
        x = node.ins[0]
        last = x.ndim - 1
        if strides is None or all(k == 1 for k in strides):
            modes += [Mode((s,), canon(out.shape, s), "view") for s in stick_options(x.shape)]
        if _lanes_of(node) is not None:  # its lanes of x's sticks (a LayoutError if not)
            modes.append(Mode((last,), canon(out.shape, last), "lanes"))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        start = tuple(node.params["start_indices"])
        limit = tuple(node.params["limit_indices"])
        if mode.variant == "view":  # a LayoutError when the slice is no window
            return [slice_view(args[0], start, limit)]
        if mode.variant == "lanes":  # a LayoutError when x's sticks do not walk its last dim
            return [lane_view(args[0], *_lanes_of(node))]  # type: ignore[misc]
        strides = node.params.get("strides")
        dim_order = dim_order_for(out.shape, mode.out)
        return [sp.slice_copy(args[0], start, limit, strides, dim_order=dim_order)]


def _lanes_of(node: Node) -> tuple[int, int, int | None] | None:
    """``lane_view``'s ``(offset, step, count)`` of a slice on lanes of ``x``'s sticks, or None.

    ``x[..., offset::step]``, or a part ``x[..., a:b]`` of the last dim inside one stick
    (a window, where that dim lies in one stick a row or is walked by stick tiles: the
    view says).
    """
    p = node.params
    args = (node.ins[0].shape, p["start_indices"], p["limit_indices"], p.get("strides"))
    strided = lane_slice_params(*args)
    if strided is not None:
        return (*strided, None)
    window = lane_window_params(*args)
    x = node.ins[0]
    if window is None or not has_spyre_format(x.dtype):
        return None
    eps = format_for_dtype(x.dtype).elems_per_stick()
    if not in_one_stick(window[0], window[1], eps):  # straddles two sticks: no window
        return None
    return window[0], 1, window[1] - window[0]


_register(_Slice(), "slice")


class _Concatenate(Rule):
    def modes(self, node: Node) -> list[Mode]:
        if any(isinstance(v, Scalar) for v in node.ins):
            raise SpyreUnsupportedError(f"concatenate of scalars at {node.source}")
        out = node.outs[0]
        modes = [Mode((None,) * len(node.ins), s) for s in stick_options(out.shape)]
        if grouped_layout(out.shape, out.dtype) is not None:  # pairs stacked: one stick
            modes.append(Mode((None,) * len(node.ins), out.ndim - 1, "grouped"))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        dim = node.params["dimension"]
        if mode.variant == "grouped":
            return [sp.concatenate(args, dim, layout=grouped_layout(out.shape, out.dtype))]
        return [sp.concatenate(args, dim, dim_order=dim_order_for(out.shape, mode.out))]


_register(_Concatenate(), "concatenate")


class _Pad(Rule):
    def modes(self, node: Node) -> list[Mode]:
        if not isinstance(node.ins[1], Scalar):
            raise SpyreUnsupportedError(f"pad with a traced fill value at {node.source}")
        return [Mode((None, None), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        config = node.params["padding_config"]
        value = _arg(args[1])
        return [sp.pad(args[0], value, config, dim_order=dim_order_for(out.shape, mode.out))]


_register(_Pad(), "pad")
