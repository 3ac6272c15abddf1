"""Pictures of Spyre layouts, as in the seed documents: what each cell holds, and where.

A :class:`Picture` is a grid of cells: the text written in each (a host offset), the
stick it belongs to (its colour), whether it is padding, and the tile it lies in. The
three views of a tensor are:

- :func:`logical_view`: the host grid (leading dims flattened into rows), each cell
  coloured by the stick that holds it and labelled with its host offset;
- :func:`host_memory`: host memory in address order, wrapped one stick's width per row,
  so the interleaving of sticks in host memory shows;
- :func:`device_memory`: device memory, one stick per row in device order, tiles
  outlined and padding marked.

Each view is a :class:`~._picture.Picture` (:mod:`._picture`: cells, colours, HTML and
figures).

Large tensors are summarised: only the first ``max_rows`` rows and ``max_cols`` columns
are drawn (device memory shows the start of the first two tiles), and the picture says
so. Pictures render as HTML in notebooks (``_repr_html_``) and as matplotlib figures
(:meth:`Picture.figure`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._errors import LayoutError
from ..dma._dci import DCI
from ..layout._host_mapping import HostMapping
from ..layout._lanes import lane_text
from ..layout._layout import SpyreTensorLayout
from ..primitives._array import SpyreArray
from ._picture import EMPTY, Picture, coords_name

__all__ = ["device_memory", "host_memory", "logical_view", "loop_nest"]


def _resolve(x: Any, layout: SpyreTensorLayout | None, dtype: Any) -> HostMapping:
    """The host tensor a picture is drawn for, bound to its layout."""
    if isinstance(x, SpyreArray):
        return x.layout.for_host(x.type.base_shape)
    if isinstance(x, tuple | list):
        shape = tuple(int(n) for n in x)
        if layout is None:
            if dtype is None:
                raise LayoutError("give a layout or a dtype with a bare shape")
            layout = SpyreTensorLayout(shape, dtype)
        return layout.for_host(shape)
    arr_shape = tuple(np.shape(x))
    return (layout or SpyreTensorLayout(arr_shape, dtype or x.dtype)).for_host(arr_shape)


def _check_max(**limits: int) -> None:
    for name, value in limits.items():
        if value < 1:
            raise LayoutError(f"{name} must be at least 1, got {value}")


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


def _tile_size(layout: SpyreTensorLayout) -> int:
    """Sticks in a tile: the run along the device dim just outside the stick (spec 2)."""
    return max(layout.device_size[-2], 1) if layout.device_rank > 1 else max(layout.num_sticks, 1)


def _tile_ids(layout: SpyreTensorLayout, sticks: np.ndarray) -> np.ndarray:
    """Tile index (in device order) of stick indices; negative sticks stay -1."""
    return np.where(sticks >= 0, sticks // _tile_size(layout), -1)


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
    _check_max(max_rows=max_rows, max_cols=max_cols)
    mapping = _resolve(x, layout, dtype)
    shape, layout = mapping.shape, mapping.layout
    rows_total = math.prod(shape[:-1]) if shape else 1
    cols_total = shape[-1] if shape else 1
    rows, cols = min(rows_total, max_rows), min(cols_total, max_cols)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    offsets = r * cols_total + c  # row-major host offsets
    index = _unravel(offsets, shape)
    coords = mapping.device_coords_of(index)
    sticks = _stick_ids(layout, coords)
    labels = tuple(str(tuple(int(i) for i in row)) for row in _unravel(np.arange(rows), shape[:-1]))
    return Picture(
        f"logical view of {list(shape)}: cells coloured by stick, labelled with host offsets",
        offsets.astype(str),
        sticks,
        labels,
        note=_note((rows, cols), (rows_total, cols_total), "rows"),
        tile=_tile_ids(layout, sticks),
        stick_shape=layout.device_size[:-1],
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
    will hold it; tile boundaries separate cells bound for different tiles.
    """
    _check_max(max_rows=max_rows)
    mapping = _resolve(x, layout, dtype)
    shape, layout = mapping.shape, mapping.layout
    width = width or layout.elems_per_stick
    total = math.prod(shape)
    rows_total = -(-total // width)
    rows = min(rows_total, max_rows)
    offsets = np.arange(rows * width).reshape(rows, width)
    inside = offsets < total
    index = _unravel(np.where(inside, offsets, 0), shape)
    sticks = _stick_ids(layout, mapping.device_coords_of(index))
    sticks = np.where(inside, sticks, EMPTY)
    text = np.where(inside, offsets.astype(str), "")
    labels = tuple(f"@{r * width}" for r in range(rows))
    return Picture(
        f"host memory of {list(shape)}: {width} elements a row, coloured by stick",
        text,
        sticks,
        labels,
        note=_note((rows, width), (rows_total, width), "rows"),
        tile=_tile_ids(layout, sticks),
        stick_shape=layout.device_size[:-1],
    )


def _device_rows(total: int, tile: int, max_rows: int) -> list[int | None]:
    """The sticks device memory shows, in order; None stands for a gap.

    All sticks if they fit; else the first ``max_rows``, unless that stays inside the
    first tile: then the first sticks of tile 0 and of tile 1, so the second tile shows.
    """
    if total <= max_rows:
        return list(range(total))
    if tile >= max_rows >= 2 and total > tile:
        head = (max_rows + 1) // 2
        return [*range(head), None, *range(tile, tile + max_rows - head)]
    return list(range(max_rows))


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
    When ``max_rows`` sticks stay inside the first tile, the picture shows the first
    sticks of tile 0, a gap row, and the first sticks of tile 1, so the boundary shows.

    Args:
        x: a :class:`SpyreArray`, a host array, or a shape (with ``layout`` or ``dtype``).
        layout: the layout; defaults to the array's own or the default layout.
        dtype: the dtype of a bare shape.
        max_rows: sticks drawn at most (a gap row is drawn in addition).
    """
    _check_max(max_rows=max_rows)
    mapping = _resolve(x, layout, dtype)
    shape, layout = mapping.shape, mapping.layout
    eps = layout.elems_per_stick
    tile_size = _tile_size(layout)
    shown = _device_rows(layout.num_sticks, tile_size, max_rows)
    rows = len(shown)
    stick_of_row = np.array([-1 if s is None else s for s in shown], np.int64).reshape(rows, 1)
    gap = stick_of_row < 0
    lane = np.arange(eps)
    coords = _unravel(np.maximum(stick_of_row, 0) * eps + lane, layout.device_size)
    offsets = np.where(gap, -1, mapping.host_offsets_of(coords))
    sticks = np.where(gap, EMPTY, np.where(offsets >= 0, stick_of_row, -1))
    text = np.where(offsets >= 0, offsets.astype(str), "")
    tiles = np.broadcast_to(_tile_ids(layout, stick_of_row), (rows, eps))
    gap_rows = tuple(int(r) for r in np.flatnonzero(gap[:, 0]))
    labels = tuple(
        f"… {tile_size - gap_rows[0]} sticks" if g else coords_name(row[0, :-1])
        for g, row in zip(gap[:, 0], coords[:, :1, :], strict=True)
    )
    note = _note((rows - len(gap_rows), eps), (layout.num_sticks, eps), "sticks")
    if gap_rows:
        head = gap_rows[0]
        note += f" (the first {head} of tile 0 and {rows - head - 1} of tile 1)"
    return Picture(
        f"device memory of {list(shape)} in {list(layout.device_size)}"
        + (f" ({layout.arrangement.value})" if layout.is_arranged else "")
        + (f" (lanes {lane_text(layout)})" if hasattr(layout, "lanes") else "")
        + ": a stick per row",
        text,
        sticks,
        labels,
        note=note,
        tile=np.where(gap, -1, tiles),
        stick_shape=layout.device_size[:-1],
        gap_rows=gap_rows,
        rows_are_sticks=True,
    )


def loop_nest(x: Any, layout: SpyreTensorLayout | None = None, *, dtype: Any = None) -> str:
    """The DMA loop nests that move ``x`` to the device, as Python-like code.

    ``x`` may also be a :class:`DCI`.
    """
    if isinstance(x, DCI):
        return x.pseudocode()
    return _resolve(x, layout, dtype).dci().pseudocode()
