"""Lowering rules for many cards: ``shard_map`` and the collectives inside it.

A ``shard_map`` node is planned per card: its body is a graph of its own, planned on the
per-card types of the inputs (``SpyreType.shard`` of the types they arrive in), and
run by a ``jax.shard_map`` over Spyre arrays (specs ``spyrejax.P`` of the same logical
partitions). It is one node for all its results. Their types are the ``unshard`` of
the body's planned result types (a result the out spec cannot join in its planned
layout is restickified on each card first).

Cost: the plan counts every element moved on every card, so the body's restickifies,
copies and collectives count once per card (``plan.cost`` is the work of all cards; a
split value restickified on each card costs what restickifying it whole costs, so the
planner has no reason to prefer either). Time is another matter: the cards run at
once, so ``explain``'s device model runs the body once (one card's program) and gives
the collectives' time at the card-to-card bandwidth, from the bytes one card sends.

Collectives (``psum``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
``ppermute``) lower to the Spyre collectives of :mod:`spyrejax.primitives._collectives`;
those along a dim offer one mode per stick, so the planner restickifies first when the
dim's blocks are not whole slabs of the layout it has. (``pvary``, a change of type
only, is forwarded by the graph builder.)
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import jax

from ... import primitives as sp
from ..._errors import LayoutError, SpyreUnsupportedError
from ..._jax import ClosedJaxpr, Jaxpr, shard_map_body
from ...primitives._array import SpyreType
from ...primitives._collectives import AllGather, AllToAll, Collective, PPermute, Psum, PsumScatter
from ...primitives._shard import P, shard_type, unshard_type
from ...primitives._stick import canon, default_type, restickify_cost, stick_of, stick_options
from .._graph import Graph, Node, Scalar, Value, build_graph
from .._planner import Plan, host_input_type, plan_graph
from .._regions import host_regions
from .._registry import Mode, Rule, _register
from ..program import _record as record
from ..program._interpret import Interpreter
from ._control import Charge, HostCharge, plan_charges

__all__ = ["body_plan", "collective_records"]

_AXIS_SIZES: ContextVar[dict[str, int] | None] = ContextVar("spyrejax_axis_sizes", default=None)


@contextlib.contextmanager
def _mesh_axes(mesh: Any) -> Iterator[None]:
    token = _AXIS_SIZES.set(dict(mesh.shape))
    try:
        yield
    finally:
        _AXIS_SIZES.reset(token)


def _axes(names: Any) -> tuple[str, ...]:
    return tuple(names) if isinstance(names, tuple | list) else (names,)


def _size(axes: tuple[str, ...]) -> int:
    sizes = _AXIS_SIZES.get()
    if sizes is None:
        raise SpyreUnsupportedError(f"a collective over {axes} outside shard_map")
    n = 1
    for a in axes:
        n *= sizes[a]
    return n


# --- shard_map ----------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _body_graph(jaxpr: Jaxpr) -> Graph:
    return host_regions(build_graph(ClosedJaxpr(jaxpr, [])))


@functools.lru_cache(maxsize=1024)
def body_plan(node_params: Any, local: tuple[SpyreType, ...]) -> tuple[Graph, Plan]:
    """The body graph of a ``shard_map`` and its plan on per-card types (all results)."""
    params = dict(node_params)
    graph = _body_graph(shard_map_body(params))
    with _mesh_axes(params["mesh"]):
        plan = plan_graph(graph, dict(zip(graph.inputs, local, strict=True)))
    return graph, plan


def _manual(params: dict[str, Any]) -> frozenset:
    return frozenset(params["newly_manual_axes"])


def _local_out(graph: Graph, plan: Plan) -> list[SpyreType]:
    """Each body result's per-card type (a scalar result is built in its default type)."""
    return [
        host_input_type((), o.dtype) if t is None else t
        for o, t in zip(graph.outputs, plan.outputs, strict=True)
    ]


def _splittable(u: Value | SpyreType, fits: Any) -> SpyreType | None:
    """The default type of ``u``'s shape that ``fits`` accepts: the last dim's stick first.

    ``fits`` splits (or joins) a type over the cards; the first default layout whose
    split dims it can cut into whole slabs wins (96 float16 columns over 2 cards: 48
    would end inside a stick, so the stick moves to the rows). None if none can.
    """
    if not u.shape:
        return None
    last = canon(u.shape, len(u.shape) - 1)
    for stick in [last, *(s for s in stick_options(u.shape) if s != last)]:
        t = default_type(u.shape, u.dtype, stick)
        try:
            fits(t)
        except (LayoutError, SpyreUnsupportedError):
            continue
        return t
    return None


