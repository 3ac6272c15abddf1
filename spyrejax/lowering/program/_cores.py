"""Per-core emulation: ``spyrejax.jit(f, emulate="cores")`` runs each op as the cores would.

Every op the device model divides (elementwise ops, ``astype``, reductions, matmuls)
runs here instead of with its whole-image kernel, vectorised over the cores:

1. **load**: each core's box of every operand moves from the DDR image into an LX
   image by the descriptors of :func:`spyrejax.device.core_dci`, composed with the
   iteration order into one map per operand for all cores, moved as a view of the
   image where the map is strided, else one gather (``_coremoves``);
2. **compute**: the core's kernel runs on its LX data, read in the order of the op's
   iteration space (one variable per output and reduced dim, counted from the core's
   slice); a reduction or matmul whose reduced dim is split leaves partial results
   that the partners sharing an output box combine (the ring);
3. **store**: each core's LX result moves back into a fresh DDR image (poison where no
   core writes) by its store descriptors.

The result's padding then gets what its type promises (poison, or zeros for ``pad=0``).
A position no core writes stays poison, so a division that does not tile the output
exactly once shows up as NaN, never as a plausible number.

Each op is divided exactly as the device model (``explain``, ``export``) divides it:
the same machine (:func:`spyrejax.device.default_machine`) and the same
``with_division`` hint, given to the same ops (the hinted node's ops of the hinted op's
geometry: :func:`spyrejax.lowering.program._device.division_hint`, loop bodies and
branches included). Ops the device model
does not divide run as in the default mode: only compute ops get a division
(spyre-device spec section 2), so views, restickifies, copies, ``iota`` and host
fallbacks run their whole-image kernels; but a view standing for its producer's own
stores (``written_space``, :mod:`spyrejax.primitives._writes`) runs per core, divided
as the op that produced its operand: ``Place`` and ``LanePlace`` (each core stores its
box of the piece into its window, front/back gaps, or onto its lanes of the
destination), ``Assemble`` and ``LaneAssemble`` (each core writes its box of the
destination, each element from the piece or buffer that holds it). ``SliceView`` and
``LaneView`` stay whole: they store nothing (their readers' loads carry the window's
gaps or lanes), and so does ``UpdateAt``, whose window moves with run-time indices.

The check mode (:class:`CoreCheck`, :func:`checking_cores`) runs every divided op both
ways in default-mode programs and compares the two results when the program runs.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..._errors import DeviceError, SpyreUnsupportedError
from ...device import Machine, OpSpace, WorkDivision, default_machine, divide_alike
from ...primitives._array import PadFill
from ...primitives._base import image, wrap
from ...primitives._masks import masked, poison
from ...primitives._rounding import Rounding
from .._spaces import divided_space
from ._coremoves import loaded, stored
from ._device import current_line, division_hint, written_space

__all__ = [
    "CoreCheck",
    "CoreExecutor",
    "Mismatch",
    "checking_cores",
    "core_check",
    "dividing",
    "injecting",
    "producer_splits",
]


class CoreExecutor:
    """Runs divided primitives core by core (vectorised); see the module docstring.

    Installed with ``spyrejax.primitives.executing`` by the interpreter, which opens a
    :func:`spyrejax.lowering.program._device.node_scope` around each node it lowers: the scope
    says which geometry of the node's divided ops gets the node's ``with_division`` hint.

    Attributes:
        machine: the machine whose cores the ops are divided over (the device model's
            default, :func:`spyrejax.device.default_machine`, unless given).
        check: None: each divided op gives its per-core result. A :class:`CoreCheck`:
            each divided op runs both ways, gives the whole-image kernel's result, and
            the two are compared when the program runs (see :class:`CoreCheck`).
    """

    def __init__(self, machine: Machine | None = None, check: CoreCheck | None = None) -> None:
        self.machine = default_machine(machine)
        self.check = check
        # Each result computed per core while it lives, by id, with its division: a view
        # its producer's cores write (``written_space``) is divided as the producer. Held
        # weakly: a loop body's tracers must not outlive its trace (``jax.checking_leaks``).
        self._made: dict[int, tuple[weakref.ref[Any], WorkDivision]] = {}

    def __call__(self, prim: Any, args: tuple[Any, ...]) -> Any:
        """The result of ``prim`` on ``args`` computed per core, or None (run it as usual)."""
        found = divided_space(prim)
        if found is None:
            return self._written(prim, args)
        space, _ = found
        hint = division_hint(prim)  # taken even if skipped below, as the record has it
        if any(math.prod(t.shape) == 0 for t in (*prim.in_avals, prim.out_aval)):
            return None
        return self._run(prim, args, self._divide(space, hint))

    def _written(self, prim: Any, args: tuple[Any, ...]) -> Any:
        """A view its producer's cores write (``written_space``), divided as the producer.

        The producer of its first operand (a divided op, or such a write) gave its
        division: each core writes the box it computed (:func:`producer_splits`). Where
        those splits do not divide the write (or no divided op made the operand), the
        device model's own division.
        """
        space = written_space(prim)
        if space is None or any(math.prod(t.shape) == 0 for t in (*prim.in_avals, prim.out_aval)):
            return None  # the device model does not divide it, nor does a producer write it
        made = self._made.get(id(args[0]))
        div = None
        hint = None if made is None or made[0]() is not args[0] else producer_splits(made[1], space)
        if hint is not None:
            with contextlib.suppress(DeviceError):
                div = self._divide(space, hint)
        return self._run(prim, args, self._divide(space, None) if div is None else div)

    def _divide(self, space: OpSpace, hint: dict[str, int] | None) -> WorkDivision:
        hook = _DIVIDE.get()
        if hook is not None:
            return hook(space, self.machine, hint)
        # One division per geometry and hint in the process (``device.divide_alike``), as
        # the device model's plan reads it: a repeated layer's ops share its per-core maps.
        return divide_alike(space, hint, self.machine)

    def _run(self, prim: Any, args: tuple[Any, ...], div: WorkDivision) -> Any:
        """``prim`` on ``args`` per core by ``div`` (checked, in the check mode)."""
        out = self._run_divided(prim, args, div)
        if out is not None:
            self._made[id(out)] = (weakref.ref(out, partial(_forget, self._made, id(out))), div)
        return out

    def _run_divided(self, prim: Any, args: tuple[Any, ...], div: WorkDivision) -> Any:
        try:
            _check_supported(div)
        except SpyreUnsupportedError as err:
            if self.check is None:
                raise
            self.check.fell_back(div, str(err))
            return None
        imgs = [image(a) for a in args]
        if self.check is None:
            return wrap(_per_core(prim, div, imgs), prim.out_aval)
        # Both ways read one materialised copy of the operands: XLA may otherwise fuse
        # (recompute) a producer into each consumer with other roundings.
        imgs = list(jax.lax.optimization_barrier(imgs))
        got = _per_core(prim, div, imgs)
        want = prim(*(wrap(x, t) for x, t in zip(imgs, prim.in_avals, strict=True)))
        self.check.watch(prim, div, imgs, got, image(want))
        return prim(*args)  # the program goes on as in the default mode, barrier-free


def _forget(made: dict[int, tuple[weakref.ref[Any], WorkDivision]], key: int, ref: Any) -> None:
    """Drop a dead result's entry (unless its id already names a newer one)."""
    if key in made and made[key][0] is ref:
        del made[key]


