"""The device model applied to a ``spyrejax.jit`` program, and the ``with_division`` hint.

:func:`device_program` lists the Spyre primitives a planned program runs (each node's
lowering traced on its planned types, so every op keeps its source line), turns them
into :class:`spyrejax.device.OpDesc` values and plans them with
:func:`spyrejax.device.plan_program`: work division, LX residency and cost. The ops of
loop bodies and ``cond`` branches are listed too, each with its
:class:`spyrejax.device.Region`.

``with_division(x, **splits)`` is the identity under plain JAX and a hint under
``spyrejax.jit``: the op producing ``x`` is divided with those splits (validated against
its iteration space when the program is planned). This module owns which op a hint
goes to: the walk (:func:`hinted_op`) and the node scopes (:func:`node_scope`,
:func:`take_hint`) through which the per-core emulation and the walk's own trace give
the hints of loop bodies' and branches' nodes to their ops.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import jax

from .. import primitives as sp
from .._errors import DeviceError, SpyreInternalError
from .._jax import Primitive, Var, ad, batching, mlir
from ..device import (
    DeviceProgram,
    Machine,
    OpDesc,
    OpSpace,
    Region,
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
from ..primitives._base import Image, Wrap
from ..primitives._elementwise import Elementwise
from ..primitives._matmul import Matmul
from ..primitives._reduce import Reduce
from ._graph import Graph, Node, Scalar, Value
from ._planner import Plan, _signature, node_key
from ._rules import Mode, Rule, _carried_modes, _register, rule_for

__all__ = [
    "Hint",
    "ProgramOps",
    "current_line",
    "device_program",
    "divided_space",
    "hinted_op",
    "inner_jaxprs",
    "node_hints",
    "node_scope",
    "program_ops",
    "take_hint",
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


def with_division(x: Any, /, **splits: int) -> Any:
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
    """Names of (value, type) pairs: a value moved into another type is another buffer.

    It also numbers the program's loops and ``cond``s (``Region.index``).
    """

    def __init__(self) -> None:
        self.names: dict[tuple[Value, SpyreType], str] = {}
        self.count: dict[Value, int] = {}
        self.regions = itertools.count()

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


_DIVIDED = (Elementwise, Astype, Reduce, Matmul)


def divided_space(prim: Any) -> tuple[OpSpace, list[TensorSpec]] | None:
    """The iteration space of a primitive the device model divides, and its operands' specs.

    None for a primitive it does not divide (only compute ops on Spyre operands are).
    """
    if not isinstance(prim, _DIVIDED) or not isinstance(prim.out_aval, SpyreType):
        return None
    if not all(isinstance(t, SpyreType) for t in prim.in_avals):
        return None
    specs = [_spec(t, f"in{k}") for k, t in enumerate(prim.in_avals)]
    specs.append(_spec(prim.out_aval, "out"))
    try:
        kind, _, space = _space(prim, specs[:-1], specs[-1])
    except DeviceError:
        return None
    return (space, specs) if kind == "compute" else None


# --- which op a node's hint goes to ---------------------------------------------------------


@dataclass
class _Scope:
    """A node being lowered: its line, its hinted op, the divided ops bound so far inside."""

    line: str
    source: str
    hinted: tuple[int, OpDesc] | None
    seen: int = 0
    used: bool = False


_SCOPES: ContextVar[tuple[_Scope, ...]] = ContextVar("spyrejax_node_scopes", default=())


@contextlib.contextmanager
def node_scope(
    line: str, hinted: tuple[int, OpDesc] | None = None, source: str | None = None
) -> Iterator[None]:
    """The divided ops bound inside belong to the node at ``line`` (scopes nest).

    The interpreter opens one around each node it lowers while an executor runs the
    primitives (``emulate="cores"``, and the device model's own trace): a loop body's
    nodes open theirs inside the loop's. Every scope counts the divided ops bound
    inside it, its inner scopes' too, in binding order (the order :func:`_walk` lists
    them).

    Args:
        line: the node's source line (messages).
        hinted: ``(position, op)`` from :func:`hinted_op`: the node's divided op at
            that position gets ``op.hint``.
        source: the node's source (``Node.source``; default ``line``).

    Raises:
        SpyreInternalError: if the hinted op was not bound inside (the lowering bound its
            ops otherwise than the device model's walk lists them).
    """
    scope = _Scope(line, source or line, hinted)
    token = _SCOPES.set((*_SCOPES.get(), scope))
    try:
        yield
    finally:
        _SCOPES.reset(token)
    if hinted is not None and not scope.used:
        raise SpyreInternalError(
            f"internal error: the with_division hint at {line} did not reach its op "
            f"({hinted[1].opfunc}); please report it"
        )


def current_line() -> str:
    """The source line of the innermost node being lowered ("" outside any)."""
    scopes = _SCOPES.get()
    return scopes[-1].line if scopes else ""


def _shape(s: TensorSpec) -> tuple[Any, ...]:
    return (s.shape, s.layout, s.dims)


def take_hint(prim: Any, specs: list[TensorSpec]) -> dict[str, int] | None:
    """Count a divided op in every open scope; its hint if it is a scope's hinted one.

    Raises:
        SpyreInternalError: if the op at a hinted position is not the op the device
            model gave the hint to.
    """
    hint = None
    for scope in _SCOPES.get():
        k, scope.seen = scope.seen, scope.seen + 1
        if scope.hinted is None or k != scope.hinted[0]:
            continue
        desc = scope.hinted[1]
        listed = [_shape(t) for _, t in (*desc.inputs, desc.output)]
        if listed != [_shape(t) for t in specs]:
            raise SpyreInternalError(
                f"internal error: the with_division hint at {scope.line} is for "
                f"{desc.opfunc}, but the op at its place is {type(prim).__name__}; "
                "please report it"
            )
        scope.used = True
        hint = dict(desc.hint or {})
    return hint


@dataclass(frozen=True)
class _Bound:
    """A divided primitive bound inside a body node's scope: its hint, the scopes' sources."""

    prim: Any
    hint: dict[str, int] | None
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Hint:
    """A node's ``with_division`` hint: which of its results, and the splits."""

    out: int
    splits: dict[str, int]


# --- a program's ops ------------------------------------------------------------------


def _node_descs(
    node: Node,
    option: Any,
    names: _Names,
    hint: Hint | None,
    lowerings: list[tuple[Any, dict[Any, str]]],
    traced: dict[Any, Any],
    claimed: list[int] | None = None,
) -> list[OpDesc]:
    """The ops a node's planned option runs, its lowering traced on the planned types.

    A ``shard_map``'s body is one card's program: its ops are listed once (the cards run
    them at once), on the per-card blocks of the buffers; its collectives are not device
    ops (``explain`` times them at the card-to-card bandwidth). Loop bodies and
    ``cond`` branches are listed too (see :func:`_walk`). The traced lowering and the
    names of its variables are appended to ``lowerings``.

    ``traced`` keeps the traced lowerings by the planner's evaluation signature and the
    source line: repeated layers are traced once (tracing is most of the cost of a big
    program's device model). ``claimed``, if given, receives the position of the op
    that gets the node's own hint.
    """
    spyre = [(u, t) for u, t in zip(node.ins, option.ins, strict=True) if t is not None]
    key = _signature(node_key(node), option.mode, option.ins)
    key = None if key is None else (key, node.source)
    found = traced.get(key) if key is not None else None
    if found is None:
        found = _trace(node, option, [t for _, t in spyre])
        if key is not None:
            traced[key] = found
    closed, bound = found
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
    target = None
    if hint is not None:
        out = closed.jaxpr.outvars[hint.out]
        target = finals.get(out) if isinstance(out, Var) else None
    op = _Op(node.source, next(iter(finals.values())), target, hint, bound, names)
    op = replace(op, claimed=[] if claimed is None else claimed)
    descs: list[OpDesc] = []
    _walk(closed.jaxpr, env, finals, op, descs)
    lowerings.append((closed.jaxpr, {**env, **finals}))
    return descs


def _trace(node: Node, option: Any, types: list[SpyreType]) -> tuple[Any, dict[int, _Bound]]:
    """The closed jaxpr of a node's lowering on its planned Spyre input types.

    Also, per divided primitive bound in the scope of a body node (the nodes of its
    loops' bodies and branches, which the interpreter lowers inside), that node's hint
    for it and the scopes' sources, by ``id`` of the primitive.
    """
    bound: dict[int, _Bound] = {}

    def record(prim: Any, args: Any) -> None:
        scopes = _SCOPES.get()
        if scopes:
            found = divided_space(prim)
            hint = take_hint(prim, found[1]) if found is not None else None
            bound[id(prim)] = _Bound(prim, hint, tuple(s.source for s in scopes))
        return None

    def run(*xs: Any) -> Any:
        it = iter(xs)
        args = [u if isinstance(u, Scalar) else next(it) for u in node.ins]
        return rule_for(node, fallback=True).lower(node, args, option.mode)

    token = _SCOPES.set(())  # the node's own ops: no scope (its hint is the walk's)
    try:
        with sp.executing(record):
            closed = jax.make_jaxpr(run)(*(sp.abstract(t) for t in types))
    finally:
        _SCOPES.reset(token)
    return closed, bound


@dataclass(frozen=True)
class _Op:
    """The node whose lowering is walked, and where the walk is.

    Attributes:
        source: the node's source line.
        first: its first result's name (the ops inside are named after it).
        target: the name of its hinted result (None: no hint).
        hint: its hint.
        bound: the divided primitives its body nodes bound (from :func:`_trace`).
        names: the program's names (and loop numbers).
        region: the loop body or branch being walked.
        depth: how many bodies (loops, branches, ``shard_map``) the walk is inside.
        claimed: receives the position of the op that gets the node's own hint.
    """

    source: str
    first: str
    target: str | None
    hint: Hint | None
    bound: Mapping[int, _Bound]
    names: _Names
    region: Region | None = None
    depth: int = 0
    claimed: list[int] = field(default_factory=list)

    def enter(self, eqn: Any, kind: str, bodies: list[Any], **fields: Any) -> _Op:
        """The walk inside a body of ``eqn`` (a loop, a branch: a new region)."""
        source = self._source(eqn, bodies)
        index = fields.pop("index", None)
        if index is None:
            index = next(self.names.regions)
        region = Region(index, kind, source, parent=self.region, **fields)
        return replace(self, region=region, depth=self.depth + 1)

    def _source(self, eqn: Any, bodies: list[Any]) -> str:
        """The source of the node whose lowering bound the loop ``eqn``.

        The node's own when the walk is in no body; else that of the body node whose
        scope the loop's ops were bound in (every body the walk enters is one level of
        node scopes).
        """
        if self.depth == 0:
            return self.source
        for b in _bound_in(bodies, self.bound):
            if len(b.sources) >= self.depth:
                return b.sources[self.depth - 1]
        return self.source


def _bound_in(jaxprs: list[Any], bound: Mapping[int, _Bound]) -> Iterator[_Bound]:
    """The recorded primitives of ``jaxprs`` and of the jaxprs inside them."""
    for jaxpr in jaxprs:
        for eqn in jaxpr.eqns:
            prim = eqn.params.get("_prim")
            b = bound.get(id(prim))
            if b is not None and b.prim is prim:
                yield b
            yield from _bound_in(inner_jaxprs(eqn), bound)


def inner_jaxprs(eqn: Any) -> list[Any]:
    """The bodies of a loop, branch or ``shard_map`` equation the walk enters (else none)."""
    p = eqn.params
    name = eqn.primitive.name
    if name == "scan":
        return [p["jaxpr"].jaxpr]
    if name == "while":
        return [p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr]
    if name == "cond":
        return [b.jaxpr for b in p["branches"]]
    if name == "shard_map":
        return [p["jaxpr"]]
    return []


def _walk(
    jaxpr: Any, env: dict[Any, str], finals: dict[Any, str], op: _Op, descs: list[OpDesc]
) -> None:
    """Append the ops of ``jaxpr`` to ``descs``.

    ``shard_map`` bodies are one card's ops. The ops of a ``scan`` body are listed once,
    each with the trip count as its ``repeat`` (nested scans multiply); those of a
    ``while`` body and predicate once (the trip count is unknown at trace time); those
    of every ``cond`` branch (the program's totals count the costliest). Each body op
    has its region. A body reads the loop's operands by their outer names and writes
    the loop's results under theirs.

    A hint goes to the op that gives the hinted result of the node (:func:`_own_hint`);
    a body node's hint to the op its scope gave it when traced (:func:`take_hint`).
    """
    made = {v: e for e in jaxpr.eqns for v in e.outvars}
    for eqn in jaxpr.eqns:
        prim = eqn.params.get("_prim")
        if prim is None and eqn.primitive.name in _LOOPS:
            _LOOPS[eqn.primitive.name](eqn, env, finals, op, descs)
            continue
        if prim is None and eqn.primitive.name == "shard_map":
            body = eqn.params["jaxpr"]
            inner = {b: env[o] for b, o in zip(body.invars, eqn.invars, strict=True) if o in env}
            outs = zip(body.outvars, eqn.outvars, strict=True)
            named = {b: finals[o] for b, o in outs if o in finals}
            _walk(body, inner, named, replace(op, depth=op.depth + 1), descs)
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
        if isinstance(prim, Wrap) and _relabels(eqn.invars[0], made):
            kind = "view"
        mine, source = None, op.source
        b = op.bound.get(id(prim))
        if b is not None and b.prim is prim:  # bound by a body node: its hint, its line
            mine, source = b.hint, b.sources[-1]
        if op.hint is not None and env[out] == op.target and kind == "compute":
            _own_hint(op, mine, descs)
            mine = dict(op.hint.splits)
        descs.append(
            OpDesc(
                opfunc,
                kind,
                source,
                tuple((s.name, s) for s in in_specs),
                (out_spec.name, out_spec),
                space,
                mine if kind == "compute" else None,
                region=op.region,
            )
        )


def _relabels(image: Any, made: Mapping[Any, Any]) -> bool:
    """Whether a ``Wrap`` of ``image`` moves no data: the image is an array's own.

    So are a ``scan`` body's slice of a stacked operand (the body's ops read it in
    place), a loop's stacked results (the body's ops wrote them) and a carry that
    forgets its zero padding (``image`` then ``wrap``). An image computed by other
    operations is a new array (a copy, as the device model counts it).
    """
    eqn = made.get(image)
    if eqn is None:  # the jaxpr's own input: a loop body's slice
        return True
    prim = eqn.params.get("_prim")
    return isinstance(prim, Image) or (prim is None and eqn.primitive.name in _LOOPS)


def _own_hint(op: _Op, inner: dict[str, int] | None, descs: list[OpDesc]) -> None:
    """The node's hint goes to the op giving its hinted result (see :func:`_walk`).

    That op may be in a ``shard_map`` body (one card's program), not in a loop body
    or branch (it runs many times, or in one branch of several).

    Raises:
        DeviceError: if the op is in a loop body or branch, or a hint inside the body
            divides it too.
    """
    if op.region is not None:
        raise DeviceError(
            f"with_division: the hinted value at {op.source} comes from the "
            f"{op.region.kind} at {op.region.source}: hint the value inside its body"
        )
    if inner is not None:
        raise DeviceError(
            f"with_division: two hints for one op at {op.source} (on a shard_map's "
            "result and on the value inside its body): keep one"
        )
    op.claimed.append(len(descs))


def _body_names(
    body: Any, ins: list[Any], outs: list[Any], env: dict[Any, str], finals: dict[Any, str]
) -> tuple[dict[Any, str], dict[Any, str]]:
    """A body's inputs named as the loop's operands, its results as the loop's results.

    ``outs`` are the loop's results the body's first results give (a scan's carries).
    """
    inner = {b: env[o] for b, o in zip(body.invars, ins, strict=True) if o in env}
    named: dict[Any, str] = {}
    for b, o in zip(body.outvars[: len(outs)], outs, strict=True):
        if isinstance(b, Var) and b not in inner and b not in named and o in finals:
            named[b] = finals[o]
    return inner, named


def _results(body: Any, outs: list[Any], inner: dict[Any, str], env: dict[Any, str]) -> None:
    """The loop's results take the names the body gave its results."""
    env.update(inner)  # the body's variables are distinct: their names join env
    for b, o in zip(body.outvars[: len(outs)], outs, strict=True):
        if isinstance(b, Var) and b in inner:
            env[o] = inner[b]


def _walk_scan(
    eqn: Any, env: dict[Any, str], finals: dict[Any, str], op: _Op, descs: list[OpDesc]
) -> None:
    """The ops of a ``scan`` body, each run ``length`` times (see :func:`_walk`)."""
    body = eqn.params["jaxpr"].jaxpr
    n = eqn.params["length"]
    carry = _num_carry(eqn)
    outs = list(eqn.outvars[:carry])
    inner, named = _body_names(body, list(eqn.invars), outs, env, finals)
    start = len(descs)
    _walk(body, inner, named, op.enter(eqn, "scan", [body], trips=n), descs)
    descs[start:] = [replace(d, repeat=d.repeat * n) for d in descs[start:]]
    _results(body, outs, inner, env)


def _walk_while(
    eqn: Any, env: dict[Any, str], finals: dict[Any, str], op: _Op, descs: list[OpDesc]
) -> None:
    """The ops of a ``while`` predicate and body, counted once (see :func:`_walk`)."""
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    test, body = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
    ins, outs = list(eqn.invars), list(eqn.outvars)
    inside = op.enter(eqn, "while", [test, body])
    tenv = {
        b: env[o]
        for b, o in zip(test.invars, [*ins[:cn], *ins[cn + bn :]], strict=True)
        if o in env
    }
    _walk(test, tenv, {}, inside, descs)
    env.update(tenv)
    benv, named = _body_names(body, ins[cn:], outs, env, finals)
    _walk(body, benv, named, inside, descs)
    _results(body, outs, benv, env)


def _walk_cond(
    eqn: Any, env: dict[Any, str], finals: dict[Any, str], op: _Op, descs: list[OpDesc]
) -> None:
    """The ops of every branch of a ``cond`` (see :func:`_walk`).

    Every branch writes the ``cond``'s results under the same names.
    """
    branches = [b.jaxpr for b in eqn.params["branches"]]
    ins, outs = list(eqn.invars[1:]), list(eqn.outvars)
    index = next(op.names.regions)
    shared = {
        o: finals.get(o) or f"{op.first}.cond{index}.{k}"
        for k, o in enumerate(outs)
        if isinstance(o, Var)
    }
    for k, body in enumerate(branches):
        inner, named = _body_names(body, ins, outs, env, shared)
        inside = op.enter(eqn, "cond", branches, index=index, branch=k, branches=len(branches))
        _walk(body, inner, named, inside, descs)
        env.update(inner)
    for o, name in shared.items():
        env[o] = name


_LOOPS = {"scan": _walk_scan, "while": _walk_while, "cond": _walk_cond}


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


def node_hints(graph: Graph) -> dict[Node, Hint]:
    """The ``with_division`` hint of each node whose result the user hinted.

    Raises:
        DeviceError: for hints on two results of one node (one op per node is hinted).
    """
    hinted = {
        node.ins[0]: dict(node.params["splits"])
        for node in graph.nodes
        if node.prim == with_division_p.name and isinstance(node.ins[0], Value)
    }
    out = {}
    for node in graph.nodes:
        mine = [k for k, v in enumerate(node.outs) if v in hinted]
        if len(mine) > 1:
            raise DeviceError(
                f"with_division: hints on {len(mine)} results of {node.describe()}; "
                "one node's results come from one division: hint one of them"
            )
        if mine:
            out[node] = Hint(mine[0], hinted[node.outs[mine[0]]])
    return out


def hinted_op(node: Node, option: Any, hint: Hint) -> tuple[int, OpDesc] | None:
    """Which compute op of a node's planned option gets the node's hint, as listed here.

    Returns:
        Its position among the node's compute ops in binding order (as
        :func:`_node_descs` lists them, the walk that owns the rule, loop bodies
        included) and its description; None if no op gets it (the hinted result
        comes from no compute op of the node's own).
    """
    claimed: list[int] = []
    descs = _node_descs(node, option, _Names(), hint, [], {}, claimed)
    if not claimed:
        return None
    compute = [k for k, d in enumerate(descs) if d.kind == "compute"]
    return compute.index(claimed[0]), descs[claimed[0]]


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
