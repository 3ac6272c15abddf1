"""Lowering rules: each JAX primitive's layout modes and its rewrite into Spyre primitives.

A rule gives, for a node:

- ``modes(node)``: the ways it can run, each with the stick (see ``spyrejax.primitives._stick``)
  it needs on every input, the stick it asks for its output where it can choose (a
  copy or a fresh array), and a variant where a rule has several ways to compute;
- ``lower(node, args, mode)``: the Spyre computation for a mode.

A rule says nothing else about its result: the planner evaluates ``lower`` on the
candidate input types (``primitives.abstract_eval``: no data), so the output type and
the copies a mode makes are exactly those of the Spyre primitives it calls, and a
``LayoutError`` means the mode cannot run on those types.

Rules live in one registry; a primitive without a rule raises
:class:`SpyreUnsupportedError` naming it and the user's source line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .. import primitives as sp
from .._errors import LayoutError, SpyreUnsupportedError
from ..layout._layout import SpyreTensorLayout
from ..primitives._array import SpyreType
from ..primitives._stick import (
    SPARSE,
    canon,
    default_layout,
    dim_order_for,
    grouped_layout,
    stick_of,
    stick_options,
)
from ._graph import Node, Scalar, Value

__all__ = ["HOST_FALLBACK", "RULES", "Mode", "Rule", "is_host_fallback", "rule_for"]


@dataclass(frozen=True)
class Mode:
    """One way to run a node.

    Attributes:
        ins: the stick each input needs (None: any, e.g. scalars and copies' inputs).
        out: the output's stick: what a copy or a fresh array is built in; for other
            nodes the stick their output has when the inputs are in ``ins``.
        variant: a rule's choice besides sticks (``"row_major"`` products, ``"fill"``
            constants, reshape ``"view"`` or ``"copy"``); empty when there is one way.
    """

    ins: tuple[int | None, ...]
    out: int
    variant: str = ""


def _req(v: Value | Scalar, stick: int) -> int | None:
    if isinstance(v, Scalar) or not v.shape:
        return None
    return canon(v.shape, stick)


class Rule:
    """A lowering rule; subclasses implement ``modes`` and ``lower``."""

    def modes(self, node: Node) -> list[Mode]:
        """The node's modes."""
        raise NotImplementedError

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        """The node's outputs, computed with Spyre primitives."""
        raise NotImplementedError


RULES: dict[str, Rule] = {}


def _register(rule: Rule, *names: str) -> None:
    for name in names:
        RULES[name] = rule


def rule_for(node: Node, *, fallback: bool = False) -> Rule:
    """The node's rule; with ``fallback``, the host fallback for a primitive without one.

    Raises:
        SpyreUnsupportedError: for a primitive spyrejax cannot lower (without
            ``fallback``).
    """
    rule = RULES.get(node.prim)
    if rule is None and fallback and is_host_fallback(node):
        return HOST_FALLBACK
    if rule is None:
        raise SpyreUnsupportedError(
            f"unsupported primitive {_clip(node.prim, 60)} at {_where(node.line)}: no Spyre "
            "device rule (fallback='warn' runs it on the host; "
            "spyrejax.explain(f, ...).fallbacks lists each with its bytes)"
        )
    return rule


def _where(line: str) -> str:
    """A source line ``file:line (function)`` in at most 110 characters, the line kept."""
    file, sep, rest = line.partition(" (")
    text = f"{file} ({_clip(rest.rstrip(')'), 40)})" if sep else file
    return _clip(text, 110, left=True)


def _clip(text: str, n: int, *, left: bool = False) -> str:
    """At most ``n`` characters (an error stays short): the end elided, or the start."""
    if len(text) <= n:
        return text
    return "..." + text[3 - n :] if left else text[: n - 3] + "..."


def is_host_fallback(node: Node) -> bool:
    """Whether the node has no device rule but a JAX primitive: it can run on the host."""
    return node.prim not in RULES and node.primitive is not None


def _arg(x: Any) -> Any:
    return x.value if isinstance(x, Scalar) else x


