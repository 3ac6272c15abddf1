"""Every experimental or internal JAX API spyrejax uses, in one place.

A JAX upgrade that moves or changes these touches only this file. Everything else in
spyrejax imports public JAX (``jax``, ``jax.numpy``, ``jax.lax``) or these names.
"""

import os
import sys
from collections.abc import Callable
from typing import Any

import jax
from jax._src import api as _api
from jax._src import core as _core
from jax._src import linear_util as _lu
from jax._src import source_info_util as _source_info
from jax._src.api_util import fun_signature, resolve_argnums, save_wrapped_fun_debug_info
from jax._src.array import ArrayImpl
from jax._src.config import bool_state, enum_state, trace_context
from jax._src.hijax import call_hi_primitive_p
from jax._src.interpreters import batching as _batching
from jax._src.interpreters.ad import LinearizeTracer
from jax._src.interpreters.partial_eval import DynamicJaxprTracer
from jax._src.numpy import array_methods as _array_methods
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
from jax.extend.core.primitives import closed_call_p
from jax.interpreters import ad, batching, mlir

__all__ = [
    "AD_TRACERS",
    "ArrayImpl",
    "BatchTracer",
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
    "array_operator",
    "aval_method",
    "aval_property",
    "batching",
    "call_body",
    "call_params",
    "called_by_device_put",
    "closed_call_p",
    "cond_branches",
    "eager",
    "expand_hi_primitive",
    "float64_mode",
    "fun_signature",
    "hi_prim",
    "inner_jaxprs",
    "jaxpr_as_fun",
    "key_impl",
    "mlir",
    "name_like",
    "name_tracing",
    "poison_padding",
    "random_bits_impl_base",
    "random_fold_in_impl_base",
    "random_seed_impl_base",
    "random_split_impl_base",
    "reduce_window_body",
    "register_cache",
    "register_hitype",
    "resolve_argnums",
    "scan_options",
    "scan_parts",
    "shard_map_body",
    "staged_eqns",
    "summarize_source",
    "threefry2x32_rounds",
    "trace_context",
    "tracer_var",
    "transpose_from_jvp",
    "vjp_from_jvp",
    "while_params",
    "while_parts",
    "with_bodies",
]

# spyrejax's own tracing wrappers (``flat_fun`` tracing a function passed as it is, as in
# ``sj.explain(jnp.matmul, ...)``) are not the user's code: the packages that trace.
_OWN_FRAMES = tuple(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), package) + os.sep
    for package in ("lowering", "frontend", "report")
)


def name_tracing(fun: Callable[..., Any], traced_for: str, name: str, arg_names: Any) -> None:
    """Have JAX's tracing errors in ``fun`` name ``name`` and ``arg_names``, not ``fun``.

    ``fun`` is a spyrejax wrapper tracing a user's function on its flat leaves: JAX's
    errors (a traced bool in an ``if``, a concrete value needed) would name the wrapper
    and its parameters (``flat_fun``, ``leaves[1]``). JAX's debug info
    (``api_util.debug_info`` reads it from the function) names the user's function
    (``f at file:line``) and each leaf's path in the call instead.
    """
    info = _lu.DebugInfo(traced_for, name, tuple(arg_names), _lu.initial_result_paths)
    save_wrapped_fun_debug_info(fun, info)


def name_like(fun: Callable[..., Any], closed: Any) -> None:
    """Have JAX's errors in ``fun`` name what ``closed`` was traced from, as it does.

    ``fun`` runs ``closed``'s program on the same flat leaves (the interpreter's jitted
    runners): an error in it would name its own parameters (``lo[0]``) instead of the
    user's function and argument paths that :func:`name_tracing` gave ``closed``.
    """
    info = closed.jaxpr.debug_info
    if info is not None and info.arg_names is not None:
        name_tracing(fun, "spyrejax.jit", info.func_src_info, info.arg_names)


UNKNOWN_SOURCE = "<unknown source>"
"""What names an equation's source where no frame does (JAX's own function at the top)."""


def summarize_source(source_info: Any) -> str:
    """An equation's innermost user frame, ``file:line:col (function)``, or ``""``.

    JAX's ``source_info_util.summarize``, skipping spyrejax's lowering frames too.
    """
    for frame in _source_info.user_frames(source_info.traceback):
        if not frame.file_name.startswith(_OWN_FRAMES):
            return _source_info._summarize_frame(frame)
    return ""


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

