"""Pictures of Spyre layouts, as in the seed documents: what each cell holds, and where.

A :class:`Picture` is a grid of cells: the text written in each (a host offset), the
stick it belongs to (its colour), whether it is padding, and where tiles start. The
three views of a tensor are:

- :func:`logical_view`: the host grid (leading dims flattened into rows), each cell
  coloured by the stick that holds it and labelled with its host offset;
- :func:`host_memory`: host memory in address order, wrapped one stick's width per row,
  so the interleaving of sticks in host memory shows;
- :func:`device_memory`: device memory, one stick per row in device order, tiles
  outlined and padding marked.

Large tensors are summarised: only the first ``max_rows`` rows and ``max_cols`` columns
are drawn, and the picture says so. Pictures render as HTML in notebooks
(``_repr_html_``) and as matplotlib figures (:meth:`Picture.figure`).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._array import SpyreArray
from .._dci import DCI, generate_dci
from .._errors import LayoutError
from .._layout import SpyreTensorLayout

__all__ = ["PALETTE", "Picture", "device_memory", "host_memory", "logical_view", "loop_nest"]

PALETTE = (
    "#8dd3c7",
    "#ffffb3",
    "#bebada",
    "#fb8072",
    "#80b1d3",
    "#fdb462",
    "#b3de69",
    "#fccde5",
    "#bc80bd",
    "#ccebc5",
    "#ffed6f",
    "#9ecae1",
)
"""Stick colours, cycled by stick index."""
PAD_COLOUR = "#d9d9d9"
EMPTY = -2


@dataclass(frozen=True)
class Picture:
    """A grid of cells drawn for one view of a tensor.

    Attributes:
        title: what the picture shows.
        text: ``(rows, cols)`` strings written in the cells (host offsets; "" if none).
        stick: ``(rows, cols)`` stick index of each cell (its colour); -1 for padding,
            -2 for cells past the end of the data.
        row_labels: a label per row.
        tile_starts: rows where a new tile begins (outlined).
        note: what was left out of a large tensor, or "".
    """

    title: str
    text: np.ndarray
    stick: np.ndarray
    row_labels: tuple[str, ...]
    tile_starts: tuple[int, ...] = ()
    note: str = ""

    @property
    def padding(self) -> np.ndarray:
        """``(rows, cols)``: True on padding cells."""
        return self.stick == -1

    @property
    def shape(self) -> tuple[int, int]:
        """Rows and columns drawn."""
        return tuple(self.text.shape)  # type: ignore[return-value]

    def colour(self, r: int, c: int) -> str:
        """The fill colour of a cell."""
        s = int(self.stick[r, c])
        if s == -1:
            return PAD_COLOUR
        if s == EMPTY:
            return "#ffffff"
        return PALETTE[s % len(PALETTE)]

    def _repr_html_(self) -> str:
        e = html.escape
        rows = []
        tiles = set(self.tile_starts)
        for r in range(self.shape[0]):
            top = " style='border-top:2px solid #333'" if r in tiles and r else ""
            cells = []
            for c in range(self.shape[1]):
                cls = " class='pad'" if self.stick[r, c] == -1 else ""
                text = "pad" if self.stick[r, c] == -1 else e(str(self.text[r, c]))
                cells.append(f"<td{cls} style='background:{self.colour(r, c)}'>{text}</td>")
            rows.append(f"<tr{top}><th>{e(self.row_labels[r])}</th>{''.join(cells)}</tr>")
        note = f"<p><i>{e(self.note)}</i></p>" if self.note else ""
        style = (
            "<style>.spyrejax-viz td{font:9px monospace;padding:1px 3px;text-align:right}"
            ".spyrejax-viz td.pad{color:#888;font-style:italic}"
            ".spyrejax-viz th{font:9px monospace;text-align:left}</style>"
        )
        return (
            f"{style}<div class='spyrejax-viz'><p><b>{e(self.title)}</b></p>{note}"
            f"<table>{''.join(rows)}</table></div>"
        )

    def figure(self, ax: Any = None, *, numbers: bool = True) -> Any:
        """Draw the picture with matplotlib (imported lazily).

        Args:
            ax: an existing ``Axes`` to draw into; a new figure otherwise.
            numbers: write the offsets in the cells (skipped for very large grids).

        Returns:
            The matplotlib ``Figure``.
        """
        import matplotlib.pyplot as plt
        from matplotlib.colors import to_rgb

        rows, cols = self.shape
        if ax is None:
            chars = max(3, max((len(str(t)) for t in self.text.flat), default=3))
            width = min(0.085 * chars * cols + 1.5, 40) if numbers else min(0.2 * cols + 1.5, 18)
            _, ax = plt.subplots(figsize=(width, min(0.28 * rows + 1, 14)))
        image = np.array([[to_rgb(self.colour(r, c)) for c in range(cols)] for r in range(rows)])
        ax.imshow(image.reshape(rows, cols, 3), aspect="auto", interpolation="nearest")
        if numbers and rows * cols <= 4096:
            for r in range(rows):
                for c in range(cols):
                    pad = self.stick[r, c] == -1
                    label = "pad" if pad else str(self.text[r, c])
                    if label:
                        ax.text(
                            c,
                            r,
                            label,
                            ha="center",
                            va="center",
                            fontsize=5,
                            color="#777" if pad else "black",
                        )
        for r in self.tile_starts:
            if r:
                ax.axhline(r - 0.5, color="#333", linewidth=1.5)
        ax.set_yticks(range(rows), self.row_labels, fontsize=6)
        ax.set_xticks([])
        ax.set_title(self.title + (f"\n{self.note}" if self.note else ""), fontsize=9)
        return ax.figure


def _resolve(
    x: Any, layout: SpyreTensorLayout | None, dtype: Any
) -> tuple[tuple[int, ...], SpyreTensorLayout]:
    """The host shape and layout a picture is drawn for."""
    if isinstance(x, SpyreArray):
        return x.type.base_shape, x.layout
    if isinstance(x, tuple | list):
        shape = tuple(int(n) for n in x)
        if layout is None:
            if dtype is None:
                raise LayoutError("give a layout or a dtype with a bare shape")
            layout = SpyreTensorLayout(shape, dtype)
        return shape, layout
    arr_shape = tuple(np.shape(x))
    return arr_shape, layout or SpyreTensorLayout(arr_shape, dtype or x.dtype)


def _unravel(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Indices ``(..., len(shape))`` of row-major flat positions (shape may be ())."""
    if not shape:
        return np.zeros((*np.shape(flat), 0), np.int64)
    return np.stack(np.unravel_index(flat, shape), -1)


