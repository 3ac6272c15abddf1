"""Exception types raised by spyrejax.

Every error a user can trigger with bad input is one of these, so callers can catch
spyrejax problems specifically while still catching the builtin they subclass.
"""

from __future__ import annotations

__all__ = [
    "DeviceError",
    "LayoutConversionError",
    "LayoutError",
    "SpyreAttributeError",
    "SpyreError",
    "SpyreFallbackWarning",
    "SpyreInternalError",
    "SpyrePlacementWarning",
    "SpyreTypeError",
    "SpyreUnsupportedError",
]


class SpyreError(Exception):
    """Base class of every spyrejax error."""


class LayoutError(SpyreError, ValueError):
    """A layout, shape, dtype or dim order that is not valid for the requested operation."""


class LayoutConversionError(LayoutError):
    """A layout another notation cannot express (CuTe, XLA, Morello, tt-mlir): a named refusal.

    Raised by the layout algebra and the converters of :mod:`spyrejax.layout` instead of
    an approximate layout: the message names what the target notation lacks.
    """


class SpyreUnsupportedError(SpyreError, NotImplementedError):
    """An operation, primitive or transformation that spyrejax does not support."""


class SpyreTypeError(SpyreError, TypeError):
    """An argument of the wrong kind or dtype (a host array where a Spyre array is needed...)."""


class SpyreAttributeError(SpyreError, AttributeError):
    """A ``jax.Array`` attribute or method a :class:`SpyreArray` does not have.

    A SpyreArray has the methods of the device ops (``sum``, ``reshape``, ``astype``...)
    and the host conversions; the message names the ways to the rest (``spyrejax.jit``,
    where the array is traced as a ``jax.Array``, or ``spyrejax.to_host``). As an
    ``AttributeError``, ``hasattr`` and ``getattr(a, name, default)`` work as usual.
    """


class SpyreInternalError(SpyreError, RuntimeError):
    """A broken invariant inside spyrejax (a bug to report), raised instead of a wrong result."""


class DeviceError(SpyreError, ValueError):
    """A request the device model cannot satisfy (a core count, a work-division hint)."""


class SpyreFallbackWarning(UserWarning):
    """An operation with no Spyre device rule runs on the host instead (a visible fallback).

    Its operands move device -> host through the DMA, JAX computes it, and the result
    moves back in a default layout. ``spyrejax.jit(f, fallback="error")`` raises
    :class:`SpyreUnsupportedError` instead.
    """


class SpyrePlacementWarning(UserWarning):
    """``SpyreJit.place`` left a product's operand where it is, and why.

    A weight a matrix product reads, but not in a layout it can read in place (converted
    to another dtype first, read by other ops as well, contracted over its last dim),
    stays in its layout; the product relays it out on every call.
    """
