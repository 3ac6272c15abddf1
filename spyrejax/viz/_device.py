"""Pictures of the device model: which core owns which sticks, and a roofline."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..device import DeviceProgram, WorkDivision

__all__ = ["CoreMap", "Roofline", "core_ownership", "roofline"]


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

    def _repr_html_(self) -> str:
        grid = self.rows()[:32, :32]
        cells = "".join(
            "<tr>" + "".join(f"<td style='background:{_colour(c)}'>{c}</td>" for c in row) + "</tr>"
            for row in grid
        )
        return f"<p>{html.escape(self.title)}</p><table>{cells}</table>"

    def figure(self, ax: Any = None) -> Any:
        """A matplotlib figure of :meth:`rows` (matplotlib imported lazily)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        ax.imshow(self.rows(), cmap="tab20", interpolation="nearest", aspect="auto")
        ax.set_title(self.title)
        ax.set_xlabel("stick (innermost device dim)")
        ax.set_ylabel("outer device dims")
        return ax.figure


def _colour(core: int) -> str:
    if core < 0:
        return "#ffffff"
    hue = (core * 47) % 360
    return f"hsl({hue},60%,75%)"


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
        for n, i, a in zip(self.names, self.intensity, self.achieved, strict=True):
            if i > 0:
                ax.annotate(n, (i, a), fontsize=7)
        ax.set_xlabel("MACs per DDR byte")
        ax.set_ylabel("MACs per second")
        ax.legend()
        return ax.figure


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
