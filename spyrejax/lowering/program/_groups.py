"""Attention run as a loop over groups of its batch dim (heads), so its scores stay small.

XLA's CPU runtime allocates a program's temporaries as one block with ``malloc`` on every
call; over glibc's 32 MiB mmap threshold the block is mapped afresh and first-touched
each time. Attention's padded scores alone take 32.8 MB at 8 heads x 1000 tokens
(``benchmarks/README.md`` item 29). A batched product, the elementwise ops on its
result, a softmax (:mod:`._softmax`) and the product of the probabilities with another
batched operand are independent per batch index, so the emulator runs that chain in a
loop over groups of the batch dim: each step's scores are a group's, and the loop body's
buffers are reused. A group holds two indices at least (a device dim of one index is
dropped from the layout, so a group's types would not be the plan's cut): a batch of
two runs whole. A batch the group size does not divide takes one more step, placed
at the end and overlapping the one before (``dynamic_slice`` clamps its start), whose
shared indices are computed twice with the same numbers. The record, the device model
and ``emulate="cores"`` still see every op, whole.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp

from ... import primitives as sp
from ..._errors import SpyreInternalError
from ...layout._layout import SpyreTensorLayout
from ...primitives._array import SpyreType
from ...primitives._tuning import tuning
from .._graph import Graph, Node, Scalar, Value
from .._planner import Plan
from ._softmax import SoftmaxChain

__all__ = ["BatchGroups", "batch_groups", "run_groups"]

_MAPS = frozenset({"add", "sub", "mul", "div", "max", "min", "select_n"})
"""Elementwise nodes the scores may pass through (no shape parameters)."""


@dataclass(frozen=True)
class BatchGroups:
    """A chain from a batched product to the product of its softmax, run by groups.

    Attributes:
        nodes: the chain's nodes in graph order, the first product first, the last last.
        end: the softmax's last node (its ``div``).
        softmax: the softmax chain ending there (run as one kernel).
        inputs: each value read from outside, the type it is read as and the device
            dim walking its batch dim.
        groups: how many steps the loop takes.
        size: how many batch indices each step computes (2 at least).
    """

    nodes: tuple[Node, ...]
    end: Node
    softmax: SoftmaxChain
    inputs: tuple[tuple[Value, SpyreType, int], ...]
    groups: int
    size: int


BROADCAST = -1
"""The "device dim" of an input broadcast along the batch dim: every step reads it whole."""


def _batch_dim(t: SpyreType, batch: int) -> int | None:
    """The device dim walking logical dim 0 of ``t`` (all of it), if ``t`` can be cut so.

    :data:`BROADCAST` for a view that repeats one slice along it (stride 0).
    """
    lay = t.layout
    if lay.has_gaps or lay.is_arranged or t.shape[:1] != (batch,):
        return None
    if t.is_view:
        return BROADCAST if t.strides[0] == 0 and t.base_shape[0] == 1 else None
    walking = [k for k, d in enumerate(t.dims) if 0 in d.dims]
    if len(walking) != 1 or t.dims[walking[0]].dims != (0,):
        return None
    k = walking[0]
    return k if lay.device_size[k] == batch and lay.stride_map[k] > 0 else None


def group_type(t: SpyreType, dim: int, size: int) -> SpyreType:
    """``t`` cut to ``size`` indices of its batch dim (device dim ``dim``)."""
    if dim == BROADCAST:
        return replace(t, shape=(size, *t.shape[1:]))
    lay = t.layout
    device_size = list(lay.device_size)
    device_size[dim] = size
    layout = SpyreTensorLayout.from_stride_map(device_size, lay.stride_map, lay.device_dtype)
    return SpyreType.contiguous((size, *t.shape[1:]), t.dtype, layout, t.pad)


def batch_groups(
    graph: Graph, plan: Plan, softmaxes: dict[Node, SoftmaxChain]
) -> list[BatchGroups]:
    """The chains :func:`run_groups` runs (see the module docstring)."""
    readers: dict[Value, list[Node]] = collections.defaultdict(list, graph.consumers())
    walk = _Walk(plan, readers, {o for o in graph.outputs if isinstance(o, Value)})
    walk.made_by.update({v: n for n in graph.nodes for v in n.outs})
    order = {n: i for i, n in enumerate(graph.nodes)}
    found = []
    for div, chain in softmaxes.items():
        g = walk.chain(div, chain)
        if g is not None:
            nodes = tuple(sorted(g[0], key=order.__getitem__))
            found.append(BatchGroups(nodes, div, chain, *g[1:]))
    return found


def _batched_product(node: Node) -> bool:
    (_, _), (lb, rb) = node.params["dimension_numbers"]
    return tuple(lb) == (0,) and tuple(rb) == (0,)


def _group_size(scores: SpyreType, batch: int) -> tuple[int, int] | None:
    """The steps and the group size of a loop over ``scores``, if it should run.

    The fewest steps whose scores stay under ``batch_group_bytes`` (groups of two at
    least), with groups as even as those steps allow.
    """
    tune, nbytes = tuning(), scores.layout.nbytes
    if nbytes <= tune.batch_loop_min_bytes or batch < 3:
        return None
    size = max(2, tune.batch_group_bytes * batch // nbytes)
    steps = -(-batch // size)
    return (steps, -(-batch // steps)) if steps > 1 else None


_Inputs = tuple[tuple[Value, SpyreType, int], ...]


@dataclass
class _Walk:
    """Walks back from a softmax's ``div`` to the batched product that makes its scores."""

    plan: Plan
    readers: dict[Value, list[Node]]
    outputs: set[Value]
    made_by: dict[Value, Node] = field(default_factory=dict)

    def chain(self, div: Node, chain: SoftmaxChain) -> tuple[list[Node], _Inputs, int, int] | None:
        """The nodes, the inputs, the steps and the group size of the chain through ``div``."""
        plan, readers = self.plan, self.readers
        if len(readers[div.outs[0]]) != 1 or chain.axis == 0:  # the softmax must not mix groups
            return None
        (last,) = readers[div.outs[0]]
        if len(plan.runs[last]) != 1 or last.ins[0] is not div.outs[0]:
            return None
        nodes, ins = [div, *chain.skipped, last], [(last, 1)]
        if not _batched_product(last) or not self._back(chain.x, nodes, ins):
            return None
        batch = last.outs[0].shape[0]
        steps = _group_size(plan.runs[div][0].outs[0], batch)
        inputs = self._inputs(ins, batch)
        if steps is None or inputs is None:
            return None
        run = [n for n in nodes if n is not div and n not in chain.skipped]
        if any(_batch_dim(plan.runs[n][0].outs[0], batch) in (None, BROADCAST) for n in run):
            return None
        return nodes, inputs, *steps

    def _back(self, x: Value, nodes: list[Node], ins: list[tuple[Node, int]]) -> bool:
        """Appends the nodes from the first product to ``x`` and their outside operands."""
        inside = set(nodes)
        while True:
            node = self.made_by.get(x)
            if (
                node is None
                or x in self.outputs
                or self.plan.moves.get(x)
                or len(self.plan.runs.get(node, [])) != 1
                or any(r not in inside for r in self.readers[x])
            ):
                return False
            nodes.append(node)
            inside.add(node)
            if node.prim == "dot_general":
                ins += [(node, 0), (node, 1)]
                return _batched_product(node)
            onward = [
                k
                for k, u in enumerate(node.ins)
                if isinstance(u, Value) and u.shape == x.shape and _leads(u, self.made_by)
            ]
            if node.prim not in _MAPS or len(onward) != 1:
                return False
            ins += [
                (node, k) for k, u in enumerate(node.ins) if k != onward[0] and isinstance(u, Value)
            ]
            x = node.ins[onward[0]]

    def _inputs(self, ins: list[tuple[Node, int]], batch: int) -> _Inputs | None:
        """Each operand read from outside, its type as read and its batch device dim.

        None (the chain runs whole) if one value is read in two types (self-attention's
        ``x`` as both products' operands, say): a step holds one image per value.
        """
        inputs, types = [], {}
        for node, k in ins:
            t = self.plan.runs[node][0].ins[k]
            dim = _batch_dim(t, batch) if isinstance(t, SpyreType) else None
            if dim is None or types.setdefault(node.ins[k], t) != t:
                return None
            inputs.append((node.ins[k], t, dim))
        return tuple(inputs)


