"""The rule registry: what a lowering rule is, the rule of each JAX primitive, the host fallback.

A rule gives, for a node:

- ``modes(node)``: the ways it can run, each with the stick (see ``spyrejax.primitives._stick``)
  it needs on every input, the stick it asks for its output where it can choose (a
  copy or a fresh array), and a variant where a rule has several ways to compute;
- ``lower(node, args, mode)``: the Spyre computation for a mode.

A rule says nothing else about its result: the planner evaluates ``lower`` on the
candidate input types (``primitives.abstract_eval``: no data), so the output type and
the copies a mode makes are exactly those of the Spyre primitives it calls, and a
``LayoutError`` means the mode cannot run on those types.

Rules live in one registry (``RULES``; ``_register`` is the one way in), written by
family in :mod:`spyrejax.lowering.rules`; a primitive without a rule raises
:class:`SpyreUnsupportedError` naming it and the user's source line, or with
``fallback`` runs on the host (``HOST_FALLBACK``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import primitives as sp
from .._errors import SpyreUnsupportedError
from ..layout._lanes import LanedLayout
from ..layout._layout import SpyreTensorLayout
from ..primitives._array import SpyreType
from ..primitives._in_place import place
from ..primitives._lanes import lane_place
from ..primitives._stick import (
    SPARSE,
    canon,
    default_layout,
    stick_options,
)
from ._graph import Node, Scalar, Value

__all__ = [
    "HOST_FALLBACK",
    "RULES",
    "Mode",
    "Rule",
    "is_host_fallback",
    "lower_node",
    "rule_for",
    "stick_req",
    "watching",
]


@dataclass(frozen=True)
class Mode:
    """One way to run a node.

    Attributes:
        ins: the stick each input needs (None: any, e.g. scalars and copies' inputs).
        out: the output's stick: what a copy or a fresh array is built in; for other
            nodes the stick their output has when the inputs are in ``ins``.
        variant: a rule's choice besides sticks (``"row_major"`` products, ``"fill"``
            constants, reshape ``"view"`` or ``"copy"``, ``"in_place"``); empty when
            there is one way.
        takes: the exact type each input must have (None: any serving ``ins``), for a
            mode that joins values written into windows of its result's buffer.
        clobbers: the input whose buffer the result reuses (an update in place): the
            planner offers the mode only where nothing reads that input afterwards.
        written: inputs their producers write straight into the result's buffer at a
            place known only at run time: each must be a fresh result read by nothing
            else.
        place: the layout with gaps the (first) output is written in: a window of a
            larger buffer (:func:`lower_node` places it; the planner asks for it).
    """

    ins: tuple[int | None, ...]
    out: int
    variant: str = ""
    takes: tuple[SpyreType | None, ...] | None = None
    clobbers: int | None = None
    written: tuple[int, ...] = ()
    place: SpyreTensorLayout | None = None


def stick_req(v: Value | Scalar, stick: int) -> int | None:
    """The stick an operand ``v`` needs for a pointwise result stuck on ``stick``.

    The dim is the same dim of ``v``'s shape (canonical for it); None for a scalar or a
    0-d value (no layout to ask for).
    """
    if isinstance(v, Scalar) or not v.shape:
        return None
    return canon(v.shape, stick)


def pointwise_modes(node: Node) -> list[Mode]:
    """A pointwise node's modes: one per stick of its result, every operand on that dim.

    Operands are aligned by :func:`stick_req`; a 0-d result has the one mode SPARSE with
    no operand asked for.
    """
    out = node.outs[0]
    return [
        Mode(tuple(stick_req(v, s) for v in node.ins), canon(out.shape, s) if out.shape else SPARSE)
        for s in stick_options(out.shape)
    ]


class Rule:
    """A lowering rule; subclasses implement ``modes`` and ``lower``.

    Attributes:
        sets_layout: its outputs are in a layout the program asks for (a layout hint):
            returned, they keep it.
    """

    sets_layout: ClassVar[bool] = False

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


Watch = Callable[[Node, list[Any], Mode], None]
_WATCHES: ContextVar[tuple[Watch, ...]] = ContextVar("spyrejax_lowering_watches", default=())


@contextlib.contextmanager
def watching(watch: Watch) -> Iterator[None]:
    """Call ``watch(node, args, mode)`` as each node is lowered inside the block.

    Every lowering goes through :func:`lower_node`: the planner's evaluations on types
    (under ``abstract_calls``) and the interpreter's traces. A hook for tests and tools
    that count or inspect them, instead of patching rules.
    """
    token = _WATCHES.set((*_WATCHES.get(), watch))
    try:
        yield
    finally:
        _WATCHES.reset(token)


def lower_node(node: Node, args: list[Any], mode: Mode, *, fallback: bool = False) -> list[Any]:
    """The node's outputs for ``mode``: its rule's lowering, placed where the mode says."""
    for watch in _WATCHES.get():
        watch(node, args, mode)
    outs = rule_for(node, fallback=fallback).lower(node, args, mode)
    if mode.place is not None:
        put = lane_place if isinstance(mode.place, LanedLayout) else place
        outs = [put(outs[0], mode.place), *outs[1:]]
    return outs


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