def _carried_modes(node: Node, out_dim: Any) -> list[Mode]:
    """Modes of a one-input node that carries the input's stick to an output dim.

    ``out_dim(t)`` is the output dim that input dim ``t`` becomes, or None when the
    stick does not survive (the output is sparse).
    """
    x, out = node.ins[0], node.outs[0]
    modes = []
    for t in stick_options(x.shape):
        d = None if t == SPARSE else out_dim(t)
        modes.append(Mode((t,), SPARSE if d is None else canon(out.shape, d)))
    return modes


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
        out = node.outs[0]
        return [
            Mode(tuple(_req(v, s) for v in node.ins), canon(out.shape, s) if out.shape else SPARSE)
            for s in stick_options(out.shape)
        ]

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
        out = node.outs[0]
        return [
            Mode(tuple(_req(v, s) for v in node.ins), canon(out.shape, s) if out.shape else SPARSE)
            for s in stick_options(out.shape)
        ]

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
    def modes(self, node: Node) -> list[Mode]:
        out = node.outs[0]
        return [
            Mode((_req(node.ins[0], s),), canon(out.shape, s) if out.shape else SPARSE)
            for s in stick_options(out.shape)
        ]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.astype(args[0], node.params["new_dtype"])]


_register(_Convert(), "convert_element_type")


# --- dot_general ----------------------------------------------------------------------


class _DotGeneral(Rule):
    @staticmethod
    def _dims(node: Node) -> tuple[Any, ...]:
        (lc, rc), (lb, rb) = node.params["dimension_numbers"]
        lhs, rhs = node.ins
        lfree = [d for d in range(lhs.ndim) if d not in (*lc, *lb)]
        rfree = [d for d in range(rhs.ndim) if d not in (*rc, *rb)]
        return tuple(lc), tuple(rc), tuple(lb), tuple(rb), lfree, rfree

    def modes(self, node: Node) -> list[Mode]:
        """A on k, B and the product on n; batched products also laid out row-major.

        Several contracting dims are merged into one k (A stuck on the last of them),
        several free dims of B into one n (B stuck on the last of them): views where
        the layouts allow, charged copies where they do not.

        ``dot_general`` emits ``[batch..., m, n]``; the default layout of stick n,
        ``[m, batch..., T, batch0, S]``, interleaves the batches inside each tile, so
        batched products (total batch > 1) can also be laid out
        ``SpyreTensorLayout.row_major`` (same stick and size). The planner weighs both
        by what their consumers then cost (a reshape may be a view of one only).
        """
        scaled = _scaled_operand(node)
        if scaled is not None:  # a literal 0-d operand: a product by a scalar
            return [
                Mode(tuple(None if u is not scaled else s for u in node.ins), s)
                for s in stick_options(scaled.shape)
            ]
        lc, _, lb, _, lfree, rfree = self._dims(node)
        lhs, rhs = node.ins
        out = node.outs[0]
        # Merged dims are stuck on the last of them that is no size-1 dim (which no
        # stick can be on): B's free dims on n, A's contracting dims on k.
        n = _last_sized(rhs.shape, rfree)
        b_stick = SPARSE if n is None else n
        out_n = None if n is None else len(lb) + len(lfree) + rfree.index(n)
        out_stick = SPARSE if out_n is None else out_n
        k = _last_sized(lhs.shape, lc)
        a_stick = SPARSE if k is None else k  # no k: an outer product
        modes = [Mode((a_stick, b_stick), out_stick)]
        if rfree and out.shape[-1] > 1 and math.prod(lhs.shape[d] for d in lb) > 1:
            modes.insert(0, Mode((a_stick, b_stick), out_stick, "row_major"))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        want = node.outs[0].dtype
        scaled = _scaled_operand(node)
        if scaled is not None:
            i = node.ins.index(scaled)
            x = args[i] if args[i].dtype == want else sp.astype(args[i], want)
            return [sp.elementwise("mul", _arg(args[1 - i]), x)]
        lc, rc, lb, rb, lfree, rfree = self._dims(node)
        if args[0].dtype != args[1].dtype:  # as JAX lowers mixed operands on CPU
            args = [x if x.dtype == want else sp.astype(x, want) for x in args]
        a = sp.transpose(args[0], (*lb, *lfree, *lc))
        b = sp.transpose(args[1], (*rb, *rc, *rfree))
        nb = len(lb)
        if len(lc) > 1:  # one k: the contracting dims merged, in the same order on both
            a = _reshape(a, (*a.shape[: -len(lc)], math.prod(a.shape[-len(lc) :])))
            b = _reshape(
                b, (*b.shape[:nb], math.prod(b.shape[nb : nb + len(rc)]), *b.shape[nb + len(rc) :])
            )
        free_sizes = tuple(b.shape[b.ndim - len(rfree) :])
        if len(rfree) > 1:  # one n: B's free dims merged
            b = _reshape(b, (*b.shape[: -len(rfree)], math.prod(free_sizes)))
        merged_k, lc, rfree = lc, lc[:1], rfree[-1:]
        if not lc:  # no contraction: a matmul with k = 1
            a = sp.expand_dims(a, a.ndim)
            b = sp.expand_dims(b, len(rb))
        if not lfree:
            a = sp.expand_dims(a, len(lb))
        if not rfree:
            b = sp.expand_dims(b, b.ndim)
        if len(lfree) > 1:  # B broadcasts over A's outer free dims
            b = sp.expand_dims(b, tuple(range(len(rb), len(rb) + len(lfree) - 1)))
        layout = None
        if mode.variant == "row_major":
            shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
            layout = SpyreTensorLayout.row_major(shape, want)
        try:
            out = sp.matmul(a, b, layout=layout, preferred_element_type=want)
        except LayoutError:
            if len(merged_k) < 2 and len(free_sizes) < 2:
                raise  # the operands as planned: the planner tries other layouts
            a, b = _on_last(a), _on_last(b)  # a merged view the matmul cannot contract
            out = sp.matmul(a, b, layout=layout, preferred_element_type=want)
        if not rfree:
            out = sp.squeeze(out, out.ndim - 1)
        if not lfree:
            out = sp.squeeze(out, len(lb))
        if len(free_sizes) > 1:
            out = _reshape(out, (*out.shape[:-1], *free_sizes))
        return [out]


