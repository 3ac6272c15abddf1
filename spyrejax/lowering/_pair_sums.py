"""A sum over a pair of products, unrolled: FMS's 2 x 2 RoPE rotation without a copy (issue 26).

FMS rotates the pairs of ``x`` with a 2 x 2 matrix per pair:
``(rot[:, None] * x.reshape(T, H, D // 2, 1, 2)).sum(-1).reshape(T, H, D)``, where
``rot`` is ``stack([stack([cos, -sin], -1), stack([sin, cos], -1)], -2)``. Planned as
written, the product is a ``[T, H, D/2, 2, 2]`` tensor built by concatenates of pieces
and copied into the stick the reduction reads, and the result copied back to ``[T, H, D]``.

Written out, row ``r`` of the result is ``p(r, 0) + p(r, 1)`` with ``p(r, c)`` the product
picked at row ``r``, column ``c``: ``x[..., c::2]`` (a lane view of ``x``) times the
rotation's entry (a broadcast of ``cos``, ``sin`` or ``-sin``), and the result is the
interleave of its rows (``lowering.rules._interleave``: each row written on its lanes).
:func:`unroll_pair_sums` rewrites the graph so: nothing is copied.

The pattern: ``reshape(cvt*(reduce_sum(cvt*(f(a, b, ...)), last)), [..., N * R])`` with
``f`` pointwise, ``cvt*`` dtype conversions (JAX sums float16 in float32), the summed dim
of 2 (two terms added once: the reduction's value, to the sign of a zero: ``-0.0 +
-0.0`` is ``-0.0`` where the reduction, summed from its ``+0.0`` init, gives ``+0.0``; an
explicit init would not keep it, as XLA folds ``x + 0.0`` to ``x``) and the kept last dim
``R >= 2``. Each operand is picked at ``(r, c)`` through the nodes that built it
(broadcasts, concatenates, expand_dims, the pair reshape of ``x``), or, where no such
node gives it and it is no dim of 1, the rewrite does not apply (the piece would be a
copy: FMS's rotation given as a host array keeps its reduction).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ._graph_edits import _POINTWISE, Facts, _drop_unread, _is_value, _new_node

if TYPE_CHECKING:  # lowering._graph calls this module: its classes for the types only
    from ._graph import Graph, Node, Value

__all__ = ["unroll_pair_sums"]

_CONVERT = "convert_element_type"


def unroll_pair_sums(graph: Graph, facts: Facts | None = None) -> Graph:
    """Rewrite every pair sum of ``graph`` (see the module docstring) in place; return it.

    ``facts``: the graph's :class:`~spyrejax.lowering._graph_edits.Facts`, walked once by
    the caller and kept current here (each unroll swaps its nodes in them), so the
    rewrites that follow read them as they are.
    """
    facts = Facts.of(graph) if facts is None else facts
    changed = False
    while _unroll_once(graph, facts):
        changed = True
    if changed:
        _drop_unread(graph, facts)
    return graph


def _unroll_once(graph: Graph, facts: Facts) -> bool:
    producers, readers, outputs = facts.producers, facts.readers, facts.outputs
    for node in graph.nodes:
        if node.prim != "reshape" or node.params.get("dimensions") is not None:
            continue
        found = _pair_sum(node, producers, readers, outputs)
        if found is None:
            continue
        f, before, after, gone = found
        new = _rows(f, before, after, node, producers)
        if new is None:
            continue
        at = graph.nodes.index(f)
        graph.nodes[at:at] = new
        for n in [*gone, node]:
            graph.nodes.remove(n)
        facts.swap([*gone, node], new)
        return True
    return False


def _only_reader(v: Any, node: Node, readers: Any, outputs: set[int]) -> bool:
    return _is_value(v) and id(v) not in outputs and readers[v] == [node]


def _converts_back(v: Value, producers: Any, readers: Any, outputs: set[int]) -> Any:
    """``(origin, [conversions from it to v, in order])``: each read by the next alone."""
    chain: list[Node] = []
    src = producers.get(v)
    while src is not None and src.prim == _CONVERT and _is_value(src.ins[0]):
        if chain and not _only_reader(src.outs[0], chain[0], readers, outputs):
            break
        chain.insert(0, src)
        src = producers.get(src.ins[0])
    return (chain[0].ins[0] if chain else v), chain


def _pair_sum(reshape: Node, producers: Any, readers: Any, outputs: set[int]) -> Any:
    """``(f, converts before the sum, converts after it, nodes removed)`` or None."""
    y, out = reshape.ins[0], reshape.outs[0]
    if not _is_value(y) or y.ndim < 2 or y.shape[-1] < 2:
        return None
    if out.shape != (*y.shape[:-2], y.shape[-2] * y.shape[-1]):
        return None
    s, after = _converts_back(y, producers, readers, outputs)
    red = producers.get(s)
    if red is None or red.prim != "reduce_sum" or not _only_reader(y, reshape, readers, outputs):
        return None
    if after and not _only_reader(s, after[0], readers, outputs):
        return None
    v = red.ins[0]
    if not _is_value(v) or tuple(red.params["axes"]) != (v.ndim - 1,) or v.shape[-1] != 2:
        return None
    if not _only_reader(v, red, readers, outputs):
        return None
    p, before = _converts_back(v, producers, readers, outputs)
    f = producers.get(p)
    if f is None or f.prim not in _POINTWISE or len(f.outs) != 1:
        return None
    if before and not _only_reader(p, before[0], readers, outputs):
        return None
    ok = all(not _is_value(x) or _broadcasts(x.shape, p.shape) for x in f.ins)
    return (f, before, after, [f, *before, red, *after]) if ok else None


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    return len(shape) == len(to) and all(a in (b, 1) for a, b in zip(shape, to, strict=True))


def _rows(
    f: Node, before: list[Node], after: list[Node], reshape: Node, producers: Any
) -> list[Node] | None:
    """The new nodes: each row's two products, their sum, and the interleave of the rows.

    None if an operand's piece is no value the program built, a lane of a pair reshape
    or a view dropping dims of 1 (picking it would copy).
    """
    p = f.outs[0]
    rdim, cdim = p.ndim - 2, p.ndim - 1
    new: list[Node] = []
    rows = []
    for r in range(p.shape[rdim]):
        terms = []
        for c in range(2):
            tag = f"{p.name}.{r}{c}"
            ins = [
                _pick(x, {rdim: r, cdim: c}, f"{tag}.{j}", f, producers, new) if _is_value(x) else x
                for j, x in enumerate(f.ins)
            ]
            if any(x is None for x in ins):
                return None  # an operand would be a copy: the reduction stays
            term = _apply(f, ins, tag, new)
            for k, cvt in enumerate(before):
                term = _apply(cvt, [term], f"{tag}.cvt{k}", new)
            terms.append(term)
        row = _node(f, "add", {}, terms, _value(terms[0], terms[0].shape, f"{p.name}.{r}"), new)
        for k, cvt in enumerate(after):
            row = _apply(cvt, [row], f"{p.name}.{r}.cvt{k}", new, drop=1)
        rows.append(row)
    new.append(_new_node(reshape, "interleave", {}, rows, reshape.outs))
    return _dedupe(new)


def _dedupe(new: list[Node]) -> list[Node]:
    """``new`` without repeats: a node of the same op on the same values reads the first's."""
    seen: dict[Any, Value] = {}
    same: dict[int, Value] = {}
    kept = []
    for n in new:
        n.ins = [same.get(id(x), x) if _is_value(x) else x for x in n.ins]
        ins = tuple(id(x) if _is_value(x) else repr(x) for x in n.ins)
        key = (n.prim, repr(sorted(n.params.items())), ins)
        if key in seen and len(n.outs) == 1:
            same[id(n.outs[0])] = seen[key]
            continue
        seen[key] = n.outs[0]
        kept.append(n)
    return kept


