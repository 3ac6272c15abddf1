"""Every experimental or internal JAX API spyrejax uses, in one place.

A JAX upgrade that moves or changes these touches only this file. Everything else in
spyrejax imports public JAX (``jax``, ``jax.numpy``, ``jax.lax``) or these names.
"""

from jax._src.api_util import fun_signature, resolve_argnums
from jax._src.array import ArrayImpl
from jax._src.config import bool_state, enum_state, trace_context
from jax._src.hijax import call_hi_primitive_p
from jax._src.interpreters.ad import LinearizeTracer
from jax._src.interpreters.partial_eval import DynamicJaxprTracer
from jax._src.random.prng import (
    random_bits_impl_base,
    random_fold_in_impl_base,
    random_seed_impl_base,
    random_split_impl_base,
)
from jax._src.random.threefry2x32 import _threefry2x32_lowering as threefry2x32_rounds
from jax._src.util import register_cache
from jax.experimental.hijax import (
    GradAccum,
    HiPrim,
    HiPspec,
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
    "ArrayImpl",
    "ClosedJaxpr",
    "GradAccum",
    "HiPrim",
    "HiPspec",
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
    "expand_hi_primitive",
    "float64_mode",
    "fun_signature",
    "jaxpr_as_fun",
    "key_impl",
    "mlir",
    "poison_padding",
    "random_bits_impl_base",
    "random_fold_in_impl_base",
    "random_seed_impl_base",
    "random_split_impl_base",
    "register_cache",
    "register_hitype",
    "resolve_argnums",
    "summarize_source",
    "threefry2x32_rounds",
    "trace_context",
    "tracer_var",
    "vjp_from_jvp",
]

poison_padding = bool_state(
    "spyrejax_poison_padding",
    default=False,
    help=(
        "Debug check (like jax_debug_nans): every spyrejax kernel writes poison (NaN, or "
        "the integer poison) into the padding of its result, so a kernel that reads "
        "padding it should have masked gives NaN. Off, padding whose content is undefined "
        "(pad=poison in the type) keeps whatever the computation left there."
    ),
    include_in_trace_context=True,
)
"""``jax.config`` option ``spyrejax_poison_padding`` (env ``SPYREJAX_POISON_PADDING``)."""

float64_mode = enum_state(
    "spyrejax_float64",
    ["error", "float32"],
    default="error",
    help=(
        "In x64 mode, what spyrejax.jit does with float64 values (Spyre has no 64-bit "
        "format): 'error' raises naming the argument or source line; 'float32' computes "
        "them in float32."
    ),
    include_in_trace_context=True,
)
"""``jax.config`` option ``spyrejax_float64`` (env ``SPYREJAX_FLOAT64``): see ``_x64``."""

AD_TRACERS = (ad.JVPTracer, LinearizeTracer)
"""The tracers of forward and reverse mode autodiff (``jax.jvp``, ``jax.grad``)."""


def key_impl(dtype: object) -> object:
    """The PRNG implementation of a key dtype (``key<fry>``): its ``key_shape`` and functions."""
    return dtype._impl  # type: ignore[attr-defined]


def expand_hi_primitive(prim: HiPrim, *args: object) -> list[object]:
    """A hijax primitive's application in the primitives it expands to (its ``expand``)."""
    return call_hi_primitive_p.to_lojax(*args, _prim=prim)


def tracer_var(x: object) -> Var | None:
    """The jaxpr variable a value traced by ``jax.make_jaxpr`` is (None for other values)."""
    var = getattr(x, "val", None) if isinstance(x, DynamicJaxprTracer) else None
    return var if isinstance(var, Var) else None
