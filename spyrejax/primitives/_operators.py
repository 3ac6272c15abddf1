"""Operators and methods of Spyre arrays, on values and on tracers alike.

A tracer forwards ``x + y`` to ``aval._add(x, y)`` and ``x.sum()`` to the aval's
``sum`` method, so each operator is attached twice: as a staticmethod/aval_method on
:class:`SpyreType` (tracers) and as a plain method on :class:`SpyreArray` (values).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import jax
import numpy as np

from .._errors import (
    SpyreAttributeError,
    SpyreFallbackWarning,
    SpyreInternalError,
    SpyreUnsupportedError,
)
from .._jax import (
    ShapedArray,
    array_operator,
    aval_method,
    aval_property,
    called_by_device_put,
    register_hitype,
)
from ._array import SpyreArray, SpyreType
from ._astype import astype
from ._base import image, wrap
from ._elementwise import elementwise, scalar_operand
from ._matmul import matmul
from ._reduce import REDUCTIONS, reduce
from ._transfer import to_host
from ._views import reshape, squeeze, transpose

__all__ = ["install"]


def _binary(op: str, reflected: bool = False) -> Callable[[Any, Any], Any]:
    if reflected:
        return lambda self, other: elementwise(op, other, self)
    return lambda self, other: elementwise(op, self, other)


def _shift_right(reflected: bool = False) -> Callable[[Any, Any], Any]:
    """``>>`` as ``jax.Array``'s: logical on unsigned integers, arithmetic on the others."""

    def method(self: Any, other: Any) -> Any:
        x, y = (other, self) if reflected else (self, other)
        logical = np.issubdtype(self.dtype, np.unsignedinteger)
        return elementwise("shift_right_logical" if logical else "shift_right_arithmetic", x, y)

    return method


def _host_only(symbol: str, reflected: bool = False) -> Callable[[Any, Any], Any]:
    """An operator of ``jax.Array`` with no eager Spyre op: refused by name.

    A host operand is refused as every operator refuses it (``host_operand``).

    Raises:
        SpyreTypeError: if the other operand is a host array.
        SpyreUnsupportedError: otherwise, naming ``spyrejax.jit`` (which runs it on the
            device, as JAX defines it from ``div``, ``rem`` and ``sign``) and ``to_host``.
    """

    def method(self: Any, other: Any) -> Any:
        scalar_operand(symbol, 0 if reflected else 1, other)
        raise SpyreUnsupportedError(
            f"{symbol}: a Spyre array has no eager {symbol!r} operator; "
            f"spyrejax.jit(lambda a, b: a {symbol} b)(a, b) runs it on the device, or "
            "spyrejax.to_host reads the arrays to the host"
        )

    return method


_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": _binary("add"),
    "radd": _binary("add", True),
    "sub": _binary("sub"),
    "rsub": _binary("sub", True),
    "mul": _binary("mul"),
    "rmul": _binary("mul", True),
    "truediv": _binary("div"),
    "rtruediv": _binary("div", True),
    "pow": _binary("pow"),
    "rpow": _binary("pow", True),
    "lt": _binary("lt"),
    "le": _binary("le"),
    "gt": _binary("gt"),
    "ge": _binary("ge"),
    "eq": _binary("eq"),
    "ne": _binary("ne"),
    "and": _binary("bitwise_and"),
    "rand": _binary("bitwise_and", True),
    "or": _binary("bitwise_or"),
    "ror": _binary("bitwise_or", True),
    "xor": _binary("bitwise_xor"),
    "rxor": _binary("bitwise_xor", True),
    "lshift": _binary("shift_left"),
    "rlshift": _binary("shift_left", True),
    "rshift": _shift_right(),
    "rrshift": _shift_right(True),
    "floordiv": _host_only("//"),
    "rfloordiv": _host_only("//", True),
    "mod": _host_only("%"),
    "rmod": _host_only("%", True),
    "invert": lambda self: elementwise("bitwise_not", self),
    "neg": lambda self: elementwise("neg", self),
    "abs": lambda self: elementwise("abs", self),
    "matmul": lambda self, other: matmul(self, other),
    "rmatmul": lambda self, other: matmul(other, self),
}


