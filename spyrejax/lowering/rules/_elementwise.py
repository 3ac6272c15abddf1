"""Lowering rules of elementwise ops, conversions and reductions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax
import numpy as np

from ... import primitives as sp
from ..._errors import SpyreUnsupportedError
from ...layout._arrangements import GROUP
from ...primitives._arranged import card_order_matters
from ...primitives._array import SpyreType
from ...primitives._stick import (
    SPARSE,
    default_layout,
    default_type,
    stick_of,
)
from .._graph import Node, Scalar, Value
from .._registry import Mode, Rule, _arg, _carried_modes, _register, pointwise_modes

# --- elementwise ----------------------------------------------------------------------


class _Elementwise(Rule):
    def __init__(self, op: sp.ElementwiseOp) -> None:
        self.op = op

    def modes(self, node: Node) -> list[Mode]:
        if len(self.op.from_jax(list(node.ins), node.params)) != self.op.arity:
            raise SpyreUnsupportedError(
                f"{node.prim} with {len(node.ins)} operands at {node.source}: spyrejax lowers "
                f"it as {self.op.name}({', '.join(self.op.params)})"
            )
        return pointwise_modes(node)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        ins = self.op.from_jax(list(args), node.params)
        vals = [_arg(a) for a in ins]
        if all(isinstance(ins[i], Scalar) for i in self.op.value_positions):
            i = self.op.value_positions[0]  # where(p, 0.0, 1.0): a 0-d value broadcasts
            vals[i] = sp.to_device(np.asarray(vals[i], node.outs[0].dtype))
        return [sp.elementwise(self.op.name, *_operands_like_values(self.op, vals))]


def _spyre_type(v: Any) -> SpyreType | None:
    """The Spyre type of a Spyre array (traced or not); None for scalars."""
    if isinstance(v, bool | int | float | np.generic | np.ndarray):
        return None
    t = jax.typeof(v)
    return t if isinstance(t, SpyreType) else None


def _operands_like_values(op: sp.ElementwiseOp, vals: list[Any]) -> list[Any]:
    """Other operands brought to the stick width of the value operands, if it differs.

    A bool predicate may hold any format's geometry: a mask in its default layout (64
    per stick) read with float32 values (32 per stick) is restickified into theirs. An
    integer exponent of another width (``bfloat16 ** int32``) is converted to the
    values' dtype, as XLA lowers ``pow`` (``hlo.power`` converts it the same way).
    """
    types = [_spyre_type(v) for v in vals]
    values = [types[i] for i in op.value_positions if types[i] is not None]
    formats = {t.layout.device_dtype for t in values}
    if len(formats) != 1:
        return vals
    (fmt,) = formats
    out = []
    for pos, (v, t) in enumerate(zip(vals, types, strict=True)):
        if (
            t is not None
            and pos not in op.value_positions
            and t.layout.elems_per_stick != fmt.elems_per_stick()
        ):
            if t.dtype == np.bool_:
                v = sp.restickify(v, layout=default_layout(t.shape, fmt, stick_of(t)))
            else:
                v = sp.astype(v, values[0].dtype)
        out.append(v)
    return out


for _op in sp.ELEMENTWISE:
    for _prim in _op.lowers:
        _register(_Elementwise(_op), _prim)


class _Polynomial(Rule):
    """``lax.polynomial(x, coeffs)``: Horner's loop of elementwise products and sums.

    As JAX lowers it: ``acc = c_n``, then ``acc = acc * x + c_k`` down to ``c_0``, each
    step a pointwise op in the result's stick (coefficients may be arrays or scalars).
    """

    def modes(self, node: Node) -> list[Mode]:
        return pointwise_modes(node)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        dtype = node.outs[0].dtype
        x, *coeffs = args
        acc = coeffs[-1]
        for c in reversed(coeffs[:-1]):
            acc = _pointwise("add", _pointwise("mul", acc, x, dtype), c, dtype)
        if isinstance(acc, Scalar):  # every coefficient and x a scalar: folded upstream
            acc = sp.to_device(np.asarray(acc.value, dtype))
        return [sp.broadcast_to(acc, node.outs[0].shape)]


def _pointwise(op: str, a: Any, b: Any, dtype: np.dtype) -> Any:
    """An elementwise op of two operands; two scalars are computed in ``dtype`` at once."""
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        fn = {"add": np.add, "mul": np.multiply}[op]
        return Scalar(fn(np.asarray(a.value, dtype), np.asarray(b.value, dtype)).item(), dtype)
    return sp.elementwise(op, _arg(a), _arg(b))


_register(_Polynomial(), "polynomial")


class _Convert(Rule):
    """``astype``: in the standard order, or in the card's staggered one.

    The card's conversion between 16-bit and 32-bit formats writes its result staggered
    (``DL16_TO_FP32``, ``FP32_TO_DL16``): the standard order costs it a relayout inside
    each group (``_arranged.card_relayout_bytes``, charged by the objective and the
    device model) where the order matters (``_arranged.card_order_matters``), which the
    ``arranged`` mode saves where the readers take the arrangement (ops position by
    position keep it, and converting an arranged value back gives the standard order).
    Where a reader refuses it (a reduction over the stick dim, a product), the value is
    restickified, and the objective compares that with the standard order's relayout.
    The mode is offered where the stick dim is whole groups of 64: a group with padding
    (a short stick dim, a ``[T, 1]`` mean) gains too little to be worth the value the
    planner's reconstruction may then restickify (it does not run a shared producer
    twice), nor the emulator's transposes of the staggered image.
    """

    def modes(self, node: Node) -> list[Mode]:
        out = node.outs[0]
        modes = pointwise_modes(node)
        x = node.ins[0]
        if isinstance(x, Value):
            modes += [
                replace(m, variant="arranged")
                for m in modes
                if card_order_matters(*_mode_types(node, m)) and out.shape[m.out] >= GROUP
            ]
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        arranged = mode.variant == "arranged"
        return [sp.astype(args[0], node.params["new_dtype"], arranged=arranged)]


_register(_Convert(), "convert_element_type")


def _mode_types(node: Node, mode: Mode) -> tuple[SpyreType, SpyreType]:
    """A conversion's operand and result types in ``mode``: each the default of its stick."""
    x, out = node.ins[0], node.outs[0]
    stick = SPARSE if mode.ins[0] is None else mode.ins[0]
    return default_type(x.shape, x.dtype, stick), default_type(out.shape, out.dtype, mode.out)


# --- reductions ----------------------------------------------------------------------


class _Reduce(Rule):
    def __init__(self, op: str) -> None:
        self.op = op

    def modes(self, node: Node) -> list[Mode]:
        axes = tuple(node.params["axes"])
        return _carried_modes(node, lambda t: None if t in axes else t - sum(a < t for a in axes))

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.reduce(self.op, args[0], tuple(node.params["axes"]))]


for _red in sp.REDUCTIONS_TABLE:
    for _prim in _red.lowers:
        _register(_Reduce(_red.name), _prim)
