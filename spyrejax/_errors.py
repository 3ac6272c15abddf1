"""Exception types raised by spyrejax.

Every error a user can trigger with bad input is one of these, so callers can catch
spyrejax problems specifically while still catching the builtin they subclass.
"""

from __future__ import annotations

__all__ = [
    "DeviceError",
    "LayoutError",
    "SpyreError",
    "SpyreInternalError",
    "SpyreTypeError",
    "SpyreUnsupportedError",
]


class SpyreError(Exception):
    """Base class of every spyrejax error."""


class LayoutError(SpyreError, ValueError):
    """A layout, shape, dtype or dim order that is not valid for the requested operation."""


class SpyreUnsupportedError(SpyreError, NotImplementedError):
    """An operation, primitive or transformation that spyrejax does not support."""


class SpyreTypeError(SpyreError, TypeError):
    """An argument of the wrong kind or dtype (a host array where a Spyre array is needed...)."""


class SpyreInternalError(SpyreError, RuntimeError):
    """A broken invariant inside spyrejax (a bug to report), raised instead of a wrong result."""


class DeviceError(SpyreError, ValueError):
    """A request the device model cannot satisfy (a core count, a work-division hint)."""
