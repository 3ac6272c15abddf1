"""Elementwise primitives: unary math, binary arithmetic, comparisons and ``where``.

Layout rule (spec section 7): after broadcasting, every operand and the result share the
stick dim. The result takes the layout (and view, ``canonical``) of the first operand of
the result's shape; the others are brought onto its device dims on the device: dims in
another order are transposed, broadcast dims get a size-1 axis, a stick of size 1
broadcasts its lane 0. An operand in a window of a larger buffer (gaps) is read in its
valid range. Operands stuck on another dim are a :class:`LayoutError` (``restickify``).

Kernel: one vectorised jnp expression on the aligned images. The result's padding is undefined
(``pad=poison``): it holds what the expression made of the operands' padding, and every kernel
that reads padding masks it. Not writing poison keeps a chain of elementwise ops (and a
reduction's producers) in one XLA fusion; debug option ``spyrejax_poison_padding`` writes it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._counts import count
from .._errors import LayoutError, SpyreTypeError
from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec, elementwise_space
from ..layout._devdims import AlignPlan, align
from ..layout._layout import SpyreTensorLayout
from ._arguments import host_operand
from ._arranged import arranged_image, arranged_result, lone_pair, standard_image, standard_type
from ._array import SpyreArray, SpyreType
from ._axes import aligned, collapsed, merged_shape, unmerged
from ._base import SpyrePrim
from ._elementwise_ops import OP, OPS, ElementwiseOp
from ._in_place import ungapped, valid_image
from ._lanes import is_laned, read_lanes, read_type
from ._masks import from_data_dims, masked, padding_in_data_dims, poisoned
from ._pointwise import compute, pointwise
from ._rounding import Rounding, float_eps
from ._views import align_batch_dims

__all__ = ["Binary", "Elementwise", "Ternary", "Unary", "elementwise"]

Scalar = bool | int | float
Operand = SpyreArray | Scalar
"""An elementwise op's operand: a Spyre array, or a Python scalar that broadcasts."""


class Unary(Protocol):
    """The type of a one-operand elementwise op's public function (``spyrejax.exp``)."""

    def __call__(self, x: SpyreArray, /) -> SpyreArray: ...


class Binary(Protocol):
    """The type of a two-operand elementwise op's public function (``spyrejax.add``)."""

    def __call__(self, x: Operand, y: Operand, /) -> SpyreArray: ...


class Ternary(Protocol):
    """The type of a three-operand elementwise op's public function (``spyrejax.where``)."""

    def __call__(self, a: Operand, b: Operand, c: Operand, /) -> SpyreArray: ...


def _target(avals: list[SpyreType], out_shape: tuple[int, ...], out_dtype: Any) -> SpyreType:
    """The result's type: the first full-shape operand's layout and view, else a default."""
    def_format = None
    for a in avals:
        if a.dtype == out_dtype or out_dtype == np.bool_:
            pairs = zip(a.shape, a.strides, strict=True)
            if a.shape == out_shape and all(s != 0 or n == 1 for n, s in pairs):
                return SpyreType(a.shape, out_dtype, a.layout, a.base_shape, a.strides).canonical()
            def_format = def_format or a.layout.device_dtype
    rank = len(out_shape)
    stick = rank - 1
    for a in avals:
        s = a.stick_dim
        if s is not None and a.shape[s] > 1:
            stick = s + rank - a.ndim
            break
    order = [d for d in range(rank) if d != stick] + ([stick] if rank else [])
    fmt = def_format or avals[0].layout.device_dtype
    return SpyreType.contiguous(out_shape, out_dtype, SpyreTensorLayout(out_shape, fmt, order))


_Broadcast = tuple[SpyreType, tuple[AlignPlan, ...]]  # the result's type, each operand's plan


def broadcast_rule(name: str, avals: list[SpyreType], out_dtype: Any) -> _Broadcast:
    """Result type of an n-ary pointwise op and how each operand aligns to it.

    Raises:
        LayoutError: if the shapes do not broadcast or an operand is stuck elsewhere.
    """
    return _broadcast_rule(name, tuple(avals), out_dtype)


