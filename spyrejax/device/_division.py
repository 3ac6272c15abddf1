"""Work division of one op over the cores (spyre-device spec section 2).

The division of an op's iteration space (:mod:`._space`) is computed in the spec's
passes: the 256 MiB span pass (forced splits), the matmul pass (a cost model's choice),
the distribution pass (largest divisors over the cores left), then the mixed-radix
core -> slice map and per-core boxes and offsets.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import DeviceError
from ._machine import Machine
from ._space import IterDim, Operand, OpSpace

__all__ = [
    "WorkDivision",
    "divide",
    "order",
    "ragged_splits",
    "validate_hint",
]


@dataclass(frozen=True)
class WorkDivision:
    """How one op's iteration space is divided over the cores.

    Attributes:
        space: the op's iteration space.
        splits: per dim name, how many slices it is cut into (1: not split).
        cores: cores available to the op (the machine's setting).
        order: the dims in mixed-radix order, fastest first.
        committed: dims fixed before distribution (hints or forced by the span pass).
        how: ``"hint"``, ``"span"``, ``"matmul"`` or ``"distribution"``: the pass that
            decided the division.
    """

    space: OpSpace
    splits: Mapping[str, int]
    cores: int
    order: tuple[str, ...]
    committed: tuple[str, ...] = ()
    how: str = "distribution"
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def cores_used(self) -> int:
        """Active cores: the product of the splits."""
        return math.prod(self.splits.values())

    def core_to_slice(self, core: int) -> dict[str, int]:
        """The slice of each dim core ``core`` works on (the mixed-radix map)."""
        out, step = {}, 1
        for name in self.order:
            out[name] = (core // step) % self.splits[name]
            step *= self.splits[name]
        return {n: out[n] for n in self.space.names}

    def chunk(self, name: str) -> int:
        """Logical elements of dim ``name`` per slice (the last slice may hold fewer).

        A split that does not divide the dim's units (a ragged split, pass 1's way out
        when no even one fits, :func:`ragged_splits`) gives every slice the rounded-up
        count; the last slice is short, its cores' boxes stop at the tensor's end.
        """
        d = self.space.dim(name)
        return -(-d.units // self.splits[name]) * d.stick

    @property
    def ragged(self) -> tuple[str, ...]:
        """The dims whose split does not divide their units (their last slice is short)."""
        return tuple(n for n in self.space.names if self.space.dim(n).units % self.splits[n])

    def extent(self, name: str, core: int) -> int:
        """Logical elements of dim ``name`` that core ``core`` works on."""
        d = self.space.dim(name)
        start = self.core_to_slice(core)[name] * self.chunk(name)
        return max(0, min(start + self.chunk(name), d.extent) - start)

    def box(self, operand: int, core: int) -> tuple[tuple[int, int], ...]:
        """Core ``core``'s box of an operand's device image: ``(start, stop)`` per dim."""
        key = ("box", operand, core)
        if key not in self._cache:
            self._cache[key] = self._box(self.space.operands[operand], core)
        return self._cache[key]

    def _box(self, op: Operand, core: int) -> tuple[tuple[int, int], ...]:
        where = self.core_to_slice(core)
        out = []
        for j, n in enumerate(op.tensor.layout.device_size):
            w = op.walks[j]
            if w is None or self.splits[w[0]] == 1:
                out.append((0, n))
                continue
            var, ratio = w
            c = self.chunk(var)
            a = where[var] * c
            if ratio * n <= c:
                out.append((0, n))
            else:
                out.append((min(a // ratio, n), min(-(-(a + c) // ratio), n)))
        return tuple(out)

    def box_shape(self, operand: int, core: int) -> tuple[int, ...]:
        """Extents of core ``core``'s box of an operand."""
        return tuple(b - a for a, b in self.box(operand, core))

    def offset(self, operand: int, core: int) -> int:
        """Byte offset of core ``core``'s box from the operand's base."""
        op = self.space.operands[operand]
        strides = op.tensor.layout.device_strides
        start = sum(a * s for (a, _), s in zip(self.box(operand, core), strides, strict=True))
        return start * op.tensor.itemsize

    def offsets(self, operand: int) -> tuple[int, ...]:
        """Byte offsets of every active core's box of an operand."""
        return tuple(self.offset(operand, c) for c in range(self.cores_used))

    def core_bytes(self, operand: int, core: int = 0) -> int:
        """Device bytes of core ``core``'s box of an operand."""
        return (
            math.prod(self.box_shape(operand, core)) * self.space.operands[operand].tensor.itemsize
        )

    def span(self, operand: int, core: int = 0) -> int:
        """Bytes core ``core`` addresses in an operand (spec section 2, pass 1)."""
        return _span(self.space.operands[operand], self.box_shape(operand, core))

    def describe(self) -> str:
        """``mb=1 out=32 (32 cores)``."""
        parts = " ".join(f"{n}={self.splits[n]}" for n in self.space.names)
        return f"{parts} ({self.cores_used} of {self.cores} cores, {self.how})"


