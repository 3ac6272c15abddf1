"""Where a value's device image lives: DDR, or the LX scratchpads of some cores.

A :class:`Residency` is the device model's answer for one value of a planned program
(spyre-device spec section 3): graph inputs, outputs and most intermediates live in the
card's DDR; an intermediate whose producer and consumers use the same per-core slices
may stay in the scratchpads (LX) of the cores ``0 .. cores - 1``, each holding its own
slice at the same per-core byte address. It is metadata on a ``SpyreType`` (printed in
jaxprs, not part of type equality).

Pure Python (no JAX): the device model's planning and the array types both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import DeviceError

__all__ = ["DDR", "Residency"]

_MEMORIES = ("DDR", "LX")


@dataclass(frozen=True)
class Residency:
    """Where a value lives: ``Residency()`` (DDR) or ``Residency.lx(cores, offset, nbytes)``.

    Attributes:
        memory: ``"DDR"`` or ``"LX"``.
        cores: in LX, the cores holding it: ``0 .. cores - 1``, each its own slice (the
            cores of the op that writes it); 0 in DDR.
        offset: in LX, the byte address of each core's slice in that core's LX.
        nbytes: in LX, the bytes each core's slice takes (aligned).
    """

    memory: str = "DDR"
    cores: int = 0
    offset: int = 0
    nbytes: int = 0

    def __post_init__(self) -> None:
        if self.memory not in _MEMORIES:
            raise DeviceError(f"Residency: memory must be 'DDR' or 'LX', got {self.memory!r}")
        fields = (self.cores, self.offset, self.nbytes)
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in fields):
            raise DeviceError(f"Residency: cores, offset and nbytes must be ints >= 0: {self!r}")
        if self.memory == "DDR" and any(fields):
            raise DeviceError(f"Residency: a DDR value has no cores, offset or size: {self!r}")
        if self.memory == "LX" and (self.cores < 1 or self.nbytes < 1):
            raise DeviceError(f"Residency: an LX value needs cores >= 1 and nbytes >= 1: {self!r}")

    @classmethod
    def lx(cls, cores: int, offset: int, nbytes: int) -> Residency:
        """The LX of cores ``0 .. cores - 1``, ``nbytes`` per core from byte ``offset``."""
        return cls("LX", cores, offset, nbytes)

    @property
    def in_lx(self) -> bool:
        """Whether the value lives in LX."""
        return self.memory == "LX"

    def __str__(self) -> str:
        """``DDR``, or ``LX[c0:32]+0x4000`` (cores 0..31, at byte 0x4000 of each LX)."""
        if not self.in_lx:
            return "DDR"
        return f"LX[c0:{self.cores}]+{self.offset:#x}"


DDR = Residency()
"""Device memory: where every value lives unless the device model keeps it in LX."""
