"""The ``dot_general`` lowering rule: matmuls, with scaled and broadcast operands."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from ... import primitives as sp
from ..._errors import LayoutError
from ...layout._layout import SpyreTensorLayout
from ...primitives._stick import (
    SPARSE,
    canon,
    default_layout,
    dim_order_for,
    stick_options,
)
from .._graph import Node, Scalar, Value
from .._registry import Mode, Rule, _arg, _register

# --- dot_general ----------------------------------------------------------------------


class _DotGeneral(Rule):
    @staticmethod
    def _dims(node: Node) -> tuple[Any, ...]:
        (lc, rc), (lb, rb) = node.params["dimension_numbers"]
        lhs, rhs = node.ins
        lfree = [d for d in range(lhs.ndim) if d not in (*lc, *lb)]
        rfree = [d for d in range(rhs.ndim) if d not in (*rc, *rb)]
        return tuple(lc), tuple(rc), tuple(lb), tuple(rb), lfree, rfree

    def modes(self, node: Node) -> list[Mode]:
        """A on k, B and the product on n; batched products also laid out row-major.

        Several contracting dims are merged into one k (A stuck on the last of them),
        several free dims of B into one n (B stuck on the last of them): views where
        the layouts allow, charged copies where they do not.

        ``dot_general`` emits ``[batch..., m, n]``; the default layout of stick n,
        ``[m, batch..., T, batch0, S]``, interleaves the batches inside each tile, so
        batched products (total batch > 1) can also be laid out
        ``SpyreTensorLayout.row_major`` (same stick and size). The planner weighs both
        by what their consumers then cost (a reshape may be a view of one only).
        """
        scaled = _scaled_operand(node)
        if scaled is not None:  # a literal 0-d operand: a product by a scalar
            return [
                Mode(tuple(None if u is not scaled else s for u in node.ins), s)
                for s in stick_options(scaled.shape)
            ]
        lc, _, lb, _, lfree, rfree = self._dims(node)
        lhs, rhs = node.ins
        out = node.outs[0]
        # Merged dims are stuck on the last of them that is no size-1 dim (which no
        # stick can be on): B's free dims on n, A's contracting dims on k.
        n = _last_sized(rhs.shape, rfree)
        b_stick = SPARSE if n is None else n
        out_n = None if n is None else len(lb) + len(lfree) + rfree.index(n)
        out_stick = SPARSE if out_n is None else out_n
        k = _last_sized(lhs.shape, lc)
        a_stick = SPARSE if k is None else k  # no k: an outer product
        modes = [Mode((a_stick, b_stick), out_stick)]
        if rfree and out.shape[-1] > 1 and math.prod(lhs.shape[d] for d in lb) > 1:
            modes.insert(0, Mode((a_stick, b_stick), out_stick, "row_major"))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        want = node.outs[0].dtype
        scaled = _scaled_operand(node)
        if scaled is not None:
            i = node.ins.index(scaled)
            x = args[i] if args[i].dtype == want else sp.astype(args[i], want)
            return [sp.elementwise("mul", _arg(args[1 - i]), x)]
        lc, rc, lb, rb, lfree, rfree = self._dims(node)
        if args[0].dtype != args[1].dtype:  # as JAX lowers mixed operands on CPU
            args = [x if x.dtype == want else sp.astype(x, want) for x in args]
        # Several free dims of A: the largest is the matmul's M, the others batch dims
        # B broadcasts over (q's tokens, not a group of 1 or 4 heads, are attention's M).
        m_at = _m_dim(node.ins[0].shape, lfree)
        a = sp.transpose(args[0], (*lb, *_m_last(lfree, m_at), *lc))
        b = sp.transpose(args[1], (*rb, *rc, *rfree))
        nb = len(lb)
        if len(lc) > 1:  # one k: the contracting dims merged, in the same order on both
            a = _reshape(a, (*a.shape[: -len(lc)], math.prod(a.shape[-len(lc) :])))
            b = _reshape(
                b, (*b.shape[:nb], math.prod(b.shape[nb : nb + len(rc)]), *b.shape[nb + len(rc) :])
            )
        free_sizes = tuple(b.shape[b.ndim - len(rfree) :])
        if len(rfree) > 1:  # one n: B's free dims merged
            b = _reshape(b, (*b.shape[: -len(rfree)], math.prod(free_sizes)))
        merged_k, lc, rfree = lc, lc[:1], rfree[-1:]
        if not lc:  # no contraction: a matmul with k = 1
            a = sp.expand_dims(a, a.ndim)
            b = sp.expand_dims(b, len(rb))
        if not lfree:
            a = sp.expand_dims(a, len(lb))
        if not rfree:
            b = sp.expand_dims(b, b.ndim)
        if len(lfree) > 1:  # B broadcasts over A's outer free dims
            b = sp.expand_dims(b, tuple(range(len(rb), len(rb) + len(lfree) - 1)))
        layout = None
        if mode.variant == "row_major":
            shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
            layout = SpyreTensorLayout.row_major(shape, want)
        try:
            out = sp.matmul(a, b, layout=layout, preferred_element_type=want)
        except LayoutError:
            if len(merged_k) < 2 and len(free_sizes) < 2:
                raise  # the operands as planned: the planner tries other layouts
            a, b = _on_last(a), _on_last(b)  # a merged view the matmul cannot contract
            out = sp.matmul(a, b, layout=layout, preferred_element_type=want)
        if not rfree:
            out = sp.squeeze(out, out.ndim - 1)
        if not lfree:
            out = sp.squeeze(out, len(lb))
        moved = _m_last(lfree, m_at)
        if moved != lfree:  # M back among A's free dims (a view)
            nb_f = len(lb)
            where = [nb_f + moved.index(d) for d in lfree]
            rest = range(nb_f + len(lfree), out.ndim)
            out = sp.transpose(out, (*range(nb_f), *where, *rest))
        if len(free_sizes) > 1:
            out = _reshape(out, (*out.shape[:-1], *free_sizes))
        return [out]


def _scaled_operand(node: Node) -> Value | None:
    """The other operand of a ``dot_general`` with a literal 0-d operand, else None.

    JAX's transpose of a product gives these (the cotangent ``1.0`` of ``jnp.vdot``):
    a 0-d operand has no contracting or batch dims, so the product is the other operand
    times the scalar, in the other operand's dim order.
    """
    lhs, rhs = node.ins
    if isinstance(lhs, Scalar) != isinstance(rhs, Scalar):
        return rhs if isinstance(lhs, Scalar) else lhs
    return None


def _m_dim(shape: tuple[int, ...], free: Sequence[int]) -> int | None:
    """The free dim of A that is the matmul's M: the largest (the last of equals)."""
    if not free:
        return None
    return max(reversed(free), key=lambda d: shape[d])


