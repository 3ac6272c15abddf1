"""Eager primitive calls and their autodiff rules as one compiled program each.

Called eagerly (no trace active, concrete operands), a Spyre primitive's kernel would run
op by op, and each ``jnp`` op of it compile a program of its own (tens of milliseconds of
XLA each). :func:`run_eagerly` runs the call under one ``jax.jit`` instead, keyed on the
primitive (its class and parameters), its operands' types and the settings kernels read
while traced (:func:`kernel_settings`): one compile per such key, as ``spyrejax.jit``
compiles the same kernel inside its programs.

Autodiff outside ``jax.jit`` (``jax.grad``, ``jax.vjp``, ``jax.jvp`` of a function of
Spyre arrays) applies each primitive's JVP and transpose rules to concrete values, with
no trace above: the rules' own ``jnp`` ops (masks, converts, the kernel's transposed
ops) would each compile apart the same way. :func:`run_rule_eagerly` runs such a rule
under one ``jax.jit`` keyed like the call, plus the rule and what it takes statically
(which tangents are symbolic zeros).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp

from .._errors import SpyreInternalError
from .._jax import Zero, eager, transpose_from_jvp
from ..dma._ffi import handler_active
from ._array import SpyreArray
from ._tuning import tuning

__all__ = [
    "differentiable",
    "eager_call",
    "eager_jvp",
    "eager_transpose",
    "kernel_settings",
    "run_eagerly",
    "run_rule_eagerly",
]


def eager_call(prim: Any, args: Any) -> bool:
    """Whether a call of ``prim`` (or a rule of it) on ``args`` is eager and can key a program.

    Eager: no trace active and no leaf of ``args`` traced. Keyed: the primitive's
    parameters all hash (``jax.jit`` takes it as a static argument).
    """
    if not eager():
        return False
    leaves = (x.image if isinstance(x, SpyreArray) else x for x in jax.tree.leaves(args))
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return False
    try:
        hash(prim)
    except TypeError:
        return False
    return True


def kernel_settings() -> Hashable:
    """What kernels read while traced besides their types (the hooks tests set)."""
    return tuning(), handler_active()


def run_eagerly(prim: Any, args: tuple[Any, ...]) -> Any:
    """The result of an eager call of ``prim`` (see :func:`eager_call`), as one program."""
    return _run(prim, kernel_settings(), *args)


RuleFn = Callable[..., Any]
"""``rule(prim, static, *arrays)``: a rule of ``prim`` on flat arrays, ``static`` hashable."""


def run_rule_eagerly(prim: Any, rule: RuleFn, static: Hashable, arrays: Any) -> Any:
    """``rule(prim, static, *arrays)`` as one program (an eager rule: see :func:`eager_call`).

    ``rule`` must be a module-level function (it keys the program, with ``prim``, ``static``
    and the arrays' types) returning arrays only: symbolic zeros are told in ``static``.
    """
    return _run_rule(prim, kernel_settings(), rule, static, *arrays)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _run(prim: Any, settings: Hashable, *args: Any) -> Any:
    """The primitive bound inside ``jax.jit`` (as under any trace); ``settings`` keys only."""
    del settings
    return prim(*args)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _run_rule(prim: Any, settings: Hashable, rule: RuleFn, static: Hashable, *args: Any) -> Any:
    """A rule of the primitive traced inside ``jax.jit``; ``settings`` keys only."""
    del settings
    return rule(prim, static, *args)


# --- the autodiff rules of SpyrePrim (``jvp``, and the transpose derived from it) --------


def eager_jvp(prim: Any, primals: Any, tangents: Any) -> tuple[Any, Any]:
    """``prim.jvp(primals, tangents)`` as one program (an eager rule: :func:`eager_call`).

    The tangents of non-float operands, and symbolic zeros, are passed as zeros (the
    rule reads neither); the result's tangents of non-float outputs are symbolic zeros
    (as the rule gives them).
    """
    ts = prim.in_tree.flatten_up_to(tangents)
    zeros = tuple(_no_tangent(t, a) for t, a in zip(ts, prim.in_avals_flat, strict=True))
    given = [t for t, z in zip(ts, zeros, strict=True) if not z]
    arrays = (*prim.in_tree.flatten_up_to(primals), *given)
    outs, t_outs = run_rule_eagerly(prim, _jvp_flat, zeros, arrays)
    got = iter(t_outs)
    t_flat = [next(got) if nz else Zero(a.to_tangent_aval()) for a, nz in _float_outs(prim)]
    return prim.out_tree.unflatten(outs), prim.out_tree.unflatten(t_flat)


def eager_transpose(prim: Any, res: Any, out_ct: Any) -> Any:
    """The cotangents of ``prim``'s operands (``vjp_from_jvp``'s backward rule), as one program.

    ``res`` is the forward rule's residuals: the primals and which operands have tangents
    (concrete flags); symbolic-zero cotangents are told statically.
    """
    primals, nzs_in = res
    nzs = tuple(bool(nz) for nz in prim.in_tree.flatten_up_to(nzs_in))
    cts = prim.out_tree.flatten_up_to(out_ct)
    ct_zeros = tuple(_no_tangent(c, a) for c, a in zip(cts, prim.out_avals_flat, strict=True))
    given = [c for c, z in zip(cts, ct_zeros, strict=True) if not z]
    arrays = (*prim.in_tree.flatten_up_to(primals), *given)
    got = iter(run_rule_eagerly(prim, _transpose_flat, (nzs, ct_zeros), arrays))
    flat = [
        next(got) if nz else Zero(a.to_tangent_aval())
        for a, nz in zip(prim.in_avals_flat, nzs, strict=True)
    ]
    return prim.in_tree.unflatten(flat)


def differentiable(dtype: Any) -> bool:
    """Whether values of ``dtype`` have tangents in a Spyre primitive's rules (floats only)."""
    return bool(jnp.issubdtype(dtype, jnp.floating))