def _scaled_operand(node: Node) -> Value | None:
    """The other operand of a ``dot_general`` with a literal 0-d operand, else None.

    JAX's transpose of a product gives these (the cotangent ``1.0`` of ``jnp.vdot``):
    a 0-d operand has no contracting or batch dims, so the product is the other operand
    times the scalar, in the other operand's dim order.
    """
    lhs, rhs = node.ins
    if isinstance(lhs, Scalar) != isinstance(rhs, Scalar):
        return rhs if isinstance(lhs, Scalar) else lhs
    return None


def _last_sized(shape: tuple[int, ...], dims: Sequence[int]) -> int | None:
    """The last of ``dims`` whose size is not 1, or None if there is none."""
    sized = [d for d in dims if shape[d] != 1]
    return sized[-1] if sized else None


def _on_last(x: Any) -> Any:
    """``x`` in the default layout stuck on its last dim: itself if it is, else a restickify."""
    t = jax.typeof(x)
    stick = canon(t.shape, t.ndim - 1)
    return sp.in_layout(x, default_layout(t.shape, t.layout.device_dtype, stick))


def _reshape(x: Any, shape: tuple[int, ...], *, sparse: bool = False) -> Any:
    """``x`` reshaped: a view where its layout allows, else a copy stuck on the last dim.

    With ``sparse``, a copy is sparse instead (B of a matrix-vector product).
    """
    try:
        return sp.reshape(x, shape)
    except LayoutError:
        stick = SPARSE if sparse or not shape else canon(shape, len(shape) - 1)
        return sp.reshape_copy(x, shape, dim_order=dim_order_for(shape, stick))


_register(_DotGeneral(), "dot_general")


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


# --- shape ops -------------------------------------------------------------------------