def _joined(t: SpyreType, mesh: Any, spec: P, check_vma: bool) -> tuple[SpyreType, SpyreType]:
    """``(per-card type, global type)`` of a body result joined over the cards as ``spec``.

    The body is planned without its out specs, so a result may come in a layout whose
    split dim is padded or stuck (a gather's result stuck on a short dim): it is then
    restickified on each card to a default layout that can be joined.

    Raises:
        LayoutError: if no layout can be joined (naming the dim and the fix).
    """
    try:
        return t, unshard_type(t, mesh, spec, check_vma)
    except LayoutError:
        d = _splittable(
            t, lambda d: unshard_type(replace(d, vma=t.vma), mesh, P(*spec.partitions), check_vma)
        )
        if d is None or d == t:
            raise
        d = replace(d, vma=t.vma)
        return d, unshard_type(d, mesh, spec, check_vma)


def _cards(params: dict[str, Any]) -> int:
    """The cards a body runs on: one per block of the manual mesh axes."""
    sizes = dict(params["mesh"].shape)
    return math.prod(sizes[a] for a in params["newly_manual_axes"])


def _card_charges(
    node: Node, graph: Graph, plan: Plan, joined: list[tuple[SpyreType, SpyreType]]
) -> list[Charge | HostCharge]:
    """What the body moves on all its cards: each card's moves times the cards.

    Copies, restickifies and collectives of the body plan, and the restickifies of
    results the out specs cannot join. The plan's cost counts every card's elements,
    so a split value restickified on each card costs what it would cost whole.
    """
    cards = _cards(node.params)
    context = f"{node.prim} on {cards} cards"
    out = plan_charges(plan, cards, context, "card")
    for i, ((want, _), got) in enumerate(zip(joined, _local_out(graph, plan), strict=True)):
        if got != want:
            base = restickify_cost(got)
            out.append(
                Charge(
                    "restickify",
                    base * cards,
                    (got,),
                    want.layout,
                    f"result {i}: its out spec cannot join {got.str_short()} "
                    f"[{context}: {base} per card x {cards}]",
                    context,
                    graph.outputs[i] if isinstance(graph.outputs[i], Value) else None,
                )
            )
    return out


