"""Reductions (``sum``, ``max``, ``min``, ``mean``, ``any``, ``all``) over any axes.

Layout rule (spec section 7): the device dims over the reduced logical dims disappear;
the others keep their order. Reducing along the stick dim gives a *sparse* result
(spec 2.5): its stick becomes a synthetic dim with data in lane 0 only, and the
tile-count dim becomes a synthetic size-1 dim, exactly the layout of
``SpyreTensorLayout(shape, dtype, [..., -1])``.

Every reduction is one :class:`ReductionOp` record in :data:`REDUCTIONS_TABLE`, from
which its primitive class, wrapper and lowering rule derive.

Kernel: padding never takes part. Along padded axes the box of data at the image's origin is
reduced with a ``reduce_window`` and what lies past it (a partial last stick's tile) is
masked with the reduction's identity (0, -inf, +inf) on its own; only layouts whose padding
is no such box (and bools) replace all padding with the identity (the pass over the data:
``primitives._reduce_data``). float16/bfloat16 sums accumulate in float32. A dense
``sum``/``mean`` leaves exact zeros in its padding, and its type says so (``pad=0``); every
other result has poison padding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..device._coremaps import valid_points
from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec, reduce_space
from ..layout._devdims import DevDim, layout_from_dims
from ..layout._dtypes import has_infinity
from ._arranged import arranged_image, kept_arrangement, standard_image, standard_order
from ._array import PadFill, SpyreArray, SpyreType
from ._axes import merge_axes
from ._base import SpyrePrim, normalize_axes
from ._in_place import ungapped, valid_image
from ._masks import (
    data_mask,
    from_data_dims,
    holds_identity,
    masked,
    padding_in_data_dims,
    poison,
    poisoned,
)
from ._reduce_data import Widen, data_box, merged_runs, reduce_data
from ._ring import combine, reduced
from ._rounding import Rounding, reassociated
from ._values import accumulator

__all__ = [
    "CLASSES",
    "REDUCTION",
    "REDUCTIONS",
    "REDUCTIONS_TABLE",
    "Reduce",
    "Reduction",
    "ReductionOp",
    "reduce",
]


class Reduction(Protocol):
    """The type of a reduction's public function (``spyrejax.sum``)."""

    def __call__(
        self, x: SpyreArray, axis: int | tuple[int, ...] | None = None, keepdims: bool = False
    ) -> SpyreArray: ...


