"""A picture of a Spyre layout: a grid of cells, coloured by stick, as HTML or a figure.

A :class:`Picture` is a grid of cells: the text written in each (a host offset), the
stick it belongs to (its colour), whether it is padding, and the tile it lies in. Tile
boundaries are drawn between neighbouring cells of different tiles and each tile is
labelled ("tile 1"). Within one picture two cells share a colour iff they are in the
same stick (see :func:`stick_colours`); :func:`share_colours` extends this to pictures
drawn side by side. Pictures render as HTML in notebooks (``_repr_html_``) and as
matplotlib figures (:meth:`Picture.figure`). The views that make them are in
:mod:`._pictures`.
"""

from __future__ import annotations

import colorsys
import dataclasses
import functools
import html
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import LayoutError

__all__ = ["EMPTY", "PALETTE", "Picture", "coords_name", "share_colours", "stick_colours"]

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
    "#c49c94",
)
"""Twelve stick colours a person tells apart in neighbouring cells: ColorBrewer's Set3
without its grey (the padding colour here), and a brown."""
SHADES = (1.0, 0.74, 0.5)
"""Lightness factors of the shades of each palette hue, used past 12 sticks."""
PAD_COLOUR = "#d9d9d9"
EMPTY_COLOUR = "#ffffff"
BOUNDARY_COLOUR = "#222222"
EMPTY = -2


def _shade(colour: str, factor: float) -> str:
    """``colour`` with its HLS lightness scaled by ``factor`` (saturation at least 0.55)."""
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    h, lightness, s = colorsys.rgb_to_hls(*rgb)
    if factor != 1.0:
        lightness, s = lightness * factor, max(s, 0.55)
    r, g, b = colorsys.hls_to_rgb(h, lightness, s)
    return "#" + "".join(f"{round(v * 255):02x}" for v in (r, g, b))


_COLOURS = tuple(_shade(c, f) for f in SHADES for c in PALETTE)


def stick_colours(n: int) -> tuple[str, ...]:
    """The fill colours of the ``n`` sticks of one picture, in colour-key order.

    A picture keys its sticks in device order (:attr:`Picture.colour_key`): stick
    ``colour_key[k]`` gets colour ``k``.

    Why this scheme: a person reliably tells apart about a dozen colours in neighbouring
    cells, so up to ``len(PALETTE)`` (12) sticks each get their own palette colour and
    need no label. Past 12, the same 12 hues come again in a darker and then a darkest
    shade (36 distinct colours, text turning white where black would not read): sticks
    next to each other in device order differ in hue, sticks 12 apart in lightness.
    Lightness steps are easy to misread, so a picture with more than 12 sticks also
    labels every region of one stick with the stick's device coordinates (see
    :attr:`Picture.stick_labels`); device coordinates, unlike colours, name a stick the
    same way in every picture and match the row labels of :func:`device_memory`. Past
    36 sticks the colours repeat and the labels tell the sticks apart.

    Args:
        n: the number of sticks.

    Returns:
        ``n`` hex colours; all different when ``n <= 36``.

    Raises:
        LayoutError: if ``n`` is negative.
    """
    if n < 0:
        raise LayoutError(f"the number of sticks must be >= 0, got {n}")
    return tuple(_COLOURS[k % len(_COLOURS)] for k in range(n))


