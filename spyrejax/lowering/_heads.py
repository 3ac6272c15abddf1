"""A projection split into heads: ``(x @ w).reshape(T, H, D)`` as a product over heads.

Attention's ``q = (x @ wq).reshape(T, H, D)`` is, as JAX traces it, a product ``[T, H *
D]`` and a reshape. Laid out as written, the product's sticks run across the heads, so
where ``D`` is no whole sticks (16-bit head dims 80 and 96: a stick and a part) head 1
starts mid-stick, and a slice of one head's dim (rotate-half's halves) is no window of
the product: the rotation copies its quarters (issue 26 item 3). :func:`split_heads`
rewrites it as ``dot_general(x, w.reshape(K, H, D))``, the product ``einsum("tk,khd->
thd")`` writes, whose rule (``lowering.rules._dot``) may run it per head, each head's
``D`` on sticks of its own (the default layout of ``[T, H, D]``, the weight laid out per
head as the matmul loads it), or as before (B's free dims merged into one n: the same
product and reshape views as the graph as written). The planner chooses by its
objective.

Rewritten only where the head dim is no whole sticks (:func:`head_dim_splits`, the one
rule the dot rule reads too): at whole sticks the merged product's sticks already
start at each head. ``SpyreJit.place`` reads a weight's products as written
(``build_graph(..., heads=False)``): the weight ``[K, H * D]`` of the merged product,
which reads it in place laid out row-major.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..layout._dtypes import has_spyre_format, stick_elems
from ._graph_edits import Facts, _is_value, _new_node

if TYPE_CHECKING:  # lowering._graph calls this module: its classes for the types only
    from ._graph import Graph, Node, Value

__all__ = ["head_dim_splits", "split_heads"]


def head_dim_splits(dtype: Any, head_dim: int) -> bool:
    """Whether heads of ``head_dim`` elements share sticks when merged into one dim.

    True where ``head_dim`` is no multiple of a stick of ``dtype`` (a head then starts
    mid-stick of the merged dim), for a dtype with a Spyre format.
    """
    return has_spyre_format(dtype) and head_dim % stick_elems(dtype) != 0


def split_heads(graph: Graph, facts: Facts) -> Graph:
    """Rewrite every projection split into heads (module docstring) in place; return it.

    ``facts``: the graph's facts, kept current (each rewrite swaps its nodes in them).
    """
    while _split_once(graph, facts):
        pass
    return graph


def _split_once(graph: Graph, facts: Facts) -> bool:
    """One ``reshape(dot_general(x, w), [..., H, D])`` as ``dot_general(x, w[.., H, D])``."""
    for i, node in enumerate(graph.nodes):
        found = _projection(node, facts)
        if found is None:
            continue
        dot, w, at = found
        heads, d = node.outs[0].shape[-2:]
        shape = (*w.shape[:at], heads, d, *w.shape[at + 1 :])
        w3 = _split_value(w, shape, node)
        params = {"new_sizes": shape, "dimensions": None, "sharding": None}
        split = _new_node(dot, "reshape", params, [w], [w3])
        (lc, rc), batch = dot.params["dimension_numbers"]
        rc = tuple(c + (c > at) for c in rc)
        dims = dict(dot.params, dimension_numbers=((lc, rc), batch))
        new = dataclasses.replace(dot, params=dims, ins=[dot.ins[0], w3], outs=node.outs)
        j = graph.nodes.index(dot)  # before the reshape: x and w are made before it
        graph.nodes[i] = new
        graph.nodes[j] = split
        facts.swap([dot, node], [split, new])
        return True
    return False


def _split_value(w: Value, shape: tuple[int, ...], node: Node) -> Value:
    """``w`` reshaped to ``shape``: the weight in heads, made at the split's line."""
    v = dataclasses.replace(w, shape=shape, name=f"{w.name}.heads", kind="node", const=None)
    v.origin = f"reshape (into heads) at {node.source}"
    return v


def _projection(node: Node, facts: Facts) -> tuple[Node, Any, int] | None:
    """``(dot, w, w's free dim)`` if ``node`` splits a product's last dim into heads.

    The product ``dot_general(x, w)`` with no batch dims, ``w``'s one free dim last in
    the product, read by the reshape alone; the reshape keeps every other dim and splits
    that one into ``[H, D]``, ``H`` > 1, ``D`` no whole sticks.
    """
    if node.prim != "reshape" or node.params.get("dimensions") is not None:
        return None
    (c,) = node.ins
    dot = facts.producers.get(c) if _is_value(c) else None
    if dot is None or dot.prim != "dot_general" or facts.readers.get(c) != [node]:
        return None
    if id(c) in facts.outputs or not all(_is_value(u) for u in dot.ins):
        return None
    (_, rc), (lb, _) = dot.params["dimension_numbers"]
    w, out = dot.ins[1], node.outs[0]
    free = [d for d in range(w.ndim) if d not in rc]
    if lb or len(free) != 1 or dot.ins[0] is w or out.ndim != c.ndim + 1:
        return None
    heads, d = out.shape[-2:]
    if out.shape[:-2] != c.shape[:-1] or heads < 2 or heads * d != c.shape[-1]:
        return None
    return (dot, w, free[0]) if head_dim_splits(c.dtype, d) else None
