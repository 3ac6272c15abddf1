"""Check the device model against a measured sweep of matmul divisions (issue 25 item 5).

A sweep (``../shared/data/spyre/README.md``) has one measured division per line:
``B{b}_M{m}_N{n}_K{k}_{sb}_{sm}_{sn}_{sk} {us}``, the SuperDSC extents ``x, mb, out,
in`` of a matmul and the slices of each; rows of 100 ms or more are hangs and are
dropped. :func:`calibrate` predicts every row's time with the device model and reports,
per shape, the card's best division, the model's pick among the measured divisions and
the card's time for it, the predicted vs measured time of the best, and the Spearman
rank correlation of predicted and measured times.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import DeviceError
from ..layout._layout import SpyreTensorLayout
from ._cost import op_cost
from ._division import WorkDivision, matmul_tie_key, order
from ._machine import Machine
from ._space import TensorSpec, matmul_space

__all__ = [
    "Calibration",
    "Measurement",
    "ShapeFit",
    "calibrate",
    "default_sweep",
    "read_sweep",
    "spearman",
    "sweep_division",
]

HANG_US = 100_000.0
_ROW = re.compile(r"^B(\d+)_M(\d+)_N(\d+)_K(\d+)_(\d+)_(\d+)_(\d+)_(\d+)\s+([0-9.eE+-]+)\s*$")
_SWEEP = "granite_splits_lx0.2.txt"


@dataclass(frozen=True)
class Measurement:
    """One measured division: the SuperDSC extents, the slices and the device time.

    Attributes:
        b: batch extent (``x``; 1: a plain matmul).
        m: ``mb`` extent.
        n: ``out`` extent.
        k: ``in`` extent.
        slices: ``(sb, sm, sn, sk)``.
        us: measured device time in microseconds.
    """

    b: int
    m: int
    n: int
    k: int
    slices: tuple[int, int, int, int]
    us: float

    @property
    def shape(self) -> str:
        """``B1_M512_N4096_K4096``."""
        return f"B{self.b}_M{self.m}_N{self.n}_K{self.k}"

    @property
    def split(self) -> str:
        """``1_4_8_1``."""
        return "_".join(map(str, self.slices))


def default_sweep() -> Path:
    """The sweep shipped beside the repository: ``../shared/data/spyre/granite_splits_lx0.2.txt``.

    Raises:
        DeviceError: if it is not there (``shared/`` must sit beside the clone).
    """
    root = Path(__file__).resolve().parents[2]
    path = root.parent / "shared" / "data" / "spyre" / _SWEEP
    if not path.is_file():
        raise DeviceError(
            f"the measured sweep is not at {path}: spyrejax looks for shared/data/spyre/ "
            f"beside the repository ({root}); pass the sweep's path instead"
        )
    return path


def read_sweep(path: str | Path) -> tuple[list[Measurement], int]:
    """The measurements of a sweep file, and how many hang rows (>= 100 ms) were dropped.

    Raises:
        DeviceError: naming the line, for a line not in the sweep's format.
    """
    rows, hangs = [], 0
    for no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        hit = _ROW.match(line.strip())
        if hit is None:
            raise DeviceError(
                f"{path}:{no}: not a sweep row B{{b}}_M{{m}}_N{{n}}_K{{k}}_{{sb}}_{{sm}}_"
                f"{{sn}}_{{sk}} {{us}}: {line!r}"
            )
        *ints, us = hit.groups()
        b, m, n, k, *slices = map(int, ints)
        if float(us) >= HANG_US:
            hangs += 1
            continue
        rows.append(Measurement(b, m, n, k, tuple(slices), float(us)))  # type: ignore[arg-type]
    return rows, hangs


def _spec(shape: tuple[int, ...], dtype: Any) -> TensorSpec:
    return TensorSpec.of(shape, SpyreTensorLayout(list(shape), dtype))


def sweep_division(row: Measurement, machine: Machine, dtype: Any = np.float16) -> WorkDivision:
    """The division of a sweep row in spyrejax's matmul iteration space.

    The operands take their default layouts; ``b == 1`` is a plain matmul (``mb, out,
    in``), else a batched one (``x, mb, out, in``). ``out`` and ``in`` index stick dims,
    so their slices count sticks, as the card's do.

    Raises:
        DeviceError: if a slice does not divide its dim's sticks, or the slices use
            more cores than ``machine.cores``.
    """
    b, m, n, k = row.b, row.m, row.n, row.k
    batch = () if b == 1 else (b,)
    out = _spec((*batch, m, n), dtype)
    space = matmul_space(_spec((*batch, m, k), dtype), _spec((*batch, k, n), dtype), out)
    slices = row.slices if b > 1 else row.slices[1:]
    if b == 1 and row.slices[0] != 1:
        raise DeviceError(f"{row.shape}_{row.split}: a plain matmul has no batch to slice")
    splits = dict(zip(space.names, slices, strict=True))
    for d in space.dims:
        if d.units % splits[d.name]:
            raise DeviceError(
                f"{row.shape}_{row.split}: {d.name}={splits[d.name]} does not divide "
                f"{d.units} {'sticks' if d.stick > 1 else 'rows'}"
            )
    if math.prod(splits.values()) > machine.cores:
        raise DeviceError(f"{row.shape}_{row.split}: more slices than {machine.cores} cores")
    return WorkDivision(space, splits, machine.cores, order(space, splits), how="hint")


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties taking their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tie = x == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties at their mean rank); NaN under 2 points or no spread."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    if len(a) != len(b):
        raise ValueError(f"spearman: {len(a)} and {len(b)} values")
    if len(a) < 2:
        return float("nan")
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass(frozen=True)
class ShapeFit:
    """One shape of a sweep: the card's divisions against the model's predictions.

    Attributes:
        shape: ``B1_M512_N4096_K4096``.
        splits: the measured divisions (``sb_sm_sn_sk``), in file order.
        measured_us: the card's times.
        predicted_us: the model's times of the same divisions.
    """

    shape: str
    splits: tuple[str, ...]
    measured_us: tuple[float, ...]
    predicted_us: tuple[float, ...]

    @property
    def best(self) -> int:
        """Index of the card's fastest division."""
        return int(np.argmin(self.measured_us))

    @property
    def pick(self) -> int:
        """Index of the model's choice: the least predicted time among the measured ones.

        Exact ties are settled as the planner settles them (``matmul_tie_key``), not by
        the file's order.
        """

        def key(i: int) -> tuple[float, int, int, tuple[int, ...]]:
            slices = [int(x) for x in self.splits[i].split("_")]
            return matmul_tie_key(self.predicted_us[i], slices)

        return min(range(len(self.splits)), key=key)

    @property
    def pick_ratio(self) -> float:
        """The card's time of the model's pick over the card's best time."""
        return self.measured_us[self.pick] / self.measured_us[self.best]

    @property
    def best_error(self) -> float:
        """Predicted over measured time of the card's best division, minus 1."""
        return self.predicted_us[self.best] / self.measured_us[self.best] - 1

    @property
    def rho(self) -> float:
        """Spearman rank correlation of predicted and measured times."""
        return spearman(self.predicted_us, self.measured_us)


