"""Elementwise primitives: unary math, binary arithmetic, comparisons and ``where``.

Layout rule (spec section 7): after broadcasting, every operand and the result share the
stick dim. The result takes the layout (and view, ``canonical``) of the first operand of
the result's shape; the others are brought onto its device dims on the device: dims in
another order are transposed, broadcast dims get a size-1 axis, a stick of size 1
broadcasts its lane 0. An operand in a window of a larger buffer (gaps) is read in its
valid range. Operands stuck on another dim are a :class:`LayoutError` (``restickify``).

Kernel: one vectorised jnp expression on the aligned images. The result's padding is undefined
(``pad=poison``): it holds what the expression made of the operands' padding, and every kernel
that reads padding masks it. Not writing poison keeps a chain of elementwise ops (and a
reduction's producers) in one XLA fusion; debug option ``spyrejax_poison_padding`` writes it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec, elementwise_space
from ..layout._devdims import AlignPlan, align
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreArray, SpyreType
from ._axes import aligned, broadcast_all, collapsed, merge_axes, merged_shape
from ._base import SpyrePrim
from ._in_place import ungapped, valid_image
from ._masks import from_data_dims, masked, padding_in_data_dims, poisoned, select
from ._pointwise import compute, pointwise
from ._views import align_batch_dims

__all__ = [
    "ELEMENTWISE_OPS",
    "OP",
    "OPS",
    "Binary",
    "Elementwise",
    "ElementwiseOp",
    "Ternary",
    "Unary",
    "elementwise",
]

Scalar = bool | int | float
Operand = SpyreArray | Scalar
"""An elementwise op's operand: a Spyre array, or a Python scalar that broadcasts."""


class Unary(Protocol):
    """The type of a one-operand elementwise op's public function (``spyrejax.exp``)."""

    def __call__(self, x: SpyreArray, /) -> SpyreArray: ...


class Binary(Protocol):
    """The type of a two-operand elementwise op's public function (``spyrejax.add``)."""

    def __call__(self, x: Operand, y: Operand, /) -> SpyreArray: ...


class Ternary(Protocol):
    """The type of a three-operand elementwise op's public function (``spyrejax.where``)."""

    def __call__(self, a: Operand, b: Operand, c: Operand, /) -> SpyreArray: ...


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


def _target(avals: list[SpyreType], out_shape: tuple[int, ...], out_dtype: Any) -> SpyreType:
    """The result's type: the first full-shape operand's layout and view, else a default."""
    def_format = None
    for a in avals:
        if a.dtype == out_dtype or out_dtype == np.bool_:
            pairs = zip(a.shape, a.strides, strict=True)
            if a.shape == out_shape and all(s != 0 or n == 1 for n, s in pairs):
                return SpyreType(a.shape, out_dtype, a.layout, a.base_shape, a.strides).canonical()
            def_format = def_format or a.layout.device_dtype
    rank = len(out_shape)
    stick = rank - 1
    for a in avals:
        s = a.stick_dim
        if s is not None and a.shape[s] > 1:
            stick = s + rank - a.ndim
            break
    order = [d for d in range(rank) if d != stick] + ([stick] if rank else [])
    fmt = def_format or avals[0].layout.device_dtype
    return SpyreType.contiguous(out_shape, out_dtype, SpyreTensorLayout(out_shape, fmt, order))


_Broadcast = tuple[SpyreType, tuple[AlignPlan, ...]]  # the result's type, each operand's plan


def broadcast_rule(name: str, avals: list[SpyreType], out_dtype: Any) -> _Broadcast:
    """Result type of an n-ary pointwise op and how each operand aligns to it.

    Raises:
        LayoutError: if the shapes do not broadcast or an operand is stuck elsewhere.
    """
    return _broadcast_rule(name, tuple(avals), out_dtype)


@functools.lru_cache(maxsize=65536)  # once per signature: the planner's tries, repeated layers
def _broadcast_rule(name: str, avals: tuple[SpyreType, ...], out_dtype: Any) -> _Broadcast:
    try:
        out_shape = tuple(np.broadcast_shapes(*(a.shape for a in avals)))
    except ValueError:
        shapes = ", ".join(str(list(a.shape)) for a in avals)
        raise LayoutError(f"{name}: shapes {shapes} do not broadcast") from None
    target = _target(avals, out_shape, out_dtype)
    rank = len(out_shape)
    plans = []
    for i, a in enumerate(avals):
        shift = rank - a.ndim
        bdims = set(range(shift))
        for k, (n, s) in enumerate(zip(a.shape, a.strides, strict=True)):
            if (n == 1 and out_shape[k + shift] != 1) or (s == 0 and n > 1):
                bdims.add(k + shift)
        plan = align([d.renumber(shift) for d in a.dims], target.dims, frozenset(bdims))
        if plan is None:
            raise LayoutError(_mismatch(name, i, a, shift, target))
        plans.append(plan)
    return target, tuple(plans)


