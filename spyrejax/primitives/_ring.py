"""What the per-core kernels of reductions and matmuls share: reduced dims and the ring.

A core of a division (``spyrejax.device.WorkDivision``) whose reduced dim is split
holds a partial result; the partners sharing its output box combine theirs over the
ring (spyre-device spec section 2).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..device._division import WorkDivision

__all__ = ["combine", "reduced"]


def reduced(div: WorkDivision) -> list[str]:
    """The reduced dims of a division's space, in iteration order."""
    return [d.name for d in div.space.dims if d.reduced]


def combine(div: WorkDivision, partial: jax.Array, op: Any) -> jax.Array:
    """Partial results combined over the cores that split a reduced dim (the ring).

    Cores are numbered mixed-radix over ``div.order``, fastest first; the partners of
    one output box differ only in the split reduced dim's digit.

    Args:
        div: the division.
        partial: every core's partial result, ``[cores, ...]``.
        op: ``op(values, axis)`` combines values along one axis (a sum, a max...).
    """
    split = [n for n in reduced(div) if div.splits[n] > 1]
    if not split:
        return partial
    radix = tuple(div.splits[n] for n in reversed(div.order))
    axis = list(reversed(div.order)).index(split[0])
    grouped = partial.reshape(radix + partial.shape[1:])
    total = op(grouped, axis)
    return jnp.broadcast_to(jnp.expand_dims(total, axis), grouped.shape).reshape(partial.shape)
