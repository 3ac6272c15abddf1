"""What public functions make of their arguments: a result's layout, a host operand."""

from __future__ import annotations

from typing import Any

from .._errors import LayoutError, SpyreTypeError
from ..layout._layout import SpyreTensorLayout

__all__ = ["host_operand", "target_layout"]


def target_layout(
    op: str, shape: tuple[int, ...], dtype: Any, layout: Any, dim_order: Any
) -> SpyreTensorLayout:
    """The layout a function places its result in, from its ``layout``/``dim_order`` pair.

    Every public function that places a result takes ``layout=None`` and, keyword-only,
    ``dim_order=None``: an explicit layout, or the default layout of ``shape`` in that
    dim order (the last entry is the stick dim), or with neither the default layout.

    Args:
        op: the function's name, for errors.
        shape: the result's logical shape.
        dtype: its element dtype (or device format), for the default layout.
        layout: the explicit layout, or None.
        dim_order: the dim order of the default layout, or None.

    Raises:
        LayoutError: if both are given, ``layout`` is not a layout, or ``dim_order`` is
            not a dim order of ``shape``.
    """
    if layout is None:
        return SpyreTensorLayout(shape, dtype, dim_order)
    if not isinstance(layout, SpyreTensorLayout):
        hint = " (a dim order goes in dim_order=)" if isinstance(layout, list | tuple) else ""
        raise LayoutError(f"{op}: layout must be a SpyreTensorLayout, got {layout!r}{hint}")
    if dim_order is not None:
        raise LayoutError(
            f"{op} takes a layout or a dim_order, not both (got {layout} and "
            f"dim_order={dim_order!r})"
        )
    return layout


def host_operand(op: str, operand: str, aval: Any) -> SpyreTypeError:
    """The error of an op given a host array beside Spyre arrays: both ways out.

    Eager Spyre ops take Spyre arrays (and scalars), in either operand order (``a + x``
    as ``x + a``): the data stay where they are, nothing moves silently.

    Args:
        op: the op's name.
        operand: which operand (``"operand 0"``, ``"b"``).
        aval: the host operand's abstract value.
    """
    return SpyreTypeError(
        f"{op}: {operand} is a host array {aval}, beside a Spyre array: move it to the "
        "device with spyrejax.to_device (or pass a Python scalar), or read the Spyre "
        "array to the host with spyrejax.to_host; spyrejax.jit(f) mixes both, moving "
        "host arguments to the device"
    )