def _m_last(free: Sequence[int], m: int | None) -> list[int]:
    """A's free dims with ``m`` moved last (the order of the matmul's batch dims, then M)."""
    return [*(d for d in free if d != m), *([m] if m is not None else [])]


def _last_sized(shape: tuple[int, ...], dims: Sequence[int]) -> int | None:
    """The last of ``dims`` whose size is not 1, or None if there is none."""
    sized = [d for d in dims if shape[d] != 1]
    return sized[-1] if sized else None


def _on_last(x: Any) -> Any:
    """``x`` in the default layout stuck on its last dim: itself if it is, else a restickify."""
    t = jax.typeof(x)
    stick = canon(t.shape, t.ndim - 1)
    return sp.in_layout(x, default_layout(t.shape, t.layout.device_dtype, stick))


def _reshape(x: Any, shape: tuple[int, ...], *, sparse: bool = False) -> Any:
    """``x`` reshaped: a view where its layout allows, else a copy stuck on the last dim.

    With ``sparse``, a copy is sparse instead (B of a matrix-vector product).
    """
    try:
        return sp.reshape(x, shape)
    except LayoutError:
        stick = SPARSE if sparse or not shape else canon(shape, len(shape) - 1)
        return sp.reshape_copy(x, shape, dim_order=dim_order_for(shape, stick))


_register(_DotGeneral(), "dot_general")
