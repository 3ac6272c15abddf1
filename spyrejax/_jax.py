"""Every experimental or internal JAX API spyrejax uses, in one place.

A JAX upgrade that moves or changes these touches only this file. Everything else in
spyrejax imports public JAX (``jax``, ``jax.numpy``, ``jax.lax``) or these names.
"""

from jax._src.interpreters.ad import LinearizeTracer
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
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Primitive, Var, jaxpr_as_fun
from jax.extend.source_info_util import summarize as summarize_source
from jax.interpreters import ad, batching, mlir

__all__ = [
    "AD_TRACERS",
    "ClosedJaxpr",
    "GradAccum",
    "HiPrim",
    "HiType",
    "Jaxpr",
    "Literal",
    "Primitive",
    "ShapedArray",
    "Var",
    "Zero",
    "ad",
    "aval_method",
    "aval_property",
    "batching",
    "jaxpr_as_fun",
    "mlir",
    "register_hitype",
    "summarize_source",
    "vjp_from_jvp",
]

AD_TRACERS = (ad.JVPTracer, LinearizeTracer)
"""The tracers of forward and reverse mode autodiff (``jax.jvp``, ``jax.grad``)."""
