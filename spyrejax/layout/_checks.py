"""Validation of the arguments layouts take: sizes, strides, dim orders, indices.

Pure Python/NumPy: no JAX import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import LayoutError
from ._segments import row_major_strides

__all__ = ["check_dim_order", "check_host_strides", "check_index", "check_shape", "int_tuple"]


def int_tuple(values: Any, name: str) -> tuple[int, ...]:
    """Python ints from a sequence of integers, or a LayoutError naming ``values``."""
    try:
        items = tuple(values)
    except TypeError:
        raise LayoutError(f"{name} must be a sequence of ints, got {values!r}") from None
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise LayoutError(f"{name} must be a sequence of ints, got {values!r}")
        out.append(int(v))
    return tuple(out)


def check_shape(size: Any) -> tuple[int, ...]:
    shape = int_tuple(size, "size")
    if any(n < 0 for n in shape):
        raise LayoutError(f"sizes must be >= 0, got size {list(shape)}")
    if len(shape) > 8:
        raise LayoutError(f"rank must be at most 8, got size {list(shape)}")
    return shape


def check_host_strides(shape: tuple[int, ...], host_strides: Any) -> tuple[int, ...]:
    if host_strides is None:
        return row_major_strides(shape)
    strides = int_tuple(host_strides, "host_strides")
    if len(strides) != len(shape):
        raise LayoutError(
            f"host_strides {list(strides)} must have one entry per dim of size {list(shape)}"
        )
    if any(s < 1 for s, n in zip(strides, shape, strict=True) if n > 1):
        raise LayoutError(f"host_strides must be positive, got {list(strides)}")
    return strides


def check_dim_order(dim_order: Any, rank: int) -> tuple[int, ...]:
    if dim_order is None:
        return tuple(range(rank))
    order = int_tuple(dim_order, "dim_order")
    dense = order[:-1] if len(order) == rank + 1 and order and order[-1] == -1 else order
    if len(dense) != rank or sorted(dense) != list(range(rank)):
        raise LayoutError(
            f"dim_order {list(order)} must be a permutation of range({rank}), optionally "
            "followed by -1 for a sparse layout"
        )
    return order


def check_index(index: Any, shape: Sequence[int], what: str = "host index") -> tuple[int, ...]:
    idx = int_tuple(index, what)
    if len(idx) != len(shape) or any(not 0 <= i < n for i, n in zip(idx, shape, strict=True)):
        raise LayoutError(f"{what} {list(idx)} is outside shape {list(shape)}")
    return idx