@functools.lru_cache(maxsize=65536)  # once per signature: the planner's tries, repeated layers
def _broadcast_rule(name: str, avals: tuple[SpyreType, ...], out_dtype: Any) -> _Broadcast:
    try:
        out_shape = tuple(np.broadcast_shapes(*(a.shape for a in avals)))
    except ValueError:
        shapes = ", ".join(str(list(a.shape)) for a in avals)
        raise LayoutError(f"{name}: shapes {shapes} do not broadcast") from None
    target = _target(avals, out_shape, out_dtype)
    rank = len(out_shape)
    plans = []
    for i, a in enumerate(avals):
        shift = rank - a.ndim
        bdims = set(range(shift))
        for k, (n, s) in enumerate(zip(a.shape, a.strides, strict=True)):
            if (n == 1 and out_shape[k + shift] != 1) or (s == 0 and n > 1):
                bdims.add(k + shift)
        plan = align([d.renumber(shift) for d in a.dims], target.dims, frozenset(bdims))
        if plan is None:
            raise LayoutError(_mismatch(name, i, a, shift, target))
        plans.append(plan)
    return target, tuple(plans)


def _mismatch(name: str, i: int, a: SpyreType, shift: int, target: SpyreType) -> str:
    mine = "none (sparse)" if a.stick_dim is None else a.stick_dim + shift
    return (
        f"{name}: operand {i} {a.str_short()} is stuck on dim {mine} (or tiled differently), "
        f"but the result {target.str_short()} is stuck on dim {target.stick_dim}. Pointwise "
        "operands must share the stick dim: call spyrejax.restickify(operand, dim_order=...) "
        "first, or use spyrejax.jit, which inserts the restickify for you."
    )


def _read(img: jax.Array, t: SpyreType) -> jax.Array:
    """An operand's image as the kernel reads it: its valid range, or its lanes in order."""
    return read_lanes(img, t) if is_laned(t) else valid_image(img, t.layout)


