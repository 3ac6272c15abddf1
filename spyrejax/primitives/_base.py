"""The base of every Spyre primitive, and the two bridge primitives ``image``/``wrap``.

A Spyre primitive is a ``HiPrim`` whose constructor is its shape and layout rule (it
computes ``out_aval`` from ``in_avals`` or raises) and whose :meth:`SpyrePrim.kernel`
computes on device images with plain JAX. From the kernel alone the base class derives:

- ``expand`` (the emulator: images in, image out),
- ``jvp`` (``jax.jvp`` of the kernel on images, re-wrapped with :func:`wrap`), and from
  it reverse mode (``vjp_from_jvp``: the tangent map is plain JAX plus the linear
  bridges, which transpose into each other),
- ``batch`` (vmap): the primitive rebuilt on batched types, batch at logical dim 0.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._array import SpyreArray, SpyreType, batched_type
from .._errors import LayoutError, SpyreUnsupportedError
from .._jax import GradAccum, HiPrim, ShapedArray, Zero, vjp_from_jvp

__all__ = ["Image", "SpyrePrim", "Wrap", "image", "is_spyre", "normalize_axes", "wrap"]


def normalize_axes(axes: Any, ndim: int, op: str) -> tuple[int, ...]:
    """Axes as non-negative ints, in the order given.

    Raises:
        LayoutError: on an axis out of range for ``ndim`` or a repeated axis.
    """
    items = (axes,) if isinstance(axes, int | np.integer) else tuple(axes)
    out = []
    for a in items:
        if not -ndim <= int(a) < ndim:
            raise LayoutError(f"{op}: axis {a} is out of range for rank {ndim}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise LayoutError(f"{op}: repeated axis in {items}")
    return tuple(out)


def is_spyre(aval: Any) -> bool:
    """Whether an abstract value is a Spyre array type."""
    return isinstance(aval, SpyreType)


def _lo_aval(aval: Any) -> Any:
    return ShapedArray(aval.layout.device_size, aval.dtype) if is_spyre(aval) else aval


def _is_float(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


class SpyrePrim(HiPrim):
    """A primitive on Spyre arrays; subclasses set avals/params and define ``kernel``.

    Attributes:
        broadcasts_operands: operands of different ranks broadcast right-aligned, as
            NumPy's (elementwise ops; matmul's batch dims). Under ``vmap`` a batched
            operand of lower rank then gets size-1 dims after its batch dim, so that
            its batch dim meets the others' (see :meth:`batch`).
    """

    broadcasts_operands = False

    def kernel(self, *args: jax.Array) -> jax.Array:
        """The emulator kernel: device images (and plain arrays) in, image out."""
        raise NotImplementedError(f"{type(self).__name__} has no kernel")

    def tangent_kernel(self, *args: jax.Array) -> jax.Array:
        """The function differentiated for ``jvp``; the kernel unless overridden."""
        return self.kernel(*args)

    def expand(self, *args: Any) -> Any:
        """Run the kernel on the inputs' device images."""
        lo = [a.image if isinstance(a, SpyreArray) else a for a in args]
        out = self.kernel(*lo)
        return SpyreArray(out, self.out_aval) if is_spyre(self.out_aval) else out

    def pp_params(self) -> dict[str, Any]:
        """Parameters shown in printed jaxprs (Spyre types in their short form)."""
        shown = {}
        for k, v in self.params.items():
            if k.startswith("_"):
                continue
            shown[k] = v.str_short() if isinstance(v, SpyreType) else v
        return shown

    # -- autodiff -------------------------------------------------------------------

    def jvp(self, primals: Any, tangents: Any) -> tuple[Any, Any]:
        """Forward mode: ``jax.jvp`` of the kernel on the device images."""
        out = self(*primals)
        if not _is_float(self.out_aval.dtype):
            return out, Zero(self.out_aval.to_tangent_aval())
        lo_p, lo_t = [], []
        for p, t, aval in zip(primals, tangents, self.in_avals, strict=True):
            lo = image(p) if is_spyre(aval) else p
            lo_p.append(lo)
            lo_t.append(_lo_tangent(t, lo, aval))
        _, t_out = jax.jvp(self.tangent_kernel, tuple(lo_p), tuple(lo_t))
        if is_spyre(self.out_aval):
            t_out = wrap(t_out, self.out_aval.to_tangent_aval())
        return out, t_out

    vjp_fwd, vjp_bwd_retval = vjp_from_jvp

    # -- vmap -----------------------------------------------------------------------

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        """Parameters of the primitive rebuilt for a leading batch dim of ``size``."""
        if self.params:
            raise SpyreUnsupportedError(
                f"primitive {type(self).__name__} does not support the transformation jax.vmap"
            )
        return {}

    def batch(self, axis_data: Any, args: Any, dims: Any) -> tuple[Any, int]:
        """vmap: move batch dims to 0 and rebuild the primitive on batched types."""
        if all(d is None for d in dims):  # hijax also asks when nothing is batched
            return self(*args), None
        moved, batched = [], []
        for a, d, aval in zip(args, dims, self.in_avals, strict=True):
            if d is None:
                moved.append(a)
            elif is_spyre(aval):
                if d != 0:
                    raise SpyreUnsupportedError(f"Spyre arrays are batched along axis 0, not {d}")
                moved.append(a)
            else:
                moved.append(jnp.moveaxis(a, d, 0))
            batched.append(d is not None)
        flags = tuple(batched)
        if self.broadcasts_operands:
            moved = _align_batch_dims(moved, flags, self.in_avals)
        params = self.batch_params(flags, axis_data.size)
        new = type(self)(*[jax.typeof(a) for a in moved], **params)
        return new(*moved), 0