def _value(like: Value, shape: tuple[int, ...], name: str, dtype: Any = None) -> Value:
    v = dataclasses.replace(like, shape=tuple(shape), name=name, kind="node", const=None)
    if dtype is not None:
        v.dtype = dtype
    return v


def _node(like: Node, prim: str, params: dict, ins: list, out: Value, new: list) -> Value:
    new.append(_new_node(like, prim, params, ins, [out]))
    return out


def _apply(node: Node, ins: list, name: str, new: list[Node], drop: int = 2) -> Value:
    """``node``'s op on ``ins`` (its ``drop`` last dims picked): its result, a node appended."""
    shape = node.outs[0].shape[:-drop]
    out = _value(node.outs[0], shape, name)
    new.append(dataclasses.replace(node, ins=ins, outs=[out]))
    return out


def _dropped(shape: tuple[int, ...], dims: Any) -> tuple[int, ...]:
    return tuple(n for d, n in enumerate(shape) if d not in dims)


def _pick(
    x: Value, picks: dict[int, int], tag: str, at: Node, producers: Any, new: list[Node]
) -> Value | None:
    """``x`` at index ``picks[d]`` of each dim ``d`` (dims of 1 at 0), those dims dropped.

    Through the nodes that built ``x``; or, where every picked dim is 1, ``x`` reshaped
    without them (a view); else None.
    """
    picks = {d: (0 if x.shape[d] == 1 else k) for d, k in picks.items()}
    if not picks:
        return x
    src = producers.get(x)
    for through in (_through_broadcast, _through_concatenate, _through_expand, _through_pairs):
        got = through(x, src, picks, tag, at, producers, new) if src is not None else None
        if got is not None:
            return got
    if any(x.shape[d] != 1 for d in picks):
        return None
    shape = _dropped(x.shape, picks)
    params = {"new_sizes": shape, "dimensions": None, "sharding": None}
    return _node(at, "reshape", params, [x], _value(x, shape, f"{tag}.r"), new)