class _BroadcastInDim(Rule):
    def modes(self, node: Node) -> list[Mode]:
        """A view of the input; a broadcast scalar is also a constant built in any stick."""
        x, out = node.ins[0], node.outs[0]
        if isinstance(x, Scalar) or not x.shape:
            fills = [Mode((None,), s, "fill") for s in stick_options(out.shape)]
            return [Mode((None,), SPARSE), *(fills if isinstance(x, Scalar) else [])]
        bdims = tuple(node.params["broadcast_dimensions"])
        return _carried_modes(node, lambda t: bdims[t])

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        x = args[0]
        out = node.outs[0]
        if mode.variant == "fill":
            dim_order = dim_order_for(out.shape, mode.out)
            return [sp.full(out.shape, x.value, out.dtype, dim_order=dim_order)]
        if isinstance(x, Scalar):
            x = sp.to_device(np.asarray(x.value, dtype=out.dtype))
        bdims = tuple(node.params["broadcast_dimensions"])
        missing = tuple(d for d in range(out.ndim) if d not in bdims)
        if missing:
            x = sp.expand_dims(x, missing)
        return [sp.broadcast_to(x, out.shape)]


_register(_BroadcastInDim(), "broadcast_in_dim")


class _Reshape(Rule):
    def modes(self, node: Node) -> list[Mode]:
        """A view of the input in any stick, or a copy into any stick.

        ``dimensions`` (JAX emits it in the gradient of a grouped convolution) is a
        transpose first: a view.
        """
        x, out = node.ins[0], node.outs[0]
        modes = []
        for t in stick_options(x.shape):
            modes.append(Mode((t,), SPARSE, "view"))
            modes.extend(Mode((t,), s, "copy") for s in stick_options(out.shape))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        x = args[0]
        if node.params.get("dimensions") is not None:
            x = sp.transpose(x, tuple(node.params["dimensions"]))
        if mode.variant == "view":  # a LayoutError when the layout allows no view
            return [sp.reshape(x, out.shape)]
        dim_order = dim_order_for(out.shape, mode.out)
        return [sp.reshape_copy(x, out.shape, dim_order=dim_order)]


_register(_Reshape(), "reshape")


class _Transpose(Rule):
    def modes(self, node: Node) -> list[Mode]:
        perm = tuple(node.params["permutation"])
        return _carried_modes(node, perm.index)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.transpose(args[0], tuple(node.params["permutation"]))]


_register(_Transpose(), "transpose")


class _Squeeze(Rule):
    def modes(self, node: Node) -> list[Mode]:
        dims = tuple(node.params["dimensions"])
        return _carried_modes(node, lambda t: None if t in dims else t - sum(d < t for d in dims))

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.squeeze(args[0], tuple(node.params["dimensions"]))]


_register(_Squeeze(), "squeeze")


class _ExpandDims(Rule):
    def modes(self, node: Node) -> list[Mode]:
        dims = set(node.params["dimensions"])
        kept = [d for d in range(node.outs[0].ndim) if d not in dims]
        return _carried_modes(node, kept.__getitem__)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.expand_dims(args[0], tuple(node.params["dimensions"]))]


_register(_ExpandDims(), "expand_dims")