def _mismatch(name: str, i: int, a: SpyreType, shift: int, target: SpyreType) -> str:
    mine = "none (sparse)" if a.stick_dim is None else a.stick_dim + shift
    return (
        f"{name}: operand {i} {a.str_short()} is stuck on dim {mine} (or tiled differently), "
        f"but the result {target.str_short()} is stuck on dim {target.stick_dim}. Pointwise "
        "operands must share the stick dim: call spyrejax.restickify(operand, dim_order=...) "
        "first, or use spyrejax.jit, which inserts the restickify for you."
    )


class Elementwise(SpyrePrim):
    """An elementwise op; one subclass per :class:`ElementwiseOp` sets ``op``."""

    op: ClassVar[ElementwiseOp]
    consts: tuple[tuple[int, Scalar], ...]
    takes_gaps = True  # iterates its operands' valid ranges; its result has no gaps

    def __init__(self, *avals: SpyreType, consts: tuple[tuple[int, Scalar], ...] = ()) -> None:
        out_dtype = _out_dtype(self.op, avals, consts)
        out, plans = broadcast_rule(self.op.name, [ungapped(a) for a in avals], out_dtype)
        self._plans = plans
        self.in_avals = tuple(avals)
        self.out_aval = out
        self.params = {"consts": consts}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"consts": self.consts} if self.consts else {}

    def kernel(self, *images: jax.Array) -> jax.Array:
        out_t = self.out_aval
        valid = [valid_image(m, a.layout) for m, a in zip(images, self.in_avals, strict=True)]
        ops: list[Any] = [aligned(img, p) for img, p in zip(valid, self._plans, strict=True)]
        for pos, value in self.consts:
            ops.insert(pos, value)
        if self.op.result == "same":  # scalar values take the dtype
            dt, at = out_t.dtype, self.op.value_positions
            ops = [
                jnp.asarray(o, dt) if k in at and not isinstance(o, jax.Array) else o
                for k, o in enumerate(ops)
            ]
        synthetic = [k for k, d in enumerate(out_t.dims) if not d.is_data]
        sparse = bool(synthetic) and not padding_in_data_dims(out_t)
        shape = out_t.layout.device_size
        if sparse:  # compute on lane 0 only and pad the other lanes with poison
            lane0 = tuple(slice(0, 1) if k in synthetic else slice(None) for k in range(len(shape)))
            ops = [o[lane0] if isinstance(o, jax.Array) and o.ndim else o for o in ops]
            shape = tuple(1 if k in synthetic else n for k, n in enumerate(shape))
        runs = collapsed(out_t.dims, shape, [o.shape for o in ops if jnp.ndim(o)])
        ops = [merge_axes(o, runs) for o in ops]
        merged = merged_shape(shape, runs)
        result = jnp.broadcast_to(self._compute(ops), merged).astype(out_t.dtype).reshape(shape)
        if sparse:
            return from_data_dims(result, out_t)
        return poisoned(result, out_t)

    def tangent_kernel(self, *images: jax.Array) -> jax.Array:
        """The kernel on images whose float padding holds 1 instead of poison.

        Reverse mode transposes the tangent map, in which the operands' images are
        coefficients: a zero cotangent times poison (NaN) padding is NaN, and the
        transpose of a broadcast (a stick of size 1, a stride-0 dim) sums those lanes
        into data. At 1 every op's derivative is finite.
        """
        safe = [
            masked(img, t, 1) if jnp.issubdtype(t.dtype, jnp.floating) else img
            for img, t in zip(images, self.in_avals, strict=True)
        ]
        return self.kernel(*safe)

    def _compute(self, ops: list[Any]) -> jax.Array:
        return compute(self.op, ops, self.out_aval.dtype)

    def align_batched(self, args: list[Any], batched: tuple[bool, ...]) -> list[Any]:
        """vmap: lower-rank batched operands line their batch dim up with the others'."""
        return align_batch_dims(args, batched, self.in_avals)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"consts": self.consts}

    def space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace:
        """One variable per result dim; inputs broadcast right-aligned; its record's facts."""
        op = self.op
        return elementwise_space(
            op.name, out, ins, transcendental=op.transcendental, in_place=op.in_place
        )

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """The op's own computation (:func:`pointwise`) on the cores' data."""
        return pointwise(self.op, self.consts, vals, self.out_aval.dtype)


