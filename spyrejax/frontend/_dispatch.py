"""Concrete calls of ``spyrejax.jit``: the dispatch fast path, and the host arrays they move.

:func:`fast_key` is a call's key for the fast path (a function of its leaves' types),
cached beside the full signature; :func:`host_arrays_to_move` gives a concrete call the
signature of the same call with SpyreArrays (host arrays moved into their default
layouts, inside the call's program), so a training loop runs one compiled program from
its first step.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from .._jax import ArrayImpl, trace_context
from ..lowering._planner import host_input_type
from ..lowering.program._cores import core_check
from ..primitives import image, to_device
from ..primitives._array import SpyreArray
from ._arguments import (
    Call,
    HostAval,
    check_formats,
)
from ._lowering import Lowering, Signature

__all__ = [
    "HostArraysMoved",
    "as_called",
    "fast_key",
    "host_arrays_moved",
    "host_arrays_to_move",
]


def fast_key(args: tuple[Any, ...]) -> tuple[Hashable, Sequence[Any]] | None:
    """A call's key for the dispatch fast path, and its leaves; None to take the full path.

    Only calls whose leaves are all concrete Spyre arrays or concrete ``jax.Array``s of a
    NumPy dtype (no PRNG keys, tracers, NumPy arrays or Python scalars) and that have no
    keyword or static arguments: for those the full signature (:meth:`SpyreJit._signature`)
    is a function of the pytree structure, each leaf's type (shape, dtype, weak type of
    host arrays), the JAX configuration and the per-core check, which this key holds.
    The key is cached beside the full signature, for the same lowering. Arguments that are all Spyre
    arrays (the common case) are their own leaves: no flattening.
    """
    flat: list[Any] = [_FLAT, trace_context(), core_check()]
    for x in args:
        if type(x) is not SpyreArray:
            break
        flat.append(x.type)
    else:
        return tuple(flat), args
    leaves, treedef = jax.tree.flatten(args)
    key: list[Any] = [_TREE, treedef, trace_context(), core_check()]
    for x in leaves:
        cls = type(x)
        if cls is SpyreArray:
            key.append(x.type)
        elif cls is ArrayImpl and isinstance(x.dtype, np.dtype):
            if isinstance(x.sharding, NamedSharding):  # maybe Explicit: in its type
                return None
            key.append((x.shape, x.dtype, x.weak_type))
        else:
            return None
    return tuple(key), leaves


# Mark fast-path keys in a signature cache (never equal to a Signature): arguments all
# Spyre arrays (the arguments are the leaves), or another pytree of arrays.
_FLAT = object()
_TREE = object()


def host_arrays_moved(
    sig: Signature, leaves: Sequence[Any], call: Call
) -> tuple[Signature, Sequence[Any], tuple[tuple[int, Any], ...]]:
    """A concrete call's signature and leaves, its host arrays moved to the device.

    Returns the signature and leaves of the call with the SpyreArrays of their default
    layouts in place of its host arrays (see :func:`_host_arrays`), and ``(leaf index,
    dtype)`` of each moved one.

    Raises:
        LayoutError: naming an argument whose dtype has no Spyre data format.
    """
    called, dtypes = host_arrays_to_move(sig, leaves, call)
    return called, _moved(leaves, dtypes) if dtypes else leaves, dtypes


def host_arrays_to_move(
    sig: Signature, leaves: Sequence[Any], call: Call
) -> tuple[Signature, tuple[tuple[int, Any], ...]]:
    """A concrete call's signature with its host arrays moved, and what to move.

    Returns the signature :func:`as_called` gives and ``(leaf index, dtype)`` of each
    host array to move (the dtype ``jax.jit`` reads it in); :class:`HostArraysMoved`
    moves them inside the call's program.

    Raises:
        LayoutError: naming an argument whose dtype has no Spyre data format.
    """
    moved: list[int] = []
    called = as_called(sig, leaves, call, moved)
    return called, tuple((i, sig.in_avals[i].dtype) for i in moved)


def as_called(sig: Signature, leaves: Sequence[Any], call: Call, moved: list[int]) -> Signature:
    """The signature of a concrete call: its host arrays in their default layouts.

    Appends the indices of those leaves (see :func:`_host_arrays`) to ``moved``.

    Raises:
        LayoutError: naming an argument whose dtype has no Spyre data format.
    """
    moved.extend(_host_arrays(sig, leaves))
    if not moved:
        return sig
    check_formats(sig.in_avals, call.path)
    avals = list(sig.in_avals)
    for i in moved:
        avals[i] = host_input_type(tuple(avals[i].shape), avals[i].dtype)
    return replace(sig, in_avals=tuple(avals))


def _host_arrays(sig: Signature, leaves: Sequence[Any]) -> tuple[int, ...]:
    """The leaves of a concrete call moved to the device before it: its host arrays.

    A host array (not a Python scalar, whose weak type the trace keeps, nor a PRNG
    key's data) is what the program would otherwise move into the default layout of
    its shape itself; moved first, the call has the signature of a call with the
    SpyreArrays the program returns, so a training loop (host arrays in, SpyreArrays
    back) runs one compiled program from its first step. None under a trace.
    """
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return ()
    keys = {i for i, _ in sig.keys}
    return tuple(
        i
        for i, (x, a) in enumerate(zip(leaves, sig.in_avals, strict=True))
        if isinstance(a, HostAval)
        and not a.weak_type
        and i not in keys
        and math.prod(a.shape)
        and not _sharded(x)
    )


def _sharded(x: Any) -> bool:
    """Whether ``x`` is spread over several devices (a shard_map reads its sharding)."""
    sharding = getattr(x, "sharding", None)
    return sharding is not None and len(sharding.device_set) > 1


def _moved(leaves: Sequence[Any], moved: tuple[tuple[int, Any], ...]) -> list[Any]:
    """``leaves`` with SpyreArrays of their default layouts where ``moved`` says (x64 mode).

    ``moved`` holds ``(leaf index, dtype)`` (see :func:`_read_as`).
    """
    out = list(leaves)
    hosts = tuple(_read_as(out[i], dtype) for i, dtype in moved)
    for (i, _), x, img in zip(moved, hosts, _images_of(hosts), strict=True):
        out[i] = SpyreArray(img, host_input_type(x.shape, x.dtype))
    return out


def _read_as(x: Any, dtype: Any) -> jax.Array:
    """A host leaf as the array ``jax.jit`` reads (float64 NumPy is float32 with x64 off)."""
    return x if isinstance(x, jax.Array) and x.dtype == dtype else jnp.asarray(x, dtype)


@jax.jit
def _images_of(hosts: tuple[Any, ...]) -> list[jax.Array]:
    """The device images of host arrays moved in their default layouts: one dispatch.

    (An eager ``to_device`` per array takes hijax's Python path, near a millisecond.)
    """
    return [image(to_device(x)) for x in hosts]


class HostArraysMoved:
    """A lowering for SpyreArrays, called with host arrays (first, and on the fast path).

    It runs the lowering's program with the host arrays moved into their default layouts
    inside it (:meth:`Lowering.on_hosts`): the call compiles one program, not a move
    and a run.
    """

    def __init__(self, lowering: Lowering, moved: tuple[tuple[int, Any], ...]) -> None:
        self.lowering = lowering
        self.moved = moved
        self._run = lowering.on_hosts(frozenset(i for i, _ in moved))

    def call_concrete(self, leaves: Sequence[Any]) -> Any:
        """:meth:`Lowering.call_concrete` of the leaves, the host arrays moved in the program."""
        out = list(leaves)
        for i, dtype in self.moved:
            out[i] = _read_as(out[i], dtype)
        return self.lowering.call_concrete(out, run=self._run)