@dataclass(frozen=True)
class Calibration:
    """The device model against a measured sweep (the result of :func:`calibrate`).

    Attributes:
        path: the sweep file.
        machine: the machine profile predicted with (its ``lx_fraction``).
        shapes: one :class:`ShapeFit` per shape, in file order.
        hangs: rows of 100 ms or more dropped.
    """

    path: str
    machine: Machine
    shapes: tuple[ShapeFit, ...]
    hangs: int

    def picks_within(self, tolerance: float = 0.10) -> int:
        """Shapes whose pick the card runs within ``tolerance`` of its best."""
        return sum(s.pick_ratio <= 1 + tolerance for s in self.shapes)

    def best_within(self, tolerance: float = 0.30) -> int:
        """Shapes whose best division's time is predicted within ``tolerance``."""
        return sum(abs(s.best_error) <= tolerance for s in self.shapes)

    @property
    def median_rho(self) -> float:
        """The median over shapes of the Spearman rank correlation."""
        return float(np.median([s.rho for s in self.shapes]))

    def summary(self) -> str:
        """One line: picks within 10%, median rho, best predicted within 30%."""
        n = len(self.shapes)
        return (
            f"pick within 10% of the card's best: {self.picks_within()}/{n}; median Spearman "
            f"rho {self.median_rho:.2f}; best division predicted within 30%: "
            f"{self.best_within()}/{n}"
        )

    def __str__(self) -> str:
        head = (
            f"{self.path}: {sum(len(s.splits) for s in self.shapes)} divisions of "
            f"{len(self.shapes)} shapes ({self.hangs} hangs dropped), machine "
            f"{self.machine.name}, lx_fraction {self.machine.lx_fraction}"
        )
        cols = (
            f"{'shape':<22} {'card best':>9} {'us':>9}  {'model pick':>10} {'card us':>9} "
            f"{'x best':>6}  {'best: pred us':>13} {'err':>5}  {'rho':>5}"
        )
        lines = [head, cols]
        for s in self.shapes:
            b, p = s.best, s.pick
            lines.append(
                f"{s.shape:<22} {s.splits[b]:>9} {s.measured_us[b]:9.1f}  {s.splits[p]:>10} "
                f"{s.measured_us[p]:9.1f} {s.pick_ratio:6.2f}  {s.predicted_us[b]:13.1f} "
                f"{s.best_error:+5.0%}  {s.rho:5.2f}"
            )
        lines.append(self.summary())
        return "\n".join(lines)

    def figure(self) -> Any:
        """Predicted vs measured time, log-log, one colour per shape (matplotlib)."""
        import matplotlib.pyplot as plt  # a notebook dependency: imported when drawn

        fig, ax = plt.subplots(figsize=(7, 6))
        lo = min(min(s.measured_us + s.predicted_us) for s in self.shapes)
        hi = max(max(s.measured_us + s.predicted_us) for s in self.shapes)
        ax.plot([lo, hi], [lo, hi], color="0.6", lw=1, zorder=0)
        for s in self.shapes:
            ax.scatter(s.measured_us, s.predicted_us, s=14, label=s.shape)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="measured on the card (us)",
            ylabel="predicted (us)",
            title=f"matmul divisions, lx_fraction {self.machine.lx_fraction}",
        )
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        return fig