def _lowest(dtype: np.dtype) -> Any:
    """The identity of max: -inf (float8_e4m3fn: its lowest), the smallest int, or False."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf if has_infinity(dtype) else jnp.finfo(dtype).min
    return False if dtype == np.bool_ else np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    """The identity of min: +inf (float8_e4m3fn: its largest), the largest int, or True."""
    if jnp.issubdtype(dtype, jnp.floating):
        return np.inf if has_infinity(dtype) else jnp.finfo(dtype).max
    return True if dtype == np.bool_ else np.iinfo(dtype).max


@dataclass(frozen=True)
class ReductionOp:
    """One reduction: its primitive, wrapper and lowering derive from this record.

    Attributes:
        name: the op's name (``spyrejax.<name>`` and ``x.<name>()``).
        identity: the value padding is replaced with, per dtype.
        lax: the ``lax`` reduction (``(x, axes)``), used except on bools.
        jnp: the ``jnp`` reduction (``(x, axis=...)``), used on bools.
        lowers: the JAX primitives ``spyrejax.jit`` lowers to this op.
        additive: a sum: accumulates in float32 for half floats, counts broadcast
            copies, and leaves exact zeros in dense padding (``pad=0``).
        mean: divide by the number of reduced elements (float arrays only).
        bools: only bool arrays (``any``/``all``).
        doc: the wrapper's first docstring line.
    """

    name: str
    identity: Callable[[np.dtype], Any]
    lax: Callable[..., Any]
    jnp: Callable[..., Any]
    lowers: tuple[str, ...] = ()
    additive: bool = False
    mean: bool = False
    bools: bool = False
    doc: str = ""


REDUCTIONS_TABLE: tuple[ReductionOp, ...] = (
    ReductionOp("sum", lambda _: 0, jax.lax.reduce_sum, jnp.sum, ("reduce_sum",), True, doc="Sum"),
    ReductionOp("max", _lowest, jax.lax.reduce_max, jnp.max, ("reduce_max",), doc="Maximum"),
    ReductionOp("min", _highest, jax.lax.reduce_min, jnp.min, ("reduce_min",), doc="Minimum"),
    ReductionOp("mean", lambda _: 0, jax.lax.reduce_sum, jnp.sum, (), True, True, doc="Mean"),
    ReductionOp(
        "any", _lowest, jax.lax.reduce_or, jnp.any, ("reduce_or",), bools=True, doc="Any true"
    ),
    ReductionOp(
        "all", _highest, jax.lax.reduce_and, jnp.all, ("reduce_and",), bools=True, doc="All true"
    ),
)
"""Every reduction, one record each."""

REDUCTION: dict[str, ReductionOp] = {op.name: op for op in REDUCTIONS_TABLE}


def _out_dims(t: SpyreType, axes: tuple[int, ...], keepdims: bool) -> list[DevDim]:
    """The result's device dims: reduced ones dropped, a reduced stick made synthetic."""
    renumber = {}
    for d in range(t.ndim):
        if d not in axes:
            renumber[d] = d if keepdims else d - sum(1 for a in axes if a < d)
    stick = t.stick_dim
    out = []
    for j, dd in enumerate(t.dims):
        if not dd.is_data:
            out.append(dd)
            continue
        reduced = [d in axes for d in dd.dims]
        if any(reduced) and not all(reduced):
            raise LayoutError(
                f"reduction over axes {axes}: device dim {j} of {t.str_short()} folds reduced "
                f"and kept dims {dd.dims}; restickify first"
            )
        if not all(reduced):
            out.append(DevDim(tuple(renumber[d] for d in dd.dims), dd.ratio, dd.size))
        elif stick is not None and stick in dd.dims:
            out.append(DevDim((), 1, dd.size if j == t.layout.device_rank - 1 else 1))
    return out


