"""The ``dot_general`` lowering rule: matmuls, with scaled and broadcast operands."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import jax
import numpy as np

from ... import primitives as sp
from ..._errors import LayoutError
from ...layout._layout import SpyreTensorLayout
from ...primitives._restickify import load_relayout
from ...primitives._stick import (
    SPARSE,
    canon,
    default_layout,
    dim_order_for,
    stick_options,
)
from .._graph import Node, Scalar, Value
from .._heads import head_dim_splits
from .._registry import Mode, Rule, _arg, _register

# --- dot_general ----------------------------------------------------------------------

_Order = Literal["default", "row_major", "m_first"]
"""How :func:`_product` lays its product out."""


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

        A batched product can also run with its operands swapped (the rhs as A, the lhs
        as B, the product transposed back, a view), its result stuck on the lhs's free
        dim, where :func:`_may_swap` says: its n under half a stick (the 4 query heads of
        a KV head under ``vmap``: ``jnp.einsum`` puts the cache first, ``K @ q^T``,
        ``V^T @ P^T``, and pads their stick 16x), or merged from several sized free dims
        of the rhs (GQA's ``einsum("sgrd,tgd->grst")`` is ``K @ q^T`` with n the query
        positions and repeats together: swapped, the scores land stuck on the keys, the
        dim the transpose keeps last and the softmax reduces). Not for a plain
        ``q @ k^T``, whose scores are stuck on the keys already: there the bytes
        objective would still take it (reductions across the stick give dense results)
        at two relayouts for one, a plan XLA runs 2x slower on the host
        (``benchmarks/README.md`` item 35). ``"swapped"`` reads the lhs stuck on its free
        dim; ``"swapped_load"`` (only where n pads: decode's KV cache stuck on the head
        dim) reads it stuck on its contracting dim and lays each block out anew as the
        matmul loads it (``LoadRelayout``). So decode attention runs ``q @ K^T`` and
        ``P @ V`` with every value dense (spec section 7's rule). Attention's ``V^T @
        P^T`` (:func:`_as_stored_swapped`) runs swapped with its product laid out M
        first (:func:`_m_first_layout`): JAX's transpose of it to ``[B, T, N, H]`` is
        then the result's default layout, and nothing is copied after the product.
        """
        scaled = _scaled_operand(node)
        if scaled is not None:  # a literal 0-d operand: a product by a scalar
            return [
                Mode(tuple(None if u is not scaled else s for u in node.ins), s)
                for s in stick_options(scaled.shape)
            ]
        lc, rc, lb, _, lfree, rfree = self._dims(node)
        lhs, rhs = node.ins
        out = node.outs[0]
        a_stick, b_stick, out_stick = _sticks(lhs.shape, rhs.shape, lc, len(lb), lfree, rfree)
        modes = [Mode((a_stick, b_stick), out_stick)]
        batched = math.prod(lhs.shape[d] for d in lb) > 1
        if rfree and out.shape[-1] > 1 and batched:
            modes.insert(0, Mode((a_stick, b_stick), out_stick, "row_major"))
        if _may_swap(node):
            a_s, b_s, _ = _sticks(rhs.shape, lhs.shape, rc, len(lb), rfree, lfree)
            n = _last_sized(lhs.shape, lfree)
            out_s = len(lb) + lfree.index(n) if n is not None else SPARSE
            modes.append(Mode((b_s, a_s), out_s, "swapped"))
            k = _last_sized(lhs.shape, lc)
            # Read in LX at no DDR charge, the load would win every tie: only where the
            # product's own stick would pad (decode's KV cache stuck on the head dim).
            if k is not None and k != b_s and _pads(rhs.shape, rfree, out.dtype):
                modes.append(Mode((k, a_s), out_s, "swapped_load"))
        if _by_heads(node):
            modes.append(Mode((a_stick, b_stick), out_stick, "heads"))
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
        if mode.variant == "heads":
            return [_heads_product(args[0], args[1], (lc, rc), (lfree, rfree), want)]
        if not mode.variant.startswith("swapped"):
            order: _Order = "row_major" if mode.variant == "row_major" else "default"
            return [_product(args[0], args[1], (lc, rc), (lb, rb), (lfree, rfree), want, order)]
        lhs = args[0]
        if mode.variant == "swapped_load":  # stuck on its free dim n as the matmul loads it
            t = jax.typeof(lhs)
            n = _last_sized(t.shape, lfree)
            lhs = load_relayout(lhs, default_layout(t.shape, t.layout.device_dtype, n))
        order: _Order = "m_first" if len(lb) > 1 and _as_stored_swapped(node) else "default"
        out = _product(args[1], lhs, (rc, lc), (rb, lb), (rfree, lfree), want, order)
        nb, nr = len(lb), len(rfree)  # [batch, rhs free, lhs free] -> [batch, lhs free, rhs free]
        back = (*range(nb), *range(nb + nr, out.ndim), *range(nb, nb + nr))
        return [sp.transpose(out, back)]


