"""Every experimental or private JAX API spyrejax uses, in one place.

A JAX upgrade that moves or changes these touches only this file. Everything else in
spyrejax imports public JAX (``jax``, ``jax.numpy``, ``jax.lax``) or these names.
"""

from jax.experimental.hijax import (
    GradAccum,
    HiPrim,
    HiType,
    ShapedArray,
    Zero,
    aval_method,
    aval_property,
    register_hitype,
    vjp_from_jvp,
)

__all__ = [
    "GradAccum",
    "HiPrim",
    "HiType",
    "ShapedArray",
    "Zero",
    "aval_method",
    "aval_property",
    "register_hitype",
    "vjp_from_jvp",
]
