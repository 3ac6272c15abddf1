"""An elementwise op's computation on plain arrays, shared by every kernel that runs it.

The whole-image kernel (:class:`~spyrejax.primitives._elementwise.Elementwise`), the
per-core kernels and fused kernels (a widened sum's maps) compute an op this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ._axes import broadcast_all

__all__ = ["compute", "kept_zero", "pointwise"]


def compute(op: Any, ops: list[Any], dtype: Any) -> jax.Array:
    """``op`` (an ``ElementwiseOp``) on aligned operands; a ``lax`` twin skips ``jnp``'s jit."""
    if op.lax is None or not jnp.issubdtype(dtype, jnp.floating):
        return op.fn(*ops)
    if any(not isinstance(o, jax.Array) or o.dtype != dtype for o in ops):
        return op.fn(*ops)
    return op.lax(*broadcast_all(ops))


def kept_zero(value: Any, dtype: Any) -> Any:
    """A float scalar zero as an operand XLA cannot fold away (other scalars as they are).

    XLA's simplifier turns ``x + 0.0`` into ``x``: ``-0.0`` where IEEE (and the card)
    give ``+0.0``; the pair-sum unroll adds its reduction's init (``lowering._pair_sums``).
    """
    if not isinstance(value, float) or value != 0 or not jnp.issubdtype(dtype, jnp.floating):
        return value
    return jax.lax.optimization_barrier(jnp.asarray(value, dtype))


def pointwise(op: Any, consts: Any, vals: Sequence[jax.Array], dtype: Any) -> jax.Array:
    """``op`` on plain arrays ``vals`` (its array operands) and ``(position, scalar)`` consts.

    Scalars take ``dtype`` where every operand is a value; the result is in ``dtype``.
    """
    ops: list[Any] = list(vals)
    for pos, value in consts:
        ops.insert(pos, kept_zero(value, dtype))
    if op.result == "same" and op.values is None:
        ops = [o if isinstance(o, jax.Array) else jnp.asarray(o, dtype) for o in ops]
    return compute(op, ops, dtype).astype(dtype)
