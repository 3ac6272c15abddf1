"""Pictures of Spyre layouts for notebooks: logical view, host memory, device memory."""

from typing import Any

from ..layout._layout import SpyreTensorLayout
from ._device import CoreMap, Roofline, core_colours, core_ownership, roofline
from ._picture import PALETTE, Picture, share_colours, stick_colours
from ._pictures import device_memory, host_memory, logical_view, loop_nest

__all__ = [
    "PALETTE",
    "CoreMap",
    "Picture",
    "Roofline",
    "core_colours",
    "core_ownership",
    "device_memory",
    "figure",
    "host_memory",
    "logical_view",
    "loop_nest",
    "roofline",
    "share_colours",
    "stick_colours",
]


def figure(
    x: Any, layout: SpyreTensorLayout | None = None, *, dtype: Any = None, max_rows: int = 16
) -> Any:
    """The three views of a tensor side by side, as one matplotlib figure.

    The views share their colours (:func:`share_colours`): a stick has the same colour
    in all three.

    Args:
        x: a SpyreArray, a host array, or a shape (with ``layout`` or ``dtype``).
        layout: the layout; defaults to the array's own or the default layout.
        dtype: the dtype of a bare shape.
        max_rows: rows drawn at most in each view.
    """
    import matplotlib.pyplot as plt

    pictures = share_colours(
        logical_view(x, layout, dtype=dtype, max_rows=max_rows, max_cols=256),
        host_memory(x, layout, dtype=dtype, max_rows=max_rows),
        device_memory(x, layout, dtype=dtype, max_rows=max_rows),
    )
    fig, axes = plt.subplots(1, 3, figsize=(24, 0.3 * max_rows + 2))
    for pic, ax in zip(pictures, axes, strict=True):
        pic.figure(ax, numbers=False)
    fig.tight_layout()
    return fig