BatchTracer = _batching.BatchTracer
"""The tracer of ``jax.vmap``."""

AD_TRACERS = (ad.JVPTracer, LinearizeTracer)
"""The tracers of forward and reverse mode autodiff (``jax.jvp``, ``jax.grad``)."""


transpose_from_jvp = vjp_from_jvp.vjp_bwd_retval
"""The backward rule ``vjp_from_jvp`` derives: ``(prim, (primals, nzs_in), out_ct) -> cts``."""


def key_impl(dtype: object) -> object:
    """The PRNG implementation of a key dtype (``key<fry>``): its ``key_shape`` and functions."""
    return dtype._impl  # type: ignore[attr-defined]


def expand_hi_primitive(prim: HiPrim, *args: object) -> list[object]:
    """A hijax primitive's application in the primitives it expands to (its ``expand``)."""
    return call_hi_primitive_p.to_lojax(*args, _prim=prim)


def eager() -> bool:
    """Whether JAX evaluates eagerly now (no trace is active: not inside ``jax.jit``...)."""
    return _core.trace_state_clean()


def tracer_var(x: object) -> Var | None:
    """The jaxpr variable a value traced by ``jax.make_jaxpr`` is (None for other values)."""
    var = getattr(x, "val", None) if isinstance(x, DynamicJaxprTracer) else None
    return var if isinstance(var, Var) else None


def staged_eqns() -> int | None:
    """How many equations the ``jax.make_jaxpr`` trace running has staged (None outside one).

    Equations of values dropped meanwhile count too (the trace keeps a slot for each).
    """
    frame = getattr(_core.trace_ctx.trace, "frame", None)
    eqns = getattr(frame, "tracing_eqns", None)
    return None if eqns is None else len(eqns)


# --- jaxpr structure: which parameters hold primitives and bodies -----------------------
# Nothing else in spyrejax reads an equation's parameters for its structure
# (tests/project/test_imports.py checks it): a JAX upgrade that renames one changes this file.

_CALL_BODIES = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "eval_jaxpr": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}


def hi_prim(eqn: Any) -> HiPrim | None:
    """The hijax primitive a ``call_hi_primitive`` equation applies (None for others)."""
    if eqn.primitive.name != "call_hi_primitive":
        return None
    return eqn.params.get("_prim")


def call_body(eqn: Any) -> Any:
    """The body of an equation of a call-like primitive (``jit``, ``closed_call``...).

    None for other primitives. The body is a ``Jaxpr`` or a ``ClosedJaxpr``.
    """
    key = _CALL_BODIES.get(eqn.primitive.name)
    return None if key is None else eqn.params[key]


def call_params(body: ClosedJaxpr) -> dict[str, Any]:
    """The parameters of a ``closed_call`` of ``body``."""
    return {"call_jaxpr": body}


def scan_parts(params: dict[str, Any]) -> tuple[ClosedJaxpr, int, int, int]:
    """A ``scan``'s body, and how many operands are constants and carries, and its length.

    The operands after the carries are the stacked inputs.
    """
    if "ft_in" in params:  # JAX >= 0.9: the operands' tree, (consts, carries, xs)
        consts, carries, _ = params["ft_in"].unpack()
        n_consts, n_carry = len(consts), len(carries)
    else:
        n_consts, n_carry = params["num_consts"], params["num_carry"]
    return params["jaxpr"], n_consts, n_carry, params["length"]


def scan_options(params: dict[str, Any]) -> tuple[bool, Any]:
    """A ``scan``'s ``reverse`` and ``unroll``."""
    return params["reverse"], params["unroll"]


def while_parts(params: dict[str, Any]) -> tuple[ClosedJaxpr, ClosedJaxpr, int, int]:
    """A ``while``'s predicate and body, and how many constants each takes first."""
    return (
        params["cond_jaxpr"],
        params["body_jaxpr"],
        params["cond_nconsts"],
        params["body_nconsts"],
    )


def while_params(
    cond: ClosedJaxpr, body: ClosedJaxpr, cond_nconsts: int, body_nconsts: int
) -> dict[str, Any]:
    """The structural parameters of a ``while`` (as :func:`while_parts` reads them)."""
    return {
        "cond_jaxpr": cond,
        "body_jaxpr": body,
        "cond_nconsts": cond_nconsts,
        "body_nconsts": body_nconsts,
    }


def cond_branches(params: dict[str, Any]) -> tuple[ClosedJaxpr, ...]:
    """A ``cond``'s branches (its first operand picks one)."""
    return tuple(params["branches"])