def _leads(v: Value, made_by: dict[Value, Node]) -> bool:
    """Whether ``v`` is made from a batched product through elementwise nodes only."""
    while True:
        node = made_by.get(v)
        if node is None:
            return False
        if node.prim == "dot_general":
            return _batched_product(node)
        if node.prim not in _MAPS:
            return False
        path = [u for u in node.ins if isinstance(u, Value) and u.shape == v.shape]
        if not path:
            return False
        v = path[0] if len(path) == 1 else next((u for u in path if _leads(u, made_by)), None)
        if v is None:
            return False


def run_groups(
    groups: BatchGroups,
    plan: Plan,
    env: dict[tuple[Value, SpyreType], Any],
    run_node: Callable[[Node, list[Any]], list[Any]],
    softmax: Callable[[Any, int], Any],
) -> Any:
    """The last product's result, computed by a loop over groups of the batch dim.

    ``run_node(node, ins)`` lowers one node on a group's operands; ``softmax(x, axis)``
    runs the softmax chain. Each node's result in a step must be the plan's type cut to
    the group (its image is what the plan's image holds there).
    """
    last, size = groups.nodes[-1], groups.size
    out_t = plan.runs[last][0].outs[0]
    images = [sp.image(env[v, t]) for v, t, _ in groups.inputs]
    cut = [group_type(t, dim, size) for _, t, dim in groups.inputs]
    skipped = set(groups.softmax.skipped)
    batch = out_t.shape[0]

    def cut_of(node: Node) -> tuple[SpyreType, int]:
        t = plan.runs[node][0].outs[0]
        dim = _batch_dim(t, batch)
        assert dim is not None and dim != BROADCAST  # checked by batch_groups
        return group_type(t, dim, size), dim

    def step(g: jax.Array, out: jax.Array) -> jax.Array:
        local: dict[Value, Any] = {}
        for (v, _, at), img, t in zip(groups.inputs, images, cut, strict=True):
            if at != BROADCAST:
                img = jax.lax.dynamic_slice_in_dim(img, g * size, size, at)
            local[v] = sp.wrap(img, t)
        for node in groups.nodes:
            if node in skipped:
                continue
            if node is groups.end:
                local[node.outs[0]] = softmax(local[groups.softmax.x], groups.softmax.axis)
                continue
            ins = [u if isinstance(u, Scalar) else local[u] for u in node.ins]
            local[node.outs[0]] = _checked(node, run_node(node, ins)[0], cut_of(node)[0])
        return jax.lax.dynamic_update_slice_in_dim(
            out, sp.image(local[last.outs[0]]), g * size, cut_of(last)[1]
        )

    image = jnp.zeros(out_t.layout.device_size, out_t.dtype)
    return sp.wrap(jax.lax.fori_loop(0, groups.groups, step, image), out_t)


def _checked(node: Node, got: Any, want: SpyreType) -> Any:
    """``got`` if it has the plan's type cut to a group, else an internal error."""
    if jax.typeof(got) != want:
        raise SpyreInternalError(
            f"internal error: a group of {node.describe()} gave {jax.typeof(got).str_short()}, "
            f"not {want.str_short()}; please report it"
        )
    return got
