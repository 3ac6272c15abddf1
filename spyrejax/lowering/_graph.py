"""A flat dataflow graph from a user's jaxpr: what the planner and the interpreter walk.

Call-like equations (nested ``jit``, ``closed_call``, ``custom_jvp_call``,
``custom_vjp_call``, remat) are inlined, identities (``copy``, ``stop_gradient``) are
forwarded, and computations on scalar literals alone are folded into scalars. What
remains are nodes over values, each with its source line for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._jax import ClosedJaxpr, Jaxpr, Literal, summarize_source

__all__ = ["Graph", "Node", "Scalar", "Value", "build_graph"]

# Call-like primitives and the parameter holding their body.
_CALLS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "eval_jaxpr": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}
# Equations with several results that become one node per result (param ``out_index``).
_PER_OUTPUT = {"shard_map"}
_IDENTITIES = {"copy", "copy_p", "stop_gradient", "optimization_barrier", "pvary"}
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

    def const(self, c: Any) -> Value | Scalar:
        arr = np.asarray(c)
        if arr.ndim == 0:
            return Scalar(arr.item(), arr.dtype)
        v = self.value(arr, "const", const=arr, origin="a constant of the function")
        self.graph.consts.append(v)
        return v

    def inline(self, jaxpr: Jaxpr, env: dict[Any, Any], caller: str = "") -> None:
        """Append ``jaxpr``'s nodes; ``caller`` is the user's line of the enclosing call."""
        for eqn in jaxpr.eqns:
            ins = [_read(env, a) for a in eqn.invars]
            name = eqn.primitive.name
            # Equations inside JAX's own functions have no user frame: use the caller's.
            source = summarize_source(eqn.source_info) or caller or "<unknown source>"
            if name in _DERIVATIVE_RULES and not all(isinstance(x, Scalar) for x in ins):
                self.graph.derivative_rules.append(f"{name} at {source}")
            if name in _CALLS:
                self._call(eqn, ins, env, source)
            elif name == "split":
                self._split(eqn, ins, env, source)
            elif name in _PER_OUTPUT:
                self._per_output(eqn, ins, env, source)
            elif name in _IDENTITIES:
                for out, x in zip(eqn.outvars, ins, strict=True):
                    env[out] = x
            elif all(isinstance(x, Scalar) for x in ins) and all(
                o.aval.shape == () for o in eqn.outvars
            ):
                self._fold(eqn, ins, env)
            else:
                self._node(eqn, ins, env, source)

    def _call(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        body = eqn.params[_CALLS[eqn.primitive.name]]
        jaxpr, consts = (body.jaxpr, body.consts) if isinstance(body, ClosedJaxpr) else (body, [])
        sub: dict[Any, Any] = {
            v: self.const(c) for v, c in zip(jaxpr.constvars, consts, strict=True)
        }
        sub.update(zip(jaxpr.invars, ins, strict=False))
        self.inline(jaxpr, sub, source)
        for out, inner in zip(eqn.outvars, jaxpr.outvars, strict=True):
            env[out] = _read(sub, inner)

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
            arr = np.asarray(val)
            env[var] = Scalar(arr.item(), arr.dtype)

    def _split(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """A split becomes one slice node per piece (nodes have one output)."""
        (x,) = ins
        axis, start = eqn.params["axis"], 0
        for var, size in zip(eqn.outvars, eqn.params["sizes"], strict=True):
            lo = [0] * len(x.shape)
            hi = list(x.shape)
            lo[axis], hi[axis] = start, start + size
            start += size
            params = {"start_indices": tuple(lo), "limit_indices": tuple(hi), "strides": None}
            v = self.value(var.aval, "node", origin=f"split at {source}")
            env[var] = v
            self.graph.nodes.append(Node("slice", params, [x], [v], source))

    def _per_output(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        """One node per result, each computing what its result needs (nodes have one output)."""
        for i, var in enumerate(eqn.outvars):
            v = self.value(var.aval, "node", origin=f"{eqn.primitive.name} at {source}")
            env[var] = v
            params = {**eqn.params, "out_index": i}
            self.graph.nodes.append(
                Node(eqn.primitive.name, params, ins, [v], source, eqn.primitive)
            )

    def _node(self, eqn: Any, ins: list[Any], env: dict[Any, Any], source: str) -> None:
        outs = []
        for var in eqn.outvars:
            v = self.value(var.aval, "node", origin=f"{eqn.primitive.name} at {source}")
            env[var] = v
            outs.append(v)
        node = Node(eqn.primitive.name, dict(eqn.params), ins, outs, source, eqn.primitive)
        self.graph.nodes.append(node)


def _read(env: dict[Any, Any], atom: Any) -> Any:
    if isinstance(atom, Literal):
        arr = np.asarray(atom.val)
        return Scalar(arr.item(), np.dtype(atom.aval.dtype))
    return env[atom]


def build_graph(closed: ClosedJaxpr) -> Graph:
    """Flatten a closed jaxpr into a :class:`Graph`."""
    b = _Builder()
    env: dict[Any, Any] = {}
    for i, var in enumerate(closed.jaxpr.invars):
        v = b.value(var.aval, "input", origin=f"argument leaf {i}")
        env[var] = v
        b.graph.inputs.append(v)
    for var, c in zip(closed.jaxpr.constvars, closed.consts, strict=True):
        env[var] = b.const(c)
    b.inline(closed.jaxpr, env)
    b.graph.outputs = [_read(env, a) for a in closed.jaxpr.outvars]
    return b.graph
