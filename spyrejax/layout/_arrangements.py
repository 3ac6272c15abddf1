"""Element arrangements inside a stick group (issue 26, item 4): torch-spyre's staggered orders.

torch-spyre converts between 16-bit and 32-bit formats on the device without moving
sticks: a 16-bit stick (64 elements) becomes two fp32 sticks (2 x 32) and back, and the
elements come out *staggered*. Its ``ElementArrangement`` names the orders; the issue
gives their exact maps as CuTe layouts over one group of 64 elements, logical index ->
position (a position ``p`` is lane ``p % 32`` of fp32 stick ``p // 32``, or lane ``p`` of
the 16-bit stick):

- ``DL16_TO_FP32``: ``(4,2,8):(1,32,4)``: runs of 4 elements alternate between the two
  fp32 sticks (elements 0-3 -> 0-3, 4-7 -> 32-35, 8-11 -> 4-7, ...).
- ``FP32_TO_DL16``: ``(4,8,2):(1,8,4)``, its inverse: ``DL16_TO_FP32 o FP32_TO_DL16`` and
  ``FP32_TO_DL16 o DL16_TO_FP32`` are both the identity ``64:1``.

Using them in ``astype`` (to skip a restickify) is later work; here they are exact
index maps with their inverse law.

Pure Python/NumPy: no JAX.
"""

from __future__ import annotations

import enum

import numpy as np

from .._errors import LayoutError
from ._algebra import CuteLayout

__all__ = ["GROUP", "ElementArrangement"]

#: Elements in one arrangement group: a 16-bit stick, or a pair of fp32 sticks.
GROUP = 64

_MAPS = {
    "STANDARD": "64:1",
    "DL16_TO_FP32": "(4,2,8):(1,32,4)",
    "FP32_TO_DL16": "(4,8,2):(1,8,4)",
}
_INVERSE = {
    "STANDARD": "STANDARD",
    "DL16_TO_FP32": "FP32_TO_DL16",
    "FP32_TO_DL16": "DL16_TO_FP32",
}


class ElementArrangement(enum.Enum):
    """How the elements of a 64-element group are placed (torch-spyre's names).

    Example:
        >>> ElementArrangement.DL16_TO_FP32.positions[:9]
        (0, 1, 2, 3, 32, 33, 34, 35, 4)
    """

    STANDARD = "STANDARD"
    DL16_TO_FP32 = "DL16_TO_FP32"
    FP32_TO_DL16 = "FP32_TO_DL16"

    @property
    def cute(self) -> CuteLayout:
        """The map logical index -> position, as a CuTe layout of size 64."""
        return CuteLayout.parse(_MAPS[self.value])

    @property
    def inverse(self) -> ElementArrangement:
        """The arrangement that undoes this one."""
        return ElementArrangement(_INVERSE[self.value])

    @property
    def positions(self) -> tuple[int, ...]:
        """``positions[i]``: where logical element ``i`` of a group is placed."""
        layout = self.cute
        return tuple(layout(i) for i in range(GROUP))

    def apply(self, values: np.ndarray, axis: int = -1) -> np.ndarray:
        """Place ``values`` in this arrangement, group by group along ``axis``.

        ``out[..., g * 64 + positions[i]] = values[..., g * 64 + i]``.

        Raises:
            LayoutError: if the axis is not whole groups of 64.
        """
        x = np.moveaxis(np.asarray(values), axis, -1)
        n = x.shape[-1]
        if n % GROUP:
            raise LayoutError(f"an arrangement moves whole groups of {GROUP}, got {n} elements")
        out = np.empty_like(x)
        groups = x.reshape(*x.shape[:-1], n // GROUP, GROUP)
        out.reshape(groups.shape)[..., list(self.positions)] = groups
        return np.moveaxis(out, -1, axis)
