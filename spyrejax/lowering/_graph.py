"""A flat dataflow graph from a user's jaxpr: what the planner and the interpreter walk.

Call-like equations (nested ``jit``, ``closed_call``, ``custom_jvp_call``,
``custom_vjp_call``, remat) are inlined, and so are the expansions of ``tile`` and of
JAX's own hijax primitives (``_expansions``); identities (``copy``, ``stop_gradient``,
``checkpoint_name``) are forwarded, and computations on scalar literals alone are
folded into scalars. A float32 conversion of a bfloat16 op's result reads its float32
value, as XLA's excess precision gives it under ``jax.jit`` (the last section).

Zero-size values carry no data: they are known at trace time. A computation giving
only zero-size results becomes zero-size constants; one with zero-size operands and a
result with data is folded (a sum over an empty axis is zeros, a product contracting
an empty dim too), or reads only the operands with data (``concatenate`` drops the
empty ones, a ``dynamic_update_slice`` or scatter of nothing is its operand). So no
node ever reads or gives a zero-size value. What remains are nodes over values, each
with its source line for error messages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SpyreUnsupportedError
from .._jax import (
    UNKNOWN_SOURCE,
    ClosedJaxpr,
    Jaxpr,
    Literal,
    call_body,
    inner_jaxprs,
    summarize_source,
)
from . import _expansions, _keys
from ._distribute import Facts, distribute
from ._heads import split_heads
from ._pair_sums import unroll_pair_sums
from ._rounding import keep_excess_precision

__all__ = ["Graph", "Node", "Scalar", "Value", "build_graph", "source_line"]

# (``name`` is ``jax.ad_checkpoint.checkpoint_name``'s tag for remat policies.)
_IDENTITIES = {"copy", "copy_p", "stop_gradient", "optimization_barrier", "pvary", "name"}
# Equations whose derivative is not that of what the graph keeps of them.
_DERIVATIVE_RULES = {"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "stop_gradient"}

# Scalar folds computed with NumPy: exact (correctly rounded) ops only, so they agree
# with XLA, and no eager XLA compile per folded constant. Others fold through JAX.
_NUMPY_FOLDS = {
    "convert_element_type": lambda x, *, new_dtype, **_: np.asarray(x).astype(new_dtype),
    "neg": lambda x, **_: np.negative(x),
    "abs": lambda x, **_: np.abs(x),
    "add": lambda x, y, **_: np.add(x, y),
    "sub": lambda x, y, **_: np.subtract(x, y),
    "mul": lambda x, y, **_: np.multiply(x, y),
    "max": lambda x, y, **_: np.maximum(x, y),
    "min": lambda x, y, **_: np.minimum(x, y),
}
_FLOAT_FOLDS = {
    "div": lambda x, y, **_: np.divide(x, y),
    "sqrt": lambda x, **_: np.sqrt(x),
}

# Ops whose result is their first operand where another operand (the update) is empty.
_UPDATES_OF_NOTHING = {
    "dynamic_update_slice": 1,
    "scatter": 2,
    "scatter-add": 2,
    "scatter_add": 2,
    "scatter-sub": 2,
    "scatter_sub": 2,
    "scatter_mul": 2,
    "scatter_min": 2,
    "scatter_max": 2,
}


@dataclass(eq=False)
class Value:
    """An array value of the graph (an input, a constant, or a node's output).

    Attributes:
        shape: logical shape.
        dtype: element dtype.
        name: a readable name for reports.
        kind: ``"input"``, ``"const"`` or ``"node"``.
        origin: where it comes from (argument, constant, or primitive and source line).
        const: the host array of a constant.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str
    kind: str
    const: Any = None
    origin: str = ""

    @property
    def ndim(self) -> int:
        """Logical rank."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"{self.name}:{self.dtype.name}{list(self.shape)}"


@dataclass(eq=False)
class Scalar:
    """A scalar known at trace time (a literal, or folded from literals)."""

    value: Any
    dtype: np.dtype


@dataclass(eq=False)
class Node:
    """One primitive application.

    Attributes:
        prim: the JAX primitive's name.
        params: its parameters.
        ins: input values or scalars.
        outs: output values.
        source: the user's source line.
        primitive: the JAX primitive object.
    """

    prim: str
    params: dict[str, Any]
    ins: list[Value | Scalar]
    outs: list[Value]
    source: str
    primitive: Any = None

    def describe(self) -> str:
        """``prim`` and where the user wrote it."""
        return f"{self.prim} at {self.source}"

    @property
    def line(self) -> str:
        """Its source line, ``file:line (function)`` (see :func:`source_line`)."""
        return source_line(self.source)


def source_line(source: str) -> str:
    """A node's source as a line: ``file:line (function)``, the column left out.

    Reports and warnings name it, so the ops of one line (several columns, several
    layers calling the same code) share one row.
    """
    return re.sub(r"^(.*:\d+):\d+( |$)", r"\1\2", source)


_SOURCE = re.compile(rf"(?:{re.escape(UNKNOWN_SOURCE)}|.*?:\d+(?::\d+)?)(?: \([^)]*\))?(?= |$)")


def reason_line(text: str) -> str:
    """The source line an op's source names: its own, or a move's reason's.

    A move the plan makes for a node reads ``"prim at <source> needs it ..."``
    (:meth:`Node.describe`): its line is the node's.
    """
    source = text.split(" at ", 1)[-1]
    found = _SOURCE.match(source)
    return source_line(found.group(0) if found else source)


@dataclass(eq=False)
class Graph:
    """A flat graph: inputs, constants, nodes in order, outputs.

    ``derivative_rules`` lists where the function had its own derivative rules that the
    graph does not keep (``custom_jvp``/``custom_vjp`` bodies are inlined, and
    ``stop_gradient`` forwarded): differentiating the graph would go around them.
    """

    inputs: list[Value]
    consts: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value | Scalar] = field(default_factory=list)
    derivative_rules: list[str] = field(default_factory=list)

    def consumers(self) -> dict[Value, list[Node]]:
        """Nodes that read each value."""
        out: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for v in node.ins:
                if isinstance(v, Value):
                    out.setdefault(v, []).append(node)
        return out


class _Builder:
    def __init__(self) -> None:
        self.count = 0
        self.graph = Graph(inputs=[])

    def value(self, aval: Any, kind: str, **kw: Any) -> Value:
        self.count += 1
        prefix = {"input": "in", "const": "const", "node": "v"}[kind]
        return Value(tuple(aval.shape), np.dtype(aval.dtype), f"{prefix}{self.count}", kind, **kw)

    def temp(self, shape: tuple[int, ...], dtype: np.dtype, origin: str) -> Value:
        """A value a rewrite makes between the nodes of one equation."""
        return self.value(jax.ShapeDtypeStruct(shape, dtype), "node", origin=origin)

    def const(self, c: Any) -> Value | Scalar:
        arr = np.asarray(jax.random.key_data(c) if _keys.is_key(c) else c)  # keys: their data
        if arr.ndim == 0:
            return Scalar(arr.item(), arr.dtype)
        v = self.value(arr, "const", const=arr, origin="a constant of the function")
        self.graph.consts.append(v)
        return v

    def inline(
        self, jaxpr: Jaxpr, env: dict[Any, Any], caller: str = "", *, internal: bool = False
    ) -> None:
        """Append ``jaxpr``'s nodes; ``caller`` is the user's line of the enclosing call.

        With ``internal``, the jaxpr is spyrejax's rewrite of the caller's equation, and
        every node takes the caller's line.
        """
        for eqn in jaxpr.eqns:
            ins = [_read(env, a) for a in eqn.invars]
            name = eqn.primitive.name
            # Equations inside JAX's own functions have no user frame: use the caller's.
            source = (None if internal else summarize_source(eqn.source_info)) or caller
            source = source or UNKNOWN_SOURCE
            if name in _DERIVATIVE_RULES and not all(isinstance(x, Scalar) for x in ins):
                self.graph.derivative_rules.append(f"{name} at {source}")
            self._equation(eqn, ins, env, source)

    def _equation(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """Add one equation: a call's body or an expansion inlined, or by its shapes."""
        name = eqn.primitive.name
        if call_body(eqn) is not None:
            self._call(eqn, ins, env, source)
        elif name == "shard_map":  # planned per card as one node (zero-size or not)
            self._node(eqn, ins, env, source)
        elif name in _IDENTITIES:
            for out, x in zip(eqn.outvars, ins, strict=True):
                env[out] = x
        elif _expansions.positional_axes(eqn) is not None:
            self._positional(eqn, ins, env, source)
        elif _keys.needs_expansion(eqn):
            self._keys(eqn, ins, env, source)
        elif _expansions.needs_expansion(eqn):
            body = _expansions.expand(eqn)
            self._inline_body(body, eqn, ins, env, source, internal=True)
        else:
            self._shaped(eqn, ins, env, source)

    def _shaped(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """Add a split, unstack or stack; a zero-size equation; a fold of scalars; a node."""
        pieces = {"split": self._split, "unstack": self._unstack, "stack": self._stack}
        if eqn.primitive.name in pieces:
            pieces[eqn.primitive.name](eqn, ins, env, source)
        elif any(_empty(x) for x in ins) or any(math.prod(o.aval.shape) == 0 for o in eqn.outvars):
            self._zero_size(eqn, ins, env, source)
        elif all(isinstance(x, Scalar) for x in ins) and _folds(eqn):
            self._fold(eqn, ins, env)
        else:
            self._node(eqn, ins, env, source)

    def _call(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        self._inline_body(call_body(eqn), eqn, ins, env, source)

    def _keys(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """A PRNG primitive, or an op on key arrays: inlined as JAX's code on key data."""
        body = _keys.expand(eqn, source)
        if body is None:  # random_wrap, random_unwrap
            env[eqn.outvars[0]] = ins[0]
        else:
            self._inline_body(body, eqn, ins, env, source, internal=True)

    def _inline_body(
        self,
        body: Any,
        eqn: Any,
        ins: list[Any],
        env: dict[Any, Any],
        source: str,
        *,
        internal: bool = False,
    ) -> None:
        jaxpr, consts = (body.jaxpr, body.consts) if isinstance(body, ClosedJaxpr) else (body, [])
        sub: dict[Any, Any] = {
            v: self.const(c) for v, c in zip(jaxpr.constvars, consts, strict=True)
        }
        sub.update(zip(jaxpr.invars, ins, strict=False))
        self.inline(jaxpr, sub, source, internal=internal)
        for out, inner in zip(eqn.outvars, jaxpr.outvars, strict=True):
            env[out] = _read(sub, inner)

    def _positional(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """A collective over vmap's positional axes: a reduction of each operand over them.

        One over no axes at all (the transpose of a vmapped ``psum``) is the identity.

        What remains over named (mesh) axes, inside a ``shard_map``, is the same
        collective over those axes alone, on the reduced operand.
        """
        pos, named = _expansions.positional_axes(eqn)
        name = eqn.primitive.name
        for x, var in zip(ins, eqn.outvars, strict=True):
            if isinstance(x, Scalar) and pos:
                raise SpyreUnsupportedError(f"{name} at {source}: a positional axis of a scalar")
            y = x
            if pos:
                body = _expansions.positional_reduction(name, x.shape, x.dtype, pos)
                sub: dict[Any, Any] = {body.jaxpr.invars[0]: x}
                self.inline(body.jaxpr, sub, source, internal=True)
                y = _read(sub, body.jaxpr.outvars[0])
            if not named:
                env[var] = y
                continue
            params = {**eqn.params, "axes": named}
            out = self.value(var.aval, "node", origin=f"{name} at {source}")
            env[var] = out
            self.graph.nodes.append(Node(name, params, [y], [out], source, eqn.primitive))

    def _fold(self, eqn: Any, ins: list[Scalar], env: dict[Any, Any]) -> None:
        name = eqn.primitive.name
        out_dtype = np.dtype(eqn.outvars[0].aval.dtype)
        fold = _NUMPY_FOLDS.get(name)
        if fold is None and jnp.issubdtype(out_dtype, jnp.floating):
            fold = _FLOAT_FOLDS.get(name)
        if fold is not None and not eqn.primitive.multiple_results:
            with np.errstate(all="ignore"):
                val = fold(*[np.asarray(x.value, x.dtype) for x in ins], **eqn.params)
            outs = [np.asarray(val).astype(out_dtype)]
        else:
            args = [jnp.asarray(x.value, x.dtype) for x in ins]
            with jax.ensure_compile_time_eval():
                outs = eqn.primitive.bind(*args, **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for var, val in zip(eqn.outvars, outs, strict=True):
            env[var] = self.const(np.asarray(val).reshape(var.aval.shape))  # 0-d: a Scalar

    def _zero_size(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """An equation with zero-size operands or results: no node reads or gives one.

        Raises:
            SpyreUnsupportedError: for an op that would read a zero-size operand and
                another with data it cannot do without.
        """
        name = eqn.primitive.name
        outs = [o.aval for o in eqn.outvars]
        if any(math.prod(a.shape) == 0 for a in outs):
            if not all(math.prod(a.shape) == 0 for a in outs):
                raise SpyreUnsupportedError(
                    f"{name} at {source}: some results have zero size and some do not"
                )
            for var, a in zip(eqn.outvars, outs, strict=True):
                env[var] = self.const(np.zeros(a.shape, a.dtype))
            return
        known = [_known(x) for x in ins]
        if all(k is not None for k in known):  # a sum over an empty axis...: fold it
            with jax.ensure_compile_time_eval():
                vals = eqn.primitive.bind(*known, **eqn.params)
            vals = vals if eqn.primitive.multiple_results else [vals]
            for var, val in zip(eqn.outvars, vals, strict=True):
                env[var] = self.const(np.asarray(val))
        elif name == "concatenate":
            kept = [x for x in ins if not _empty(x)]
            if len(kept) == 1:
                env[eqn.outvars[0]] = kept[0]
            else:
                self._node(eqn, kept, env, source)
        elif name in _UPDATES_OF_NOTHING and _empty(ins[_UPDATES_OF_NOTHING[name]]):
            env[eqn.outvars[0]] = ins[0]
        elif name == "dot_general":  # a result with data from an empty operand: k is 0
            (a,) = outs
            env[eqn.outvars[0]] = self.const(np.zeros(a.shape, a.dtype))
        else:
            raise SpyreUnsupportedError(
                f"{name} at {source} reads a zero-size operand and gives a result with data"
            )

    def _split(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """A split becomes one slice node per piece (nodes have one output)."""
        (x,) = ins
        axis, start = eqn.params["axis"], 0
        for var, size in zip(eqn.outvars, eqn.params["sizes"], strict=True):
            if math.prod(var.aval.shape) == 0:  # an empty piece: no data, no node
                env[var] = self.const(np.zeros(var.aval.shape, var.aval.dtype))
                start += size
                continue
            lo = [0] * len(x.shape)
            hi = list(x.shape)
            lo[axis], hi[axis] = start, start + size
            start += size
            params = {"start_indices": tuple(lo), "limit_indices": tuple(hi), "strides": None}
            v = self.value(var.aval, "node", origin=f"split at {source}")
            env[var] = v
            self.graph.nodes.append(Node("slice", params, [x], [v], source))

    def _unstack(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """An unstack becomes a slice and a squeeze per piece."""
        (x,) = ins
        axis = eqn.params["axis"]
        for k, var in enumerate(eqn.outvars):
            lo, hi = [0] * len(x.shape), list(x.shape)
            lo[axis], hi[axis] = k, k + 1
            params = {"start_indices": tuple(lo), "limit_indices": tuple(hi), "strides": None}
            shape = tuple(b - a for a, b in zip(lo, hi, strict=True))
            piece = self.temp(shape, x.dtype, f"unstack at {source}")
            self.graph.nodes.append(Node("slice", params, [x], [piece], source))
            v = self.value(var.aval, "node", origin=f"unstack at {source}")
            env[var] = v
            self.graph.nodes.append(Node("squeeze", {"dimensions": (axis,)}, [piece], [v], source))

    def _stack(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """A stack becomes an expand_dims per piece and a concatenate."""
        axis = eqn.params["axis"]
        (var,) = eqn.outvars
        pieces = []
        for x in ins:
            if isinstance(x, Scalar):
                x = self.const(np.asarray(x.value, x.dtype)[None])
                pieces.append(x)
                continue
            shape = (*x.shape[:axis], 1, *x.shape[axis:])
            piece = self.temp(shape, x.dtype, f"stack at {source}")
            self.graph.nodes.append(
                Node("expand_dims", {"dimensions": (axis,)}, [x], [piece], source)
            )
            pieces.append(piece)
        v = self.value(var.aval, "node", origin=f"stack at {source}")
        env[var] = v
        self.graph.nodes.append(Node("concatenate", {"dimension": axis}, pieces, [v], source))

    def _node(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        outs = []
        for var in eqn.outvars:
            v = self.value(var.aval, "node", origin=f"{eqn.primitive.name} at {source}")
            env[var] = v
            outs.append(v)
        self.graph.derivative_rules.extend(f"{r} at {source}" for r in _inner_rules(eqn))
        node = Node(eqn.primitive.name, dict(eqn.params), ins, outs, source, eqn.primitive)
        self.graph.nodes.append(node)


def _inner_rules(eqn: Any) -> list[str]:
    """Derivative rules inside the bodies a node keeps (a loop's, a cond's branches)."""
    found = []
    todo = inner_jaxprs(eqn)
    while todo:
        j = todo.pop()
        for eqn in j.eqns:
            if eqn.primitive.name in _DERIVATIVE_RULES:
                found.append(eqn.primitive.name)
            todo.extend(inner_jaxprs(eqn))
    return found


def _folds(eqn: Any) -> bool:
    """Whether an equation of scalars alone is folded into constants.

    Scalar results are; so are results of one element from operands (``linspace``
    reshapes its end point to ``[1]``), which no rule takes as scalars.
    """
    shapes = [o.aval.shape for o in eqn.outvars]
    if all(s == () for s in shapes):
        return True
    return bool(eqn.invars) and all(math.prod(s) == 1 for s in shapes)


def _empty(x: Value | Scalar) -> bool:
    return isinstance(x, Value) and math.prod(x.shape) == 0


def _known(x: Value | Scalar) -> Any:
    """The host value of a scalar, a constant or a zero-size value; None for others."""
    if isinstance(x, Scalar):
        return np.asarray(x.value, x.dtype)
    if x.kind == "const":
        return x.const
    return np.zeros(x.shape, x.dtype) if _empty(x) else None


def _read(env: dict[Any, Any], atom: Any) -> Any:
    if isinstance(atom, Literal):
        arr = np.asarray(atom.val)
        return Scalar(arr.item(), np.dtype(atom.aval.dtype))
    return env[atom]


def build_graph(
    closed: ClosedJaxpr, bound: Sequence[Scalar | None] = (), *, heads: bool = True
) -> Graph:
    """Flatten a closed jaxpr into a :class:`Graph`.

    ``bound`` gives inputs known at trace time (a loop body's scalar operands): they
    are folded in as scalars and are no inputs of the graph. ``heads``: projections
    split into heads rewritten as products over heads (``lowering._heads``); without,
    the products as written (``SpyreJit.place`` reads a weight's products so: the
    merged product is the one that may read the weight in place).
    """
    b = _Builder()
    env: dict[Any, Any] = {}
    for i, var in enumerate(closed.jaxpr.invars):
        if i < len(bound) and bound[i] is not None:
            env[var] = bound[i]
            continue
        v = b.value(var.aval, "input", origin=f"argument leaf {i}")
        env[var] = v
        b.graph.inputs.append(v)
    for var, c in zip(closed.jaxpr.constvars, closed.consts, strict=True):
        env[var] = b.const(c)
    b.inline(closed.jaxpr, env)
    b.graph.outputs = [_read(env, a) for a in closed.jaxpr.outvars]
    facts = Facts.of(b.graph)  # one walk for every rewrite until one changes the graph
    graph = split_heads(b.graph, facts) if heads else b.graph
    return keep_excess_precision(distribute(unroll_pair_sums(graph, facts), facts))