def _stick_ids(layout: SpyreTensorLayout, coords: np.ndarray) -> np.ndarray:
    """Index of the stick (device coords without the lane) in device order."""
    return (
        np.ravel_multi_index(tuple(np.moveaxis(coords[..., :-1], -1, 0)), layout.device_size[:-1])
        if layout.device_rank > 1
        else np.zeros(coords.shape[:-1], np.int64)
    )


def _note(shown: tuple[int, int], total: tuple[int, int], what: str) -> str:
    if shown == total:
        return ""
    return f"showing {shown[0]} of {total[0]} {what} and {shown[1]} of {total[1]} columns"


def logical_view(
    x: Any,
    layout: SpyreTensorLayout | None = None,
    *,
    dtype: Any = None,
    max_rows: int = 32,
    max_cols: int = 64,
) -> Picture:
    """The host grid: cells coloured by stick and labelled with host offsets.

    Args:
        x: a :class:`SpyreArray`, a host array, or a shape (with ``layout`` or ``dtype``).
        layout: the layout; defaults to the array's own or the default layout.
        dtype: the dtype of a bare shape.
        max_rows: rows drawn at most (leading dims are flattened into rows).
        max_cols: columns drawn at most.
    """
    shape, layout = _resolve(x, layout, dtype)
    rows_total = math.prod(shape[:-1]) if shape else 1
    cols_total = shape[-1] if shape else 1
    rows, cols = min(rows_total, max_rows), min(cols_total, max_cols)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    offsets = r * cols_total + c  # row-major host offsets
    index = _unravel(offsets, shape)
    coords = layout.device_coords_of(index, shape)
    sticks = _stick_ids(layout, coords)
    labels = tuple(str(tuple(int(i) for i in row)) for row in _unravel(np.arange(rows), shape[:-1]))
    return Picture(
        f"logical view of {list(shape)}: cells coloured by stick, labelled with host offsets",
        offsets.astype(str),
        sticks,
        labels,
        note=_note((rows, cols), (rows_total, cols_total), "rows"),
    )


