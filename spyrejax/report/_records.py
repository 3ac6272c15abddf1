"""What ``spyrejax.explain`` reports, one record each: tensors, ops, source lines, fallbacks."""

from __future__ import annotations

from dataclasses import dataclass

from ..layout._residency import DDR, Residency

__all__ = ["Fallback", "LineInfo", "OpInfo", "TensorInfo"]


@dataclass(frozen=True)
class TensorInfo:
    """Device memory of one value of the Spyre-level jaxpr.

    Attributes:
        name: the jaxpr variable.
        type: its Spyre type (printed form).
        device_bytes: bytes of its device image.
        data_bytes: bytes its logical elements need in the device format.
        view: whether it is a view of another value's image (no memory of its own).
        residency: where it lives on the report's machine: DDR, or the LX of the cores
            of the op writing it.
    """

    name: str
    type: str
    device_bytes: int
    data_bytes: int
    view: bool
    residency: Residency = DDR

    @property
    def padding_overhead(self) -> float:
        """Device bytes per data byte, minus one."""
        return self.device_bytes / self.data_bytes - 1 if self.data_bytes else 0.0


@dataclass(frozen=True)
class Fallback:
    """A node run on the host: no device rule, so its operands go to the host and back.

    Attributes:
        prim: the JAX primitive.
        line: the user's source line (``file:line (function)``).
        to_host_bytes: bytes its operands move device -> host (their logical values).
        to_device_bytes: bytes its result moves host -> device (in a default layout).
    """

    prim: str
    line: str
    to_host_bytes: int
    to_device_bytes: int


@dataclass(frozen=True)
class OpInfo:
    """One node of the plan (a JAX primitive application) and what it costs.

    Restickifies are charged to the node that needs them (a planned move of an input,
    or one its lowering makes). Fields are per op; :class:`LineInfo` sums them per
    source line.

    Attributes:
        prim: the JAX primitive.
        line: the user's source line (``file:line (function)``).
        out_type: the Spyre type of its result (printed form).
        device_bytes: device bytes it allocates: its result unless that is a view,
            and the restickified copies of its inputs.
        restickifies: how many restickifies it needs.
        restickify_cost: elements they move.
        copies: how many device copies its lowering makes (slice, pad, gather...).
        copy_cost: elements they move.
        fallback: the host fallback, if it runs on the host.
        inner_fallbacks: the host fallbacks inside its loop bodies or branches (under
            their own primitive and line), their bytes counted as often as they run.
    """

    prim: str
    line: str
    out_type: str
    device_bytes: int = 0
    restickifies: int = 0
    restickify_cost: int = 0
    copies: int = 0
    copy_cost: int = 0
    fallback: Fallback | None = None
    inner_fallbacks: tuple[Fallback, ...] = ()

    @property
    def fallbacks(self) -> tuple[Fallback, ...]:
        """Its own fallback and those inside it."""
        return (*([self.fallback] if self.fallback else []), *self.inner_fallbacks)


# The OpInfo fields a LineInfo sums (a new per-op number joins the summary here).
_SUMMED = ("device_bytes", "restickifies", "restickify_cost", "copies", "copy_cost")


@dataclass(frozen=True)
class LineInfo:
    """The ops of one user source line, their costs summed (a row of the summary).

    Attributes:
        line: the source line (``file:line (function)``).
        ops: its ops, in plan order.
        device_bytes, restickifies, restickify_cost, copies, copy_cost: the sums of
            its ops' fields.
        to_host_bytes: bytes its host fallbacks move device -> host.
        to_device_bytes: bytes they move back.
        device_s: the predicted device time of its device ops (those the program's
            totals count; a fused kernel's ops each bring their part of it).
    """

    line: str
    ops: tuple[OpInfo, ...]
    device_bytes: int = 0
    restickifies: int = 0
    restickify_cost: int = 0
    copies: int = 0
    copy_cost: int = 0
    to_host_bytes: int = 0
    to_device_bytes: int = 0
    device_s: float = 0.0

    @classmethod
    def of(cls, line: str, ops: tuple[OpInfo, ...], device_s: float = 0.0) -> LineInfo:
        """The row of ``ops`` (all of ``line``), its device ops taking ``device_s``."""
        sums = {f: sum(getattr(o, f) for o in ops) for f in _SUMMED}
        falls = [f for o in ops for f in o.fallbacks]
        return cls(
            line,
            ops,
            **sums,
            to_host_bytes=sum(f.to_host_bytes for f in falls),
            to_device_bytes=sum(f.to_device_bytes for f in falls),
            device_s=device_s,
        )

    @property
    def moved(self) -> int:
        """Elements moved between layouts: restickifies and copies."""
        return self.restickify_cost + self.copy_cost

    @property
    def costly(self) -> bool:
        """Whether anything moves: restickifies, copies or host fallbacks."""
        return bool(self.moved or self.restickifies or self.copies or self.to_host_bytes)

    @property
    def prims(self) -> str:
        """Its primitives, each once: host fallbacks first, marked ``(host)``."""
        host = [f"{f.prim}(host)" for o in self.ops for f in o.fallbacks]
        return " ".join(dict.fromkeys([*host, *(o.prim for o in self.ops if not o.fallback)]))