def producer_splits(made: WorkDivision, space: OpSpace) -> dict[str, int] | None:
    """The splits of ``made``'s output as ``space``'s, whose first operand that output is.

    Matched through the buffer's device dims, not by name: a matmul names a 3-D result's
    dims ``x, mb, out`` (batch, rows, columns) where an elementwise space says ``mb, x,
    out``. (A ``LaneAssemble`` reads a piece as the result's layout: the same device
    dims, each stick dim walking twice the elements.) A dim of ``space`` its first
    operand does not walk stays whole. None where the two images differ, or the
    producer splits a device dim the write does not walk.
    """
    theirs_op, mine_op = made.space.output, space.operands[0]
    if theirs_op.tensor.layout.device_size != mine_op.tensor.layout.device_size:
        return None
    hint = dict.fromkeys(space.names, 1)
    for theirs, mine in zip(theirs_op.walks, mine_op.walks, strict=True):
        if theirs is not None and mine is not None:
            hint[mine[0]] = made.splits[theirs[0]]
        elif theirs is not None and made.splits[theirs[0]] > 1:
            return None  # split by the producer, whole for the write
    return hint


def _per_core(prim: Any, div: WorkDivision, imgs: list[jax.Array]) -> jax.Array:
    """The image of ``prim``'s result computed core by core (padding as its type says)."""
    vals = [loaded(div, k, img) for k, img in enumerate(imgs)]
    fault = _FAULT.get()
    if fault is not None:
        vals = fault(prim, div, vals)
    result = prim.core_kernel(div, vals)
    img = stored(div, len(div.space.operands) - 1, result)
    t = prim.out_aval
    return masked(img, t, 0 if t.pad is PadFill.ZERO else poison(t.dtype))