def _reduction(op: str) -> Callable[..., Any]:
    def method(self: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return reduce(op, self, axis, keepdims)

    method.__name__ = op
    method.__doc__ = f"``{op}`` over ``axis`` (see :func:`spyrejax.{op}`)."
    return method


def _reshape(self: Any, *shape: Any) -> Any:
    return reshape(self, shape[0] if len(shape) == 1 else shape)


def _transpose(self: Any, *axes: Any) -> Any:
    return transpose(self, None if not axes else axes[0] if len(axes) == 1 else axes)


_METHODS: dict[str, Callable[..., Any]] = {
    **{name: _reduction(name) for name in REDUCTIONS},
    "reshape": _reshape,
    "transpose": _transpose,
    "squeeze": lambda self, axis=None: squeeze(self, axis),
    "astype": lambda self, dtype: astype(self, dtype),
}

_PROPERTIES: dict[str, Callable[[Any], Any]] = {"T": lambda self: transpose(self)}


def _vspace_zero(self: SpyreType) -> SpyreArray:
    """A zero tangent of this type."""
    return wrap(jax.numpy.zeros(self.layout.device_size, self.dtype), self)


def _vspace_add(self: SpyreType, x: SpyreArray, y: SpyreArray) -> SpyreArray:
    """Sum of two tangents of this type (image-wise: padding stays undefined)."""
    return wrap(image(x) + image(y), self.to_tangent_aval())


def _array(self: SpyreArray, dtype: Any = None, copy: Any = None) -> np.ndarray:
    """The host values (a device -> host DMA), for ``np.asarray``."""
    out = np.asarray(to_host(self))
    return out if dtype is None else out.astype(dtype)


def _host(self: SpyreArray) -> jax.Array:
    """The host values as a JAX array (a device -> host DMA)."""
    return to_host(self)


def _jax_array(self: SpyreArray) -> Any:
    """``jnp.asarray(a)``, ``jnp.sin(a)``: the host values (a device -> host DMA).

    Not for a ``jax.Array``'s operator (``x + a``, ``x @ a``): there it gives no array,
    so the operator returns ``NotImplemented`` and Python calls the Spyre array's own
    reflected one (``a.__radd__(x)``), which treats ``x`` as ``a + x`` does. The data
    stay where they are in both orders; no silent read to the host.
    """
    if array_operator(1) is not None:
        return NotImplemented
    return to_host(self)


_LIBRARIES = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (jax, np, sys.modules[__name__.split(".")[0]])
)
_WARNED: dict[Any, Any] = {}  # the warnings registry: once per user line


def _traced_by_jax(frame: Any) -> bool:
    """Whether JAX (``jax.jit``, ``grad``...) called the user's code at ``frame``."""
    frame = frame.f_back
    while frame is not None:
        if frame.f_code.co_filename.startswith(_LIBRARIES[0]):
            return True
        frame = frame.f_back
    return False


_REFLECTED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _reflected(self: Any, name: str, other: Any) -> Any:
    """``other <name> self`` for a traced Spyre array ``self``: its own reflected operator.

    Eager, Python calls it when the ``jax.Array``'s operator returns ``NotImplemented``;
    two tracers are one Python type, so Python would not: it is called here. It raises
    (``other`` is no Spyre array), as ``self + other`` does.

    Raises:
        SpyreTypeError: from the Spyre operator, naming the host operand and the fixes.
    """
    own = _OPERATORS.get(_REFLECTED.get(name, "r" + name))
    if own is None:  # an operator Spyre arrays do not have: Python's TypeError
        return NotImplemented
    own(self, other)
    raise SpyreInternalError(f"a Spyre operator {name!r} took a non-Spyre operand {other!r}")