def host_memory(
    x: Any,
    layout: SpyreTensorLayout | None = None,
    *,
    dtype: Any = None,
    width: int | None = None,
    max_rows: int = 32,
) -> Picture:
    """Host memory in address order, ``width`` elements a row (default: one stick).

    Each cell is labelled with its host offset and coloured by the device stick that
    will hold it.
    """
    shape, layout = _resolve(x, layout, dtype)
    width = width or layout.elems_per_stick
    total = math.prod(shape)
    rows_total = -(-total // width)
    rows = min(rows_total, max_rows)
    offsets = np.arange(rows * width).reshape(rows, width)
    inside = offsets < total
    index = _unravel(np.where(inside, offsets, 0), shape)
    sticks = _stick_ids(layout, layout.device_coords_of(index, shape))
    sticks = np.where(inside, sticks, EMPTY)
    text = np.where(inside, offsets.astype(str), "")
    labels = tuple(f"@{r * width}" for r in range(rows))
    return Picture(
        f"host memory of {list(shape)}: {width} elements a row, coloured by stick",
        text,
        sticks,
        labels,
        note=_note((rows, width), (rows_total, width), "rows"),
    )


def device_memory(
    x: Any,
    layout: SpyreTensorLayout | None = None,
    *,
    dtype: Any = None,
    max_rows: int = 32,
) -> Picture:
    """Device memory: one stick per row in device order, padding marked, tiles outlined.

    Each cell shows the host offset it holds, or is padding. A tile is the run of
    sticks along the device dim just outside the stick (``device_size[-2]`` sticks).
    """
    shape, layout = _resolve(x, layout, dtype)
    eps = layout.elems_per_stick
    rows_total = layout.num_sticks
    rows = min(rows_total, max_rows)
    r, lane = np.meshgrid(np.arange(rows), np.arange(eps), indexing="ij")
    coords = _unravel(r * eps + lane, layout.device_size)  # stick r, lane `lane`
    offsets = layout.host_offsets_of(coords, shape)
    sticks = np.where(offsets >= 0, r, -1)
    text = np.where(offsets >= 0, offsets.astype(str), "")
    tile = layout.device_size[-2] if layout.device_rank > 1 else rows_total
    labels = tuple(str(tuple(int(i) for i in row[0, :-1])) for row in coords[:, :1, :])
    return Picture(
        f"device memory of {list(shape)} in {list(layout.device_size)}: a stick per row",
        text,
        sticks,
        labels,
        tile_starts=tuple(range(0, rows, max(tile, 1))),  # an empty tensor has no tiles
        note=_note((rows, eps), (rows_total, eps), "sticks"),
    )


def loop_nest(x: Any, layout: SpyreTensorLayout | None = None, *, dtype: Any = None) -> str:
    """The DMA loop nests that move ``x`` to the device, as Python-like code.

    ``x`` may also be a :class:`DCI`.
    """
    if isinstance(x, DCI):
        return x.pseudocode()
    shape, layout = _resolve(x, layout, dtype)
    return generate_dci(shape, layout).pseudocode()
