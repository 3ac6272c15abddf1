"""A node's lowering replayed: a repeated layer is lowered once in the record's trace.

While the interpreter's record is traced (``explain``, ``Lowered.as_text``, the device
model), each node run is lowered by its rule: the rule's Python (its primitives built,
their types checked) is most of that trace, and a model's repeated layers run the same
rules on the same types again and again (issue 24: ``explain`` of a deep training step).

A lowering depends only on what the planner evaluates it on (``evaluation_key``: the
primitive, parameters, scalar inputs, shapes, mode and input types). The first run of a
key is lowered by its rule, and its record (:class:`~._record.NodeRun`) says what it
bound. If that was Spyre primitives only, each staged as one equation, reading the
run's inputs, earlier results and plain constants (no arrays: a replayed array would be
one constant where each rule call made its own), later runs of the key bind the same
primitives on their own inputs: the same equations, recorded the same way, without the
rule. Anything else is lowered by its rule every time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ... import primitives as sp
from ..._counts import count
from ..._jax import inner_jaxprs, staged_eqns
from .._graph import Node
from .._node_key import evaluation_key, node_key
from .._registry import is_host_fallback, lower_node
from ._record import Call, NodeRun

__all__ = ["Replays", "replaying"]

_ON: ContextVar[bool] = ContextVar("spyrejax_replaying", default=True)


@contextlib.contextmanager
def replaying(on: bool) -> Iterator[None]:
    """Replay repeated lowerings inside the block (the default) or lower each by its rule.

    Tests compare the two: the jaxpr and the record must be the same either way.
    """
    token = _ON.set(on)
    try:
        yield
    finally:
        _ON.reset(token)


@dataclass(frozen=True)
class _Replay:
    """What a lowering bound: per call its primitive and its operands, then its results.

    An operand or result is ``(True, i)``, the ``i``-th value (the run's inputs, then
    each call's results in order), or ``(False, x)``, the constant ``x``.
    """

    calls: tuple[tuple[Any, tuple[tuple[bool, Any], ...]], ...]
    outs: tuple[int, ...]

    def run(self, ins: Sequence[Any]) -> list[Any]:
        values = list(ins)
        for prim, args in self.calls:
            out = prim(*[values[a] if ref else a for ref, a in args])
            values.extend(out if isinstance(out, tuple | list) else (out,))
        return [values[i] for i in self.outs]


class Replays:
    """The lowerings of one trace of a program, replayed per evaluation key."""

    def __init__(self) -> None:
        self._known: dict[Any, _Replay | None] = {}

    def lower(self, node: Node, ins: list[Any], option: Any, run: NodeRun | None) -> list[Any]:
        """The node's outputs for ``option`` (as ``lower_node``), replayed when known.

        ``run``: the node run being recorded (None: nothing records, nothing replays).
        While an executor runs the primitives (``emulate="cores"``'s record) each run is
        lowered by its rule.
        """
        plain = run is not None and _ON.get() and sp.current_executor() is None
        key = _key(node, option) if plain else None
        if key is None:
            return lower_node(node, ins, option.mode, fallback=True)
        known = self._known.get(key, False)
        if known is not False:
            if known is None:
                return lower_node(node, ins, option.mode, fallback=True)
            count("interpret.replay")
            return known.run(ins)
        before = staged_eqns()
        outs = lower_node(node, ins, option.mode, fallback=True)
        after = staged_eqns()
        assert run is not None
        staged = None if before is None or after is None else after - before
        self._known[key] = _learned(ins, run.entries, outs, staged)
        return outs


def _key(node: Node, option: Any) -> Any:
    """What the node's lowering depends on, or None (lowered by its rule every time)."""
    mode = option.mode
    if mode.takes is not None or mode.clobbers is not None:
        return None
    if is_host_fallback(node) or inner_jaxprs(node):
        return None
    key = evaluation_key(node_key(node), mode, tuple(option.ins))
    if key is None:
        return None
    return key, option.outs, tuple(t.vma for t in option.outs)


def _learned(
    ins: Sequence[Any], entries: Sequence[Any], outs: Sequence[Any], staged: int | None
) -> _Replay | None:
    """The replay of a lowering from its record, or None if it cannot be replayed."""
    if staged is None or staged != len(entries):
        return None  # a body, a plain JAX op, or a primitive staged otherwise
    index = {id(x): i for i, x in enumerate(ins)}
    n = len(ins)  # the values so far (the run's inputs, then each call's results)
    calls = []
    for call in entries:
        if not isinstance(call, Call):
            return None
        args = []
        for a in call.args:
            if id(a) in index:
                args.append((True, index[id(a)]))
            elif _plain(a):
                args.append((False, a))
            else:
                return None
        calls.append((call.prim, tuple(args)))
        for o in call.outs:
            index[id(o)] = n
            n += 1
    if any(id(o) not in index for o in outs):
        return None
    return _Replay(tuple(calls), tuple(index[id(o)] for o in outs))


def _plain(x: Any) -> bool:
    """Whether ``x`` may be given again as it is: no traced value, no array."""
    return not any(
        isinstance(leaf, jax.core.Tracer | jax.Array | np.ndarray) for leaf in jax.tree.leaves(x)
    )
