"""An op's iteration space: its variables, its operands, and how each tensor walks them.

An op's iteration space has one variable per output dim and per reduced dim, named as
SuperDSC names them (``mb``, ``out``, ``in``, ...). A variable that indexes some
operand's stick dim counts in sticks, so every split falls on a stick boundary
(:mod:`._division` divides a space over the cores).

Pure Python: an op is described by :class:`TensorSpec` values (shape, layout and the
device-dim tags of :mod:`spyrejax.layout`), never by JAX objects.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import DeviceError
from ..layout._arrangements import GROUP
from ..layout._devdims import DevDim, FoldIndex, device_dims, fold_index
from ..layout._dtypes import BYTES_PER_STICK
from ..layout._gaps import valid_nbytes
from ..layout._lanes import LanedLayout
from ..layout._layout import SpyreTensorLayout
from ..layout._segments import row_major_strides

__all__ = [
    "MATMUL_NAMES",
    "OTHER_NAMES",
    "Fold",
    "IterDim",
    "OpSpace",
    "Operand",
    "TensorSpec",
    "elementwise_space",
    "matmul_space",
    "reduce_space",
]

# SuperDSC's names of an op's dims: innermost first for most ops, K last for a matmul.
OTHER_NAMES = ("mb", "x", "y", "i", "j", "ki", "kj")
MATMUL_NAMES = ("ki", "kj", "y", "x", "mb", "out", "in")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as an op reads or writes it: logical shape, layout, device-dim tags.

    Attributes:
        shape: logical shape (a view's shape for a view).
        layout: the device layout of its image.
        dims: per device dim, the logical dims it walks (:class:`DevDim`).
        name: a name for reports.
        base_shape: for a view, the contiguous host tensor the layout was built for
            (None: ``shape`` itself).
        strides: for a view, its strides over ``base_shape`` (None: row-major).
        buffer: for a lane view (``lanes=k::s``), the name of the value whose sticks
            it reads; an op reading several lane sets of one buffer reads its sticks
            once (see ``op_cost``). Empty otherwise.
    """

    shape: tuple[int, ...]
    layout: SpyreTensorLayout
    dims: tuple[DevDim, ...]
    name: str = ""
    base_shape: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    buffer: str = ""

    @classmethod
    def of(
        cls,
        shape: Sequence[int],
        layout: SpyreTensorLayout,
        *,
        base_shape: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        name: str = "",
    ) -> TensorSpec:
        """The spec of a tensor of ``shape`` in ``layout`` (a view if ``strides`` given)."""
        shape = tuple(int(n) for n in shape)
        base = tuple(base_shape) if base_shape is not None else shape
        strides = tuple(strides) if strides is not None else row_major_strides(shape)
        dims = device_dims(layout, base, shape, tuple(strides))
        return cls(shape, layout, dims, name, base, tuple(strides))

    @property
    def sticks_of(self) -> str:
        """The value whose sticks a read of it moves: its ``buffer``, else its ``name``.

        One op's reads of one such value are one read (``x + x``, or ``x[..., 0::2] *
        x[..., 1::2]`` on one buffer's sticks); ``op_cost`` and the device plan's cost
        cache both key reads by it.
        """
        return self.buffer or self.name

    @functools.cached_property
    def folds(self) -> tuple[FoldIndex | None, ...]:
        """Per device dim, how it indexes the logical dims it folds (None if it folds none).

        Raises:
            DeviceError: if the view (``base_shape``, ``strides``) does not give
                :attr:`dims` (a spec built without its view).
        """
        base = self.shape if self.base_shape is None else self.base_shape
        strides = row_major_strides(self.shape) if self.strides is None else self.strides
        folds = fold_index(self.layout, base, self.shape, strides)
        for d, f in zip(self.dims, folds, strict=True):
            if len(d.dims) > 1 and (f is None or (f.dims, f.ratio) != (d.dims, d.ratio)):
                raise DeviceError(
                    f"{self.name or 'a tensor'}: its device dims {self.dims} are not those of "
                    f"the view {self.shape} with strides {strides} over {base}"
                )
        return folds

    @property
    def itemsize(self) -> int:
        """Device bytes per element."""
        return BYTES_PER_STICK // self.layout.elems_per_stick

    @property
    def nbytes(self) -> int:
        """Device bytes of its image (stick-granular); of a window, its valid range.

        A window of a larger buffer (a layout with gaps) is read and written in its
        valid range only: the gaps are the buffer's other slots.
        """
        return valid_nbytes(self.layout)

    def box_nbytes(self, shape: Sequence[int]) -> int | None:
        """Device bytes of the sticks holding a box of ``shape`` of it (from its origin).

        A stick is read whole: ``x[:, -1]`` of a ``[1024, 4096]`` float16 array holds a
        stick in each of its 1,024 rows (128 KiB), ``x[:4]`` 4 rows of 64 sticks (32
        KiB). Counted from the origin, a box straddling one more stick than it needs is
        not seen (a lower bound). None when the box is not of its rank or larger, or a
        device dim folds several logical dims or the sticks are not the last device dim.
        """
        shape = tuple(shape)
        dims = self.dims
        if len(shape) != len(self.shape):
            return None
        if any(n > m for n, m in zip(shape, self.shape, strict=True)):
            return None
        if not dims or dims[-1].size != self.layout.elems_per_stick:
            return None
        sticks = 1
        for d in dims[:-1]:
            if len(d.dims) > 1:
                return None
            if d.dims:  # else a synthetic or size-1 dim: its index 0 holds the data
                sticks *= min(d.size, -(-shape[d.dims[0]] // d.ratio))
        return sticks * BYTES_PER_STICK


@dataclass(frozen=True)
class IterDim:
    """One variable of an op's iteration space.

    Attributes:
        name: the SuperDSC dim name.
        extent: logical extent.
        stick: elements per unit: the largest ``elems_per_stick`` among the operands
            whose stick dim it indexes, else 1.
        reduced: whether it is a reduced (contracted) dim.
        pinned: whether some operand lays it out in a way no split can follow (a
            folded device dim): it is never split.
    """

    name: str
    extent: int
    stick: int = 1
    reduced: bool = False
    pinned: bool = False

    @property
    def units(self) -> int:
        """Stick-adjusted extent: ``ceil(extent / stick)``."""
        return -(-self.extent // self.stick)


@dataclass(frozen=True)
class Fold:
    """A device dim of an operand that folds several logical dims: the variables it walks.

    Its variables are pinned (never split): every core walks the whole folded range.

    Attributes:
        vars: the iteration variable of each folded logical dim, outermost first (None
            for a logical dim no variable indexes: it is walked at 0).
        index: how the device coordinate follows from theirs (the radix rule).
    """

    vars: tuple[str | None, ...]
    index: FoldIndex


@dataclass(frozen=True)
class Operand:
    """One operand of an op, with the iteration variable each device dim walks.

    Attributes:
        tensor: the tensor.
        role: ``"input"`` or ``"output"``.
        walks: per device dim, ``(variable name, ratio)`` or None (synthetic, size-1,
            broadcast or folded dims).
        folds: per device dim, the :class:`Fold` of a dim that folds several logical
            dims, else None (empty: none given).
    """

    tensor: TensorSpec
    role: str
    walks: tuple[tuple[str, int] | None, ...]
    folds: tuple[Fold | None, ...] = ()

    def fold(self, j: int) -> Fold | None:
        """The :class:`Fold` of device dim ``j``, or None."""
        return self.folds[j] if self.folds else None


@dataclass(frozen=True)
class OpSpace:
    """An op's iteration space and operands.

    Attributes:
        opfunc: the op's name (``add``, ``exp``, ``sum``, ``matmul``, ``batchmatmul``).
        kind: ``"elementwise"``, ``"reduce"`` or ``"matmul"``.
        dims: the iteration variables in iteration order (SuperDSC name order).
        operands: inputs first, then the output.
        macs: multiply-accumulates (matmul only).
        broadcast: whether an input is broadcast along some variable.
        transcendental: whether the vector units run it as a transcendental
            (``Machine.transcendental_factor``); the op's record says so.
        in_place: whether its result may take the LX space of an input dying at it;
            the op's record says so.
        relayout_bytes: bytes its cores read and write again in their own LX to reorder
            elements inside stick groups (a 16 <-> 32-bit conversion in the standard
            order: the card's conversion writes them staggered); the op's primitive
            says how many.
    """

    opfunc: str
    kind: str
    dims: tuple[IterDim, ...]
    operands: tuple[Operand, ...]
    macs: int = 0
    broadcast: bool = False
    transcendental: bool = False
    in_place: bool = False
    relayout_bytes: int = 0

    def dim(self, name: str) -> IterDim:
        """The variable called ``name``."""
        for d in self.dims:
            if d.name == name:
                return d
        raise DeviceError(
            f"{self.opfunc} has no dim {name!r}; its dims are {[d.name for d in self.dims]}"
        )

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """The variables' names in iteration order."""
        return tuple(d.name for d in self.dims)

    @property
    def inputs(self) -> tuple[Operand, ...]:
        """The input operands."""
        return tuple(o for o in self.operands if o.role == "input")

    @property
    def output(self) -> Operand:
        """The output operand."""
        return self.operands[-1]

    def geometry(self) -> Hashable:
        """Everything a division depends on: the space without the tensors' names.

        Two ops of one geometry (a repeated layer's) divide alike, into the same boxes.
        Made once per space (the device plan asks for it per op, twice).
        """
        return self._geometry

    def renamed(self, tensors: Sequence[TensorSpec]) -> OpSpace:
        """This space over ``tensors``: an op of its geometry (a repeated layer's).

        One tensor per operand in order, each equal to the operand's tensor but for its
        name and buffer (the caller vouches for it). What derives from the tensors'
        shapes, layouts and dims alone (:meth:`geometry`, the variables' names) is kept,
        not made again.
        """
        self.geometry()  # made here once, for every copy
        operands = tuple(_copied(o, tensor=t) for o, t in zip(self.operands, tensors, strict=True))
        return _copied(self, operands=operands)

    @functools.cached_property
    def _geometry(self) -> Hashable:
        operands = tuple(
            (o.role, o.walks, o.folds, o.tensor.shape, o.tensor.layout, o.tensor.dims)
            for o in self.operands
        )
        return (
            self.opfunc, self.kind, self.dims, operands, self.macs, self.broadcast,
            self.relayout_bytes,
        )  # fmt: skip


def _copied(x: Any, **fields: Any) -> Any:
    """A frozen dataclass ``x`` with ``fields`` set, its cached values kept.

    ``dataclasses.replace`` without its ``__init__`` (on a deep model's op records, a
    sixth of their time); only for fields none of ``x``'s cached values derives from.
    """
    new = object.__new__(type(x))
    new.__dict__.update(x.__dict__)
    new.__dict__.update(fields)
    return new


def _space(
    opfunc: str,
    kind: str,
    names: Sequence[str],
    extents: Sequence[int],
    reduced: Sequence[bool],
    operands: Sequence[tuple[TensorSpec, str, Callable[[int], str | None]]],
    macs: int = 0,
    transcendental: bool = False,
    in_place: bool = False,
) -> OpSpace:
    """An :class:`OpSpace`; ``operands`` give each tensor's logical dim -> variable."""
    stick = dict.fromkeys(names, 1)
    pinned: set[str] = set()
    ops = []
    broadcast = False
    for tensor, role, var_of in operands:
        walks: list[tuple[str, int] | None] = []
        folds: list[Fold | None] = [None] * len(tensor.dims)
        for j, d in enumerate(tensor.dims):
            if not d.is_data:
                walks.append(None)
                continue
            vars_ = [var_of(x) for x in d.dims]
            if len(d.dims) != 1 or vars_[0] is None:
                pinned.update(v for v in vars_ if v is not None)
                walks.append(None)
                index = tensor.folds[j] if len(d.dims) > 1 else None
                if index is not None:
                    folds[j] = Fold(tuple(vars_), index)
                continue
            var = vars_[0]
            walks.append((var, d.ratio))
            if j == len(tensor.dims) - 1:
                stick[var] = max(stick[var], _unit(tensor.layout))
        seen = {w[0] for w in walks if w is not None}
        if role == "input" and any(
            n not in seen and e > 1 for n, e, r in zip(names, extents, reduced, strict=True)
        ):
            broadcast = broadcast or kind == "elementwise"
        ops.append(Operand(tensor, role, tuple(walks), tuple(folds)))
    for op in ops:
        for var in {w[0] for w in op.walks if w is not None}:
            if not _follows(op, var, stick[var]):
                pinned.add(var)
    dims = tuple(
        IterDim(n, e, stick[n], r, n in pinned)
        for n, e, r in zip(names, extents, reduced, strict=True)
    )
    return OpSpace(opfunc, kind, dims, tuple(ops), macs, broadcast, transcendental, in_place)


def _unit(layout: SpyreTensorLayout) -> int:
    """Elements of a layout's stick dim a core takes whole: a stick, or an arranged group.

    An element arrangement permutes the elements of a group (a 16-bit stick, or two fp32
    sticks): a core's box holds whole groups, so it places them by the arranged map.
    """
    return max(layout.elems_per_stick, GROUP if layout.is_arranged else 1)


def _follows(op: Operand, var: str, stick: int) -> bool:
    """Whether splits of ``var`` in units of ``stick`` cut ``op`` into boxes.

    The operand walks ``var`` with one device dim (ratio 1), or with a tile and a stick
    dim (ratio ``eps`` and 1, the stick dim of size ``eps`` dividing ``stick``).
    """
    dims = [(op.walks[j][1], _steps(op.tensor.layout, j)) for j in _walking(op, var)]
    if len(dims) == 1:
        return dims[0][0] == 1
    if len(dims) == 2:
        (r_t, _), (r_s, n_s) = sorted(dims, reverse=True)
        return r_s == 1 and r_t == n_s and stick % n_s == 0
    return False


def _steps(layout: SpyreTensorLayout, j: int) -> int:
    """How many steps of its variable device dim ``j`` holds: its size, or a lane view's lanes.

    A lane view's stick (``lanes=k::s``) holds ``eps / s`` of its elements, ``s`` lanes apart.
    """
    if j == layout.device_rank - 1 and isinstance(layout, LanedLayout):
        return layout.valid_size[j]
    return layout.device_size[j]


def _walking(op: Operand, var: str) -> list[int]:
    return [j for j, w in enumerate(op.walks) if w is not None and w[0] == var]


def _names(n: int) -> list[str]:
    """Non-matmul names for logical dims 0..n-1: ``out`` for dim 0, ``mb`` for the last."""
    if n == 0:
        return []
    if n - 1 > len(OTHER_NAMES):
        raise DeviceError(f"an op of rank {n} has more dims than SuperDSC names")
    inner = list(OTHER_NAMES[: n - 1])  # mb for dim n-1, x for n-2, ...
    return ["out", *reversed(inner)]


def _right_aligned(t: TensorSpec, names: Sequence[str], shape: Sequence[int]) -> Callable:
    shift = len(shape) - len(t.shape)

    def var_of(i: int) -> str | None:
        if t.shape[i] == 1 and shape[i + shift] != 1:
            return None
        return names[i + shift]

    return var_of


def elementwise_space(
    opfunc: str,
    out: TensorSpec,
    ins: Sequence[TensorSpec],
    *,
    transcendental: bool = False,
    in_place: bool = False,
) -> OpSpace:
    """The iteration space of an elementwise op (inputs broadcast right-aligned).

    ``transcendental`` and ``in_place``: the op's facts, from its record (:class:`OpSpace`).
    """
    names = _names(len(out.shape))
    order = list(reversed(names))  # iteration order: mb (innermost dim) first, out last
    extents = {n: out.shape[i] for i, n in enumerate(names)}
    operands = [(t, "input", _right_aligned(t, names, out.shape)) for t in ins]
    operands.append((out, "output", lambda i: names[i]))
    ext = [extents[n] for n in order]
    red = [False] * len(order)
    return _space(opfunc, "elementwise", order, ext, red, operands, 0, transcendental, in_place)


def reduce_space(
    opfunc: str, x: TensorSpec, out: TensorSpec, axes: Sequence[int], keepdims: bool = False
) -> OpSpace:
    """The iteration space of a reduction of ``x`` over ``axes``."""
    names = _names(len(x.shape))
    order = list(reversed(names))
    kept = [i for i in range(len(x.shape)) if i not in axes]

    def out_var(i: int) -> str | None:
        return names[i] if keepdims else names[kept[i]]

    extents = {n: x.shape[i] for i, n in enumerate(names)}
    red = {names[a] for a in axes}
    operands = [(x, "input", lambda i: names[i]), (out, "output", out_var)]
    return _space(
        opfunc, "reduce", order, [extents[n] for n in order], [n in red for n in order], operands
    )


def matmul_space(a: TensorSpec, b: TensorSpec, out: TensorSpec) -> OpSpace:
    """The iteration space of ``out[..., m, n] = a[..., m, k] @ b[..., k, n]``."""
    n = len(out.shape)
    if n < 2 or len(a.shape) < 2 or len(b.shape) < 2:
        raise DeviceError("matmul work division needs operands and result of rank >= 2")
    if n + 1 > len(MATMUL_NAMES):
        raise DeviceError(f"a matmul of rank {n} has more dims than SuperDSC names")
    names = list(MATMUL_NAMES[-(n + 1) :])  # batch..., M, N, K
    batch, m, nn, k = names[: n - 2], names[n - 2], names[n - 1], names[n]
    ext = [*out.shape, a.shape[-1]]

    def walks(x: TensorSpec, last: str, second: str) -> Callable[[int], str | None]:
        """An operand's dim -> its variable: its two last dims, then right-aligned batch."""

        def var(i: int) -> str | None:
            if i == len(x.shape) - 1:
                return last
            if i == len(x.shape) - 2:
                return second
            j = i + n - len(x.shape)
            return None if x.shape[i] == 1 and out.shape[j] != 1 else batch[j]

        return var

    operands = [
        (a, "input", walks(a, k, m)),
        (b, "input", walks(b, nn, k)),
        (out, "output", lambda i: names[i]),
    ]
    opfunc = "batchmatmul" if n > 2 else "matmul"
    macs = math.prod(out.shape) * a.shape[-1]
    reduced = [False] * n + [True]
    return _space(opfunc, "matmul", names, ext, reduced, operands, macs)