def _align_batch_dims(args: list[Any], batched: tuple[bool, ...], avals: Any) -> list[Any]:
    """Batched operands of lower rank with size-1 dims after their batch dim (dim 0).

    Up to the highest operand rank, so that right-aligned broadcasting lines the batch
    dims up. Without them, ``x[b, i] * s[b]`` (a per-example vector times a per-example scalar)
    would broadcast ``s`` along ``i``: wrong numbers whenever the sizes agree.
    """
    rank = max(aval.ndim for aval in avals)
    out = []
    for a, b, aval in zip(args, batched, avals, strict=True):
        if b and aval.ndim < rank:
            axes = tuple(range(1, 1 + rank - aval.ndim))
            if is_spyre(aval):
                from ._views import expand_dims  # the views module builds on this one

                a = expand_dims(a, axes)
            else:
                a = jnp.expand_dims(a, axes)
        out.append(a)
    return out


def _lo_tangent(t: Any, lo_primal: Any, aval: Any) -> Any:
    if not _is_float(aval.dtype):
        return np.zeros(np.shape(lo_primal), dtype=jax.dtypes.float0)
    if isinstance(t, Zero):
        return jnp.zeros(np.shape(lo_primal), aval.dtype)
    return image(t) if is_spyre(aval) else t


# ---------------------------------------------------------------------------------
# Image / Wrap: the device image of a Spyre array, and a Spyre array around an image.
# Both are linear and each is the other's transpose.
# ---------------------------------------------------------------------------------


class Image(SpyrePrim):
    """The raw device image of a Spyre array (padding included)."""

    def __init__(self, aval: SpyreType) -> None:
        self.in_avals = (aval,)
        self.out_aval = _lo_aval(aval)
        self.params = {}
        super().__init__()

    def kernel(self, x: jax.Array) -> jax.Array:
        return x

    def transpose(self, ct: Any, accum: Any) -> None:
        """``wrap`` is the transpose of ``image``."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            accum.accum(wrap(ct, self.in_avals[0].to_tangent_aval()))


def image(x: Any) -> jax.Array:
    """The device image of a Spyre array: an array of shape ``x.layout.device_size``.

    Works on traced arrays too; padding positions hold whatever the producer left
    there (poison unless the type says ``pad=0``).
    """
    return Image(jax.typeof(x))(x)


class Wrap(SpyrePrim):
    """A Spyre array of a given type around a device image."""

    def __init__(self, aval: Any, type: SpyreType) -> None:
        self.in_avals = (aval,)
        self.out_aval = type
        self.params = {"type": type}
        super().__init__()

    def kernel(self, x: jax.Array) -> jax.Array:
        return x

    def transpose(self, ct: Any, accum: Any) -> None:
        """``image`` is the transpose of ``wrap``."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            accum.accum(image(ct))

    def batch(self, axis_data: Any, args: Any, dims: Any) -> tuple[Any, int]:
        """vmap: wrap the batched image into the batched type."""
        (x,), (d,) = args, dims
        if d is None:
            return self(x), None
        x = jnp.moveaxis(x, d, 0)
        return Wrap(jax.typeof(x), batched_type(self.type, x.shape[0]))(x), 0


def wrap(x: jax.Array, type: SpyreType) -> Any:
    """A Spyre array of ``type`` whose device image is ``x`` (no copy, no check of padding)."""
    return Wrap(jax.typeof(x), type)(x)