def shard_map_body(params: dict[str, Any]) -> Jaxpr:
    """A ``shard_map``'s body (one card's program)."""
    return params["jaxpr"]


def reduce_window_body(params: dict[str, Any]) -> Any:
    """A generic ``reduce_window``'s combiner."""
    return params["jaxpr"]


def inner_jaxprs(of: Any) -> list[Jaxpr]:
    """Every jaxpr an equation's parameters hold (bodies, branches), unclosed.

    ``of``: the equation, or a graph node (which keeps its equation's parameters).
    """
    out = []
    for v in of.params.values():
        for p in v if isinstance(v, tuple) else (v,):
            if isinstance(p, ClosedJaxpr):
                out.append(p.jaxpr)
            elif isinstance(p, Jaxpr):
                out.append(p)
    return out


def with_bodies(eqn: Any, fn: Callable[[Jaxpr], Jaxpr]) -> dict[str, Any]:
    """An equation's parameters with ``fn`` applied to its loop, branch and ``shard_map`` bodies."""
    params = eqn.params
    name = eqn.primitive.name

    def closed(c: ClosedJaxpr) -> ClosedJaxpr:
        return ClosedJaxpr(fn(c.jaxpr), c.consts)

    if name == "shard_map":
        return {**params, "jaxpr": fn(params["jaxpr"])}
    if name == "scan":
        return {**params, "jaxpr": closed(params["jaxpr"])}
    if name == "while":
        return {
            **params,
            "cond_jaxpr": closed(params["cond_jaxpr"]),
            "body_jaxpr": closed(params["body_jaxpr"]),
        }
    if name == "cond":
        return {**params, "branches": tuple(closed(b) for b in params["branches"])}
    return params


def _operators_of(methods: Any) -> frozenset[Any]:
    """The code of the ``_operator_*`` functions of ``methods`` (JAX's array methods module).

    Raises:
        ImportError: if there are none (a JAX that renamed them): :func:`array_operator`
            would then find no operator, and a host array beside a SpyreArray would be
            converted silently instead of refused.
    """
    found = frozenset(
        f.__code__
        for name, f in vars(methods).items()
        if name.startswith("_operator_") and callable(f) and hasattr(f, "__code__")
    )
    if not found:
        raise ImportError(
            f"spyrejax: {methods.__name__} has no _operator_* functions in JAX "
            f"{jax.__version__}; spyrejax reads them to tell a jax.Array operator (x + a, a "
            "SpyreArray beside it) from other callers of __jax_array__, and without them "
            "would convert host operands silently. Use the JAX version pyproject.toml pins."
        )
    return found


_ARRAY_OPERATORS = _operators_of(_array_methods)
"""The code of ``jax.Array``'s operators (``_operator_add``...): each reads the other
operand's ``__jax_array__`` and returns ``NotImplemented`` when that gives no array."""


def array_operator(depth: int) -> tuple[str, Any] | None:
    """The ``jax.Array`` operator among the ``depth`` frames above the caller, if any.

    ``x + a`` with ``x`` a ``jax.Array`` (or a tracer of one) calls ``a.__jax_array__()``
    from the operator (on a tracer through ``Tracer.__jax_array__``'s lambda: one frame
    more), so a ``__jax_array__`` can tell an operator from ``jnp.asarray(a)``.

    Returns:
        The operator's name (``"add"``, ``"radd"``, ``"lt"``) and its ``jax.Array``
        operand (``x``), or None.
    """
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code in _ARRAY_OPERATORS:
            return frame.f_code.co_name.removeprefix("_operator_"), frame.f_locals["self"]
        frame = frame.f_back
    return None


_ABSTRACTIFY = _core.shaped_abstractify.__code__
_DEVICE_PUT = _api.device_put.__code__


def called_by_device_put() -> bool:
    """Whether the calling ``typeof`` handler (``register_hitype``) runs for ``jax.device_put``.

    ``jax.device_put`` abstractifies each leaf (``core.shaped_abstractify`` calls the
    handler) and then refuses every hijax type with a bare ``NotImplementedError``: the
    handler can raise a clearer error of its own first. Call it from the handler itself.
    """
    frame = sys._getframe(2)  # this <- the handler <- shaped_abstractify
    if frame.f_code is not _ABSTRACTIFY:
        return False
    return frame.f_back is not None and frame.f_back.f_code is _DEVICE_PUT