def calibrate(
    path: str | Path | None = None,
    lx_fraction: float = 0.2,
    machine: Machine | None = None,
) -> Calibration:
    """Predict every division of a measured sweep and compare (issue 25 item 5).

    Args:
        path: the sweep (None: :func:`default_sweep`).
        lx_fraction: the scratchpad budget the sweep ran at.
        machine: the profile (None: ``Machine.spyre()``); ``lx_fraction`` is applied.

    Raises:
        DeviceError: for a missing default sweep, a malformed line or a division the
            model cannot represent.
    """
    path = default_sweep() if path is None else Path(path)
    machine = (machine or Machine.spyre()).with_lx_fraction(lx_fraction)
    rows, hangs = read_sweep(path)
    by_shape: dict[str, list[Measurement]] = {}
    for r in rows:
        by_shape.setdefault(r.shape, []).append(r)
    fits = []
    for shape, group in by_shape.items():
        pred = tuple(op_cost(sweep_division(r, machine), machine).time_s * 1e6 for r in group)
        fits.append(
            ShapeFit(shape, tuple(r.split for r in group), tuple(r.us for r in group), pred)
        )
    return Calibration(str(path), machine, tuple(fits), hangs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spyrejax.device.calibrate FILE [--lx-fraction F] [--plot PNG]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m spyrejax.device.calibrate",
        description="Compare the device model with a measured sweep of matmul divisions.",
    )
    parser.add_argument("file", nargs="?", help="the sweep (default: the shared Granite one)")
    parser.add_argument("--lx-fraction", type=float, default=0.2, help="LX budget (0.2)")
    parser.add_argument("--plot", help="save predicted vs measured (log-log) to this file")
    args = parser.parse_args(argv)
    try:
        result = calibrate(args.file, lx_fraction=args.lx_fraction)
    except DeviceError as e:
        parser.exit(2, f"error: {e}\n")
    print(result)
    if args.plot:
        result.figure().savefig(args.plot, dpi=120)
    return 0
