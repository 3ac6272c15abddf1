"""Lowering rules of the random family: bit reinterpretation for ``jax.random``.

``jax.random`` makes floats from random bits by reinterpreting them
(``bitcast_convert_type`` of ``uint32`` bits to ``float32``); the bit ops and the
integer arithmetic of threefry are elementwise ops (``spyrejax.primitives.OPS``) and
the keys are their data (``_keys``). The rules here register into ``RULES``.
"""

from __future__ import annotations

from typing import Any

from ... import primitives as sp
from ..._errors import SpyreUnsupportedError
from ...primitives._stick import SPARSE, canon, stick_options
from .._graph import Node
from .._registry import Mode, Rule, _register

__all__: list[str] = []


class _Bitcast(Rule):
    """Same-width bitcasts keep the layout: each element's bits in place."""

    def modes(self, node: Node) -> list[Mode]:
        x, out = node.ins[0], node.outs[0]
        if x.dtype.itemsize != out.dtype.itemsize:
            raise SpyreUnsupportedError(
                f"bitcast_convert_type from {x.dtype} to {out.dtype} at {node.source}: "
                "spyrejax bitcasts between dtypes of the same width only"
            )
        return [
            Mode(
                (canon(x.shape, s) if x.shape else None,),
                canon(out.shape, s) if out.shape else SPARSE,
            )
            for s in stick_options(out.shape)
        ]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [sp.bitcast(args[0], node.params["new_dtype"])]


_register(_Bitcast(), "bitcast_convert_type")