class Elementwise(SpyrePrim):
    """An elementwise op; one subclass per :class:`ElementwiseOp` sets ``op``."""

    op: ClassVar[ElementwiseOp]
    consts: tuple[tuple[int, Scalar], ...]
    space_kind = "elementwise"
    takes_gaps = True  # iterates its operands' valid ranges; its result has no gaps
    takes_arrangements = True  # position by position: operands of one arranged layout
    takes_lanes = True  # reads a lane-strided operand lane by lane (primitives._lanes)

    def __init__(self, *avals: SpyreType, consts: tuple[tuple[int, Scalar], ...] = ()) -> None:
        out_dtype = _out_dtype(self.op, avals, consts)
        read = [read_type(ungapped(a)) for a in avals]
        out, plans = broadcast_rule(self.op.name, read, out_dtype)
        out = arranged_result(self.op.name, avals, out)
        self._plans = plans
        self.in_avals = tuple(avals)
        self.out_aval = out
        self.params = {"consts": consts}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"consts": self.consts} if self.consts else {}

    def kernel(self, *images: jax.Array) -> jax.Array:
        out_t = self.out_aval
        if out_t.layout.is_arranged and all(lone_pair(t) is None for t in self._typed()):
            # Position by position, so the same values in the standard order, arranged
            # last: a producer's placing and a reader's putting back meet and XLA
            # cancels both (a norm's chain runs with no transpose between its ops).
            images = tuple(standard_image(m, t) for m, t in zip(images, self.in_avals, strict=True))
            return arranged_image(self._kernel(images, standard_type(out_t)), out_t)
        return self._kernel(images, out_t)

    def _typed(self) -> list[SpyreType]:
        """The result's type and the operands' (scalars have none)."""
        return [self.out_aval, *(t for t in self.in_avals if isinstance(t, SpyreType))]

    def _kernel(self, images: Sequence[jax.Array], out_t: SpyreType) -> jax.Array:
        synthetic = [k for k, d in enumerate(out_t.dims) if not d.is_data]
        sparse = bool(synthetic) and not padding_in_data_dims(out_t)
        shape = out_t.layout.device_size
        if sparse:  # compute on lane 0 only (aligned operands have size 1 there)
            shape = tuple(1 if k in synthetic else n for k, n in enumerate(shape))
        # Each operand aligned and its runs merged in one reshape (see ``collapsed``).
        runs = collapsed(out_t.dims, shape, [p.shape for p in self._plans])
        merged = merged_shape(shape, runs)
        ops: list[Any] = [
            aligned(_read(m, a), p, merged_shape(p.shape, runs))
            for m, a, p in zip(images, self.in_avals, self._plans, strict=True)
        ]
        for pos, value in self.consts:
            ops.insert(pos, value)
        if self.op.result == "same":  # scalar values take the dtype
            dt, at = out_t.dtype, self.op.value_positions
            ops = [
                jnp.asarray(o, dt) if k in at and not isinstance(o, jax.Array) else o
                for k, o in enumerate(ops)
            ]
        result = unmerged(jnp.broadcast_to(self._compute(ops), merged).astype(out_t.dtype), shape)
        if sparse:
            return from_data_dims(result, out_t)
        return poisoned(result, out_t)

    def tangent_kernel(self, *images: jax.Array) -> jax.Array:
        """The kernel on images whose float padding holds 1 instead of poison.

        Reverse mode transposes the tangent map, in which the operands' images are
        coefficients: a zero cotangent times poison (NaN) padding is NaN, and the
        transpose of a broadcast (a stick of size 1, a stride-0 dim) sums those lanes
        into data. At 1 every op's derivative is finite.
        """
        safe = [
            masked(img, t, 1) if jnp.issubdtype(t.dtype, jnp.floating) else img
            for img, t in zip(images, self.in_avals, strict=True)
        ]
        return self.kernel(*safe)

    def _compute(self, ops: list[Any]) -> jax.Array:
        return compute(self.op, ops, self.out_aval.dtype)

    def align_batched(self, args: list[Any], batched: tuple[bool, ...]) -> list[Any]:
        """vmap: lower-rank batched operands line their batch dim up with the others'."""
        return align_batch_dims(args, batched, self.in_avals)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"consts": self.consts}

    def space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace | None:
        """One variable per result dim; inputs broadcast right-aligned; its record's facts."""
        count("space.elementwise")
        op = self.op
        return elementwise_space(
            op.name, out, ins, transcendental=op.transcendental, in_place=op.in_place
        )

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """The op's own computation (:func:`pointwise`) on the cores' data."""
        return pointwise(self.op, self.consts, vals, self.out_aval.dtype)

    def core_rounding(self, div: WorkDivision) -> Rounding | None:
        """A float transcendental within 4 ulps; a division by a broadcast within 2.

        XLA's CPU backend evaluates an approximated op (``ElementwiseOp.approximated``) by
        polynomials that differ in the last bits between its vectorised loop and its
        scalar remainder, so the same input rounds otherwise at another position of
        another array shape. XLA computes ``a / broadcast(b)`` as ``a * broadcast(1 / b)``
        (two roundings); a core whose slice holds one copy of the divisor divides exactly.
        """
        eps_out = float_eps(self.out_aval.dtype)
        if eps_out is None:
            return None
        if self.op.approximated:
            return Rounding(0, 0.0, eps_out, 4)
        return Rounding(0, 0.0, eps_out, 2) if self._divides_by_broadcast(div) else None

    def _divides_by_broadcast(self, div: WorkDivision) -> bool:
        """A division whose divisor is an operand that does not walk every dim."""
        if self.op.name != "div" or len(self.in_avals) != 2:
            return False
        walked = {w[0] for w in div.space.operands[1].walks if w is not None}
        return any(d.extent > 1 and d.name not in walked for d in div.space.dims)


