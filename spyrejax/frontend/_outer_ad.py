"""Differentiating a ``spyrejax.jit`` function from outside, with the function's own rules.

The graph inlines ``custom_jvp``/``custom_vjp`` bodies and forwards ``stop_gradient``,
so JAX differentiating the Spyre computation itself would go around those rules
(``relu'(0)`` would be ``lax.max``'s tie, 0.5, not relu's 0). Instead, under ``jax.grad``
or ``jax.vjp`` such a call is a ``jax.custom_vjp``: its forward pass is the planned
computation, and its backward pass is ``spyrejax.jit`` of ``jax.vjp`` of the *plain*
function (its traced jaxpr), so JAX applies the function's derivative rules while
tracing, exactly as ``jax.grad(jax.jit(f))`` does. The backward pass recomputes the
forward one on the device (the residuals are the inputs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import primitives as sp
from .._errors import SpyreUnsupportedError
from .._jax import ClosedJaxpr, jaxpr_as_fun
from ..primitives._array import SpyreType

__all__ = ["vjp_function", "with_own_derivatives"]


def _is_float(aval: Any) -> bool:
    return jnp.issubdtype(aval.dtype, jnp.inexact)


def vjp_function(closed: ClosedJaxpr) -> Callable[..., list[Any]]:
    """``(primals, cotangents) -> input cotangents`` of the function ``closed`` traces.

    ``cotangents`` holds one entry per float output; integer and bool inputs get
    None (no cotangent).
    """
    fun = jaxpr_as_fun(closed)
    out_avals = closed.out_avals

    def backward(primals: list[Any], cotangents: list[Any]) -> list[Any]:
        given = iter(cotangents)
        cts = [
            next(given) if _is_float(a) else np.zeros(a.shape, jax.dtypes.float0) for a in out_avals
        ]
        _, pullback = jax.vjp(lambda *xs: fun(*xs), *primals)
        grads = pullback(cts)
        return [g if _is_float(a) else None for g, a in zip(grads, closed.in_avals, strict=True)]

    return backward


def _as_tangent(ct: Any, aval: Any) -> Any:
    """A host cotangent from the backward pass in the type of its input's tangents."""
    if not isinstance(aval, SpyreType):
        return ct
    if aval.is_view:
        raise SpyreUnsupportedError(
            f"differentiating spyrejax.jit from outside with respect to a view "
            f"{aval.str_short()}: pass a fresh array (spyrejax.restickify) instead"
        )
    return sp.to_device(ct, aval.layout)


def with_own_derivatives(
    primal: Callable[[Sequence[Any]], list[Any]],
    backward: Callable[..., list[Any]],
    leaves: Sequence[Any],
    in_avals: Sequence[Any],
    out_avals: Sequence[Any],
) -> list[Any]:
    """``primal(leaves)`` under a ``jax.custom_vjp`` whose backward pass is ``backward``.

    Args:
        primal: the planned computation on flat inputs (no autodiff tracers inside).
        backward: ``spyrejax.jit`` of :func:`vjp_function` of the plain function,
            with host results.
        leaves: the flat inputs (some are autodiff tracers).
        in_avals: the inputs' abstract values (Spyre types or host shapes).
        out_avals: the plain function's output avals (which ones take cotangents).
    """

    @jax.custom_vjp
    def run(*xs: Any) -> list[Any]:
        return list(primal(xs))

    def fwd(*xs: Any) -> tuple[list[Any], tuple[Any, ...]]:
        return list(primal(xs)), xs

    def bwd(xs: tuple[Any, ...], cts: list[Any]) -> tuple[Any, ...]:
        floats = [ct for ct, a in zip(cts, out_avals, strict=True) if _is_float(a)]
        grads = backward(list(xs), floats)
        return tuple(
            None if g is None else _as_tangent(g, a) for g, a in zip(grads, in_avals, strict=True)
        )

    run.defvjp(fwd, bwd)
    return run(*leaves)