def _no_tangent(t: Any, aval: Any) -> bool:
    """Whether a tangent is nothing a rule reads: a symbolic zero, or of a non-float value."""
    return isinstance(t, Zero) or not differentiable(aval.dtype)


def _float_outs(prim: Any) -> list[tuple[Any, bool]]:
    """Each output's type, and whether ``jvp`` gives it a tangent (a float)."""
    return [(a, differentiable(a.dtype)) for a in prim.out_avals_flat]


def _jvp_flat(prim: Any, zeros: tuple[bool, ...], *arrays: Any) -> Any:
    """``prim.jvp`` on flat primals and the given tangents; the float outputs' tangents."""
    n = len(zeros)
    given = iter(arrays[n:])
    ts = [
        Zero(a.to_tangent_aval()) if z else next(given)
        for a, z in zip(prim.in_avals_flat, zeros, strict=True)
    ]
    out, t_out = prim.jvp(prim.in_tree.unflatten(arrays[:n]), prim.in_tree.unflatten(ts))
    t_flat = prim.out_tree.flatten_up_to(t_out)
    for t, (_, nz) in zip(t_flat, _float_outs(prim), strict=True):
        if isinstance(t, Zero) == nz:
            raise SpyreInternalError(f"{type(prim).__name__}.jvp: a tangent not as its type says")
    return prim.out_tree.flatten_up_to(out), [t for t in t_flat if not isinstance(t, Zero)]


def _transpose_flat(
    prim: Any, static: tuple[tuple[bool, ...], tuple[bool, ...]], *arrays: Any
) -> list[Any]:
    """``vjp_from_jvp``'s backward rule on flat primals and cotangents; the given ones out."""
    nzs, ct_zeros = static
    n = len(nzs)
    given = iter(arrays[n:])
    cts = [
        Zero(a.to_ct_aval()) if z else next(given)
        for a, z in zip(prim.out_avals_flat, ct_zeros, strict=True)
    ]
    res = prim.in_tree.unflatten(arrays[:n]), prim.in_tree.unflatten(list(nzs))
    in_cts = prim.in_tree.flatten_up_to(transpose_from_jvp(prim, res, prim.out_tree.unflatten(cts)))
    out = [c for c, nz in zip(in_cts, nzs, strict=True) if nz]
    if any(isinstance(c, Zero) for c in out):
        raise SpyreInternalError(f"{type(prim).__name__}: a symbolic zero cotangent")
    return out
