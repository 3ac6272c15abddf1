"""Pictures of the device model: which core owns which sticks, and a roofline."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..device import DeviceProgram, WorkDivision

__all__ = ["CoreMap", "Roofline", "core_colours", "core_ownership", "roofline"]


@dataclass(frozen=True)
class CoreMap:
    """The core that owns each stick of an operand's device image.

    Attributes:
        owner: array of shape ``device_size[:-1]`` (one entry per stick): the first
            active core whose box holds the stick (-1: none, e.g. a broadcast input).
        copies: how many active cores hold each stick (more than 1 for inputs read by
            several cores, or outputs of K-split partners).
        title: what is drawn.
    """

    owner: np.ndarray
    copies: np.ndarray
    title: str

    def rows(self) -> np.ndarray:
        """The owners as a 2-D grid: sticks in device order, the innermost dim across."""
        o = self.owner
        return o.reshape(-1, o.shape[-1]) if o.ndim > 1 else o.reshape(1, -1)

    def cores(self) -> tuple[int, ...]:
        """The cores that own at least one stick, in order."""
        return tuple(int(c) for c in np.unique(self.owner) if c >= 0)

    def colours(self) -> dict[int, str]:
        """Each owning core's colour (``#rrggbb``): no two cores of the picture share one."""
        palette = core_colours(int(self.owner.max()) + 1 if self.owner.size else 0)
        return {c: palette[c] for c in self.cores()}

    def label_cells(self) -> dict[int, tuple[int, int]]:
        """Where each core's index is written: a (row, column) of :meth:`rows` it owns."""
        grid = self.rows()
        cells = {}
        for c in self.cores():
            rows, cols = np.nonzero(grid == c)
            middle = len(rows) // 2
            cells[c] = (int(rows[middle]), int(cols[middle]))
        return cells

    def _repr_html_(self) -> str:
        colours = self.colours()

        def cell(c: int) -> str:
            return f"<td style='background:{colours.get(int(c), '#ffffff')}'>{c}</td>"

        grid = self.rows()[:32, :32]
        cells = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in grid)
        legend = "".join(
            f"<span style='background:{colours[c]};padding:0 4px;margin-right:2px'>core {c}</span>"
            for c in self.cores()
        )
        return f"<p>{html.escape(self.title)}</p><table>{cells}</table><p>{legend}</p>"

    def figure(self, ax: Any = None) -> Any:
        """A matplotlib figure of :meth:`rows`: one colour per core, a legend, core labels.

        Every core has a colour of its own (:func:`core_colours`) and an entry in the
        legend; each core's index is also written on one of its own sticks when the grid is
        small enough for the labels to be read (at most 32 x 32 sticks). Sticks no core
        holds are white. matplotlib is imported lazily.
        """
        import matplotlib.pyplot as plt
        from matplotlib.colors import to_rgb
        from matplotlib.patches import Patch

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4))
        grid = self.rows()
        colours = self.colours()
        rgb = np.ones((*grid.shape, 3))
        for c, colour in colours.items():
            rgb[grid == c] = to_rgb(colour)
        ax.imshow(rgb, interpolation="nearest", aspect="auto")
        if grid.shape[0] <= 32 and grid.shape[1] <= 32:
            for c, (r, col) in self.label_cells().items():
                ax.text(col, r, str(c), ha="center", va="center", fontsize=6)
        handles = [Patch(facecolor=colours[c], label=f"core {c}") for c in colours]
        ax.legend(
            handles=handles,
            title="owner",
            fontsize=6,
            title_fontsize=7,
            ncols=max(1, -(-len(handles) // 16)),
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0.0,
        )
        ax.set_title(self.title, fontsize=8)
        ax.set_xlabel("stick (innermost device dim)")
        ax.set_ylabel("outer device dims")
        return ax.figure


def core_colours(n: int) -> list[str]:
    """``n`` colours, one per core, pairwise distinct and light enough for black text.

    Hues are spread over the circle in as many steps as needed for three lightness
    levels; consecutive cores (neighbours in most pictures) step far round the circle and
    change lightness, so neighbouring regions never look alike.
    """
    import colorsys

    levels = (0.82, 0.66, 0.52) if n > 12 else (0.7,)
    hues = max(1, -(-n // len(levels)))
    step = next(s for s in range(hues // 3 + 1, hues + 1) if np.gcd(s, hues) == 1)
    out = []
    for core in range(n):
        hue = ((core * step) % hues) / hues
        light = levels[(core // hues) % len(levels)] if n > 12 else levels[0]
        r, g, b = colorsys.hls_to_rgb(hue, light, 0.9)
        out.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return out


def core_ownership(division: WorkDivision, operand: int = -1) -> CoreMap:
    """Which core owns each stick of an operand (default: the output) of a divided op."""
    ops = division.space.operands
    k = operand % len(ops)
    t = ops[k].tensor
    sticks = t.layout.device_size[:-1]
    owner = np.full(sticks, -1, np.int64)
    copies = np.zeros(sticks, np.int64)
    for core in reversed(range(division.cores_used)):
        box = tuple(slice(a, b) for a, b in division.box(k, core)[:-1])
        owner[box] = core
        copies[box] += 1
    title = f"{division.space.opfunc} operand {k} ({t.name}): {division.describe()}"
    return CoreMap(owner, copies, title)


@dataclass(frozen=True)
class Roofline:
    """The ops of a program against the machine's roofline.

    Attributes:
        names: op names.
        intensity: MACs per DDR byte of each op.
        achieved: MACs per second each op reaches at its predicted time.
        peak: the machine's MACs per second (all cores, sustained matmul rate).
        bandwidth: the DDR bandwidth (bytes per second).
    """

    names: tuple[str, ...]
    intensity: np.ndarray
    achieved: np.ndarray
    peak: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """The intensity where memory and compute bounds meet."""
        return self.peak / self.bandwidth

    def figure(self, ax: Any = None) -> Any:
        """A log-log matplotlib figure (matplotlib imported lazily)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        x = np.logspace(-3, 4, 200)
        ax.loglog(x, np.minimum(self.peak, x * self.bandwidth), "k-", label="roof")
        pts = self.intensity > 0
        ax.loglog(self.intensity[pts], self.achieved[pts], "o", label="matmuls")
        ax.set_xlabel("MACs per DDR byte")
        ax.set_ylabel("MACs per second")
        ax.legend(loc="lower right")
        self._label_points(ax)
        return ax.figure

    def _label_points(self, ax: Any, fontsize: float = 7) -> None:
        """Name each point in a column right of the axes, joined to it by a thin line.

        The labels are stacked from the highest point down, one text line apart at least,
        so no two overlap however close the points are.
        """
        points = [
            (a, i, n)
            for n, i, a in zip(self.names, self.intensity, self.achieved, strict=True)
            if i > 0
        ]
        if not points:
            return
        points.sort(key=lambda p: -p[0])
        height_pt = ax.get_position().height * ax.figure.get_figheight() * 72
        gap = max(1.0 / len(points), 1.4 * fontsize / height_pt)
        for k, (a, i, n) in enumerate(points):
            ax.annotate(
                n,
                xy=(i, a),
                xytext=(1.03, 1.0 - (k + 0.5) * gap),
                textcoords="axes fraction",
                va="center",
                fontsize=fontsize,
                annotation_clip=False,
                arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.6"},
            )


def roofline(program: DeviceProgram | Any) -> Roofline:
    """The roofline of a :class:`DeviceProgram` (or an explain report's ``device``)."""
    program = getattr(program, "device", program)
    m = program.machine
    ops = [op for op in program.ops if op.desc.kind != "view"]
    names = tuple(f"{op.index}_{op.opfunc}" for op in ops)
    intensity = np.array([op.cost.intensity for op in ops])
    achieved = np.array([op.macs / op.time_s if op.time_s else 0.0 for op in ops])
    peak = m.matmul_macs_per_ns * 1e9 * m.cores
    return Roofline(names, intensity, achieved, peak, m.ddr_bw)