def _out_dtype(op: ElementwiseOp, avals: tuple[SpyreType, ...], consts: Any) -> Any:
    """Value operands share one dtype (no implicit promotion); comparisons give bool."""
    scalar_at = {pos for pos, _ in consts}
    arrays = [pos for pos in range(op.arity) if pos not in scalar_at]
    aval_at = dict(zip(arrays, avals, strict=True))
    values = [a for pos, a in aval_at.items() if pos in op.value_positions]
    for pos, a in aval_at.items():
        if pos not in op.value_positions and not _other_ok(op, a.dtype, values):
            want = "bool" if op.others == "bool" else "an integer or the values' dtype"
            raise SpyreTypeError(f"{op.name}: the {op.params[pos]} must be {want}, got {a.dtype}")
    if not values and op.others == "integer":  # 2.0 ** x: the exponent's float dtype
        values = [a for a in aval_at.values() if not jnp.issubdtype(a.dtype, jnp.integer)]
    if not values:
        raise SpyreTypeError(f"{op.name}: give at least one value operand as a Spyre array")
    dtypes = {a.dtype for a in values}
    if len(dtypes) > 1:
        names = ", ".join(sorted(str(d) for d in dtypes))
        raise SpyreTypeError(
            f"{op.name}: operand dtypes differ ({names}); convert with astype first"
        )
    return np.dtype(np.bool_) if op.result == "bool" else values[0].dtype


def _other_ok(op: ElementwiseOp, dtype: np.dtype, values: list[SpyreType]) -> bool:
    """Whether a non-value operand's dtype fits ``op.others``."""
    if op.others == "bool":
        return dtype == np.bool_
    return jnp.issubdtype(dtype, jnp.integer) or all(a.dtype == dtype for a in values)


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_CLASSES: dict[str, type[Elementwise]] = {
    op.name: type(_class_name(op.name), (Elementwise,), {"op": op}) for op in OPS
}


def _is_scalar(x: Any) -> bool:
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


def scalar_operand(op: str, pos: int, x: Any) -> bool:
    """Whether an eager op's operand ``pos`` is a scalar (else it is a Spyre array).

    Raises:
        SpyreTypeError: if it is a host array (``host_operand``: both ways out).
    """
    if _is_scalar(x):
        return True
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise host_operand(op, f"operand {pos}", aval)
    return False


def elementwise(op: str, *operands: Any) -> SpyreArray:
    """Apply the elementwise op ``op`` to Spyre arrays and Python/NumPy scalars.

    Args:
        op: a name from :data:`ELEMENTWISE_OPS`.
        *operands: Spyre arrays (traced or not) and scalars; at least one Spyre array.

    Raises:
        SpyreTypeError: on an unknown op, a wrong number of operands, a host array
            operand, or operands of different dtypes.
        LayoutError: if the shapes do not broadcast or operands are stuck on different
            dims.
    """
    if op not in _CLASSES:
        raise SpyreTypeError(f"unknown elementwise op {op!r}; known: {sorted(_CLASSES)}")
    if len(operands) != OP[op].arity:
        raise SpyreTypeError(f"{op} takes {OP[op].arity} operands, got {len(operands)}")
    arrays, consts = [], []
    for pos, x in enumerate(operands):
        if scalar_operand(op, pos, x):
            consts.append((pos, np.asarray(x).item()))
        else:
            arrays.append(x)
    if not arrays:
        raise SpyreTypeError(f"{op}: needs at least one Spyre array operand")
    prim = _CLASSES[op](*[jax.typeof(a) for a in arrays], consts=tuple(consts))
    return prim(*arrays)


def _make_public(op: ElementwiseOp) -> Callable[..., SpyreArray]:
    def fn(*operands: Any) -> SpyreArray:
        return elementwise(op.name, *operands)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY, annotation=Any)
            for p in op.params
        ],
        return_annotation=SpyreArray,
    )
    fn.__doc__ = (
        f"{op.doc} Elementwise on Spyre arrays; scalars broadcast.\n\n"
        "Operands must share the stick dim after broadcasting; the result takes the "
        "first full-shape operand's layout; its padding is undefined (``pad=poison``).\n\n"
        f"Args:\n" + "".join(f"    {p}: a Spyre array or a scalar.\n" for p in op.params)
    )
    return fn


PUBLIC = {op.name: _make_public(op) for op in OPS if op.public}
"""The public function of every elementwise op, by name."""
