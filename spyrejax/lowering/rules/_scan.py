"""The ``scan`` rule: a loop whose body is planned once on its carried types, not unrolled."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax

from ... import primitives as sp
from ..._errors import LayoutError
from ..._jax import scan_options, scan_parts
from ...primitives._array import SpyreType, batched_type
from ...primitives._mapping import stacked_type
from ...primitives._stick import (
    default_type,
    stick_options,
)
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
    _into_cost,
    _invariant_types,
    _Loop,
    _scalar_type,
    _type_of,
    plan_charges,
)


class _Scan(_ControlRule):
    def _decide(
        self, node: Node, types: list[Any]
    ) -> tuple[_Loop, list[SpyreType], list[SpyreType]]:
        """The loop, the stacked inputs' types and the constants' types it runs with."""
        body, nc, nk, length = scan_parts(node.params)
        c = _cache(node)
        key = tuple(types)
        if key in c.decisions:
            return c.decisions[key]
        bound = [u if isinstance(u, Scalar) else None for u in node.ins[:nc]]
        graph = _graph(node, "body", body, bound)
        consts = [t for t in types[:nc] if t is not None]
        init = [
            t if t is not None else _scalar_type(u)
            for t, u in zip(types[nc : nc + nk], node.ins[nc : nc + nk], strict=True)
        ]
        given = types[nc + nk :]
        stacked = [stacked_type(t, length) for t in given]

        def choose(stacked: list[SpyreType], consts: list[SpyreType] = consts) -> _Loop:
            xs = [t.dec_rank(length, 0) for t in stacked]

            def plan_for(carry: list[SpyreType]) -> tuple[_Body, None]:
                carried = range(len(consts), len(consts) + len(carry))
                return _body(node, "body", graph, [*consts, *carry, *xs], carried), None

            return _choose_carry(init, plan_for, length)

        loop = choose(stacked)
        # A stacked input moved before the loop anyway may as well be moved into the
        # stick its slices are read in: try each, one input at a time.
        for j, t in enumerate(given):
            if stacked[j] == t:
                continue
            for s in stick_options(t.shape[1:]):
                alt = batched_type(default_type(t.shape[1:], t.dtype, s), length)
                if alt == stacked[j]:
                    continue
                try:
                    other = choose([*stacked[:j], alt, *stacked[j + 1 :]])
                except LayoutError:
                    continue
                if other.cost < loop.cost:
                    loop, stacked = other, [*stacked[:j], alt, *stacked[j + 1 :]]
        # A constant the body relays out on every iteration (a weight read transposed,
        # or sliced by a loop inside the body) is relaid out once before the loop.
        hoisted = _invariant_types(loop.body, consts)
        if hoisted != consts and length > 1:
            try:
                other = choose(stacked, hoisted)
            except LayoutError:
                other = None
            once = sum(_into_cost(a, b) for a, b in zip(consts, hoisted, strict=True))
            if other is not None and other.cost + once < loop.cost:
                loop, consts = replace(other, cost=other.cost + once), hoisted
        c.decisions[key] = (loop, stacked, consts)
        return loop, stacked, consts

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        _, nc, nk, length = scan_parts(node.params)
        reverse, unroll = scan_options(node.params)
        types = [_type_of(a) for a in args]
        loop, stacked, const_types = self._decide(node, types)
        held = [(i, a) for i, a in enumerate(args[:nc]) if not isinstance(a, Scalar)]
        consts = [
            _before(node, [a], [t], i, "into the layout the body reads it in")[0]
            for (i, a), t in zip(held, const_types, strict=True)
        ]
        init = _before(node, args[nc : nc + nk], loop.carry, nc, "into the type it is carried in")
        xs = _before(
            node, args[nc + nk :], stacked, nc + nk, "into the stacked layout of its slices"
        )
        body, carry = loop.body, loop.carry
        context = f"in the body of {node.describe()}"
        called = sp.abstract_calls()
        if called is not None:  # planning: the types, and what the iterations copy
            _emit(called, plan_charges(body.plan, length, context))
            _emit(called, _fix_charges(body, carry, length, context))
            ys = [batched_type(t, length) for t in body.outs[nk:]]
            return [sp.abstract(t) for t in [*carry, *ys]]

        x_types = [t.dec_rank(length, 0) for t in stacked]
        y_types = [batched_type(t, length) for t in body.outs[nk:]]

        images = [sp.image(x) for x in xs]
        loop = record.loop("scan", length)

        # Stacked operands go through the loop as device images (sliced and stacked
        # along the image's dim 0, the logical dim 0 of a stacked layout); carries as
        # Spyre arrays.
        def step(c: list[Any], x: list[Any]) -> tuple[list[Any], list[Any]]:
            with record.body(loop, "body", list(c), list(init), images=list(x)) as b:
                x = [sp.wrap(i, t) for i, t in zip(x, x_types, strict=True)]
                outs = body.run(*consts, *c, *x)
                c = [_into(o, t) for o, t in zip(outs[:nk], carry, strict=True)]
                if b is not None:
                    b.outs = c
                return c, [sp.image(y) for y in outs[nk:]]

        c_out, ys = jax.lax.scan(step, init, images, length=length, reverse=reverse, unroll=unroll)
        record.finish(loop, c_out, images=ys)
        return [*c_out, *(sp.wrap(y, t) for y, t in zip(ys, y_types, strict=True))]


_register(_Scan(), "scan")
