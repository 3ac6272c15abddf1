"""Lowering rules for many cards: ``shard_map`` and the collectives inside it.

A ``shard_map`` node is planned per card: its body is a graph of its own, planned on the
per-card types of the inputs (``SpyreType.shard`` of the types they arrive in), and
run by a ``jax.shard_map`` over Spyre arrays (specs ``spyrejax.P`` of the same logical
partitions). Its output type is the ``unshard`` of the body's planned output type.
Restickifies and copies inside the body count once (they run on every card at once).

Collectives (``psum``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
``ppermute``) lower to the Spyre collectives of :mod:`spyrejax.primitives._collectives`;
those along a dim offer one mode per stick, so the planner restickifies first when the
dim's blocks are not whole slabs of the layout it has. (``pvary``, a change of type
only, is forwarded by the graph builder.)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import jax

from .. import primitives as sp
from .._errors import SpyreUnsupportedError
from .._jax import ClosedJaxpr, Jaxpr
from ..primitives._array import SpyreType
from ..primitives._base import evaluating_abstractly
from ..primitives._collectives import (
    AllGather,
    AllToAll,
    Collective,
    PPermute,
    Psum,
    PsumScatter,
)
from ..primitives._shard import P, shard_type, unshard_type
from ..primitives._stick import canon, stick_options
from ._graph import Graph, Node, Scalar, build_graph
from ._interpret import Interpreter
from ._planner import Plan, plan_graph
from ._regions import host_regions
from ._rules import RULES, Mode, Rule

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
    """The body graph of one result of a ``shard_map`` and its plan on per-card types."""
    params = dict(node_params)
    full = _body_graph(params["jaxpr"])
    graph = replace(full, outputs=[full.outputs[params["out_index"]]])
    with _mesh_axes(params["mesh"]):
        plan = plan_graph(graph, dict(zip(graph.inputs, local, strict=True)))
    return graph, plan


def _manual(params: dict[str, Any]) -> frozenset:
    return frozenset(params["newly_manual_axes"])


class _ShardMap(Rule):
    def modes(self, node: Node) -> list[Mode]:
        """Inputs in the layout they come in, or all in their default layouts."""
        last = tuple(
            None if isinstance(u, Scalar) or not u.shape else canon(u.shape, len(u.shape) - 1)
            for u in node.ins
        )
        return [Mode(last, 0), Mode(tuple(None for _ in node.ins), 0)]

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
        out_spec = params["out_specs"][params["out_index"]]
        (local_out,) = plan.outputs
        out_type = unshard_type(local_out, mesh, P(*out_spec), params["check_vma"])
        run = Interpreter(graph, plan).run

        def body(*xs: Any) -> Any:
            with _mesh_axes(mesh):
                return run(*xs)[0]

        if evaluating_abstractly():
            body(*(sp.abstract(t) for t in local))  # lists the body's copies for the cost
            return [sp.abstract(out_type)]
        f = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=tuple(P(*spec) for spec in params["in_specs"]),
            out_specs=P(*out_spec),
            axis_names=set(manual),
            check_vma=params["check_vma"],
        )
        return [f(*args)]


RULES["shard_map"] = _ShardMap()


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


RULES["psum"] = RULES["psum_invariant"] = _Same(_psum)
RULES["ppermute"] = _Same(_ppermute)


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


RULES["all_gather"] = _AlongDims(_all_gather)
RULES["reduce_scatter"] = _AlongDims(_reduce_scatter)
RULES["all_to_all"] = _AlongDims(_all_to_all)


# --- reports --------------------------------------------------------------------------


def collective_records(closed: ClosedJaxpr) -> tuple[tuple[str, int], ...]:
    """``(description, bytes one card sends)`` of every collective in a Spyre-level jaxpr."""
    out: list[tuple[str, int]] = []
    _walk(closed.jaxpr, out)
    return tuple(out)


def _walk(jaxpr: Jaxpr, out: list[tuple[str, int]]) -> None:
    for eqn in jaxpr.eqns:
        prim = eqn.params.get("_prim")
        if isinstance(prim, Collective):
            (t,) = prim.in_avals
            what = f"{type(prim).__name__} over {prim.axes} ({prim.size} cards) of {t.str_short()}"
            out.append((what, prim.bytes_moved))
        for p in eqn.params.values():
            if isinstance(p, ClosedJaxpr):
                _walk(p.jaxpr, out)
            elif isinstance(p, Jaxpr):
                _walk(p, out)
