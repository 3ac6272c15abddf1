"""The interpreter: runs a planned graph with Spyre primitives (under ``jax.jit``).

It follows the plan: each node runs in its mode, and an input not in the stick a node
needs is restickified first (once per value and stick). Every restickify is recorded
with its reason for :func:`spyrejax.explain`. Should a rule still refuse its inputs
(a view the planner's model did not foresee), the inputs not already in the default
layouts of the sticks the mode needs are copied there and the rule runs again; that is
recorded too. Constants (``jnp.ones``, ``zeros_like``, ``full``: a broadcast scalar) are
built directly in whatever layout a consumer needs, at no cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .. import primitives as sp
from .._array import SpyreType
from .._errors import LayoutError, SpyreInternalError
from .._layout import SpyreTensorLayout
from ._graph import Graph, Node, Scalar, Value
from ._planner import Plan
from ._rules import SPARSE, layout_for, rule_for, stick_of

__all__ = ["Interpreter", "Record"]


@dataclass(frozen=True)
class Record:
    """One restickify the lowering inserted.

    Attributes:
        value: the value: its type and where it comes from.
        reason: which node needed it in which stick.
        source: the layout it had.
        target: the layout it got.
        cost: elements moved, ``prod(source.device_size)``.
        source_type: its type before (shows a view over ``source``).
    """

    value: str
    reason: str
    source: SpyreTensorLayout
    target: SpyreTensorLayout
    cost: int
    source_type: str = ""


def _stick_name(s: int | None) -> str:
    return "sparse" if s == SPARSE else f"dim {s}"


def _broadcast_dims(t: SpyreType) -> set[int]:
    return {
        d for d, (n, st) in enumerate(zip(t.shape, t.strides, strict=True)) if st == 0 and n > 1
    }


def _serves(x: Any, required: int | None) -> bool:
    if required is None:
        return True
    have = stick_of(x)
    return have == required or (have == SPARSE and required in _broadcast_dims(jax.typeof(x)))


def _constant_fill(node: Node) -> Any:
    """The scalar a node broadcasts when its output is a constant (``jnp.ones``), else None."""
    if node.prim != "broadcast_in_dim":
        return None
    (x,) = node.ins
    if isinstance(x, Scalar):
        return x.value
    if x.kind == "const" and x.const is not None and np.size(x.const) == 1:
        return np.asarray(x.const).reshape(())
    return None


def _in_default_layout(t: SpyreType, stick: int) -> bool:
    """Whether ``t`` is already what a fallback copy would make: not a view, default layout."""
    return not t.is_view and t.layout == layout_for(t.shape, t.dtype, stick)


def _checked(node: Node, out: Any) -> Any:
    """``out``, after checking it has its equation's shape and dtype.

    A rule that returned anything else would give numbers that differ from ``jax.jit``
    (an integer product wrapped to int8, a float32 result rounded to bfloat16).

    Raises:
        SpyreInternalError: naming the equation, what it should give and what it gave.
    """
    want, got = node.outs[0], jax.typeof(out)
    if tuple(got.shape) != tuple(want.shape) or np.dtype(got.dtype) != np.dtype(want.dtype):
        raise SpyreInternalError(
            f"internal error: the lowering of {node.describe()} gave "
            f"{np.dtype(got.dtype).name}{list(got.shape)}, but the equation's result is "
            f"{np.dtype(want.dtype).name}{list(want.shape)}; please report it"
        )
    return out


class Interpreter:
    """Runs a graph with its plan; ``records`` lists the restickifies of the last trace."""

    def __init__(self, graph: Graph, plan: Plan) -> None:
        self.graph = graph
        self.plan = plan
        self.records: list[Record] = []

    def run(self, *args: Any) -> list[Any]:
        """Outputs for inputs (Spyre arrays, or host arrays moved with default layouts)."""
        self.records = []
        self._fills: dict[Value, Any] = {}
        env: dict[Value, Any] = {}
        for v, a in zip(self.graph.inputs, args, strict=True):
            env[v] = a if isinstance(jax.typeof(a), SpyreType) else sp.to_device(a)
        for c in self.graph.consts:
            if c in self.plan.sticks:
                env[c] = sp.to_device(c.const, layout_for(c.shape, c.dtype, self.plan.sticks[c]))
        moved: dict[tuple[Value, int], Any] = {}
        for node in self.graph.nodes:
            mode = self.plan.modes.get(node)
            if mode is None:
                continue  # dead
            ins = [
                self._fetch(env, moved, u, r, node) for u, r in zip(node.ins, mode.ins, strict=True)
            ]
            env[node.outs[0]] = _checked(node, self._lower(node, ins, mode))
            fill = _constant_fill(node)
            if fill is not None:
                self._fills[node.outs[0]] = fill
        return [self._output(env, o) for o in self.graph.outputs]

    def _output(self, env: dict[Value, Any], o: Value | Scalar) -> Any:
        if isinstance(o, Scalar):
            return sp.to_device(np.asarray(o.value, dtype=o.dtype))
        return env[o]

    def _fetch(
        self, env: dict[Value, Any], moved: dict[Any, Any], u: Any, r: int | None, node: Node
    ) -> Any:
        if isinstance(u, Scalar):
            return u
        x = env[u]
        if _serves(x, r):
            return x
        key = (u, r)
        if key not in moved and u in self._fills:  # a constant: built where it is needed
            moved[key] = self._fill(u, r)
        if key not in moved:
            have = stick_of(x)
            need = _stick_name(r)
            if have == SPARSE and r != SPARSE:  # a sparse value made dense again
                reason = f"compact: {node.describe()} needs it dense, stuck on {need}"
            else:
                reason = (
                    f"{node.describe()} needs it stuck on {need} (it is on {_stick_name(have)})"
                )
            moved[key] = self._restickify(x, u, r, reason)
        return moved[key]

    def _restickify(self, x: Any, u: Value, stick: int, reason: str) -> Any:
        t = jax.typeof(x)
        target = layout_for(t.shape, t.dtype, stick)
        self.records.append(
            Record(
                f"{t.dtype.name}{list(t.shape)} ({u.origin})",
                reason,
                t.layout,
                target,
                math.prod(t.layout.device_size),
                t.str_short(),
            )
        )
        return sp.restickify(x, layout=target)

    def _fill(self, u: Value, stick: int) -> Any:
        """The constant ``u`` built directly in the default layout of ``stick`` (no copy)."""
        full = jax.lax.full(u.shape, self._fills[u], u.dtype)
        return sp.to_device(full, layout_for(u.shape, u.dtype, stick))

    def _lower(self, node: Node, ins: list[Any], mode: Any) -> Any:
        rule = rule_for(node)
        try:
            return rule.lower(node, ins, mode)[0]
        except LayoutError as err:
            first = err
        retry = []
        for u, x, r in zip(node.ins, ins, mode.ins, strict=True):
            if not isinstance(u, Value) or r is None:
                pass
            elif u in self._fills:
                x = self._fill(u, r)
            elif not _in_default_layout(jax.typeof(x), r):
                why = f"{node.describe()} refused its layout ({first}); copied to a default layout"
                x = self._restickify(x, u, r, why)
            retry.append(x)
        try:
            return rule.lower(node, retry, mode)[0]
        except LayoutError as err:
            layouts = ", ".join(jax.typeof(x).str_short() for x in ins if not isinstance(x, Scalar))
            raise LayoutError(
                f"no layout works for {node.describe()} with inputs {layouts}: {err}"
            ) from first