def _text_colour(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill`` (WCAG relative luminance)."""
    channels = [int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "#000000" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "#ffffff"


def coords_name(coords: Any) -> str:
    """How a stick is named: its device coordinates without the lane, ``(1, 0)``."""
    return str(tuple(int(i) for i in coords))


def _regions(values: np.ndarray) -> list[tuple[int, int, int]]:
    """``(value, row, col)`` of the first cell of each 4-connected region of equal values.

    Cells with negative values belong to no region. Regions come in reading order of
    their first cell.
    """
    grid = values.tolist()
    rows, cols = values.shape
    seen = [[False] * cols for _ in range(rows)]
    out = []
    for r in range(rows):
        for c in range(cols):
            v = grid[r][c]
            if v < 0 or seen[r][c]:
                continue
            out.append((int(v), r, c))
            seen[r][c] = True
            stack = [(r, c)]
            while stack:
                i, j = stack.pop()
                for a, b in ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1)):
                    if 0 <= a < rows and 0 <= b < cols and not seen[a][b] and grid[a][b] == v:
                        seen[a][b] = True
                        stack.append((a, b))
    return out


def _shown(n: int, most: int) -> list[int]:
    """The indices of ``n`` rows (columns) a text rendering shows; -1 stands for ``...``."""
    if n <= most:
        return list(range(n))
    head = most - most // 4
    return [*range(head), -1, *range(n - (most - head - 1), n)]


@dataclass(frozen=True, repr=False)
class Picture:
    """A grid of cells drawn for one view of a tensor.

    Attributes:
        title: what the picture shows.
        text: ``(rows, cols)`` strings written in the cells (host offsets; "" if none).
        stick: ``(rows, cols)`` stick index (in device order) of each cell; -1 for
            padding, -2 for cells past the end of the data or in a gap row.
        row_labels: a label per row.
        note: what was left out of a large tensor, or "".
        tile: ``(rows, cols)`` tile index (in device order) of each cell, padding
            included; -1 for cells in no tile. None: the whole picture is one tile.
        stick_shape: ``device_size[:-1]`` of the layout, to name sticks by their device
            coordinates; None names them by index.
        gap_rows: rows standing for sticks left out; tile boundaries are drawn across
            them as if the rows on either side were neighbours.
        colour_sticks: the sorted stick indices the colours are assigned over (see
            :func:`share_colours`); () means the sticks of this picture.
        rows_are_sticks: every row is one stick, named by its row label (device memory).
    """

    title: str
    text: np.ndarray
    stick: np.ndarray
    row_labels: tuple[str, ...]
    note: str = ""
    tile: np.ndarray | None = None
    stick_shape: tuple[int, ...] | None = None
    gap_rows: tuple[int, ...] = ()
    colour_sticks: tuple[int, ...] = ()
    rows_are_sticks: bool = False

    @property
    def padding(self) -> np.ndarray:
        """``(rows, cols)``: True on padding cells."""
        return self.stick == -1

    @property
    def shape(self) -> tuple[int, int]:
        """Rows and columns drawn."""
        return tuple(self.text.shape)  # type: ignore[return-value]

    @property
    def sticks_shown(self) -> tuple[int, ...]:
        """The sorted indices of the sticks with data in this picture."""
        return tuple(int(s) for s in np.unique(self.stick[self.stick >= 0]))

    @property
    def colour_key(self) -> tuple[int, ...]:
        """Stick indices in colour order: stick ``colour_key[k]`` gets colour ``k``."""
        return self.colour_sticks or self.sticks_shown

    @property
    def labelled(self) -> bool:
        """True when colours alone cannot tell the sticks apart, so sticks are labelled."""
        return len(self.colour_key) > len(PALETTE)

    @functools.cached_property
    def colours(self) -> np.ndarray:
        """``(rows, cols)`` fill colours: one per stick, grey padding, white elsewhere.

        Raises:
            LayoutError: if a stick of the picture is missing from ``colour_sticks``.
        """
        key = np.asarray(self.colour_key, dtype=np.int64)
        if (np.diff(key) <= 0).any():
            raise LayoutError(
                f"colour_sticks must be sorted and distinct, got {self.colour_sticks}"
            )
        data = self.stick >= 0
        if not np.isin(self.stick[data], key).all():
            missing = sorted(set(self.sticks_shown) - set(self.colour_key))
            raise LayoutError(f"sticks {missing} of {self.title!r} are not in colour_sticks")
        k = np.searchsorted(key, self.stick)
        palette = np.array((*stick_colours(len(key)), PAD_COLOUR, EMPTY_COLOUR), dtype=object)
        index = np.where(data, k, np.where(self.stick == -1, len(key), len(key) + 1))
        return palette[index]

    def colour(self, r: int, c: int) -> str:
        """The fill colour of a cell."""
        return str(self.colours[r, c])

    def stick_name(self, s: int) -> str:
        """How stick ``s`` is labelled: its device coordinates, e.g. ``(1, 0)``."""
        if self.stick_shape is None:
            return f"stick {s}"
        return coords_name(np.unravel_index(s, self.stick_shape))

    @functools.cached_property
    def tile_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Where tile boundaries are drawn: ``(top, left)``, two ``(rows, cols)`` masks.

        ``top[r, c]`` is True when cell ``(r, c)`` and the cell above it (the row before
        a gap, across ``gap_rows``) are in different tiles; ``left[r, c]`` likewise with
        the cell to its left. Cells in no tile have no boundaries.
        """
        rows, cols = self.shape
        top = np.zeros((rows, cols), bool)
        left = np.zeros((rows, cols), bool)
        if self.tile is None:
            return top, left
        t = self.tile
        left[:, 1:] = (t[:, 1:] != t[:, :-1]) & (t[:, 1:] >= 0) & (t[:, :-1] >= 0)
        gaps = set(self.gap_rows)
        above = -1
        for r in range(rows):
            if r in gaps:
                continue
            if above >= 0:
                top[r] = (t[r] != t[above]) & (t[r] >= 0) & (t[above] >= 0)
            above = r
        return top, left

    @property
    def tile_starts(self) -> tuple[int, ...]:
        """Rows whose first cell starts a tile: the first row, and rows with a boundary above."""
        top, _ = self.tile_edges
        rows = [r for r in range(self.shape[0]) if r not in self.gap_rows]
        return tuple(r for i, r in enumerate(rows) if i == 0 or top[r, 0])

    @functools.cached_property
    def tile_labels(self) -> tuple[tuple[int, int, str], ...]:
        """``(row, col, "tile t")`` at the first cell of each region of one tile."""
        if self.tile is None:
            return ()
        return tuple((r, c, f"tile {t}") for t, r, c in _regions(self.tile))

    @functools.cached_property
    def stick_labels(self) -> tuple[tuple[int, int, int, str], ...]:
        """``(row, first col, last col, name)`` of the sticks labelled in the picture.

        Empty unless :attr:`labelled`, or when row labels name the sticks
        (``rows_are_sticks``). Otherwise each region of one stick is labelled on the run
        of cells its first cell starts.
        """
        if not self.labelled or self.rows_are_sticks:
            return ()
        out = []
        for s, r, c in _regions(self.stick):
            name = self.stick_name(s)
            end = c
            while end + 1 < self.shape[1] and self.stick[r, end + 1] == s:
                end += 1
            out.append((r, c, end, name))
        return tuple(out)

    def cell_title(self, r: int, c: int) -> str:
        """What a cell is, in words (the HTML tooltip): its stick and tile."""
        s = int(self.stick[r, c])
        parts = [f"stick {self.stick_name(s)}"] if s >= 0 else ["padding"] if s == -1 else []
        if self.tile is not None and self.tile[r, c] >= 0:
            parts.append(f"tile {int(self.tile[r, c])}")
        return ", ".join(parts)

    def __repr__(self) -> str:
        """The title, then the cells as text for a terminal (``pad`` on padding).

        At most 16 rows and 12 columns, elided with ``...`` as NumPy elides; a notebook
        shows the HTML table, :meth:`figure` draws the picture.
        """
        rows, cols = _shown(self.shape[0], 16), _shown(self.shape[1], 12)
        cell = lambda r, c: "pad" if self.stick[r, c] == -1 else str(self.text[r, c])  # noqa: E731
        grid = [
            [self.row_labels[r], *(cell(r, c) if c >= 0 else "..." for c in cols)] for r in rows
        ]
        width = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
        lines = [f"Picture: {self.title} ({self.shape[0]} x {self.shape[1]} cells)"]
        for r, line in zip(rows, grid, strict=True):
            if r < 0:
                lines.append("  ...")
                continue
            cells = " ".join(v.rjust(w) for v, w in zip(line[1:], width[1:], strict=True))
            lines.append(f"  {line[0].rjust(width[0])} | {cells}")
        return "\n".join(lines + ([f"  {self.note}"] if self.note else []))

    def _repr_html_(self) -> str:
        e = html.escape
        top, left = self.tile_edges
        tiles = {(r, c): t for r, c, t in self.tile_labels}
        sticks = {(r, c): name for r, c, _, name in self.stick_labels}
        line = f"2px solid {BOUNDARY_COLOUR}"
        rows = []
        for r in range(self.shape[0]):
            cells = []
            for c in range(self.shape[1]):
                pad = self.stick[r, c] == -1
                fill = self.colour(r, c)
                style = f"background:{fill};color:{'#888' if pad else _text_colour(fill)}"
                style += f";border-top:{line}" if top[r, c] else ""
                style += f";border-left:{line}" if left[r, c] else ""
                tags = "".join(
                    f"<span class='{cls}'>{e(tag)}</span>"
                    for cls, tag in (("tile", tiles.get((r, c))), ("stick", sticks.get((r, c))))
                    if tag
                )
                text = "pad" if pad else e(str(self.text[r, c]))
                cls = " class='pad'" if pad else ""
                title = e(self.cell_title(r, c), quote=True)
                cells.append(f"<td{cls} title='{title}' style='{style}'>{tags}{text}</td>")
            rows.append(f"<tr><th>{e(self.row_labels[r])}</th>{''.join(cells)}</tr>")
        note = f"<p><i>{e(self.note)}</i></p>" if self.note else ""
        key = (
            f"<p>{len(self.colour_key)} sticks, more than {len(PALETTE)} colours tell apart: "
            "each stick is also labelled with its device coordinates.</p>"
            if self.labelled
            else ""
        )
        style = (
            "<style>.spyrejax-viz table{border-collapse:collapse}"
            ".spyrejax-viz td,.spyrejax-viz th{font:9px monospace;white-space:nowrap}"
            ".spyrejax-viz td{padding:1px 3px;text-align:right;border:none}"
            ".spyrejax-viz td.pad{font-style:italic}"
            ".spyrejax-viz th{text-align:left;padding-right:4px}"
            ".spyrejax-viz span{font:bold 8px sans-serif;margin-right:3px;padding:0 2px;"
            "background:#fff;color:#000}"
            f".spyrejax-viz span.tile{{border:1px solid {BOUNDARY_COLOUR}}}</style>"
        )
        return (
            f"{style}<div class='spyrejax-viz'><p><b>{e(self.title)}</b></p>{note}{key}"
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
        from matplotlib.collections import LineCollection
        from matplotlib.colors import to_rgb

        rows, cols = self.shape
        numbers = numbers and rows * cols <= 4096
        if ax is None:
            chars = max(3, max((len(str(t)) for t in self.text.flat), default=3))
            # A stick label must fit on its run of cells.
            chars = max(
                [chars] + [len(n) * 0.9 / (c1 - c0 + 1) for _, c0, c1, n in self.stick_labels]
            )
            width = min(0.085 * chars * cols + 1.5, 40) if numbers else min(0.2 * cols + 1.5, 18)
            _, ax = plt.subplots(figsize=(width, min(0.28 * rows + 1, 14)))
        fills = self.colours
        rgb = {str(f): to_rgb(str(f)) for f in np.unique(fills)}
        image = np.array([[rgb[str(f)] for f in row] for row in fills]).reshape(rows, cols, 3)
        ax.imshow(image, aspect="auto", interpolation="nearest")
        if numbers:
            for r in range(rows):
                for c in range(cols):
                    pad = self.stick[r, c] == -1
                    label = "pad" if pad else str(self.text[r, c])
                    if label:
                        colour = "#777" if pad else _text_colour(str(fills[r, c]))
                        ax.text(c, r, label, ha="center", va="center", fontsize=5, color=colour)
        top, left = self.tile_edges
        segments = [((c - 0.5, r - 0.5), (c + 0.5, r - 0.5)) for r, c in np.argwhere(top)]
        segments += [((c - 0.5, r - 0.5), (c - 0.5, r + 0.5)) for r, c in np.argwhere(left)]
        if segments:
            ax.add_collection(
                LineCollection(segments, colors=BOUNDARY_COLOUR, linewidths=1.5, label="tiles")
            )
        # With numbers in the cells, labels keep to the bottom (sticks) and top (tiles) of
        # a row, clear of the numbers in its middle.
        size = 4.5 if numbers else 6
        for r, c0, c1, name in self.stick_labels:
            ax.text(
                (c0 + c1) / 2,
                r + 0.45 if numbers else r,
                name,
                ha="center",
                va="bottom" if numbers else "center",
                fontsize=size,
                fontweight="bold",
                bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none", "alpha": 0.8},
            )
        for r, c, name in self.tile_labels:
            ax.text(
                c - 0.45,
                r - 0.45,
                name,
                ha="left",
                va="top",
                fontsize=size,
                fontweight="bold",
                bbox={
                    "boxstyle": "square,pad=0.1",
                    "fc": "white",
                    "ec": BOUNDARY_COLOUR,
                    "lw": 0.6,
                },
            )
        ax.set_yticks(range(rows), self.row_labels, fontsize=6)
        ax.set_xticks([])
        ax.set_title(self.title + (f"\n{self.note}" if self.note else ""), fontsize=9)
        return ax.figure


def share_colours(*pictures: Picture) -> tuple[Picture, ...]:
    """The pictures recoloured over all their sticks together, to be shown side by side.

    Each picture alone gives its sticks distinct colours, but two pictures colour the
    same stick differently. After ``share_colours``, a stick has one colour in every
    picture, and two cells of any of them share a colour iff they are in the same stick
    (colour and label when more than 12 sticks are shown in all).

    Args:
        *pictures: pictures of one tensor in one layout (views of it).

    Returns:
        The pictures, in order, coloured over the union of their sticks.

    Raises:
        LayoutError: if the pictures are of layouts with different stick grids.
    """
    shapes = {p.stick_shape for p in pictures}
    if len(shapes) > 1:
        raise LayoutError(f"share_colours needs pictures of one layout, got stick grids {shapes}")
    key = tuple(sorted(set().union(*(p.sticks_shown for p in pictures))))
    return tuple(dataclasses.replace(p, colour_sticks=key) for p in pictures)
