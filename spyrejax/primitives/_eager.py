"""Eager primitive calls as one compiled program each, not their kernels op by op.

Called eagerly (no trace active, concrete operands), a Spyre primitive's kernel would run
op by op, and each ``jnp`` op of it compile a program of its own (tens of milliseconds of
XLA each). :func:`run_eagerly` runs the call under one ``jax.jit`` instead, keyed on the
primitive (its class and parameters), its operands' types and the settings kernels read
while traced (:func:`kernel_settings`): one compile per such key, as ``spyrejax.jit``
compiles the same kernel inside its programs.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

import jax

from .._jax import eager
from ..dma._ffi import handler_active
from ._array import SpyreArray
from ._tuning import tuning

__all__ = ["eager_call", "kernel_settings", "run_eagerly"]


def eager_call(prim: Any, args: tuple[Any, ...]) -> bool:
    """Whether a call of ``prim`` is eager and can key a program.

    Eager: no trace active and no operand traced. Keyed: the primitive's parameters all
    hash (``jax.jit`` takes it as a static argument).
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


@functools.partial(jax.jit, static_argnums=(0, 1))
def _run(prim: Any, settings: Hashable, *args: Any) -> Any:
    """The primitive bound inside ``jax.jit`` (as under any trace); ``settings`` keys only."""
    del settings
    return prim(*args)
