"""The ``with_division`` hint, and the ops the device model divides.

``with_division(x, /, **splits)`` is the identity under plain JAX and a hint under
``spyrejax.jit``: the op producing ``x`` is divided with those splits (validated against
its iteration space when the program is planned). :func:`divided_space` says which
primitives the device model divides (those defining ``SpyrePrim.space``) and their
iteration space. A hint is resolved on the record of the program's trace
(:func:`resolve_hints`) to the op whose result is the hinted value and the ops of its
geometry that its node run binds: their record entries carry it (``Call.division_hint``),
which the device model reads; the per-core emulation gives it to the same ops through
the node scopes (:func:`node_scope`, :func:`division_hint`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jax

from ..._errors import DeviceError, SpyreInternalError
from ..._jax import Jaxpr, Primitive, ad, batching, inner_jaxprs, mlir
from ...device import OpSpace, TensorSpec
from ...device._space import MATMUL_NAMES, OTHER_NAMES
from ...primitives._array import SpyreType
from ...primitives._base import SpyrePrim
from .._graph import Graph, Node, Value
from .._registry import Mode, Rule, _carried_modes, _register
from .._spaces import divided_space, geometry
from .._spaces import type_spec as _spec
from ._record import Body, Call, NodeRun, Recorder

__all__ = [
    "Hint",
    "HintTable",
    "HintedOp",
    "classify",
    "current_line",
    "division_hint",
    "forwards",
    "has_hints",
    "hint_table",
    "hinting",
    "node_hints",
    "node_scope",
    "resolve_hints",
    "traced",
    "with_division",
    "with_division_p",
    "written_space",
]

_DIM_NAMES = frozenset({*OTHER_NAMES, *MATMUL_NAMES, "out"})

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


# --- the ops the device model divides ------------------------------------------------


def classify(prim: Any, ins: list[TensorSpec], out: TensorSpec) -> tuple[str, str, Any]:
    """What the device model makes of a primitive: ``(kind, op name, space)``.

    ``"compute"`` with its own iteration space (``SpyrePrim.space``) for a divided one;
    else its ``role`` (``"view"``, ``"copy"``, ``"restickify"``; any other: a copy) and
    no space.

    Raises:
        DeviceError: when a divided primitive's operands have no space.
    """
    space = _named_space(prim, [*ins, out]) if isinstance(prim, SpyrePrim) else None
    if space is not None:
        return "compute", space.opfunc, space
    role = getattr(prim, "role", "compute")
    kind = role if role in ("view", "copy", "restickify") else "copy"
    return kind, type(prim).__name__.lower(), None


def _named_space(prim: SpyrePrim, specs: list[TensorSpec]) -> OpSpace | None:
    """``prim.space`` of ``specs`` (the inputs', then the result's).

    The space :func:`divided_space` keeps for the primitive, with the specs' names, when
    the specs are its specs but for their names (a repeated layer's ops: computed once).
    """
    found = divided_space(prim)
    if found is not None and len(found[1]) == len(specs):
        space, kept = found
        if all(_unnamed(a) == _unnamed(b) for a, b in zip(kept, specs, strict=True)):
            at = {id(s): k for k, s in enumerate(kept)}
            if all(id(o.tensor) in at for o in space.operands):
                return space.renamed([specs[at[id(o.tensor)]] for o in space.operands])
    return prim.space(specs[:-1], specs[-1])


def _unnamed(s: TensorSpec) -> tuple[Any, ...]:
    return (s.shape, s.layout, s.dims, s.base_shape, s.strides)


def written_space(prim: Any) -> OpSpace | None:
    """The space of the stores a view stands for, or None.

    A view whose result its producer's cores write in place (``LanePlace``,
    ``LaneAssemble``: each core writes its own sticks) defines
    ``written_space(ins, out)``: ``emulate="cores"`` runs it per core over that space,
    divided as its producer; the device model counts no kernel for it (a ``"view"``).
    """
    write = getattr(prim, "written_space", None) if isinstance(prim, SpyrePrim) else None
    if write is None:
        return None
    avals = (*prim.in_avals, prim.out_aval)
    if not all(isinstance(t, SpyreType) for t in avals):
        return None
    specs = [_spec(t, f"in{k}") for k, t in enumerate(prim.in_avals)]
    return write(specs, _spec(prim.out_aval, "out"))


# --- which ops a node's hint divides ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class HintedOp:
    """What a node run's ``with_division`` hint divides.

    Attributes:
        geometry: the :func:`geometry` of the op giving the hinted value: that op and
            every op of its geometry the node run binds itself get the hint.
        splits: the hint's splits.
        space: that op's iteration space (the hint is checked against it).
        line: the hinted node's source line (messages).
    """

    geometry: Hashable
    splits: dict[str, int]
    space: OpSpace
    line: str


@dataclass(frozen=True)
class HintTable:
    """The hints a record resolved (:func:`resolve_hints`), for the runs that follow it.

    Attributes:
        ops: per ``(node, option index)`` of the node run binding hinted ops, the hint.
        nodes: every node the record ran (its bodies' too): a graph whose hinted nodes
            are all here needs no record of its own.
    """

    ops: dict[tuple[Node, int], HintedOp]
    nodes: frozenset[Node]

    def covers(self, hinted: Iterable[Node]) -> bool:
        """Whether every node of ``hinted`` ran in the record."""
        return all(n in self.nodes for n in hinted)


def resolve_hints(record: Recorder) -> HintTable:
    """Resolve a record's ``with_division`` hints to the calls they divide.

    A node run's hint names the op giving the hinted value, found by the value's
    identity in the record (through a ``shard_map``'s body: the body's node run that
    binds it). That op and every op of its :func:`geometry` the same node run binds
    itself (not in its bodies' node runs) get the hint as their ``division_hint``: one
    division per geometry, as the per-core executor gives it (:func:`division_hint`).
    Resolved once per record (``Recorder.hinted``).

    Raises:
        DeviceError: if the op giving a hinted value is in a loop body or branch of the
            hinted node (hint the value inside the body), or two hints divide one node
            run's ops otherwise (a ``shard_map``'s result and a value inside its body).
    """
    runs = list(_node_runs(record.runs))
    if record.hinted is None:  # kept once complete: a refused hint raises at every call
        placed: dict[tuple[Node, int], HintedOp] = {}
        for run in runs:
            if run.hint is not None and not forwards(run, run.hint.out):
                _place(placed, run)
        record.hinted = placed
    table = HintTable(dict(record.hinted), frozenset(r.node for r in runs))
    for run in runs:
        hinted = table.ops.get((run.node, run.index))
        if hinted is not None:
            for call in _own_calls(run.entries):
                if divided_space(call.prim) and geometry(call.prim) == hinted.geometry:
                    call.division_hint = dict(hinted.splits)
    return table


def _place(table: dict[tuple[Node, int], HintedOp], run: NodeRun) -> None:
    """Add a hinted node run's hint to ``table``, under the node run binding its op."""
    found = _giver(run.entries, run.outs[run.hint.out], run, None)
    if found is None:
        return  # no op of the node's own gives the value (a view of an operand)
    call, binder, crossed = found
    if crossed is not None:
        raise DeviceError(
            f"with_division: the hinted value at {run.node.source} comes from the "
            f"{crossed[0]} at {crossed[1]}: hint the value inside its body"
        )
    found_space = divided_space(call.prim)
    assert found_space is not None  # _giver gives divided calls only
    hinted = HintedOp(geometry(call.prim), dict(run.hint.splits), found_space[0], run.node.line)
    key = (binder.node, binder.index)
    old = table.get(key)
    if old is not None and (old.geometry, old.splits) != (hinted.geometry, hinted.splits):
        raise DeviceError(
            f"with_division: two hints for the ops of one node at {run.node.source} (on a "
            "shard_map's result and on a value inside its body): keep one"
        )
    table.setdefault(key, hinted)


def _giver(
    entries: list[Any], want: Any, binder: NodeRun, crossed: tuple[str, str] | None
) -> tuple[Call, NodeRun, tuple[str, str] | None] | None:
    """The divided call giving ``want``, the node run binding it, the loop crossed.

    ``want`` is followed from a loop's result into its bodies' results and from a node
    run's result into its calls; ``crossed`` is the first loop, branch (not
    ``shard_map``) crossed: its kind and the source of the node running it.
    """
    for e in entries:
        if isinstance(e, Call):
            if any(o is want for o in e.outs) and divided_space(e.prim) is not None:
                return e, binder, crossed
        elif isinstance(e, NodeRun):
            if any(o is want for o in e.outs):
                found = _giver(e.entries, want, e, crossed)
                if found is not None:
                    return found
        elif e.role != "test":
            k = next((k for k, o in enumerate(e.loop.results) if o is want), None)
            if k is not None and k < len(e.outs):
                kind = e.loop.kind
                inside = crossed or (None if kind == "shard_map" else (kind, binder.node.source))
                found = _giver(e.entries, e.outs[k], binder, inside)
                if found is not None:
                    return found
    return None


def _node_runs(entries: list[Any]) -> Iterator[NodeRun]:
    """Every node run in ``entries`` and in its bodies, outer ones first."""
    for e in entries:
        if isinstance(e, NodeRun):
            yield e
            yield from _node_runs(e.entries)
        elif isinstance(e, Body):
            yield from _node_runs(e.entries)


def _own_calls(entries: list[Any]) -> Iterator[Call]:
    """The calls a node run binds itself: in its bodies too, not in their node runs."""
    for e in entries:
        if isinstance(e, Call):
            yield e
        elif isinstance(e, Body):
            yield from _own_calls(e.entries)


def traced(x: Any) -> bool:
    """Whether a lowering's result is a value it computed (not a constant it gave)."""
    return isinstance(x, jax.core.Tracer)


def forwards(run: NodeRun, out: int) -> bool:
    """Whether a run's result ``out`` is one of its operands (no op of its own gives it)."""
    x = run.outs[out]
    return not traced(x) or any(x is y for y in run.ins)


# --- the hints on the per-core run --------------------------------------------------------


@dataclass
class _Scope:
    """A node being lowered: its line, its hint, whether an op of its took it."""

    line: str
    source: str
    hinted: HintedOp | None
    used: bool = False


_SCOPES: ContextVar[tuple[_Scope, ...]] = ContextVar("spyrejax_node_scopes", default=())
_TABLE: ContextVar[HintTable | None] = ContextVar("spyrejax_hint_table", default=None)


@contextlib.contextmanager
def node_scope(
    line: str, hinted: HintedOp | None = None, source: str | None = None
) -> Iterator[None]:
    """The divided ops bound inside belong to the node at ``line`` (scopes nest).

    The interpreter opens one around each node it lowers while an executor runs the
    primitives (``emulate="cores"``): a loop body's nodes open theirs inside the loop's.

    Args:
        line: the node's source line (messages).
        hinted: the hint of the node run (:func:`resolve_hints`): the divided ops of its
            geometry bound in this scope, not in an inner one, get it.
        source: the node's source (``Node.source``; default ``line``).

    Raises:
        SpyreInternalError: if no op took the hint (the lowering bound other ops than
            when the record was traced).
    """
    scope = _Scope(line, source or line, hinted)
    token = _SCOPES.set((*_SCOPES.get(), scope))
    try:
        yield
    finally:
        _SCOPES.reset(token)
    if hinted is not None and not scope.used:
        raise SpyreInternalError(
            f"internal error: the with_division hint at {line} reached none of the node's "
            f"{hinted.space.opfunc} ops; please report it"
        )


@contextlib.contextmanager
def hinting(table: HintTable) -> Iterator[None]:
    """The node runs of the program run inside (its bodies') take their hints from ``table``."""
    token = _TABLE.set(table)
    try:
        yield
    finally:
        _TABLE.reset(token)


def hint_table() -> HintTable | None:
    """The table of the program running (:func:`hinting`), or None."""
    return _TABLE.get()


def current_line() -> str:
    """The source line of the innermost node being lowered ("" outside any)."""
    scopes = _SCOPES.get()
    return scopes[-1].line if scopes else ""


def division_hint(prim: SpyrePrim) -> dict[str, int] | None:
    """The hint of a divided op: its node's, if the op has the hinted geometry.

    The node is the innermost scope's (the node run that binds the op itself), as the
    record's calls get it (:func:`resolve_hints`).
    """
    scopes = _SCOPES.get()
    scope = scopes[-1] if scopes else None
    if scope is None or scope.hinted is None or geometry(prim) != scope.hinted.geometry:
        return None
    scope.used = True
    return dict(scope.hinted.splits)


def has_hints(graph: Graph) -> bool:
    """Whether the graph, or a loop, branch or ``shard_map`` body of it, has a hint."""
    return any(
        node.prim == with_division_p.name or any(map(_has_hints, inner_jaxprs(node)))
        for node in graph.nodes
    )


def _has_hints(jaxpr: Jaxpr) -> bool:
    return any(
        e.primitive is with_division_p or any(map(_has_hints, inner_jaxprs(e))) for e in jaxpr.eqns
    )


@dataclass(frozen=True)
class Hint:
    """A node's ``with_division`` hint: which of its results, and the splits."""

    out: int
    splits: dict[str, int]


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
