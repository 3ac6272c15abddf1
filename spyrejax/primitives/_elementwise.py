"""Elementwise primitives: unary math, binary arithmetic, comparisons and ``where``.

Layout rule (spec section 7): after broadcasting, every operand and the result share
the stick dim. The result takes the layout (and view) of the first operand that has
the result's shape; other operands are brought onto its device dims on the device:
device dims in another order are transposed, dims an operand is broadcast along get a
size-1 axis, and a stick of size 1 broadcasts its lane 0. Operands stuck on another
dim are a :class:`LayoutError` that points to ``restickify``.

Kernel: one vectorised jnp expression on the aligned images; the result's padding is
written with poison, so nothing downstream can mistake it for data.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._array import SpyreArray, SpyreType
from .._devdims import AlignPlan, align
from .._errors import LayoutError, SpyreTypeError
from .._layout import SpyreTensorLayout
from ._base import SpyrePrim
from ._kernels import (
    aligned,
    broadcast_all,
    collapsed,
    from_data_dims,
    masked,
    merge_axes,
    merged_shape,
    padding_in_data_dims,
    poison,
    select,
)

__all__ = ["ELEMENTWISE_OPS", "Elementwise", "elementwise"]

Scalar = bool | int | float

_UNARY: dict[str, Callable[..., Any]] = {
    "neg": jnp.negative,
    "abs": jnp.abs,
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "rsqrt": jax.lax.rsqrt,
    "reciprocal": jnp.reciprocal,
    "square": jnp.square,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "relu": jax.nn.relu,
    "gelu": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_erf": functools.partial(jax.nn.gelu, approximate=False),
    "silu": jax.nn.silu,
    "erf": jax.lax.erf,
    "erfc": jax.lax.erfc,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "sign": jnp.sign,
    "logical_not": jnp.logical_not,
    "one_minus_square": lambda x: 1 - x * x,
}
_BINARY: dict[str, Callable[..., Any]] = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": jnp.divide,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "pow": jnp.power,
    "integer_pow": lambda x, y: jax.lax.integer_pow(x, int(y)),
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
}
_COMPARE: dict[str, Callable[..., Any]] = {
    "lt": jnp.less,
    "le": jnp.less_equal,
    "gt": jnp.greater,
    "ge": jnp.greater_equal,
    "eq": jnp.equal,
    "ne": jnp.not_equal,
}
_TERNARY: dict[str, Callable[..., Any]] = {"where": select}
# Float ops whose ``jnp`` function is a nested jit: the kernel calls these ``lax``
# twins directly (same results on same-dtype floats), one function less to compile.
_LAX: dict[str, Callable[..., Any]] = {
    "add": jax.lax.add,
    "sub": jax.lax.sub,
    "mul": jax.lax.mul,
    "div": jax.lax.div,
    "maximum": jax.lax.max,
    "minimum": jax.lax.min,
    "exp": jax.lax.exp,
    "log": jax.lax.log,
    "tanh": jax.lax.tanh,
    "neg": jax.lax.neg,
    "abs": jax.lax.abs,
    "sqrt": jax.lax.sqrt,
}

ELEMENTWISE_OPS: dict[str, int] = {
    **{k: 1 for k in _UNARY},
    **{k: 2 for k in _BINARY},
    **{k: 2 for k in _COMPARE},
    **{k: 3 for k in _TERNARY},
}
"""Every elementwise op name and its number of operands."""


def _target(avals: list[SpyreType], out_shape: tuple[int, ...], out_dtype: Any) -> SpyreType:
    """The result's type: the first full-shape operand's layout and view, else a default."""
    def_format = None
    for a in avals:
        if a.dtype == out_dtype or out_dtype == np.bool_:
            full = a.shape == out_shape
            no_bcast = all(s != 0 or n == 1 for n, s in zip(a.shape, a.strides, strict=True))
            if full and no_bcast:
                return SpyreType(a.shape, out_dtype, a.layout, a.base_shape, a.strides)
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


def broadcast_rule(
    name: str, avals: list[SpyreType], out_dtype: Any
) -> tuple[SpyreType, tuple[AlignPlan, ...]]:
    """Result type of an n-ary pointwise op and how each operand aligns to it.

    Raises:
        LayoutError: if the shapes do not broadcast or an operand is stuck elsewhere.
    """
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


class Elementwise(SpyrePrim):
    """An elementwise op; subclasses per op name set ``op`` and ``fn``."""

    op: str = ""
    fn: Callable[..., Any] = staticmethod(lambda *a: None)
    broadcasts_operands = True

    def __init__(self, *avals: SpyreType, consts: tuple[tuple[int, Scalar], ...] = ()) -> None:
        out_dtype = _out_dtype(self.op, avals, consts)
        out, plans = broadcast_rule(self.op, list(avals), out_dtype)
        self._plans = plans
        self.in_avals = tuple(avals)
        self.out_aval = out
        self.params = {"consts": consts}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"consts": self.consts} if self.consts else {}

    def kernel(self, *images: jax.Array) -> jax.Array:
        out_t = self.out_aval
        ops: list[Any] = [aligned(img, p) for img, p in zip(images, self._plans, strict=True)]
        for pos, value in self.consts:
            ops.insert(pos, value)
        if self.op not in _COMPARE and self.op not in ("where", "integer_pow"):
            dt = out_t.dtype
            ops = [jnp.asarray(o, dt) if not isinstance(o, jax.Array) else o for o in ops]
        synthetic = [k for k, d in enumerate(out_t.dims) if not d.is_data]
        sparse = bool(synthetic) and not padding_in_data_dims(out_t)
        shape = out_t.layout.device_size
        if sparse:  # compute on lane 0 only and pad the other lanes with poison
            lane0 = tuple(slice(0, 1) if k in synthetic else slice(None) for k in range(len(shape)))
            ops = [o[lane0] if isinstance(o, jax.Array) and o.ndim else o for o in ops]
            shape = tuple(1 if k in synthetic else n for k, n in enumerate(shape))
        runs = collapsed(out_t.dims, shape, [o.shape for o in ops if jnp.ndim(o)])
        ops = [merge_axes(o, runs) for o in ops]
        merged = merged_shape(shape, runs)
        result = jnp.broadcast_to(self._compute(ops), merged).astype(out_t.dtype).reshape(shape)
        if sparse:
            return from_data_dims(result, out_t)
        return masked(result, out_t, poison(out_t.dtype))

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
        """The op on aligned operands; float ops with a ``lax`` twin skip ``jnp``'s jit."""
        lax_fn = _LAX.get(self.op)
        dt = self.out_aval.dtype
        if lax_fn is None or not jnp.issubdtype(dt, jnp.floating):
            return type(self).fn(*ops)
        if any(not isinstance(o, jax.Array) or o.dtype != dt for o in ops):
            return type(self).fn(*ops)
        return lax_fn(*broadcast_all(ops))

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"consts": self.consts}