def _traced_host(self: SpyreArray) -> Any:
    """A traced Spyre array's host values for a JAX function: a visible host fallback.

    Under a plain ``jax.jit`` (or ``grad``...), a Spyre array's operators and methods
    are Spyre primitives, but a ``jnp``/``lax`` function reads the array's values to
    the host and runs there: :class:`SpyreFallbackWarning` once per user source line.
    A ``jax.Array``'s operator (``x + a``) runs the Spyre array's own, as eager
    (:func:`_reflected`).
    """
    found = array_operator(2)
    if found is not None:  # x + a: the Spyre array's own operator, as eager
        return _reflected(self, *found)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame = frame.f_back
    if frame is None or not _traced_by_jax(frame):  # eager jnp on an array: as asked
        return to_host(self)
    file, line = frame.f_code.co_filename, frame.f_lineno
    warning = SpyreFallbackWarning(
        f"a JAX function at {file}:{line} was given a traced Spyre array: it reads the "
        "array's values to the host (a device -> host DMA) and runs on the host. Under a "
        "plain jax.jit, Spyre arrays' operators and methods (+, @, .sum()) run on the "
        "device and jnp/lax functions on the host; spyrejax.jit(f) runs all of f there"
    )
    warnings.warn_explicit(warning, None, file, line, registry=_WARNED)
    return to_host(self)


def _scalar(convert: Callable[[Any], Any]) -> Callable[[SpyreArray], Any]:
    def method(self: SpyreArray) -> Any:
        if self.size != 1:
            raise TypeError(
                f"only arrays of one element convert to Python scalars, got shape {self.shape}"
            )
        return convert(np.asarray(self).reshape(()).item())

    return method


def _len(self: SpyreArray) -> int:
    if not self.shape:
        raise TypeError("len() of a 0-d SpyreArray")
    return self.shape[0]


def _index(self: SpyreArray) -> int:
    if not np.issubdtype(self.dtype, np.integer):
        raise TypeError(f"only integer arrays can be indices, got {self.dtype}")
    return _scalar(int)(self)


def _iter(self: SpyreArray) -> Any:
    _len(self)  # a 0-d array is not iterable
    return iter(_host(self))


def _deepcopy(self: SpyreArray, memo: dict[int, Any]) -> SpyreArray:
    """A copy of the image with the same type, as ``copy.deepcopy`` of a ``jax.Array``."""
    return SpyreArray.of_checked(deepcopy(self.image, memo), self.type)


# Host-side conversions: each moves the array to the host (a DMA), as jax.Array's do.
_HOST_METHODS: dict[str, Callable[..., Any]] = {
    "__float__": _scalar(float),
    "__int__": _scalar(int),
    "__bool__": _scalar(bool),
    "__complex__": _scalar(complex),
    "__index__": _index,
    "item": lambda self, *args: _host(self).item(*args),
    "tolist": lambda self: _host(self).tolist(),
    "__format__": lambda self, spec: format(_host(self), spec),
    "__len__": _len,
    "__iter__": _iter,
    "__getitem__": lambda self, index: _host(self)[index],
    "__jax_array__": _jax_array,
    "__copy__": lambda self: self,  # immutable
    "__deepcopy__": _deepcopy,  # copy.deepcopy(model) of a model on the device
}


_JAX_ARRAY_NAMES = frozenset(n for n in dir(jax.Array) if not n.startswith("_"))
"""The public attributes of ``jax.Array``: the ones a JAX user reaches for."""


def _missing_attribute(self: SpyreArray, name: str) -> Any:
    """``a.name`` that SpyreArray does not have: for a ``jax.Array`` name, the ways to it.

    Raises:
        SpyreAttributeError: always (an ``AttributeError``, so ``hasattr`` says False).
    """
    if name not in _JAX_ARRAY_NAMES:
        raise SpyreAttributeError(f"'SpyreArray' object has no attribute {name!r}", name=name)
    raise SpyreAttributeError(
        f"a SpyreArray has no {name!r}, a jax.Array attribute. {_own_names()} In "
        f"spyrejax.jit the array is traced as a jax.Array, so every jax.Array method "
        f"runs there: sj.jit(lambda a: a.{_use(name)})(a); or read it to the host first: "
        f"sj.to_host(a).{_use(name)} (a device -> host DMA)",
        name=name,
        obj=self,
    )


_TRACED_NAMES = (_JAX_ARRAY_NAMES & frozenset(dir(ShapedArray))) - {"sharding"}
"""The ``jax.Array`` methods a tracer takes from its abstract value (``a.argmax()`` under
a plain ``jax.jit`` asks the Spyre type for ``argmax``); not ``sharding``, which JAX
reads off any abstract value."""


