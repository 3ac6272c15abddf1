"""``jax.vmap`` of a ``spyrejax.jit`` function: the batched function is planned whole.

Run under ``jax.vmap``, the interpreter's Spyre primitives would be batched one by
one, and some cannot be: a ``scan`` moves the batch dim of its ``xs`` behind the
scanned one, which is then not the outermost device dim (``jax.vmap/scan cannot map
over axis 0``), and a carry batched by the loop body must be broadcast (which Spyre
types cannot be by JAX's rule). So a call under ``jax.vmap`` is a ``custom_vmap``
whose rule is ``spyrejax.jit`` of ``jax.vmap`` of the plain function: the planner sees
the batched program and restickifies where it must (``explain`` of the vmapped
function shows it). Its results are put in the batched layouts of the unbatched
results (batch outermost), so they are what the interpreter under ``vmap`` gives.

Results that are views of a larger tensor have no such layout: a call with one runs
the interpreter under ``vmap`` as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from .._jax import ClosedJaxpr, jaxpr_as_fun
from ..lowering.rules._with_layout import with_layout
from ..primitives._array import SpyreType, batched_layout

__all__ = ["can_batch_whole", "vmapped_call"]


def can_batch_whole(out_types: Sequence[SpyreType]) -> bool:
    """Whether every result has a batched layout (no view of a larger tensor)."""
    return all(not t.is_view for t in out_types)


def vmapped_call(
    jaxpr: ClosedJaxpr,
    out_types: Sequence[SpyreType],
    run: Callable[..., Any],
    jits: dict[tuple[bool, ...], Any],
    make_jit: Callable[[Callable[..., Any]], Any],
    leaves: Sequence[Any],
) -> list[Any]:
    """``run(*leaves)`` (the interpreter), batched by planning ``jax.vmap`` of ``jaxpr``.

    Args:
        jaxpr: the plain function, flat leaves in and out.
        out_types: its planned results' types (per example).
        run: the unbatched computation (``jax.jit`` of the interpreter).
        jits: the batched functions' ``spyrejax.jit``, per batched-ness of the inputs.
        make_jit: ``spyrejax.jit`` (passed in: this module sits below it).
        leaves: the call's flat inputs (traced by ``jax.vmap``).
    """

    @jax.custom_batching.custom_vmap
    def call(*xs: Any) -> list[Any]:
        return list(run(*xs))

    @call.def_vmap
    def rule(size: int, in_batched: list[bool], *xs: Any) -> tuple[list[Any], list[bool]]:
        key = (size, *in_batched)
        jitted = jits.get(key)
        if jitted is None:
            jitted = jits[key] = make_jit(_batched_fun(jaxpr, out_types, size, in_batched))
        outs = jitted(*xs)
        return list(outs), [True] * len(outs)

    return call(*leaves)


def _batched_fun(
    jaxpr: ClosedJaxpr, out_types: Sequence[SpyreType], size: int, in_batched: Sequence[bool]
) -> Callable[..., list[Any]]:
    plain = jax.vmap(jaxpr_as_fun(jaxpr), in_axes=[0 if b else None for b in in_batched])

    def batched(*xs: Any) -> list[Any]:
        outs = plain(*xs)
        return [
            with_layout(o, batched_layout(t.layout, t.base_shape, size))
            for o, t in zip(outs, out_types, strict=True)
        ]

    return batched