def _out_dtype(op: str, avals: tuple[SpyreType, ...], consts: Any) -> Any:
    """Operands share one dtype (no implicit promotion); comparisons give bool."""
    cond_is_array = op == "where" and all(pos != 0 for pos, _ in consts)
    if cond_is_array and avals[0].dtype != np.bool_:
        raise SpyreTypeError(f"where: the condition must be bool, got {avals[0].dtype}")
    values = avals[1:] if cond_is_array else avals
    if not values:
        raise SpyreTypeError(f"{op}: give at least one value operand as a Spyre array")
    dtypes = {a.dtype for a in values}
    if len(dtypes) > 1:
        names = ", ".join(sorted(str(d) for d in dtypes))
        raise SpyreTypeError(f"{op}: operand dtypes differ ({names}); convert with astype first")
    return np.dtype(np.bool_) if op in _COMPARE else values[0].dtype


_CLASSES: dict[str, type[Elementwise]] = {}
for _table in (_UNARY, _BINARY, _COMPARE, _TERNARY):
    for _name, _fn in _table.items():
        _cls_name = "".join(part.capitalize() for part in _name.split("_"))
        _CLASSES[_name] = type(_cls_name, (Elementwise,), {"op": _name, "fn": staticmethod(_fn)})


def _is_scalar(x: Any) -> bool:
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


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
    if len(operands) != ELEMENTWISE_OPS[op]:
        raise SpyreTypeError(f"{op} takes {ELEMENTWISE_OPS[op]} operands, got {len(operands)}")
    arrays, consts = [], []
    for pos, x in enumerate(operands):
        if _is_scalar(x):
            consts.append((pos, np.asarray(x).item()))
            continue
        aval = jax.typeof(x)
        if not isinstance(aval, SpyreType):
            raise SpyreTypeError(
                f"{op}: operand {pos} is a host array {aval}; move it with spyrejax.to_device "
                "(or pass a Python scalar)"
            )
        arrays.append(x)
    if not arrays:
        raise SpyreTypeError(f"{op}: needs at least one Spyre array operand")
    prim = _CLASSES[op](*[jax.typeof(a) for a in arrays], consts=tuple(consts))
    return prim(*arrays)


def _make_public(op: str) -> Callable[..., SpyreArray]:
    arity = ELEMENTWISE_OPS[op]
    args = ", ".join("xyz"[:arity])

    def fn(*operands: Any) -> SpyreArray:
        return elementwise(op, *operands)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = (
        f"Elementwise ``{op}({args})`` on Spyre arrays (scalars broadcast).\n\n"
        "Operands must share the stick dim after broadcasting; the result takes the "
        "first full-shape operand's layout and has poison padding.\n"
    )
    return fn


PUBLIC = {op: _make_public(op) for op in _CLASSES}
"""The public function of every elementwise op, by name."""
