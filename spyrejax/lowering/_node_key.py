"""What a node's evaluation by the planner depends on, as hashable keys of its caches."""

from __future__ import annotations

import weakref
from typing import Any

from ..primitives._array import SpyreType
from ._graph import Node, Scalar
from ._registry import Mode

__all__ = ["NodeKey", "evaluation_key", "node_key"]


class NodeKey:
    """What a node's lowering depends on besides its mode and input types, hashed once.

    A hashable key of the node's primitive, parameters, scalar inputs and shapes; the
    planner and the device model key their per-evaluation caches on it, many times per
    node, so its hash is computed once.
    """

    __slots__ = ("_hash", "key")

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeKey):
            return NotImplemented
        return self is other or (self._hash == other._hash and self.key == other.key)


_KEYS: weakref.WeakKeyDictionary[Node, NodeKey | None] = weakref.WeakKeyDictionary()


def node_key(node: Node) -> NodeKey | None:
    """The node's :class:`NodeKey`, or None if its parameters are not hashable.

    Made once per node (the planner and the interpreter's replays ask for it again).
    """
    if node in _KEYS:
        return _KEYS[node]
    key = _KEYS[node] = _node_key(node)
    return key


def _node_key(node: Node) -> NodeKey | None:
    scalars = tuple((u.value, u.dtype) if isinstance(u, Scalar) else None for u in node.ins)
    outs = tuple((o.shape, o.dtype) for o in node.outs)
    in_shapes = tuple(None if isinstance(u, Scalar) else (u.shape, u.dtype) for u in node.ins)
    try:
        params = tuple(sorted(node.params.items()))
        return NodeKey((node.prim, params, scalars, outs, in_shapes))
    except TypeError:
        return None


def evaluation_key(base: NodeKey | None, mode: Mode, ins: tuple[SpyreType | None, ...]) -> Any:
    """A hashable key for an evaluation of a node (``base``: its :func:`node_key`)."""
    if base is None:
        return None
    # Types compare without vma, but a result varies over the mesh axes its operands do.
    vma = tuple(frozenset() if t is None else t.vma for t in ins)
    return (base, mode, ins, vma)