def _span(op: Operand, shape: Sequence[int]) -> int:
    strides = op.tensor.layout.device_strides
    for n, s in zip(shape, strides, strict=True):
        if n > 1:
            return n * s * op.tensor.itemsize
    return op.tensor.itemsize


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _largest_divisor(n: int, limit: int) -> int:
    return max(_divisors(n, limit) or [1])


def validate_hint(space: OpSpace, hint: Mapping[str, int], cores: int) -> dict[str, int]:
    """A hint's splits after the spec's checks.

    Raises:
        DeviceError: naming the dim and value: an unknown dim, a split that is not a
            positive int or does not divide the dim's stick-adjusted extent, a product
            over ``cores``, more than one reduction dim split, or a dim no split can follow.
    """
    out = {}
    for name, s in hint.items():
        d = space.dim(name)
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise DeviceError(f"with_division: {name}={s!r} must be a positive int")
        if d.units % s:
            what = f"{d.units} sticks" if d.stick > 1 else f"{d.units}"
            raise DeviceError(
                f"with_division: {name}={s} does not divide {space.opfunc}'s {name} extent ({what})"
            )
        if d.pinned and s > 1:
            raise DeviceError(
                f"with_division: {space.opfunc}'s {name} is laid out in folded device dims; "
                "it cannot be split"
            )
        out[name] = s
    if math.prod(out.values()) > cores:
        raise DeviceError(
            f"with_division: splits {out} use {math.prod(out.values())} cores, more than {cores}"
        )
    red = [n for n, s in out.items() if s > 1 and space.dim(n).reduced]
    if len(red) > 1:
        raise DeviceError(f"with_division: at most one reduction dim may be split, got {red}")
    return out


def order(space: OpSpace, splits: Mapping[str, int]) -> tuple[str, ...]:
    """A division's dims in mixed-radix order over the cores, fastest first."""
    n = tuple(space.names)  # a matmul splitting K walks it fastest: K partners are neighbours
    return (n[-1], *n[:-1]) if space.kind == "matmul" and splits.get(n[-1], 1) > 1 else n


def _max_span(space: OpSpace, splits: Mapping[str, int], cores: int) -> int:
    div = WorkDivision(space, dict(splits), cores, order(space, splits))
    return max(div.span(i) for i in range(len(space.operands)))