class Reduce(SpyrePrim):
    """A reduction; one subclass per :class:`ReductionOp` sets ``op``."""

    op: ClassVar[ReductionOp]
    axes: tuple[int, ...]
    keepdims: bool
    space_kind = "reduce"
    takes_gaps = True  # reduces its operand's valid range; its result has no gaps
    takes_arrangements = True  # a group's order: folded whole, or kept (``_arranged``)

    def __init__(self, aval: SpyreType, *, axes: tuple[int, ...], keepdims: bool) -> None:
        window, aval = aval, standard_order(ungapped(aval), axes, self.op.name)
        shape = tuple(1 if d in axes else n for d, n in enumerate(aval.shape))
        if not keepdims:
            shape = tuple(n for d, n in enumerate(aval.shape) if d not in axes)
        dims = _out_dims(aval, axes, keepdims)
        layout = layout_from_dims(shape, dims, aval.layout.device_dtype)
        self._dev_axes = tuple(
            j for j, d in enumerate(aval.dims) if d.is_data and set(d.dims) <= set(axes)
        )
        self._take = tuple(j for j, d in enumerate(aval.dims) if not d.is_data)
        # Dense sums of masked padding are exact zeros: a fill the type can promise.
        lanes_filled = any(not d.is_data and d.size > 1 for d in dims)
        zero = self.op.additive and not lanes_filled
        self.in_avals = (window,)
        self._standard_out = SpyreType.contiguous(
            shape, aval.dtype, layout, PadFill.ZERO if zero else PadFill.POISON
        )
        self.out_aval = kept_arrangement(window, axes, self._standard_out)
        self.params = {"axes": axes, "keepdims": keepdims}
        super().__init__()

    def kernel(self, img: jax.Array, trust_padding: bool = True) -> jax.Array:
        return self.finish(*self.data_result(img, trust=trust_padding))

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return self.kernel(img, trust_padding=False)  # a tangent's padding holds no identity

    def data_result(
        self, img: jax.Array, then: Callable[..., Any] | None = None, *, trust: bool = True
    ) -> tuple[jax.Array, bool]:
        """The reduction over the result's data device dims, and whether it was windowed.

        In the accumulator's dtype (float32 for half-float sums), before any division.
        ``then`` (half-float sums only) maps the widened values before they are summed.
        Padding that holds the identity is not masked (see :meth:`_mask`).
        """
        img = standard_image(valid_image(img, self.in_avals[0].layout), self.in_avals[0])
        t = standard_order(ungapped(self.in_avals[0]), self.axes, self.op.name)
        op = self.op
        mask, unmasked = self._mask(t, then, trust)
        take = self._take
        if take:  # synthetic dims hold data at index 0 only
            index = tuple(0 if k in take else slice(None) for k in range(img.ndim))
            img = img[index]
            mask = None if mask is None else mask[index]
        dev_axes = tuple(j - sum(1 for k in take if k < j) for j in self._dev_axes)
        data_dims = tuple(d for d in t.dims if d.is_data)
        runs = merged_runs(img.shape, data_dims, dev_axes)
        img, mask = merge_axes(img, runs), None if mask is None else merge_axes(mask, runs)
        dev_axes = tuple(i for i, r in enumerate(runs) if r[0] in dev_axes)
        acc = accumulator(t.dtype) if op.additive else None
        widen = None if acc is None else Widen(acc, then)
        box = None if mask is None else data_box(t, take, runs)
        out = reduce_data(img, mask, box, dev_axes, op, op.identity(t.dtype), widen)
        if op.mean:
            out = out / math.prod(t.shape[d] for d in self.axes if t.strides[d] != 0)
        elif op.additive:  # broadcast (stride-0) logical dims hold one copy of each value
            copies = math.prod(t.shape[d] for d in self.axes if t.strides[d] == 0)
            out = out * copies if copies > 1 else out
        return out, box is not None or unmasked

    def _mask(self, t: SpyreType, then: Any, trust: bool) -> tuple[Any, bool]:
        """The data mask of ``t``, and whether padding holding the identity spared it.

        Not spared where ``trust`` is false (a tangent) or ``then`` maps the padding.
        """
        if trust and then is None and holds_identity(self.in_avals[0], self.op.identity(t.dtype)):
            return None, True
        return data_mask(t), False

    def finish(self, out: jax.Array, windowed: bool) -> jax.Array:
        """The result's image from :meth:`data_result`: converted, padded, filled, arranged."""
        out = from_data_dims(out.astype(self.out_aval.dtype), self._standard_out)
        if padding_in_data_dims(self._standard_out):
            out = self._fill_padding(out, windowed=windowed)
        return arranged_image(out, self.out_aval)

    def _fill_padding(self, out: jax.Array, windowed: bool) -> jax.Array:
        """The result's padding (in its kept dims) filled as its type promises.

        Reduced windowed, kept dims' padding holds the reduction of whatever their
        padding held: zeros are written if the type promises them. Reduced from a
        masked image it holds the identity: a dense sum's zeros already, else poison.
        """
        out_t = self._standard_out
        if out_t.pad is PadFill.ZERO:
            return masked(out, out_t, 0) if windowed else out
        return poisoned(out, out_t) if windowed else masked(out, out_t, poison(out.dtype))

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"axes": tuple(a + 1 for a in self.axes), "keepdims": self.keepdims}

    def space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace:
        """One variable per operand dim, those of :attr:`axes` reduced."""
        return reduce_space(self.op.name, ins[0], out, self.axes, self.keepdims)

    def space_key(self) -> Hashable:
        return (self.axes, self.keepdims)

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """The reduction of each core's slice, identity outside the extents, then the ring."""
        (x,) = vals
        t = self.in_avals[0]
        op = self.op
        names = reduced(div)
        # A broadcast (stride-0) reduced dim holds one copy: every copy takes part.
        full = tuple(
            div.chunk(n) if n in names else s
            for n, s in zip(div.space.names, x.shape[1:], strict=True)
        )
        x = jnp.broadcast_to(x, (x.shape[0], *full))
        ok = valid_points(div, names, full)
        if ok is not None:
            x = jnp.where(ok, x, jnp.asarray(op.identity(t.dtype), x.dtype))
        acc = accumulator(t.dtype) if op.additive else None
        if acc is not None:
            x = x.astype(acc)
        axes = tuple(1 + div.space.names.index(n) for n in names)

        def reduce(v: jax.Array, ax: Any) -> jax.Array:
            ax = (ax,) if isinstance(ax, int) else ax
            return op.jnp(v, axis=ax) if v.dtype == bool else op.lax(v, ax)

        total = combine(div, jnp.expand_dims(reduce(x, axes), axes), reduce)
        if op.mean:
            total = total / math.prod(div.space.dim(n).extent for n in names)
        return total.astype(t.dtype)

    def core_rounding(self, div: WorkDivision) -> Rounding | None:
        """A float sum or mean reassociates (:func:`reassociated`); max, min... are exact."""
        if not self.op.additive:
            return None
        return reassociated(div, self.in_avals[0].dtype, self.out_aval.dtype)