# --- the check mode --------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """A divided op whose per-core result differs from its whole-image kernel's.

    Attributes:
        op: the op's name (``add``, ``sum``, ``matmul``...).
        splits: its division's splits.
        cores: cores used.
        source: the user's source line of the node that ran it.
        detail: how many positions differ and the first one.
    """

    op: str
    splits: tuple[tuple[str, int], ...]
    cores: int
    source: str
    detail: str

    def __str__(self) -> str:
        return (
            f"{self.op} divided {dict(self.splits)} over {self.cores} cores "
            f"at {self.source or '?'}: {self.detail}"
        )


class CoreCheck:
    """The check mode of per-core emulation: every divided op run both ways and compared.

    With a check active (:func:`checking_cores`), every ``spyrejax.jit`` program traced
    runs each op the device model divides core by core *and* with its whole-image
    kernel, continues with the latter (the default mode's kernels: only XLA's fusion of
    float chains around the extra reads may change last bits) and compares
    the two device images when the program runs (a ``jax.debug.callback``): bit for
    bit on every data position (and on padding a type promises to be zero), NaN equal
    to NaN; a float sum, mean or matmul (reassociated) within the rounding bound of two
    summation orders,
    ``n * eps(acc) * sum|terms| + eps(out) * |result|`` per position (``n`` the
    reduction's length, ``sum|terms|`` the same op on the operands' magnitudes); a
    division by a broadcast operand within two roundings (XLA multiplies by the
    reciprocal where it sees the broadcast), a transcendental within 4 ulps (see
    each primitive's ``core_rounding``); ``0.0 == -0.0``
    (see :func:`_agree`). Ops the
    device model does not divide (views, copies, restickifies, ``iota``, host
    fallbacks) run as in the default mode.

    Attributes:
        checked: ops traced both ways, per op name.
        fallbacks: ops that cannot run per core (a division splitting a variable that
            a folded device dim walks), per op name and reason: they ran the whole-image
            kernel only.
        mismatches: what the comparisons found (:meth:`take` empties it).
    """

    def __init__(self) -> None:
        self.checked: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()
        self.mismatches: list[Mismatch] = []
        self._lock = threading.Lock()

    def take(self) -> list[Mismatch]:
        """The mismatches found since the last call (wait for ``jax.effects_barrier()``)."""
        with self._lock:
            out, self.mismatches = self.mismatches, []
        return out

    def fell_back(self, div: WorkDivision, reason: str) -> None:
        """Count an op that runs its whole-image kernel only."""
        self.fallbacks[f"{div.space.opfunc}: {reason.split(';')[0]}"] += 1

    def watch(
        self, prim: Any, div: WorkDivision, imgs: list[jax.Array], got: jax.Array, want: Any
    ) -> None:
        """Compare ``got`` (per core) with ``want`` (whole image) when the program runs."""
        self.checked[div.space.opfunc] += 1
        info = (
            div.space.opfunc,
            tuple(sorted(div.splits.items())),
            div.cores_used,
            current_line(),
        )
        t = prim.out_aval
        # Poison padding is undefined (either kernel may leave anything there).
        kept = np.ones(t.layout.device_size, bool)
        if t.pad is not PadFill.ZERO:
            kept = ~t.layout.padding_mask(t.base_shape)
        bound = prim.core_rounding(div)
        if bound is None or not bound.n:
            jax.debug.callback(partial(self._compare, info, kept, bound), got, want)
            return
        magnitude = _per_core(prim, div, [jnp.abs(x) for x in imgs])
        jax.debug.callback(partial(self._compare, info, kept, bound), got, want, magnitude)

    def _compare(
        self,
        info: tuple[Any, ...],
        kept: np.ndarray,
        bound: Any,
        got: Any,
        want: Any,
        mag: Any = None,
    ) -> None:
        bad = ~_agree(np.asarray(got), np.asarray(want), bound, mag) & kept
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            detail = (
                f"{int(bad.sum())} of {bad.size} device positions differ; first at {first}: "
                f"per core {np.asarray(got)[first]!r}, whole image {np.asarray(want)[first]!r}"
            )
            with self._lock:
                self.mismatches.append(Mismatch(*info, detail))


def _agree(got: np.ndarray, want: np.ndarray, bound: Rounding | None, mag: Any) -> np.ndarray:
    """Per position: the same bits, both NaN, both zero, or within ``bound``.

    The sign of a zero is no evidence about a division: a max or min over ``-0.0`` and
    ``0.0`` may give either (IEEE leaves it to the order), and XLA's rewrites of a
    float chain do not keep it (seen in the suite: a ``neg`` of ``0.0`` giving ``0.0``
    inside one program's per-core path, ``-0.0`` alone).
    """
    bits = np.dtype(f"u{got.dtype.itemsize}") if got.dtype != np.bool_ else np.bool_
    same = got.view(bits) == want.view(bits)
    if not jnp.issubdtype(got.dtype, jnp.floating):
        return same
    with np.errstate(invalid="ignore"):  # a bfloat16 NaN's cast warns; it stays NaN
        g, w = got.astype(np.float64), want.astype(np.float64)
    same |= (np.isnan(g) & np.isnan(w)) | ((g == 0) & (w == 0))
    if bound is not None:
        m = 0.0 if mag is None else np.abs(np.asarray(mag).astype(np.float64))
        tiny = float(jnp.finfo(got.dtype).tiny)
        with np.errstate(invalid="ignore", over="ignore"):
            limit = bound.n * (bound.eps_acc * m + tiny) + bound.ulps * bound.eps_out * np.abs(w)
            same |= np.abs(g - w) <= limit
    return same


Divide = Callable[[OpSpace, Machine, "dict[str, int] | None"], WorkDivision]
_DIVIDE: ContextVar[Divide | None] = ContextVar("spyrejax_core_divide", default=None)


@contextlib.contextmanager
def dividing(divide: Divide) -> Iterator[None]:
    """Per-core runs traced inside the block divide their ops with ``divide``.

    ``divide(space, machine, hint)`` stands for :func:`spyrejax.device.divide_op` (the
    device model's own division, the default): a hook for tests that watch the divisions
    used, or give a division the device model would not choose.
    """
    token = _DIVIDE.set(divide)
    try:
        yield
    finally:
        _DIVIDE.reset(token)


Fault = Callable[[Any, WorkDivision, "list[jax.Array]"], "list[jax.Array]"]
_FAULT: ContextVar[Fault | None] = ContextVar("spyrejax_core_fault", default=None)


@contextlib.contextmanager
def injecting(fault: Fault) -> Iterator[None]:
    """Per-core runs traced inside the block load their operands through ``fault``.

    ``fault(prim, div, vals)`` gets each divided op's per-core operand slices (each
    ``[cores, *local shape]``, as :func:`loaded` gives them) and returns the slices its
    cores compute on: a hook for tests that the check mode (:func:`checking_cores`) sees
    a core computing on wrong data or losing its slice. The whole-image side is untouched.
    """
    token = _FAULT.set(fault)
    try:
        yield
    finally:
        _FAULT.reset(token)


_CHECK: ContextVar[CoreCheck | None] = ContextVar("spyrejax_core_check", default=None)


def core_check() -> CoreCheck | None:
    """The active check (:func:`checking_cores`), or None."""
    return _CHECK.get()


@contextlib.contextmanager
def checking_cores(check: CoreCheck | None = None) -> Iterator[CoreCheck]:
    """Check per-core emulation against the default mode in every program traced inside.

    Every ``spyrejax.jit`` program first traced inside the block (its lowerings are
    cached per check) runs each divided op both ways and compares them at run time
    (:class:`CoreCheck`); results are the default mode's. ``pytest --emulate-check``
    (``make test-cores``) runs the test suite this way.

    Yields:
        ``check`` (a new :class:`CoreCheck` if None): read its ``mismatches`` after
        ``jax.effects_barrier()``.
    """
    check = CoreCheck() if check is None else check
    token = _CHECK.set(check)
    try:
        yield check
    finally:
        _CHECK.reset(token)


# --- what can run per core ---------------------------------------------------------------


def _check_supported(div: WorkDivision) -> None:
    """Every data device dim of every operand walks one variable, or folds unsplit ones.

    A device dim folding several logical dims (:class:`spyrejax.device.Fold`) is read
    whole by every core: the division must not split the variables it walks (the
    planner pins them; a hand-built division may not).

    Raises:
        SpyreUnsupportedError: for a folded device dim whose variable is split, or a
            data device dim that walks no variable.
    """
    for op in div.space.operands:
        for j, d in enumerate(op.tensor.dims):
            if not d.is_data or op.walks[j] is not None:
                continue
            fold = op.fold(j)
            if fold is None:
                raise SpyreUnsupportedError(
                    f'emulate="cores": {div.space.opfunc} reads {op.tensor.name} whose device '
                    f"dim {j} walks logical dims {d.dims} with no iteration variable; "
                    "use the default mode"
                )
            split = [v for v in fold.vars if v is not None and div.splits[v] > 1]
            if split:
                raise SpyreUnsupportedError(
                    f'emulate="cores": {div.space.opfunc} splits {split[0]}, which '
                    f"{op.tensor.name}'s device dim {j} walks folded with other logical dims "
                    f"{d.dims}; per-core execution reads a folded device dim whole (do not "
                    "split it, restickify first, or use the default mode)"
                )
