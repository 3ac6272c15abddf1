"""The device model applied to a ``spyrejax.jit`` program, and the ``with_division`` hint.

:func:`device_program` lists the Spyre primitives a planned program runs (each node's
lowering traced on its planned types, so every op keeps its source line), turns them
into :class:`spyrejax.device.OpDesc` values and plans them with
:func:`spyrejax.device.plan_program`: work division, LX residency and cost.

``with_division(x, **splits)`` is the identity under plain JAX and a hint under
``spyrejax.jit``: the op producing ``x`` is divided with those splits (validated against
its iteration space when the program is planned).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import jax

from .. import primitives as sp
from .._errors import DeviceError
from .._jax import Primitive, Var, ad, batching, mlir
from ..device import (
    DeviceProgram,
    Machine,
    OpDesc,
    TensorSpec,
    default_machine,
    elementwise_space,
    matmul_space,
    plan_program,
    reduce_space,
)
from ..device._division import _MATMUL_NAMES, _OTHER_NAMES
from ..primitives._array import SpyreType
from ..primitives._astype import Astype
from ..primitives._elementwise import Elementwise
from ..primitives._matmul import Matmul
from ..primitives._reduce import Reduce
from ._graph import Graph, Node, Scalar, Value
from ._planner import Plan, _signature, node_key
from ._rules import Mode, Rule, _carried_modes, _register, rule_for

__all__ = [
    "ProgramOps",
    "device_program",
    "hinted_op",
    "node_hints",
    "program_ops",
    "with_division",
    "with_division_p",
]

_DIM_NAMES = frozenset({*_OTHER_NAMES, *_MATMUL_NAMES, "out"})

with_division_p = Primitive("spyre_with_division")
with_division_p.def_impl(lambda x, **_: x)
with_division_p.def_abstract_eval(lambda x, **_: x)
mlir.register_lowering(with_division_p, lambda ctx, x, **_: [x])
ad.deflinear2(with_division_p, lambda ct, x, **params: [with_division_p.bind(ct, **params)])
batching.primitive_batchers[with_division_p] = lambda args, dims, **params: (
    with_division_p.bind(args[0], **params),
    dims[0],
)


def with_division(x: Any, **splits: int) -> Any:
    """Fix how the op producing ``x`` is divided over the cores (a hint).

    Args:
        x: an array (traced or not).
        **splits: slices per SuperDSC dim name of that op's iteration space (``mb``,
            ``out``, ``in``, ``x``, ...); the dims not named are distributed as usual.

    Returns:
        ``x`` itself. Under :func:`spyrejax.jit` the device model divides the op that
        produces ``x`` with these splits (``spyrejax.explain`` and ``export`` show it).

    Raises:
        DeviceError: for an unknown dim name or a split that is not a positive int; when
            the program is planned, for a split that does not divide the dim's
            stick-adjusted extent, a product over the cores, or more than one reduction
            dim split.
    """
    if not splits:
        raise DeviceError("with_division needs at least one split, e.g. with_division(x, mb=4)")
    for name, s in splits.items():
        if name not in _DIM_NAMES:
            raise DeviceError(
                f"with_division: unknown dim {name!r}; SuperDSC dims are {sorted(_DIM_NAMES)}"
            )
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise DeviceError(f"with_division: {name}={s!r} must be a positive int")
    return with_division_p.bind(x, splits=tuple(sorted(splits.items())))


class _WithDivision(Rule):
    def modes(self, node: Node) -> list[Mode]:
        return _carried_modes(node, lambda t: t)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [args[0]]


_register(_WithDivision(), with_division_p.name)


# --- a program's ops ------------------------------------------------------------------


class _Names:
    """Names of (value, type) pairs: a value moved into another type is another buffer."""

    def __init__(self) -> None:
        self.names: dict[tuple[Value, SpyreType], str] = {}
        self.count: dict[Value, int] = {}

    def __call__(self, v: Value, t: SpyreType) -> str:
        key = (v, t)
        if key not in self.names:
            k = self.count.get(v, 0)
            self.count[v] = k + 1
            self.names[key] = v.name if k == 0 else f"{v.name}~{k}"
        return self.names[key]


def _spec(t: SpyreType, name: str) -> TensorSpec:
    return TensorSpec(t.shape, t.layout, t.dims, name, t.base_shape, t.strides)


def _space(prim: Any, ins: list[TensorSpec], out: TensorSpec) -> Any:
    if isinstance(prim, Matmul):
        return (
            "compute",
            "matmul" if len(out.shape) == 2 else "batchmatmul",
            matmul_space(*ins, out),
        )
    if isinstance(prim, Elementwise):
        return "compute", prim.op.name, elementwise_space(prim.op.name, out, ins)
    if isinstance(prim, Astype):
        return "compute", "astype", elementwise_space("astype", out, ins)
    if isinstance(prim, Reduce):
        space = reduce_space(prim.op.name, ins[0], out, prim.axes, prim.keepdims)
        return "compute", prim.op.name, space
    role = getattr(prim, "role", "compute")
    kind = role if role in ("view", "copy", "restickify") else "copy"
    return kind, type(prim).__name__.lower(), None


def _node_descs(
    node: Node,
    option: Any,
    names: _Names,
    hint: dict[str, int] | None,
    lowerings: list[tuple[Any, dict[Any, str]]],
    traced: dict[Any, Any],
) -> list[OpDesc]:
    """The ops a node's planned option runs, its lowering traced on the planned types.

    A ``shard_map``'s body is one card's program: its ops are listed once (the cards run
    them at once), on the per-card blocks of the buffers; its collectives are not device
    ops (``explain`` times them at the card-to-card bandwidth). The traced lowering and
    the names of its variables are appended to ``lowerings``.

    ``traced`` keeps the traced lowerings by the planner's evaluation signature and the
    source line: repeated layers are traced once (tracing is most of the cost of a big
    program's device model).
    """
    spyre = [(u, t) for u, t in zip(node.ins, option.ins, strict=True) if t is not None]
    key = _signature(node_key(node), option.mode, option.ins)
    key = None if key is None else (key, node.source)
    closed = traced.get(key) if key is not None else None
    if closed is None:
        closed = _trace(node, option, [t for _, t in spyre])
        if key is not None:
            traced[key] = closed
    env = {var: names(u, t) for var, (u, t) in zip(closed.jaxpr.invars, spyre, strict=True)}
    finals: dict[Any, str] = {}
    for var, v, t in zip(closed.jaxpr.outvars, node.outs, option.outs, strict=True):
        if not isinstance(var, Var) or var in finals:
            continue
        if var in env:  # a result that only forwards an input
            names.names[v, t] = env[var]
        else:
            finals[var] = names(v, t)
    if not finals:
        return []
    descs: list[OpDesc] = []
    _walk(closed.jaxpr, env, finals, _Op(node, next(iter(finals.values())), hint), descs)
    lowerings.append((closed.jaxpr, {**env, **finals}))
    return descs


def _trace(node: Node, option: Any, types: list[SpyreType]) -> Any:
    """The closed jaxpr of a node's lowering on its planned Spyre input types."""

    def run(*xs: Any) -> Any:
        it = iter(xs)
        args = [u if isinstance(u, Scalar) else next(it) for u in node.ins]
        return rule_for(node, fallback=True).lower(node, args, option.mode)

    return jax.make_jaxpr(run)(*(sp.abstract(t) for t in types))


class _Op:
    """The node whose lowering is walked: its line, its first result's name, its hint."""

    def __init__(self, node: Node, first: str, hint: dict[str, int] | None) -> None:
        self.source = node.source
        self.first = first
        self.hint = hint

    @classmethod
    def unhinted(cls, op: _Op) -> _Op:
        """The same node's walk without its hint (for loop bodies)."""
        out = cls.__new__(cls)
        out.source, out.first, out.hint = op.source, op.first, None
        return out


def _walk(
    jaxpr: Any, env: dict[Any, str], finals: dict[Any, str], op: _Op, descs: list[OpDesc]
) -> None:
    """Append the ops of ``jaxpr`` to ``descs``.

    ``shard_map`` bodies are one card's ops. A ``scan`` body's ops are listed once, each
    with the trip count as its ``repeat`` (nested scans multiply): the body reads the
    loop's operands by their outer names and writes the loop's results under theirs.
    ``while`` and ``cond`` bodies are not listed (``explain`` names them).
    """
    for eqn in jaxpr.eqns:
        prim = eqn.params.get("_prim")
        if prim is None and eqn.primitive.name == "scan":
            _walk_scan(eqn, env, finals, op, descs)
            continue
        if prim is None and eqn.primitive.name == "shard_map":
            body = eqn.params["jaxpr"]
            inner = {b: env[o] for b, o in zip(body.invars, eqn.invars, strict=True) if o in env}
            outs = zip(body.outvars, eqn.outvars, strict=True)
            _walk(body, inner, {b: finals[o] for b, o in outs if o in finals}, op, descs)
            env.update(inner)  # the body's variables are distinct: their names join env
            continue
        outs = [v for v in eqn.outvars if isinstance(v.aval, SpyreType)]
        if prim is None or len(outs) != 1:
            continue
        (out,) = outs
        env[out] = finals.get(out) or f"{op.first}.{len(descs)}"
        if getattr(prim, "role", "") == "collective":
            continue  # between cards: timed at the card link, not a device op
        ins = [(env[v], v.aval) for v in eqn.invars if isinstance(v, Var) and v in env]
        in_specs = [_spec(t, n) for n, t in ins]
        out_spec = _spec(out.aval, env[out])
        try:
            kind, opfunc, space = _space(prim, in_specs, out_spec)
        except DeviceError:
            kind, opfunc, space = "copy", type(prim).__name__.lower(), None
        mine = op.hint if env[out] == op.first and kind == "compute" else None
        descs.append(
            OpDesc(
                opfunc,
                kind,
                op.source,
                tuple((s.name, s) for s in in_specs),
                (out_spec.name, out_spec),
                space,
                mine,
            )
        )


def _walk_scan(
    eqn: Any, env: dict[Any, str], finals: dict[Any, str], op: _Op, descs: list[OpDesc]
) -> None:
    """The ops of a ``scan`` body, each run ``length`` times (see :func:`_walk`).

    Hints do not reach body ops (``emulate="cores"`` does not apply them there either).
    """
    body = eqn.params["jaxpr"].jaxpr
    inner = {b: env[o] for b, o in zip(body.invars, eqn.invars, strict=True) if o in env}
    carry = _num_carry(eqn)
    named = {}
    for b, o in zip(body.outvars[:carry], eqn.outvars[:carry], strict=True):
        if isinstance(b, Var) and b not in inner and b not in named and o in finals:
            named[b] = finals[o]
    start = len(descs)
    _walk(body, inner, named, _Op.unhinted(op), descs)
    n = eqn.params["length"]
    descs[start:] = [replace(d, repeat=d.repeat * n) for d in descs[start:]]
    env.update(inner)  # the body's variables are distinct: their names join env
    for b, o in zip(body.outvars[:carry], eqn.outvars[:carry], strict=True):
        if isinstance(b, Var) and b in inner:
            env[o] = inner[b]


def _num_carry(eqn: Any) -> int:
    """A scan's loop-carried results: they come first among its results."""
    if "num_carry" in eqn.params:
        return eqn.params["num_carry"]
    carry, _ = eqn.params["ft_out"].update(list(eqn.outvars)).unpack()  # (carry, ys)
    return len(list(carry))


def _move_descs(plan: Plan, v: Value, names: _Names) -> list[OpDesc]:
    out = []
    for m in plan.moves.get(v, []):
        src, dst = names(v, m.source), names(v, m.target)
        out.append(
            OpDesc(
                "restickify",
                "restickify",
                m.reason,
                ((src, _spec(m.source, src)),),
                (dst, _spec(m.target, dst)),
            )
        )
    return out


def node_hints(graph: Graph) -> dict[Node, dict[str, int]]:
    """The ``with_division`` splits per node whose first result the user hinted."""
    hinted = {
        node.ins[0]: dict(node.params["splits"])
        for node in graph.nodes
        if node.prim == with_division_p.name and isinstance(node.ins[0], Value)
    }
    return {
        node: hinted[node.outs[0]] for node in graph.nodes if node.outs and node.outs[0] in hinted
    }


def hinted_op(node: Node, option: Any, hint: dict[str, int]) -> tuple[int, OpDesc] | None:
    """Which compute op of a node's planned option gets the node's hint, as listed here.

    Returns:
        Its position among the node's compute ops in binding order (as
        :func:`_node_descs` lists them, the walk that owns the rule) and its
        description; None if no op gets it (the hinted result comes from no compute op).
    """
    descs = _node_descs(node, option, _Names(), hint, [], {})
    compute = [d for d in descs if d.kind == "compute"]
    return next(((k, d) for k, d in enumerate(compute) if d.hint is not None), None)


@dataclass(frozen=True)
class ProgramOps:
    """A planned graph's device ops and the names of its values.

    Attributes:
        descs: the ops in program order.
        ddr: the names that live in DDR whatever the LX plan (graph inputs, outputs).
        names: the buffer name of each (graph value, planned type) pair.
        lowerings: per node option that runs ops, its lowering traced on its planned
            types and the names of that jaxpr's variables (the values inside one
            node's lowering are named ``<first result>.<k>``).
    """

    descs: list[OpDesc]
    ddr: list[str]
    names: dict[tuple[Value, SpyreType], str]
    lowerings: list[tuple[Any, dict[Any, str]]]


def program_ops(graph: Graph, plan: Plan) -> ProgramOps:
    """The ops of a planned graph in program order, and the names of its values."""
    names = _Names()
    hints = node_hints(graph)
    traced: dict[Any, Any] = {}
    descs: list[OpDesc] = []
    lowerings: list[tuple[Any, dict[Any, str]]] = []
    ddr = []
    for v in graph.inputs:
        for t in plan.sources.get(v, []):
            ddr.append(names(v, t))
        descs.extend(_move_descs(plan, v, names))
    for node in graph.nodes:
        if not node.outs:  # run on the host for its effects only (jax.debug.print)
            continue
        for option in plan.runs.get(node, []):
            descs.extend(_node_descs(node, option, names, hints.get(node), lowerings, traced))
        for v in node.outs:
            descs.extend(_move_descs(plan, v, names))
    for o, t in zip(graph.outputs, plan.outputs, strict=True):
        if isinstance(o, Value) and t is not None:
            ddr.append(names(o, t))
    return ProgramOps(descs, ddr, names.names, lowerings)


def device_program(
    graph: Graph, plan: Plan, machine: Machine | None = None, strategy: str = "greedy"
) -> DeviceProgram:
    """A planned graph on a machine: every op divided, placed and costed."""
    ops = program_ops(graph, plan)
    return plan_program(ops.descs, default_machine(machine), ops.ddr, strategy)