class _ShardMap(Rule):
    """One node for all results: the body is planned once and runs once per card.

    Like a loop, it tries one candidate type per operand and mode: every combination of
    two candidates per operand would be exponential in the operands (a model's
    parameters). The modes name, per operand, a default layout its split can cut.
    """

    candidates = 1

    def modes(self, node: Node) -> list[Mode]:
        """Inputs in default layouts their splits can cut (see ``_splittable``), or as they come."""
        params = node.params
        mesh, manual = params["mesh"], _manual(params)
        sticks = []
        for u, spec in zip(node.ins, params["in_specs"], strict=True):
            if isinstance(u, Scalar) or not u.shape:
                sticks.append(None)
                continue
            t = _splittable(
                u, lambda t, spec=spec: shard_type(t, mesh, manual, P(*spec), params["check_vma"])
            )
            sticks.append(canon(u.shape, len(u.shape) - 1) if t is None else stick_of(t))
        return [Mode(tuple(sticks), 0), Mode(tuple(None for _ in node.ins), 0)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        """Plan the body on the per-card types; run it in a ``jax.shard_map``."""
        if any(isinstance(u, Scalar) for u in node.ins):
            raise SpyreUnsupportedError(f"{node.describe()}: a scalar operand of shard_map")
        params = node.params
        mesh, manual = params["mesh"], _manual(params)
        local = tuple(
            shard_type(jax.typeof(a), mesh, manual, P(*spec), params["check_vma"])
            for a, spec in zip(args, params["in_specs"], strict=True)
        )
        key = tuple(sorted(params.items()))
        graph, plan = body_plan(key, local)
        out_specs = tuple(P(*spec) for spec in params["out_specs"])
        joined = [
            _joined(t, mesh, spec, params["check_vma"])
            for t, spec in zip(_local_out(graph, plan), out_specs, strict=True)
        ]
        run = Interpreter(graph, plan).run
        loop = record.loop("shard_map")

        def body(*xs: Any) -> Any:
            with record.body(loop, "body", list(xs), list(args)) as b:
                with _mesh_axes(mesh):
                    outs = run(*xs)
                outs = tuple(
                    o if jax.typeof(o) == want else sp.restickify(o, layout=want.layout)
                    for o, (want, _) in zip(outs, joined, strict=True)
                )
                if b is not None:
                    b.outs = list(outs)
                return outs

        called = sp.abstract_calls()
        if called is not None:
            called.extend(c for c in _card_charges(node, graph, plan, joined) if c.moves)
            return [sp.abstract(t) for _, t in joined]
        f = jax.shard_map(
            body,
            mesh=_auto(mesh),
            in_specs=tuple(P(*spec) for spec in params["in_specs"]),
            out_specs=tuple(P(*spec) for spec in params["out_specs"]),
            axis_names=set(manual),
            check_vma=params["check_vma"],
        )
        results = list(f(*args))
        record.finish(loop, results)
        return results


def _auto(mesh: Any) -> Any:
    """The mesh with Auto axes: Spyre types carry no sharding for Explicit axes to check.

    (``jax.make_mesh`` gives Explicit axes; the user's ``shard_map`` was checked
    against its inputs' shardings when it was traced.)
    """
    if not getattr(mesh, "explicit_axes", ()):
        return mesh
    return jax.sharding.Mesh(
        mesh.devices, mesh.axis_names, axis_types=(jax.sharding.AxisType.Auto,) * mesh.devices.ndim
    )


_register(_ShardMap(), "shard_map")


# --- collectives ----------------------------------------------------------------------


class _Same(Rule):
    """Collectives whose result has the input's type: any layout works."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def modes(self, node: Node) -> list[Mode]:
        return [Mode((None,), 0)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [self.make(node.params, args[0])]


def _psum(params: dict[str, Any], x: Any) -> Any:
    axes = _axes(params["axes"])
    return Psum(jax.typeof(x), axes=axes, size=_size(axes))(x)


def _ppermute(params: dict[str, Any], x: Any) -> Any:
    axes = _axes(params["axis_name"])
    perm = tuple((int(a), int(b)) for a, b in params["perm"])
    return PPermute(jax.typeof(x), axes=axes, size=_size(axes), perm=perm)(x)


_register(_Same(_psum), "psum", "psum_invariant")
_register(_Same(_ppermute), "ppermute")


class _AlongDims(Rule):
    """Collectives along logical dims: one mode per stick of the input."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def modes(self, node: Node) -> list[Mode]:
        return [Mode((s,), 0) for s in stick_options(node.ins[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        params = node.params
        if not params.get("tiled", False) or params.get("axis_index_groups") is not None:
            raise SpyreUnsupportedError(
                f"{node.describe()}: spyrejax runs the tiled form without axis_index_groups"
            )
        return [self.make(params, args[0])]


def _all_gather(params: dict[str, Any], x: Any) -> Any:
    axes = _axes(params["axis_name"])
    dim = params["all_gather_dimension"]
    return AllGather(jax.typeof(x), axes=axes, size=_size(axes), dim=dim)(x)


def _reduce_scatter(params: dict[str, Any], x: Any) -> Any:
    axes = _axes(params["axis_name"])
    dim = params["scatter_dimension"]
    return PsumScatter(jax.typeof(x), axes=axes, size=_size(axes), dim=dim)(x)


def _all_to_all(params: dict[str, Any], x: Any) -> Any:
    axes = _axes(params["axis_name"])
    split, concat = params["split_axis"], params["concat_axis"]
    return AllToAll(jax.typeof(x), axes=axes, size=_size(axes), split=split, concat=concat)(x)


_register(_AlongDims(_all_gather), "all_gather")
_register(_AlongDims(_reduce_scatter), "reduce_scatter")
_register(_AlongDims(_all_to_all), "all_to_all")


# --- reports --------------------------------------------------------------------------


def collective_records(rec: record.Recorder) -> tuple[tuple[str, int], ...]:
    """``(description, bytes one card sends)`` of every collective the program binds.

    Read from the record of the program's one trace (``Lowering.record``), in binding
    order, loop, branch and ``shard_map`` bodies included.
    """
    out: list[tuple[str, int]] = []
    _walk(rec.runs, out)
    return tuple(out)


def _walk(entries: list[Any], out: list[tuple[str, int]]) -> None:
    for entry in entries:
        if isinstance(entry, record.Call):
            prim = entry.prim
            if isinstance(prim, Collective):
                (t,) = prim.in_avals
                what = (
                    f"{type(prim).__name__} over {prim.axes} ({prim.size} cards) of {t.str_short()}"
                )
                out.append((what, prim.bytes_moved))
        else:  # a node run or a loop's body: what it bound
            _walk(entry.entries, out)
