"""x64 mode (``jax_enable_x64``) on a device with no 64-bit formats, as torch-spyre runs it.

Spyre has int32 and float32 formats and no int64 or float64. In x64 mode,
``spyrejax.jit`` traces, plans and runs the function as JAX does with x64 off
(``jnp.arange``, ``argmax``, ``one_hot``, Python ints and ``jax.random`` give 32-bit
values), and:

- an int64 (uint64) argument is held as int32 (uint32) on the device, as torch-spyre
  holds int64 indices: checked at the transfer, a value that does not fit raises a
  ``LayoutError`` naming the argument and the value;
- a result ``jax.jit`` gives as int64 (uint64) is returned with that dtype: its type's
  ``x64_dtype``, which ``to_host`` gives back (values computed in 32 bits);
- float64 (an argument, or a value ``jax.jit``'s x64 trace computes in float64) raises
  naming the argument or the source line, unless
  ``jax.config.update("spyrejax_float64", "float32")`` asks for float32 (then it is
  computed, and returned, in float32).

Integer arithmetic that overflows 32 bits inside the function wraps, as it would on
the device: only the transfers are checked.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreUnsupportedError
from .._jax import (
    UNKNOWN_SOURCE,
    ClosedJaxpr,
    Jaxpr,
    float64_mode,
    inner_jaxprs,
    summarize_source,
)
from ..layout._dtypes import NARROWED, narrow_int64
from ..primitives._array import SpyreArray

__all__ = ["active", "narrow_leaves", "off", "out_dtypes", "widen"]

_F64 = np.dtype(np.float64)
_INT32 = np.iinfo(np.int32)


def active() -> bool:
    """Whether JAX is in x64 mode (``jax_enable_x64``)."""
    return bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def off() -> Iterator[None]:
    """A context with x64 off: where spyrejax traces, plans and runs in x64 mode.

    JAX's warning that an explicitly requested 64-bit dtype (``dtype=jnp.int64``) is
    not available is silenced there: holding it in 32 bits is the point.
    """
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Explicitly requested dtype", UserWarning)
        yield


def _as_float32() -> bool:
    return float64_mode.value == "float32"


def narrow_leaves(leaves: Sequence[Any], path: Callable[[int], str]) -> list[Any]:
    """A call's leaves as the device holds them: 64-bit integers in 32 bits, checked.

    Raises:
        LayoutError: naming the argument whose value does not fit in 32 bits, or a
            float64 argument (unless ``spyrejax_float64`` is ``"float32"``).
        SpyreUnsupportedError: for a traced 64-bit argument (its values cannot be
            checked).
    """
    out = list(leaves)
    for i, x in enumerate(leaves):
        if isinstance(x, SpyreArray):
            continue
        if isinstance(x, int) and not isinstance(x, bool):
            if not _INT32.min <= x <= _INT32.max:
                raise LayoutError(
                    f"spyrejax.jit: argument {path(i)} is the Python int {x}, held as int32 "
                    "on the device (Spyre has no 64-bit integer format), where it does not fit"
                )
            continue
        dtype = getattr(x, "dtype", None)
        if not isinstance(dtype, np.dtype) or (dtype not in NARROWED and dtype != _F64):
            continue
        if isinstance(x, jax.core.Tracer):
            raise SpyreUnsupportedError(
                f"spyrejax.jit: argument {path(i)} is a traced {dtype} value in x64 mode; "
                "Spyre holds 64-bit values in 32 bits, checked at the transfer, which a "
                "traced value cannot be: cast it first"
            )
        if dtype == _F64:
            if not _as_float32():
                raise LayoutError(
                    f"spyrejax.jit: argument {path(i)} is float64{list(np.shape(x))}: Spyre has "
                    "no 64-bit float format. Cast it (x.astype(jnp.float32)), or compute "
                    "float64 in float32: jax.config.update('spyrejax_float64', 'float32')"
                )
            out[i] = np.asarray(x, np.float32)
        else:
            out[i] = narrow_int64(np.asarray(x), f"spyrejax.jit: argument {path(i)}")
    return out


def out_dtypes(closed: ClosedJaxpr) -> tuple[np.dtype | None, ...]:
    """The 64-bit integer dtype of each result of ``jax.jit``'s x64 trace (None: others).

    Raises:
        SpyreUnsupportedError: naming the first source line computing a float64 value
            (a weakly typed Python float is not one), unless ``spyrejax_float64`` is
            ``"float32"``.
    """
    if not _as_float32():
        _check_float64(closed.jaxpr)
    return tuple(
        a.dtype if isinstance(getattr(a, "dtype", None), np.dtype) and a.dtype in NARROWED else None
        for a in closed.out_avals
    )


def _check_float64(jaxpr: Jaxpr) -> None:
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            aval = v.aval
            if getattr(aval, "dtype", None) == _F64 and not getattr(aval, "weak_type", False):
                where = summarize_source(eqn.source_info) or UNKNOWN_SOURCE
                raise SpyreUnsupportedError(
                    f"{eqn.primitive.name} at {where} computes float64 in x64 mode: Spyre "
                    "has no 64-bit float format. Use float32 there, or compute float64 in "
                    "float32: jax.config.update('spyrejax_float64', 'float32')"
                )
        for sub in inner_jaxprs(eqn):
            _check_float64(sub)


def widen(outs: Sequence[Any], dtypes: Sequence[np.dtype | None]) -> list[Any]:
    """The results with ``jax.jit``'s 64-bit dtypes recorded (``SpyreType.x64_dtype``)."""
    return [
        SpyreArray.of_checked(o.image, replace(o.type, x64_dtype=d))
        if d is not None and isinstance(o, SpyreArray)
        else o
        for o, d in zip(outs, dtypes, strict=True)
    ]
