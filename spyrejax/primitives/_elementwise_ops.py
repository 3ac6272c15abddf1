"""The elementwise op table: one record per op, from which everything else derives.

Each :class:`ElementwiseOp` record gives an op's computation and its facts (operands,
result dtype, the JAX primitives it lowers, device and rounding facts); the primitive
classes, public wrappers, lowering rules and exports are derived from :data:`OPS`
(``_elementwise``, ``lowering/rules``, ``tools/public_names.py``). Adding an op is one
record here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ._axes import broadcast_all
from ._masks import select

__all__ = ["ELEMENTWISE_OPS", "OP", "OPS", "ElementwiseOp"]


@dataclass(frozen=True)
class ElementwiseOp:
    """One elementwise op: its primitive, wrapper, lowering and export derive from this.

    Attributes:
        name: the op's name (``spyrejax.<name>``, and the primitive's class name).
        params: the wrapper's parameter names, one per operand.
        fn: the computation on aligned operands (jnp semantics, any dtype).
        lax: a ``lax`` twin the kernel calls for same-dtype floats (``jnp`` functions
            are nested jits: one function less to compile).
        lowers: the JAX primitives ``spyrejax.jit`` lowers to this op.
        result: the result dtype: ``"same"`` as the value operands, ``"bool"``.
        values: the operand positions that hold values (``where``'s condition is not
            one): they share one dtype.
        others: what the other operands are: ``"bool"`` (``where``'s condition), or
            ``"integer"``: an integer or the values' dtype (``pow``'s exponent, as
            ``lax.pow`` takes ``float32 ** int32``).
        doc: the first line of the wrapper's docstring.
        public: exported as ``spyrejax.<name>``.
        from_jax: the op's operands from a JAX equation's operands and parameters
            (``select_n(pred, on_false, on_true)`` is ``where(pred, on_true, on_false)``).
        transcendental: the device's vector units run it as a transcendental
            (``Machine.transcendental_factor`` of an op's time; ktir-cpu charges them 4x).
        approximated: XLA computes it on floats by approximation, not correctly
            rounded: two array shapes may round it differently, within 4 ulps (what
            ``emulate="cores"``'s check allows).
        in_place: the device may write its result over an input dying at it (the LX
            planner lets the result take that input's space).
    """

    name: str
    params: tuple[str, ...]
    fn: Callable[..., Any]
    lax: Callable[..., Any] | None = None
    lowers: tuple[str, ...] = ()
    result: str = "same"
    values: tuple[int, ...] | None = None
    others: str = "bool"
    doc: str = ""
    public: bool = True
    from_jax: Callable[[list[Any], dict[str, Any]], list[Any]] = lambda xs, params: xs
    transcendental: bool = False
    approximated: bool = False
    in_place: bool = False

    @property
    def arity(self) -> int:
        """Number of operands."""
        return len(self.params)

    @property
    def value_positions(self) -> tuple[int, ...]:
        """Positions of the value operands."""
        return tuple(range(self.arity)) if self.values is None else self.values


def _unary(
    name: str, fn: Any, lax: Any = None, lowers: Any = None, doc: str = "", **facts: bool
) -> Any:
    prims = (name,) if lowers is None else lowers
    return ElementwiseOp(name, ("x",), fn, lax, prims, doc=doc or f"``{name}(x)``.", **facts)


def _binary(
    name: str, fn: Any, lax: Any = None, lowers: Any = None, doc: str = "", **facts: bool
) -> Any:
    prims = (name,) if lowers is None else lowers
    return ElementwiseOp(name, ("x", "y"), fn, lax, prims, doc=doc or f"``{name}(x, y)``.", **facts)


_MATH: dict[str, bool] = {"transcendental": True, "approximated": True}
"""The facts of most math functions: a transcendental on the device, approximated by XLA."""


def _lax(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A ``lax`` op on operands that may differ in shape (``lax`` needs equal shapes)."""
    return lambda *xs: fn(*broadcast_all([jnp.asarray(x) for x in xs]))


def _pow(x: Any, y: Any) -> jax.Array:
    """``lax.pow``: a scalar exponent takes ``x``'s dtype, an integer array keeps its own."""
    x = jnp.asarray(x)
    if not isinstance(y, jax.Array):
        y = jnp.asarray(y, x.dtype)
    return jax.lax.pow(*broadcast_all([x, y]))


def _compare(name: str, fn: Any, symbol: str) -> ElementwiseOp:
    return ElementwiseOp(name, ("x", "y"), fn, None, (name,), "bool", doc=f"``x {symbol} y``.")


OPS: tuple[ElementwiseOp, ...] = (
    _unary("neg", jnp.negative, jax.lax.neg, doc="``-x``."),
    _unary("abs", jnp.abs, jax.lax.abs, doc="``|x|``."),
    _unary("exp", jnp.exp, jax.lax.exp, in_place=True, **_MATH),
    _unary("log", jnp.log, jax.lax.log, doc="Natural logarithm.", **_MATH),
    _unary("log2", jax.lax.log2, jax.lax.log2, doc="Base-2 logarithm.", approximated=True),
    _unary("sqrt", jnp.sqrt, jax.lax.sqrt, transcendental=True),
    _unary("rsqrt", jax.lax.rsqrt, doc="``1 / sqrt(x)``.", in_place=True, **_MATH),
    _unary("reciprocal", jnp.reciprocal, lowers=(), doc="``1 / x``."),
    _unary("square", jnp.square, doc="``x * x``."),
    _unary("tanh", jnp.tanh, jax.lax.tanh, **_MATH),
    _unary("sigmoid", jax.nn.sigmoid, lowers=("logistic",), doc="``1 / (1 + exp(-x))``.", **_MATH),
    _unary("relu", jax.nn.relu, lowers=(), doc="``max(x, 0)``."),
    _unary(
        "gelu",
        functools.partial(jax.nn.gelu, approximate=True),
        lowers=(),
        doc="GELU, tanh approximation (``jax.nn.gelu``).",
        transcendental=True,
    ),
    _unary(
        "gelu_erf",
        functools.partial(jax.nn.gelu, approximate=False),
        lowers=(),
        doc="Exact GELU (``jax.nn.gelu(x, approximate=False)``).",
        transcendental=True,
    ),
    _unary("silu", jax.nn.silu, lowers=(), doc="``x * sigmoid(x)``.", **_MATH),
    _unary("erf", jax.lax.erf, doc="The error function.", **_MATH),
    _unary("erfc", jax.lax.erfc, doc="``1 - erf(x)``.", **_MATH),
    _unary("log1p", jnp.log1p, doc="``log(1 + x)``.", **_MATH),
    _unary("expm1", jnp.expm1, doc="``exp(x) - 1``.", **_MATH),
    _unary("sign", jnp.sign, doc="-1, 0 or 1."),
    _unary("one_minus_square", lambda x: 1 - x * x, doc="``1 - x * x`` (tanh's derivative)."),
    _unary("bitwise_not", jnp.bitwise_not, lowers=("not",), doc="``~x`` (logical on bools)."),
    _unary("floor", jax.lax.floor, doc="Round down."),
    _unary("ceil", jax.lax.ceil, doc="Round up."),
    _unary("sin", jax.lax.sin, **_MATH),
    _unary("cos", jax.lax.cos, **_MATH),
    _unary("tan", jax.lax.tan, **_MATH),
    _unary("asin", jax.lax.asin, **_MATH),
    _unary("acos", jax.lax.acos, **_MATH),
    _unary("atan", jax.lax.atan, **_MATH),
    _unary("sinh", jax.lax.sinh, **_MATH),
    _unary("cosh", jax.lax.cosh, **_MATH),
    _unary("asinh", jax.lax.asinh, **_MATH),
    _unary("acosh", jax.lax.acosh, **_MATH),
    _unary("atanh", jax.lax.atanh, **_MATH),
    _unary("exp2", jax.lax.exp2, doc="``2 ** x``.", **_MATH),
    _unary("cbrt", jax.lax.cbrt, doc="Cube root.", **_MATH),
    _unary("erf_inv", jax.lax.erf_inv, doc="The inverse error function.", **_MATH),
    _unary("lgamma", jax.lax.lgamma, doc="``log |gamma(x)|``.", **_MATH),
    _unary("digamma", jax.lax.digamma, doc="The derivative of ``lgamma``.", **_MATH),
    _unary("population_count", jax.lax.population_count, doc="Set bits of an integer."),
    _unary("clz", jax.lax.clz, doc="Leading zero bits of an integer."),
    ElementwiseOp(
        "is_finite",
        ("x",),
        jax.lax.is_finite,
        lowers=("is_finite",),
        result="bool",
        doc="Whether ``x`` is neither infinite nor NaN.",
    ),
    ElementwiseOp(
        "round",
        ("x", "rounding_method"),
        lambda x, method: jax.lax.round(x, jax.lax.RoundingMethod(method)),
        lowers=("round",),
        values=(0,),
        doc="Round to an integer: ``rounding_method`` 0 away from zero, 1 to even.",
        from_jax=lambda xs, params: [*xs, int(params["rounding_method"])],
    ),
    _binary("add", jnp.add, jax.lax.add, ("add", "add_any"), doc="``x + y``.", in_place=True),
    _binary("sub", jnp.subtract, jax.lax.sub, doc="``x - y``.", in_place=True),
    _binary("mul", jnp.multiply, jax.lax.mul, doc="``x * y``."),
    _binary(
        "div",
        _lax(jax.lax.div),
        jax.lax.div,
        doc="``x / y``; integers divide rounding toward zero, as ``lax.div``.",
    ),
    _binary("rem", _lax(jax.lax.rem), doc="Remainder with the sign of ``x``, as ``lax.rem``."),
    _binary(
        "atan2",
        _lax(jax.lax.atan2),
        doc="``arctan(x / y)`` in the quadrant of the point ``(y, x)``.",
        **_MATH,
    ),
    _binary("nextafter", _lax(jax.lax.nextafter), doc="The next float after ``x`` toward ``y``."),
    _binary("bitwise_xor", jnp.bitwise_xor, lowers=("xor",), doc="``x ^ y``."),
    _binary("shift_left", _lax(jax.lax.shift_left), doc="``x << y``."),
    _binary(
        "shift_right_logical",
        _lax(jax.lax.shift_right_logical),
        doc="``x >> y``, filling with zeros.",
    ),
    _binary(
        "shift_right_arithmetic",
        _lax(jax.lax.shift_right_arithmetic),
        doc="``x >> y``, filling with the sign bit.",
    ),
    _binary("maximum", jnp.maximum, jax.lax.max, ("max",), doc="Elementwise maximum."),
    _binary("minimum", jnp.minimum, jax.lax.min, ("min",), doc="Elementwise minimum."),
    ElementwiseOp(
        "pow",
        ("x", "y"),
        lambda x, y: _pow(x, y),
        lowers=("pow",),
        values=(0,),
        others="integer",
        doc="``x ** y``; ``y`` an integer array, or of ``x``'s dtype (as ``lax.pow``).",
        **_MATH,
    ),
    ElementwiseOp(
        "integer_pow",
        ("x", "y"),
        lambda x, y: jax.lax.integer_pow(x, int(y)),
        lowers=("integer_pow",),
        values=(0,),
        from_jax=lambda xs, params: [*xs, params["y"]],
        doc="``x ** y`` for a Python int ``y``.",
    ),
    _binary("bitwise_and", jnp.bitwise_and, lowers=("and",), doc="``x & y`` (logical on bools)."),
    _binary("bitwise_or", jnp.bitwise_or, lowers=("or",), doc="``x | y`` (logical on bools)."),
    _compare("lt", jnp.less, "<"),
    _compare("le", jnp.less_equal, "<="),
    _compare("gt", jnp.greater, ">"),
    _compare("ge", jnp.greater_equal, ">="),
    _compare("eq", jnp.equal, "=="),
    _compare("ne", jnp.not_equal, "!="),
    *(
        ElementwiseOp(
            f"{name}_to",
            ("x", "y"),
            _lax(prim.bind),
            lowers=(f"{name}_to",),
            result="bool",
            public=False,
            doc=f"``x {symbol} y`` in the total order of sorts (-0.0 < 0.0, NaNs last).",
        )
        for name, prim, symbol in (
            ("lt", jax.lax.lt_to_p, "<"),
            ("le", jax.lax.le_to_p, "<="),
            ("eq", jax.lax.eq_to_p, "=="),
        )
    ),
    ElementwiseOp(
        "clamp",
        ("min", "x", "max"),
        _lax(jax.lax.clamp),
        lowers=("clamp",),
        doc="``x`` clipped to ``[min, max]``, as ``lax.clamp``.",
    ),
    ElementwiseOp(
        "where",
        ("condition", "x", "y"),
        select,
        lowers=("select_n",),
        values=(1, 2),
        from_jax=lambda xs, params: [xs[0], xs[2], xs[1]] if len(xs) == 3 else xs,
        doc="``x`` where ``condition`` (a bool array) holds, else ``y``.",
    ),
)
"""Every elementwise op, one record each."""

OP: dict[str, ElementwiseOp] = {op.name: op for op in OPS}

ELEMENTWISE_OPS: dict[str, int] = {op.name: op.arity for op in OPS}
"""Every elementwise op name and its number of operands."""