class _Iota(Rule):
    def modes(self, node: Node) -> list[Mode]:
        return [Mode((), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        return [
            sp.iota(
                out.dtype,
                out.shape,
                node.params["dimension"],
                dim_order=dim_order_for(out.shape, mode.out),
            )
        ]


_register(_Iota(), "iota")


# --- copies: slice and concatenate --------------------------------------------------


class _Slice(Rule):
    def modes(self, node: Node) -> list[Mode]:
        return [Mode((None,), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        start = tuple(node.params["start_indices"])
        limit = tuple(node.params["limit_indices"])
        strides = node.params.get("strides")
        dim_order = dim_order_for(out.shape, mode.out)
        return [sp.slice_copy(args[0], start, limit, strides, dim_order=dim_order)]


_register(_Slice(), "slice")


class _Concatenate(Rule):
    def modes(self, node: Node) -> list[Mode]:
        if any(isinstance(v, Scalar) for v in node.ins):
            raise SpyreUnsupportedError(f"concatenate of scalars at {node.source}")
        out = node.outs[0]
        modes = [Mode((None,) * len(node.ins), s) for s in stick_options(out.shape)]
        if grouped_layout(out.shape, out.dtype) is not None:  # pairs stacked: one stick
            modes.append(Mode((None,) * len(node.ins), out.ndim - 1, "grouped"))
        return modes

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        dim = node.params["dimension"]
        if mode.variant == "grouped":
            return [sp.concatenate(args, dim, layout=grouped_layout(out.shape, out.dtype))]
        return [sp.concatenate(args, dim, dim_order=dim_order_for(out.shape, mode.out))]


_register(_Concatenate(), "concatenate")


class _Pad(Rule):
    def modes(self, node: Node) -> list[Mode]:
        if not isinstance(node.ins[1], Scalar):
            raise SpyreUnsupportedError(f"pad with a traced fill value at {node.source}")
        return [Mode((None, None), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        out = node.outs[0]
        config = node.params["padding_config"]
        value = _arg(args[1])
        return [sp.pad(args[0], value, config, dim_order=dim_order_for(out.shape, mode.out))]


_register(_Pad(), "pad")


# --- index-driven and cumulative ops: device copies through the values ----------------


class _LaxCopy(Rule):
    """Gathers, scatters, dynamic slices, cumulative ops and arg-reductions.

    Each runs the JAX primitive on its operands' values, read and written through DMA
    descriptors (``primitives.lax_copy``): any input layout, the result built in any
    stick, charged as a copy of its operands. With several results (``sort``,
    ``top_k``), ``mode.out`` is the stick of the first; the others take the same dim
    where they have the first's shape, else their default.
    """

    def modes(self, node: Node) -> list[Mode]:
        ins = (None,) * len(node.ins)
        return [Mode(ins, s) for s in stick_options(node.outs[0].shape)]

    call = staticmethod(sp.lax_copy)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        operands = [np.asarray(a.value, a.dtype) if isinstance(a, Scalar) else a for a in args]
        layouts = [_like(o, node.outs[0], mode.out) for o in node.outs]
        if not node.primitive.multiple_results:
            (out,), (layout,) = node.outs, layouts
            return [
                self.call(
                    node.primitive, operands, node.params, out.shape, out.dtype, layout=layout
                )
            ]
        shapes, dtypes = [o.shape for o in node.outs], [o.dtype for o in node.outs]
        return list(
            self.call(node.primitive, operands, node.params, shapes, dtypes, layout=layouts)
        )


class _HostFallback(_LaxCopy):
    """Any primitive without a device rule, run on the host.

    The operands are read in any layout and moved to the host through the DMA
    (``primitives.host_call``), JAX runs the primitive, and the results come back in
    their default layouts. The planner warns once per primitive and source line.
    """

    call = staticmethod(sp.host_call)

    def modes(self, node: Node) -> list[Mode]:
        if not node.outs:  # run for its effects (jax.debug.print): it gives nothing back
            return [Mode((None,) * len(node.ins), SPARSE)]
        out = node.outs[0]
        stick = canon(out.shape, out.ndim - 1) if out.shape else SPARSE
        return [Mode((None,) * len(node.ins), stick)]


HOST_FALLBACK: Rule = _HostFallback()


def _like(out: Value, first: Value, stick: int) -> SpyreTensorLayout:
    """``out``'s default layout with ``first``'s stick dim where ``out`` has the same shape."""
    if out.shape != first.shape:
        stick = stick_options(out.shape)[0]
    return default_layout(out.shape, out.dtype, stick)


_register(
    _LaxCopy(),
    "gather",
    "scatter",
    "scatter-add",
    "scatter_add",
    "scatter-sub",
    "scatter_sub",
    "scatter-mul",
    "scatter_mul",
    "scatter-min",
    "scatter_min",
    "scatter-max",
    "scatter_max",
    "dynamic_slice",
    "dynamic_update_slice",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "argmax",
    "argmin",
    "reduce_precision",
    "rev",
    "reduce_prod",
    "reduce_xor",
    "sort",
    "top_k",
    "approx_top_k",
)