def _pads(shape: tuple[int, ...], free: Sequence[int], dtype: Any) -> bool:
    """Whether a product stuck on these free dims (merged) pads its sticks over 2x."""
    size = math.prod(shape[d] for d in free)
    eps = SpyreTensorLayout((size,), dtype).elems_per_stick
    return -(-size // eps) * eps > 2 * size


def _sticks(
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    ac: Sequence[int],
    nb: int,
    afree: Sequence[int],
    bfree: Sequence[int],
) -> tuple[int, int, int]:
    """The sticks of A, B and the product ``[batch, A free, B free]`` (``nb`` batch dims).

    Merged dims are stuck on the last of them that is no size-1 dim (which no stick can
    be on): B's free dims on n, A's contracting dims on k (none: an outer product).
    """
    n = _last_sized(b_shape, bfree)
    k = _last_sized(a_shape, ac)
    b_stick = SPARSE if n is None else n
    out_stick = SPARSE if n is None else nb + len(afree) + list(bfree).index(n)
    return (SPARSE if k is None else k), b_stick, out_stick


def _product(
    a: Any,
    b: Any,
    contract: tuple[Sequence[int], Sequence[int]],
    batch: tuple[Sequence[int], Sequence[int]],
    free: tuple[Sequence[int], Sequence[int]],
    want: Any,
    order: _Order = "default",
) -> Any:
    """``dot_general(a, b)`` as one matmul with ``a`` as A: ``[batch, a free, b free]``.

    ``order``: how the product is laid out: ``"default"`` (the matmul's own layout),
    ``"row_major"`` (``SpyreTensorLayout.row_major``), or ``"m_first"`` (A's rows, its
    last free dim, attention's queries, outside its batch dims but the first:
    :func:`_m_first_layout`).
    """
    (lc, rc), (lb, rb), (lfree, rfree) = contract, batch, free
    # Several free dims of A: the largest is the matmul's M, the others batch dims B
    # broadcasts over (q's tokens, not a group of 1 or 4 heads, are attention's M).
    moved = _m_last(lfree, _m_dim(jax.typeof(a).shape, lfree))  # A's free dims, M last
    a = sp.transpose(a, (*lb, *moved, *lc))
    b = sp.transpose(b, (*rb, *rc, *rfree))
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
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    layout = None
    if order == "row_major":
        layout = SpyreTensorLayout.row_major(shape, want)
    elif order == "m_first":
        rows = nb + moved.index(lfree[-1]) if lfree else len(shape) - 2
        layout = _m_first_layout(shape, want, rows)
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
    if moved != lfree:  # M back among A's free dims (a view)
        nb_f = len(lb)
        where = [nb_f + moved.index(d) for d in lfree]
        rest = range(nb_f + len(lfree), out.ndim)
        out = sp.transpose(out, (*range(nb_f), *where, *rest))
    if len(free_sizes) > 1:
        out = _reshape(out, (*out.shape[:-1], *free_sizes))
    return out


def _by_heads(node: Node) -> bool:
    """Whether a product may run with the rhs's leading free dims as its batch (heads).

    ``x @ w`` with ``w[k, H, D]`` (``jnp.einsum("tk,khd->thd")``, a projection into
    heads with its weight in heads): merged into one n (the product's other mode), its
    sticks run across the heads, so where ``D`` is no whole sticks a head starts
    mid-stick (the weight is copied into the merged layout, and a slice of one head's
    dim, rotate-half's halves, is no window of the product). Run per head, each head's
    ``D`` is on sticks of its own: the product in the default layout of ``[T, H, D]``,
    the weight read as it arrives. No batch dims, one contracting dim, an lhs free dim
    (of size 1 too: a decode step's one token), every rhs free dim sized.
    """
    lc, _, lb, _, lfree, rfree = _DotGeneral._dims(node)
    rhs = node.ins[1]
    dtype = node.outs[0].dtype
    if lb or len(lc) != 1 or len(rfree) < 2 or not lfree:
        return False
    if any(rhs.shape[d] == 1 for d in rfree):
        return False
    return head_dim_splits(dtype, rhs.shape[rfree[-1]])


def _heads_product(
    a: Any,
    b: Any,
    contract: tuple[Sequence[int], Sequence[int]],
    free: tuple[Sequence[int], Sequence[int]],
    want: Any,
) -> Any:
    """``dot_general(a, b)`` with b's leading free dims (heads) as the matmul's batch.

    ``[a free..., heads..., n]`` as a view of the matmul's ``[a outer..., heads..., m,
    n]``, stuck on n. A ``b`` whose device dims fold its dims (``w.reshape(k, H, D)`` of
    a ``[k, H * D]`` weight) is laid out per head as the matmul loads it
    (``LoadRelayout``).
    """
    (lc, rc), (lfree, rfree) = contract, free
    m_at = _m_dim(jax.typeof(a).shape, lfree)
    order = _m_last(lfree, m_at)
    heads = tuple(rfree[:-1])
    a = sp.transpose(a, (*order, *lc))
    b = sp.transpose(b, (*heads, *rc, rfree[-1]))
    t = jax.typeof(b)
    if any(len(d.dims) > 1 for d in t.dims if d.is_data):
        kd = len(heads)  # [T(n), k, S(n)] per head: the default layout of [k, heads..., n]
        b = load_relayout(b, SpyreTensorLayout(t.shape, t.dtype, [kd, *range(kd), kd + 1]))
    outer, nh = len(order) - 1, len(heads)
    a = sp.expand_dims(a, tuple(range(outer, outer + nh)))
    if outer:
        b = sp.expand_dims(b, tuple(range(outer)))
    where = [outer + nh if d == order[-1] else order.index(d) for d in lfree]
    back = (*where, *range(outer, outer + nh), outer + nh + 1)
    # [a outer..., heads..., m, n], laid out so that ``back`` gives the default layout
    shape = (*jax.typeof(a).shape[:outer], *jax.typeof(b).shape[outer:-2])
    shape += (jax.typeof(a).shape[-2], jax.typeof(b).shape[-1])
    layout = SpyreTensorLayout(shape, want, list(back))
    out = sp.matmul(a, b, layout=layout, preferred_element_type=want)
    return sp.transpose(out, back)


def _m_first_layout(shape: tuple[int, ...], dtype: Any, rows: int) -> SpyreTensorLayout:
    """A product ``[b0, ..., n]`` stuck on n with dim ``rows`` outside the others but b0.

    Device ``[rows, others..., T(n), b0, S(n)]``: the default layout of the product
    transposed to ``[b0, rows, others..., n]`` (attention's ``[B, T, N, H]``, ``rows``
    its queries), so that transpose is a view of it in its default layout. The queries
    are the matmul's M unless they are fewer than a group's heads (GQA decode: one
    token, ``[B, T, K, G, H]`` with M the G query heads of a KV head): the heads then
    stay in the caller's order, K outside G, and merging them into N is a view.
    """
    r = len(shape)
    return SpyreTensorLayout(
        shape, dtype, [0, rows, *(d for d in range(1, r - 1) if d != rows), r - 1]
    )


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


def in_place_layout(node: Node, value: Value) -> SpyreTensorLayout | str:
    """The layout in which this product reads ``value`` with no copy, or why there is none.

    A weight ``[batch..., k, n]`` read as the rhs of ``x @ w`` (batch dims leading,
    contracted over k, n free) is read by the matmul kernel as XLA's dot takes it when
    it is ``SpyreTensorLayout.row_major`` (``[batch..., k, T(n), S(n)]``, the padded
    row-major matrix); in the default layout ``[T(n), k, S(n)]`` n sits on both sides
    of k and XLA copies the whole weight on every call (``primitives._matmul``). The
    same for ``w[batch..., n, k]`` read as ``x @ w.T`` (that image of its transpose,
    no restickify onto n), and for ``W[m..., k]`` read as the lhs of ``W @ x`` (A,
    row-major ``[m..., T(k), S(k)]`` where the default ``[T(k), m, S(k)]`` is copied).

    Returns:
        The layout; or, where the product reads ``value`` otherwise, the reason in a
        user's words (``SpyreJit.place`` prints it): in another dim order, scaled,
        beside an operand of another dtype, or where the swapped mode may run.
    """
    if node.prim != "dot_general":
        return f"it is also read by {node.prim}"
    if _scaled_operand(node) is not None:
        return "its product is a scaling by a constant"
    lhs, rhs = node.ins
    if lhs is rhs or value.ndim < 2:
        return "its product reads it as a vector or as both operands"
    if lhs.dtype != rhs.dtype:
        return f"its product's other operand is {node.ins[value is lhs].dtype}, it is {value.dtype}"
    if _may_swap(node):
        return "its product may run swapped, reading it stuck on k (decode attention, GQA scores)"
    lc, rc, lb, rb, _, _ = _DotGeneral._dims(node)
    nb = rhs.ndim - 2
    if value is lhs:  # W in W @ x: A, [m..., k], read as XLA's dot takes it row-major
        if lb or lc != (lhs.ndim - 1,):
            return "it is the lhs of a product that contracts it in another order than [m, k]"
        return SpyreTensorLayout.row_major(lhs.shape, lhs.dtype)
    if rc not in ((nb,), (nb + 1,)) or rb != tuple(range(nb)):
        return "its product contracts it in another dim order than [batch..., k, n]"
    if rc == (nb,):  # w in x @ w: [batch..., k, T(n), S(n)]
        return SpyreTensorLayout.row_major(rhs.shape, rhs.dtype)
    # w in x @ w.T: the same image, [batch..., k, T(n), S(n)], of w's transpose
    return SpyreTensorLayout.row_major(rhs.shape, rhs.dtype, order=[*range(nb), nb + 1, nb])


def _may_swap(node: Node) -> bool:
    """Whether a product may run ``swapped`` (B as the matmul's A).

    Batched, A's free dims not padded in the output, and B's padded (decode
    attention's scores), merged from several sized dims (GQA's ``K @ q^T``), or each
    operand's last dim the one the swapped product sticks it on where the product as
    written sticks neither so (:func:`_as_stored_swapped`: attention's ``V^T @ P^T``):
    the one rule the modes and :func:`in_place_layout` read.
    """
    _, _, lb, _, lfree, rfree = _DotGeneral._dims(node)
    lhs, rhs = node.ins
    dtype = node.outs[0].dtype
    batched = math.prod(lhs.shape[d] for d in lb) > 1
    several = sum(rhs.shape[d] > 1 for d in rfree) > 1
    return (
        batched
        and not _pads(lhs.shape, lfree, dtype)
        and (_pads(rhs.shape, rfree, dtype) or several or _as_stored_swapped(node))
    )


def _as_stored_swapped(node: Node) -> bool:
    """Whether only the swapped product reads both operands stuck on their last dims.

    Swapped, the rhs is A (stuck on its contracting dim) and the lhs B (stuck on its
    free dim), the sticks :func:`_sticks` gives them: when those are the rhs's and the
    lhs's last dims, both are read as stored in the default layout (a softmax's
    probabilities stuck on the keys, v on its head dim), and the product ``[batch, rhs
    free, lhs free]`` is stuck on the lhs's last dim. ``jax.nn.dot_product_attention``
    and the einsum form write ``P @ V`` as ``V^T @ P^T`` (``dot_general(v, p)``): as
    written it restickifies v onto the keys and p onto the queries, and its product,
    stuck on the queries, is copied into the result's layout. Not a plain ``q @ k^T``
    (q's last dim is contracted): there the swap is the 2x slower plan of
    ``benchmarks/README.md`` item 35.
    """
    _, rc, lb, _, lfree, rfree = _DotGeneral._dims(node)
    lhs, rhs = node.ins
    a_stick, b_stick, _ = _sticks(rhs.shape, lhs.shape, rc, len(lb), rfree, lfree)
    return a_stick == rhs.ndim - 1 and b_stick == lhs.ndim - 1
