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

__all__ = ["compute", "pointwise"]


def compute(op: Any, ops: list[Any], dtype: Any) -> jax.Array:
    """``op`` (an ``ElementwiseOp``) on aligned operands; a ``lax`` twin skips ``jnp``'s jit."""
    if op.lax is None or not jnp.issubdtype(dtype, jnp.floating):
        return op.fn(*ops)
    if any(not isinstance(o, jax.Array) or o.dtype != dtype for o in ops):
        return op.fn(*ops)
    return op.lax(*broadcast_all(ops))


def pointwise(op: Any, consts: Any, vals: Sequence[jax.Array], dtype: Any) -> jax.Array:
    """``op`` on plain arrays ``vals`` (its array operands) and ``(position, scalar)`` consts.

    Scalars take ``dtype`` where every operand is a value; the result is in ``dtype``.
    """
    ops: list[Any] = list(vals)
    for pos, value in consts:
        ops.insert(pos, value)
    if op.result == "same" and op.values is None:
        ops = [o if isinstance(o, jax.Array) else jnp.asarray(o, dtype) for o in ops]
    return compute(op, ops, dtype).astype(dtype)
