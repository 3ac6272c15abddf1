"""Host regions: values with no Spyre data format (complex, uint8, ...) stay on the host.

Spyre stores no complex numbers (nor 8-bit unsigned, 16-bit or 64-bit integers): such a
value cannot be laid out on the device, so it never goes there. The nodes that read or
give one run on the host together, as one node: a *host region*. Its operands are the
device values it reads (moved to the host through the DMA), its results the device
values it gives (moved back in default layouts), and in between it is JAX code on the
host. The planner runs it as any primitive without a device rule: a visible fallback
(``SpyreFallbackWarning``, ``explain(...).fallbacks``), named after the dtypes and the
primitives it holds.

A region is the smallest set of nodes that holds every node touching its host values
and every node on a path between two of them (a device value computed from one host
value and feeding another is computed on the host too), so it can run as one node.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SpyreInternalError, SpyreUnsupportedError
from .._jax import call_params, closed_call_p
from ..layout._dtypes import has_spyre_format
from ._graph import Graph, Node, Scalar, Value

__all__ = ["host_regions", "on_host"]

# Nodes spyrejax's graph rewrites make without a JAX primitive: their lax functions.
_LAX = {
    "slice": lambda x, *, start_indices, limit_indices, strides: jax.lax.slice(
        x, start_indices, limit_indices, strides
    ),
    "squeeze": lambda x, *, dimensions: jax.lax.squeeze(x, dimensions),
    "expand_dims": lambda x, *, dimensions: jax.lax.expand_dims(x, dimensions),
    "concatenate": lambda *xs, dimension: jax.lax.concatenate(xs, dimension),
    "interleave": lambda *xs: jnp.stack(xs, -1).reshape(*xs[0].shape[:-1], -1),
}


_NAMED = 6  # primitives a region's name lists


def on_host(v: Value | Scalar) -> bool:
    """Whether a value has no Spyre data format: it can only live on the host."""
    return isinstance(v, Value) and not has_spyre_format(v.dtype)


def host_regions(graph: Graph) -> Graph:
    """Replace the nodes that read or give host values by host-region nodes, in place.

    Every graph the lowering plans goes through here once it is built: the function's,
    and each loop body's, branch's and ``shard_map`` body's.

    Returns:
        ``graph``.

    Raises:
        SpyreUnsupportedError: if the function returns a host value (it has no Spyre
            array to come back as).
    """
    touching = [i for i, n in enumerate(graph.nodes) if any(map(on_host, (*n.ins, *n.outs)))]
    if not touching:
        return graph
    for o in graph.outputs:
        if on_host(o):
            raise SpyreUnsupportedError(
                f"the function returns a {np.dtype(o.dtype).name} value ({o.origin}): Spyre "
                f"has no {np.dtype(o.dtype).name} format; return real arrays (for complex "
                "values, their .real and .imag)"
            )
    regions = _regions(graph, touching)
    merged = []
    for i, node in enumerate(graph.nodes):
        region = regions.get(i)
        if region is None:
            merged.append(node)
        elif max(region) == i:  # the region runs where its last node ran...
            merged.append(_region_node(graph, [graph.nodes[j] for j in sorted(region)]))
    graph.nodes[:] = _in_order(graph, merged)
    graph.consts[:] = [c for c in graph.consts if not on_host(c)]
    return graph


def _in_order(graph: Graph, nodes: list[Node]) -> list[Node]:
    """``nodes`` in their order, each node that reads a region's result after it.

    (...so a node that read an early result of the region, and that no node of the
    region depends on, moves after the region.)
    """
    ready = {*graph.inputs, *graph.consts}
    out: list[Node] = []
    waiting: list[Node] = []

    def can_run(n: Node) -> bool:
        return all(u in ready for u in n.ins if isinstance(u, Value))

    for node in nodes:
        waiting.append(node)
        progress = True
        while progress:
            progress = False
            for n in waiting:
                if can_run(n):
                    waiting.remove(n)
                    out.append(n)
                    ready.update(n.outs)
                    progress = True
                    break
    if waiting:
        raise SpyreInternalError(
            f"internal error: host regions left {waiting[0].describe()} without its operands; "
            "please report it"
        )
    return out


def _regions(graph: Graph, touching: list[int]) -> dict[int, frozenset[int]]:
    """Each region's node indices, by node index.

    Its nodes are connected through host values, and closed under paths between them.
    """
    producer = {v: i for i, n in enumerate(graph.nodes) for v in n.outs}
    preds = [
        {producer[u] for u in n.ins if isinstance(u, Value) and u in producer} for n in graph.nodes
    ]
    succs: list[set[int]] = [set() for _ in graph.nodes]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].add(i)
    groups = _connected(graph, touching)
    while True:
        merged = False
        for g in list(groups):
            closure = _between(g, preds, succs)
            others = [h for h in groups if h is not g and h & closure]
            if closure != g or others:
                groups = [h for h in groups if h is not g and h not in others]
                groups.append(frozenset(closure.union(*others)))
                merged = True
                break
        if not merged:
            return {i: g for g in groups for i in g}


def _connected(graph: Graph, touching: list[int]) -> list[frozenset[int]]:
    """The touching nodes grouped by the host values they share."""
    parent = {i: i for i in touching}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[Value, int] = {}
    for i in touching:
        n = graph.nodes[i]
        for v in (*n.ins, *n.outs):
            if on_host(v):
                j = first.setdefault(v, i)
                parent[find(i)] = find(j)
    groups: dict[int, set[int]] = {}
    for i in touching:
        groups.setdefault(find(i), set()).add(i)
    return [frozenset(g) for g in groups.values()]


def _between(group: frozenset[int], preds: list[set[int]], succs: list[set[int]]) -> set[int]:
    """``group`` with every node on a path from one of its nodes to another."""
    after = _reach(group, succs)
    before = _reach(group, preds)
    return set(group) | (after & before)


def _reach(start: frozenset[int], edges: list[set[int]]) -> set[int]:
    seen: set[int] = set()
    todo = [j for i in start for j in edges[i]]
    while todo:
        i = todo.pop()
        if i not in seen:
            seen.add(i)
            todo.extend(edges[i])
    return seen


def _region_node(graph: Graph, nodes: list[Node]) -> Node:
    """One node running ``nodes`` on the host: a ``closed_call`` of their JAX code."""
    ins = _region_inputs(nodes)
    outs = _region_outputs(graph, nodes)
    structs = [jax.ShapeDtypeStruct(u.shape, u.dtype) for u in ins]
    closed = jax.make_jaxpr(_host_runner(nodes, ins, outs))(*structs)
    held = sorted({np.dtype(v.dtype).name for n in nodes for v in (*n.ins, *n.outs) if on_host(v)})
    names = list(dict.fromkeys(n.prim for n in nodes))
    prims = ", ".join(names[:_NAMED]) + (", ..." if len(names) > _NAMED else "")
    name = f"host region ({' '.join(held)}: {prims})"
    return Node(name, call_params(closed), list(ins), outs, nodes[0].source, closed_call_p)


def _region_inputs(nodes: list[Node]) -> list[Value]:
    """The values a region reads from outside it (host-only constants are folded in)."""
    inside = {v for n in nodes for v in n.outs}
    ins: list[Value] = []
    for n in nodes:
        for u in n.ins:
            if isinstance(u, Value) and u not in inside and u not in ins:
                if on_host(u) and u.kind != "const":
                    raise SpyreUnsupportedError(
                        f"{np.dtype(u.dtype).name} value {u.origin} has no Spyre format"
                    )
                if not on_host(u):
                    ins.append(u)
    return ins


def _region_outputs(graph: Graph, nodes: list[Node]) -> list[Value]:
    """The values of a region read after it, in the order the region makes them."""
    made = [v for n in nodes for v in n.outs]
    read_after = {u for n in graph.nodes if n not in nodes for u in n.ins}
    read_after.update(o for o in graph.outputs if isinstance(o, Value))
    return [v for v in made if v in read_after]


def _host_runner(nodes: list[Node], ins: list[Value], outs: list[Value]) -> Any:
    """A function of the region's inputs that runs its nodes' JAX code in order."""

    def run(*args: Any) -> list[Any]:
        env: dict[Value, Any] = dict(zip(ins, args, strict=True))
        for n in nodes:
            vals = [_operand(u, env) for u in n.ins]
            if n.primitive is not None:
                res = n.primitive.bind(*vals, **n.params)
            elif n.prim in _LAX:
                res = _LAX[n.prim](*vals, **n.params)
            else:
                raise SpyreUnsupportedError(f"{n.describe()} cannot run on the host")
            several = n.primitive.multiple_results if n.primitive is not None else False
            env.update(zip(n.outs, res if several else [res], strict=True))
        return [env[v] for v in outs]

    return run


def _operand(u: Value | Scalar, env: dict[Value, Any]) -> Any:
    if isinstance(u, Scalar):
        return jnp.asarray(u.value, u.dtype)
    if u in env:
        return env[u]
    return jnp.asarray(u.const)  # a constant of the function, complex say