def ragged_splits(units: int, limit: int) -> list[int]:
    """Splits of ``units`` up to ``limit`` that do not divide it and leave no slice empty.

    Every slice holds ``ceil(units / s)`` units but the last, which is short: the dim is
    walked as if padded to ``s * ceil(units / s)`` units (a gap after the tensor's end
    that no core reads or writes). Granite's vocabulary, 49155 columns = 769 sticks (a
    prime), has no even split at all.
    """
    return [
        s for s in range(2, min(units, limit) + 1) if units % s and (s - 1) * -(-units // s) < units
    ]


def _span_pass(space: OpSpace, machine: Machine, fixed: Mapping[str, int]) -> dict[str, int]:
    """Pass 1: splits forced so every operand's span fits (empty if it already does).

    Even splits first (the spec's rule). When none fits, ragged ones
    (:func:`ragged_splits`): a compiler tiles a dim of prime stick count anyway, and the
    cores of its short last slice do less work; the op's time is its full slices'.
    """
    base = {n: fixed.get(n, 1) for n in space.names}
    if _max_span(space, base, machine.cores) <= machine.span_limit:
        return {}
    free = [d for d in space.dims if d.name not in fixed and not d.pinned]
    budget = machine.cores // math.prod(base.values())
    for uneven in (False, True):
        options = [
            _divisors(d.units, budget) + (ragged_splits(d.units, budget) if uneven else [])
            for d in free
        ]
        best = _fitting(space, machine, base, free, options, budget)
        if best is not None:
            return {n: s for n, s in best.items() if s > 1 and n not in fixed}
    why = _span_why(space, base, free, budget, machine.span_limit)
    raise DeviceError(
        f"{space.opfunc}: no division over {machine.cores} cores keeps every per-core "
        f"span within {machine.span_limit} bytes with at most one reduction dim split "
        f"(even or ragged splits, spec section 2): {why}"
    )


def _fitting(
    space: OpSpace,
    machine: Machine,
    base: Mapping[str, int],
    free: Sequence[IterDim],
    options: Sequence[Sequence[int]],
    budget: int,
) -> dict[str, int] | None:
    """Among ``options`` per free dim, the splits of largest span within the limit."""
    best: tuple[Any, dict[str, int]] | None = None
    for combo in itertools.product(*options):
        if math.prod(combo) > budget:
            continue
        splits = {**base, **{d.name: s for d, s in zip(free, combo, strict=True)}}
        if sum(1 for d in space.dims if d.reduced and splits[d.name] > 1) > 1:
            continue
        span = _max_span(space, splits, machine.cores)
        if span > machine.span_limit:
            continue
        key = (span, -math.prod(combo), -sum(d.units % s for d, s in zip(free, combo, strict=True)))
        if best is None or key > best[0]:
            best = (key, splits)
    return None if best is None else best[1]


def _span_why(
    space: OpSpace, base: Mapping[str, int], free: Sequence[IterDim], budget: int, limit: int
) -> str:
    """The operands over the span limit undivided, and the even and ragged splits tried."""
    div = WorkDivision(space, dict(base), math.prod(base.values()), order(space, base))
    over = [
        f"operand {i} (device {list(op.tensor.layout.device_size)}) spans {div.span(i):,} B"
        for i, op in enumerate(space.operands)
        if div.span(i) > limit
    ]
    unit = {True: "sticks", False: "rows"}
    allowed = [
        f"{d.name} of {d.units} {unit[d.stick > 1]}: even {_divisors(d.units, budget)}, "
        f"ragged {ragged_splits(d.units, budget)}"
        for d in free
    ]
    return "; ".join(over) + "; splits tried: " + ", ".join(allowed)


def _distribute(space: OpSpace, cores: int, fixed: Mapping[str, int]) -> dict[str, int]:
    """Pass 3: committed splits, then output dims by decreasing extent, then one reduction."""
    splits = {n: fixed.get(n, 1) for n in space.names}
    left = cores // math.prod(splits.values())
    outs = [d for d in space.dims if not d.reduced and d.name not in fixed and not d.pinned]
    for d in sorted(outs, key=lambda d: -d.units):  # stable: iteration order among ties
        splits[d.name] = _largest_divisor(d.units, left)
        left //= splits[d.name]
    if not any(splits[d.name] > 1 for d in space.dims if d.reduced):
        red = [d for d in space.dims if d.reduced and d.name not in fixed and not d.pinned]
        if red:
            d = max(red, key=lambda d: _largest_divisor(d.units, left))
            splits[d.name] = _largest_divisor(d.units, left)
    return splits


def matmul_tie_key(time: float, slices: Sequence[int]) -> tuple[float, int, int, tuple[int, ...]]:
    """The matmul pass's order of candidate divisions (the least key wins).

    Least predicted ``time``, then more cores, then fewer slices of the last (the
    reduced K) dim, then the smaller ``slices`` in dim order (the pass's iteration
    order): an exact tie is never settled by the order candidates are listed in.
    """
    return (time, -math.prod(slices), slices[-1], tuple(slices))


def _matmul_pass(
    space: OpSpace, machine: Machine, score: Callable[[WorkDivision], float]
) -> dict[str, int] | None:
    """Pass 2: the splits of least predicted time (ties: ``matmul_tie_key``)."""
    free = [d for d in space.dims if not d.pinned]
    best: tuple[Any, dict[str, int]] | None = None
    for combo in itertools.product(*(_divisors(d.units, machine.cores) for d in free)):
        if math.prod(combo) > machine.cores:
            continue
        splits = {n: 1 for n in space.names} | {d.name: s for d, s in zip(free, combo, strict=True)}
        div = WorkDivision(space, splits, machine.cores, order(space, splits), how="matmul")
        key = matmul_tie_key(score(div), [splits[n] for n in space.names])
        if best is None or key < best[0]:
            best = (key, splits)
    return None if best is None else best[1]


def divide(
    space: OpSpace,
    machine: Machine,
    hint: Mapping[str, int] | None = None,
    score: Callable[[WorkDivision], float] | None = None,
) -> WorkDivision:
    """Divide an op over ``machine.cores`` cores (spyre-device spec section 2).

    Args:
        space: the op's iteration space.
        machine: the machine profile (its ``cores`` and ``span_limit``).
        hint: splits per dim name that the user fixed (validated, then they win).
        score: for matmuls, the predicted time of a candidate division (pass 2); without
            it pass 3 decides.

    Raises:
        DeviceError: for an invalid hint, or when no division keeps the spans in bounds.
    """
    fixed = validate_hint(space, hint or {}, machine.cores)
    forced = _span_pass(space, machine, fixed)
    committed = {**fixed, **forced}
    splits = _distribute(space, machine.cores, committed)
    how = "hint" if fixed else "span" if forced else "distribution"
    if space.kind == "matmul" and not committed and score is not None:
        chosen = _matmul_pass(space, machine, score)
        if chosen is not None and math.prod(chosen.values()) >= math.prod(splits.values()):
            splits, how = chosen, "matmul"
    return WorkDivision(space, splits, machine.cores, order(space, splits), tuple(committed), how)
