"""The ``while`` rule: a loop whose body and predicate are planned once on the carry's types."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ... import primitives as sp
from ..._errors import SpyreInternalError
from ..._jax import jaxpr_as_fun, while_parts
from ...primitives._array import SpyreType
from .._graph import Node, Scalar
from .._registry import Mode, _register
from ..program import _record as record
from ._control import (
    _before,
    _Body,
    _body,
    _cache,
    _choose_carry,
    _ControlRule,
    _emit,
    _fix_charges,
    _graph,
    _into,
    _Loop,
    _scalar_type,
    _type_of,
    plan_charges,
)


def _any_predicate(params: dict[str, Any]) -> tuple[Any, Any, int, int]:
    """A while whose predicate is batched (``jax.vmap``), as one with a scalar predicate.

    JAX runs such a loop while any element's predicate holds, and each iteration
    updates only the elements whose predicate holds: the predicate is folded into the
    body (a select) and reduced for the test, so the body and test are plain jaxprs.

    Returns:
        The loop's predicate and body and how many constants each takes first
        (:func:`spyrejax._jax.while_parts`).
    """
    cond, body, cn, bn = while_parts(params)
    if cond.out_avals[0].shape == ():
        return cond, body, cn, bn
    test_fn, step_fn = jaxpr_as_fun(cond), jaxpr_as_fun(body)
    cconsts = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in cond.in_avals[:cn]]
    bconsts = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in body.in_avals[:bn]]
    carry = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in body.in_avals[bn:]]

    def any_test(*args: Any) -> Any:
        (pred,) = test_fn(*args)
        return jnp.max(pred.astype(np.int32)) > 0

    def masked_step(*args: Any) -> list[Any]:
        cc, bc, c = args[:cn], args[cn : cn + bn], args[cn + bn :]
        (pred,) = test_fn(*cc, *c)
        new = step_fn(*bc, *c)
        keep = range(pred.ndim)
        return [
            jax.lax.select(jax.lax.broadcast_in_dim(pred, n.shape, tuple(keep)), n, o)
            for n, o in zip(new, c, strict=True)
        ]

    return (
        jax.make_jaxpr(any_test)(*cconsts, *carry),
        jax.make_jaxpr(masked_step)(*cconsts, *bconsts, *carry),
        cn,
        cn + bn,
    )


class _While(_ControlRule):
    def _parts(self, node: Node) -> tuple[Any, Any, int, int]:
        """The loop's predicate, body and constant counts (a batched predicate folded)."""
        c = _cache(node)
        if "parts" not in c.decisions:
            c.decisions["parts"] = _any_predicate(node.params)
        return c.decisions["parts"]

    def _ins(self, node: Node, args: list[Any]) -> list[Any]:
        """The operands as the loop takes them: the predicate's constants also the body's."""
        cond, _, cn, _ = while_parts(node.params)
        if self._parts(node)[0] is cond:
            return args
        return [*args[:cn], *args[:cn], *args[cn:]]

    def _decide(self, node: Node, types: list[Any]) -> _Loop:
        test, step, cn, bn = self._parts(node)
        c = _cache(node)
        key = tuple(types)
        if key in c.decisions:
            return c.decisions[key]
        ins = self._ins(node, list(node.ins))
        cbound = [u if isinstance(u, Scalar) else None for u in ins[:cn]]
        bbound = [u if isinstance(u, Scalar) else None for u in ins[cn : cn + bn]]
        cgraph = _graph(node, "cond", test, cbound)
        bgraph = _graph(node, "body", step, bbound)
        cconsts = [t for t in types[:cn] if t is not None]
        bconsts = [t for t in types[cn : cn + bn] if t is not None]
        init = [
            t if t is not None else _scalar_type(u)
            for t, u in zip(types[cn + bn :], ins[cn + bn :], strict=True)
        ]

        def plan_for(carry: list[SpyreType]) -> tuple[_Body, _Body]:
            carried = range(len(bconsts), len(bconsts) + len(carry))  # updated in place
            return (
                _body(node, "body", bgraph, [*bconsts, *carry], carried),
                _body(node, "cond", cgraph, [*cconsts, *carry]),
            )

        loop = c.decisions[key] = _choose_carry(init, plan_for, 1)
        return loop

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        _, _, cn, bn = self._parts(node)
        args = self._ins(node, args)
        loop = self._decide(node, [_type_of(a) for a in args])
        cconsts = [a for a in args[:cn] if not isinstance(a, Scalar)]
        bconsts = [a for a in args[cn : cn + bn] if not isinstance(a, Scalar)]
        init = _before(node, args[cn + bn :], loop.carry, cn + bn, "into the type it is carried in")
        body, cond, carry = loop.body, loop.cond, loop.carry
        if cond is None:
            raise SpyreInternalError(f"internal error: {node.describe()} has no planned predicate")
        called = sp.abstract_calls()
        if called is not None:
            context = f"per iteration of {node.describe()} (trip count unknown)"
            _emit(called, plan_charges(body.plan, 1, context))
            _emit(called, plan_charges(cond.plan, 1, context))
            _emit(called, _fix_charges(body, carry, 1, context))
            return [sp.abstract(t) for t in carry]

        loop = record.loop("while")

        def test(c: tuple[Any, ...]) -> Any:
            with record.body(loop, "test", list(c), init):
                return sp.to_host(cond.run(*cconsts, *c)[0])

        def step(c: tuple[Any, ...]) -> tuple[Any, ...]:
            with record.body(loop, "body", list(c), init) as b:
                outs = body.run(*bconsts, *c)
                new = tuple(_into(o, t) for o, t in zip(outs, carry, strict=True))
                if b is not None:
                    b.outs = list(new)
                return new

        results = list(jax.lax.while_loop(test, step, tuple(init)))
        record.finish(loop, results)
        return results


_register(_While(), "while")