def _through_broadcast(x, src, picks, tag, at, producers, new):
    if src.prim != "broadcast_in_dim" or len(src.ins) != 1 or not _is_value(src.ins[0]):
        return None
    (y,) = src.ins
    dims = tuple(src.params["broadcast_dimensions"])
    inner = {k: picks[d] for k, d in enumerate(dims) if d in picks}
    picked = _pick(y, inner, tag, at, producers, new)
    if picked is None:
        return None
    shape = _dropped(x.shape, picks)
    kept = [d for d in range(x.ndim) if d not in picks]
    bdims = tuple(kept.index(d) for d in dims if d not in picks)
    if picked.shape == shape and bdims == tuple(range(len(shape))):
        return picked
    params = dict(src.params, shape=shape, broadcast_dimensions=bdims)
    return _node(at, "broadcast_in_dim", params, [picked], _value(x, shape, f"{tag}.b"), new)


def _through_concatenate(x, src, picks, tag, at, producers, new):
    dim = src.params.get("dimension") if src.prim == "concatenate" else None
    if dim not in picks:
        return None
    start = 0
    for piece in src.ins:
        n = piece.shape[dim]
        if start <= picks[dim] < start + n:
            return _pick(piece, {**picks, dim: picks[dim] - start}, tag, at, producers, new)
        start += n
    return None


def _through_expand(x, src, picks, tag, at, producers, new):
    if src.prim != "expand_dims" or not _is_value(src.ins[0]):
        return None
    (y,) = src.ins
    added = set(src.params["dimensions"])
    kept = [d for d in range(x.ndim) if d not in added]
    picked = _pick(
        y, {kept.index(d): k for d, k in picks.items() if d not in added}, tag, at, producers, new
    )
    if picked is None:
        return None
    left = [d for d in range(x.ndim) if d not in picks]
    still = tuple(left.index(d) for d in sorted(added) if d not in picks)
    if not still:
        return picked
    shape = _dropped(x.shape, picks)
    return _node(
        at, "expand_dims", {"dimensions": still}, [picked], _value(x, shape, f"{tag}.e"), new
    )


def _through_pairs(x, src, picks, tag, at, producers, new):
    """``x.reshape(..., N, 1, ..., s)`` picked at lane ``c`` of the last dim: ``x[..., c::s]``."""
    if src.prim != "reshape" or src.params.get("dimensions") is not None:
        return None
    (y,) = src.ins
    s, last = x.shape[-1], x.ndim - 1
    if not _is_value(y) or y.ndim < 1 or last not in picks or s < 2 or y.shape[-1] % s:
        return None
    lead = y.ndim - 1
    ones = set(range(lead + 1, last))
    if x.shape[:lead] != y.shape[:-1] or x.shape[lead] * s != y.shape[-1]:
        return None
    if any(x.shape[d] != 1 for d in ones) or set(picks) != ones | {last}:
        return None
    c = picks[last]
    params = {
        "start_indices": (0,) * lead + (c,),
        "limit_indices": y.shape,
        "strides": (1,) * lead + (s,),
    }
    return _node(
        at, "slice", params, [y], _value(y, (*y.shape[:-1], x.shape[lead]), f"{tag}.l"), new
    )