def _missing_traced(self: SpyreType, name: str) -> Any:
    """``a.name`` of a traced Spyre array under a plain ``jax.jit``: as eager, the ways to it.

    Raises:
        SpyreAttributeError: for a ``jax.Array`` name; AttributeError for any other.
    """
    if name not in _TRACED_NAMES:
        raise AttributeError(f"'SpyreType' object has no attribute {name!r}", name=name, obj=self)
    raise SpyreAttributeError(
        f"a SpyreArray traced by jax.jit has no {name!r}, a jax.Array attribute. "
        f"{_own_names(traced=True)} spyrejax.jit traces the array as a jax.Array, so every "
        f"jax.Array method runs there: spyrejax.jit(f) in place of jax.jit(f); or read it "
        f"to the host first: sj.to_host(a).{_use(name)} (a device -> host DMA)",
        name=name,
        obj=self,
    )


def _own_names(traced: bool = False) -> str:
    """What a Spyre array has: the device ops' methods, and eager the host reads."""
    names = _METHODS | _PROPERTIES if traced else _METHODS | _PROPERTIES | _HOST_METHODS
    own = ", ".join(sorted(n for n in names if not n.startswith("_")))
    what = "the device ops'" if traced else "the device ops' and host reads"
    return f"Its own are {what} ({own}; shape, dtype, ndim, size, layout)."


def _use(name: str) -> str:
    """How advice spells ``jax.Array``'s ``name``: a call for a method."""
    return f"{name}(...)" if callable(getattr(jax.Array, name)) else name


def _typeof(a: SpyreArray) -> SpyreType:
    """``jax.typeof(a)``; for ``jax.device_put(a)``, a named refusal with the ways to go.

    Raises:
        SpyreUnsupportedError: under ``jax.device_put``, which refuses every hijax value
            (JAX's bare ``NotImplementedError``); this says what to call instead.
    """
    if called_by_device_put():
        raise SpyreUnsupportedError(
            f"jax.device_put does not take a SpyreArray ({a.type.str_short()}): it is "
            "already in Spyre device memory, and JAX moves no hijax value. Pass it on as "
            "it is (spyrejax.jit and the Spyre ops take it there); spyrejax.to_host(a) "
            "reads it to the host as a jax.Array, which jax.device_put takes; "
            "spyrejax.restickify(a, layout) lays it out anew on the device; "
            "spyrejax.device_put(x, sharding) puts a host array on the cards of a mesh"
        )
    return a.type


def install() -> None:
    """Attach operators, methods, properties, the tangent space and ``typeof`` to the types."""
    SpyreType.vspace_zero = _vspace_zero  # type: ignore[method-assign]
    SpyreType.vspace_add = _vspace_add  # type: ignore[method-assign]
    SpyreArray.__array__ = _array  # type: ignore[attr-defined]
    register_hitype(SpyreArray, _typeof)  # jax.typeof(a)
    SpyreArray.__getattr__ = _missing_attribute  # type: ignore[attr-defined]
    SpyreType.__getattr__ = _missing_traced  # type: ignore[attr-defined]
    # NumPy's operators (``x + a``) defer to the Spyre array's, as jax.Array's do.
    SpyreArray.__array_priority__ = 100  # type: ignore[attr-defined]
    for name, fn in _HOST_METHODS.items():
        setattr(SpyreArray, name, fn)
    # jnp functions on a Spyre array (or a traced one) read its host values.
    SpyreType.__jax_array__ = aval_method(_traced_host)  # type: ignore[attr-defined]
    for name, fn in _OPERATORS.items():
        setattr(SpyreType, f"_{name}", staticmethod(fn))
        setattr(SpyreArray, f"__{name}__", fn)
    for name, fn in _METHODS.items():
        setattr(SpyreType, name, aval_method(fn))
        setattr(SpyreArray, name, fn)
    for name, fn in _PROPERTIES.items():
        setattr(SpyreType, name, aval_property(fn))
        setattr(SpyreArray, name, property(fn))
    SpyreArray.__hash__ = None  # type: ignore[assignment]  # == is elementwise