REDUCTIONS = tuple(op.name for op in REDUCTIONS_TABLE)
"""Every reduction's name."""

CLASSES: dict[str, type[Reduce]] = {
    op.name: type(op.name.capitalize(), (Reduce,), {"op": op}) for op in REDUCTIONS_TABLE
}
"""Every reduction's primitive class, by name."""


def reduce(op: str, x: SpyreArray, axis: Any = None, keepdims: bool = False) -> SpyreArray:
    """Reduce a Spyre array with ``op`` (one of :data:`REDUCTIONS`) over ``axis``.

    Args:
        op: a name from :data:`REDUCTIONS`.
        x: the Spyre array.
        axis: an int, a tuple of ints or None (all axes).
        keepdims: keep reduced dims as size 1.

    Returns:
        The reduction; sparse (one element per stick) when the stick dim is reduced.

    Raises:
        LayoutError: on a bad axis.
        SpyreTypeError: if ``x`` is not a Spyre array or ``op`` is unknown.
    """
    if op not in CLASSES:
        raise SpyreTypeError(f"unknown reduction {op!r}; known: {REDUCTIONS}")
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"{op}: needs a SpyreArray, got {aval}")
    axes = (
        tuple(range(aval.ndim))
        if axis is None
        else tuple(sorted(normalize_axes(axis, aval.ndim, op)))
    )
    record = REDUCTION[op]
    if record.mean and not jnp.issubdtype(aval.dtype, jnp.floating):
        raise SpyreTypeError(f"mean: needs a float array, got {aval.dtype}")
    if record.bools and aval.dtype != np.bool_:
        raise SpyreTypeError(f"{op}: needs a bool array, got {aval.dtype}")
    return CLASSES[op](aval, axes=axes, keepdims=bool(keepdims))(x)


def _make_public(op: ReductionOp) -> Callable[..., SpyreArray]:
    def fn(x: SpyreArray, axis: Any = None, keepdims: bool = False) -> SpyreArray:
        return reduce(op.name, x, axis, keepdims)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = (
        f"{op.doc} over ``axis``, like ``jnp.{op.name}``; padding never takes part.\n\n"
        "Reducing the stick dim gives a sparse result (one element per stick).\n\n"
        "Args:\n    x: a Spyre array.\n    axis: an int, a tuple of ints or None (all).\n"
        "    keepdims: keep reduced dims as size 1.\n"
    )
    return fn


PUBLIC = {op.name: _make_public(op) for op in REDUCTIONS_TABLE}
"""The public function of every reduction, by name."""
