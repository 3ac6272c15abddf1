"""The ``cond`` and ``switch`` rule, and ``select_n`` with an integer index.

``select_n`` with an integer index is what ``cond`` and ``switch`` become under ``jax.vmap``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ... import primitives as sp
from ..._jax import cond_branches
from ...primitives._array import SpyreType
from .._graph import Node, Scalar
from .._registry import RULES, Mode, Rule, _register, pointwise_modes
from ..program import _record as record
from . import _elementwise  # noqa: F401  (registers select_n, which _SelectN wraps)
from ._control import (
    _Body,
    _body,
    _cache,
    _carried,
    _ControlRule,
    _emit,
    _fix_charges,
    _graph,
    _into,
    _type_of,
    plan_charges,
)

# --- cond and switch ------------------------------------------------------------------


@dataclass
class _Branches:
    bodies: list[_Body]
    outs: list[SpyreType]


class _Cond(_ControlRule):
    def _decide(self, node: Node, types: list[Any]) -> _Branches:
        c = _cache(node)
        key = tuple(types)
        if key in c.decisions:
            return c.decisions[key]
        bound = [u if isinstance(u, Scalar) else None for u in node.ins[1:]]
        ops = [t for t in types[1:] if t is not None]
        bodies = []
        for k, branch in enumerate(cond_branches(node.params)):
            graph = _graph(node, f"branch{k}", branch, bound)
            bodies.append(_body(node, f"branch{k}", graph, ops))
        outs = []
        for got in zip(*(b.outs for b in bodies), strict=True):
            outs.append(got[0] if len(set(got)) == 1 else _carried(got[0]))
        d = c.decisions[key] = _Branches(bodies, outs)
        return d

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        index, ops = args[0], [a for a in args[1:] if not isinstance(a, Scalar)]
        d = self._decide(node, [_type_of(a) for a in args])
        called = sp.abstract_calls()
        if called is not None:
            n = len(d.bodies)
            for k, b in enumerate(d.bodies):
                context = f"in branch {k} of {node.describe()} (one of {n} runs)"
                _emit(called, plan_charges(b.plan, 1, context, "run"))
                _emit(called, _fix_charges(b, d.outs, 1, context, "output"))
            return [sp.abstract(t) for t in d.outs]

        if isinstance(index, Scalar):  # known at trace time: that branch alone
            k = min(max(int(index.value), 0), len(d.bodies) - 1)
            return [_into_out(o, t) for o, t in zip(d.bodies[k].run(*ops), d.outs, strict=True)]
        loop = record.loop("cond")

        def branch(k: int, b: _Body) -> Any:
            def run(*xs: Any) -> list[Any]:
                with record.body(loop, k, list(xs), ops) as rb:
                    outs = [_into_out(o, t) for o, t in zip(b.run(*xs), d.outs, strict=True)]
                    if rb is not None:
                        rb.outs = outs
                    return outs

            return run

        fns = [branch(k, b) for k, b in enumerate(d.bodies)]
        results = list(jax.lax.switch(sp.to_host(index), fns, *ops))
        record.finish(loop, results)
        return results


def _into_out(x: Any, want: SpyreType) -> Any:
    """A branch's output in the type every branch gives (views kept when all agree)."""
    return x if jax.typeof(x) == want else _into(x, want)


_register(_Cond(), "cond")


# --- select_n with an integer index: cond and switch under jax.vmap ---------------------


class _SelectN(Rule):
    """``select_n`` with a bool predicate (``where``), or an int32 case index.

    ``jax.vmap`` turns a ``cond``/``switch`` on a batched index into every branch and a
    ``select_n`` on the index: case ``k`` where the index is ``k``, a chain of
    ``where(index == k, case_k, ...)`` on the device.
    """

    def __init__(self, where: Rule) -> None:
        self.where = where

    def modes(self, node: Node) -> list[Mode]:
        return pointwise_modes(node)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        index, cases = args[0], args[1:]
        kind = np.dtype(index.dtype) if isinstance(index, Scalar) else jax.typeof(index).dtype
        if kind == np.bool_ and len(cases) == 2:
            return self.where.lower(node, args, mode)
        dtype = node.outs[0].dtype
        out_shape = node.outs[0].shape
        vals = [sp.full(out_shape, c.value, dtype) if isinstance(c, Scalar) else c for c in cases]
        if isinstance(index, Scalar):
            return [vals[int(index.value)]]
        out = vals[-1]
        for k in range(len(vals) - 2, -1, -1):
            hit = sp.elementwise("eq", index, np.asarray(k, kind))
            out = sp.elementwise("where", hit, vals[k], out)
        return [out]


_register(_SelectN(RULES["select_n"]), "select_n")