def _out_dtype(op: ElementwiseOp, avals: tuple[SpyreType, ...], consts: Any) -> Any:
    """Value operands share one dtype (no implicit promotion); comparisons give bool."""
    scalar_at = {pos for pos, _ in consts}
    arrays = [pos for pos in range(op.arity) if pos not in scalar_at]
    aval_at = dict(zip(arrays, avals, strict=True))
    values = [a for pos, a in aval_at.items() if pos in op.value_positions]
    for pos, a in aval_at.items():
        if pos not in op.value_positions and not _other_ok(op, a.dtype, values):
            want = "bool" if op.others == "bool" else "an integer or the values' dtype"
            raise SpyreTypeError(f"{op.name}: the {op.params[pos]} must be {want}, got {a.dtype}")
    if not values and op.others == "integer":  # 2.0 ** x: the exponent's float dtype
        values = [a for a in aval_at.values() if not jnp.issubdtype(a.dtype, jnp.integer)]
    if not values:
        raise SpyreTypeError(f"{op.name}: give at least one value operand as a Spyre array")
    dtypes = {a.dtype for a in values}
    if len(dtypes) > 1:
        names = ", ".join(sorted(str(d) for d in dtypes))
        raise SpyreTypeError(
            f"{op.name}: operand dtypes differ ({names}); convert with astype first"
        )
    return np.dtype(np.bool_) if op.result == "bool" else values[0].dtype


def _other_ok(op: ElementwiseOp, dtype: np.dtype, values: list[SpyreType]) -> bool:
    """Whether a non-value operand's dtype fits ``op.others``."""
    if op.others == "bool":
        return dtype == np.bool_
    return jnp.issubdtype(dtype, jnp.integer) or all(a.dtype == dtype for a in values)


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_CLASSES: dict[str, type[Elementwise]] = {
    op.name: type(_class_name(op.name), (Elementwise,), {"op": op}) for op in OPS
}


def _is_scalar(x: Any) -> bool:
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


def elementwise(op: str, *operands: Any) -> SpyreArray:
    """Apply the elementwise op ``op`` to Spyre arrays and Python/NumPy scalars.

    Args:
        op: a name from :data:`ELEMENTWISE_OPS`.
        *operands: Spyre arrays (traced or not) and scalars; at least one Spyre array.

    Raises:
        SpyreTypeError: on an unknown op, a wrong number of operands, a host array
            operand, or operands of different dtypes.
        LayoutError: if the shapes do not broadcast or operands are stuck on different
            dims.
    """
    if op not in _CLASSES:
        raise SpyreTypeError(f"unknown elementwise op {op!r}; known: {sorted(_CLASSES)}")
    if len(operands) != OP[op].arity:
        raise SpyreTypeError(f"{op} takes {OP[op].arity} operands, got {len(operands)}")
    arrays, consts = [], []
    for pos, x in enumerate(operands):
        if _is_scalar(x):
            consts.append((pos, np.asarray(x).item()))
            continue
        aval = jax.typeof(x)
        if not isinstance(aval, SpyreType):
            raise SpyreTypeError(
                f"{op}: operand {pos} is a host array {aval}; move it with spyrejax.to_device "
                "(or pass a Python scalar)"
            )
        arrays.append(x)
    if not arrays:
        raise SpyreTypeError(f"{op}: needs at least one Spyre array operand")
    prim = _CLASSES[op](*[jax.typeof(a) for a in arrays], consts=tuple(consts))
    return prim(*arrays)


def _make_public(op: ElementwiseOp) -> Callable[..., SpyreArray]:
    def fn(*operands: Any) -> SpyreArray:
        return elementwise(op.name, *operands)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY, annotation=Any)
            for p in op.params
        ],
        return_annotation=SpyreArray,
    )
    fn.__doc__ = (
        f"{op.doc} Elementwise on Spyre arrays; scalars broadcast.\n\n"
        "Operands must share the stick dim after broadcasting; the result takes the "
        "first full-shape operand's layout; its padding is undefined (``pad=poison``).\n\n"
        f"Args:\n" + "".join(f"    {p}: a Spyre array or a scalar.\n" for p in op.params)
    )
    return fn


PUBLIC = {op.name: _make_public(op) for op in OPS if op.public}
"""The public function of every elementwise op, by name."""
