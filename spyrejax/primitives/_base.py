"""The base of every Spyre primitive, and the two bridge primitives ``image``/``wrap``.

A Spyre primitive is a ``HiPrim`` whose constructor is its shape and layout rule (it
computes ``out_aval`` from ``in_avals`` or raises) and whose :meth:`SpyrePrim.kernel`
computes on device images with plain JAX. From the kernel alone the base class derives:

- ``expand`` (the emulator: images in, image out),
- ``jvp`` (``jax.jvp`` of the kernel on images, re-wrapped with :func:`wrap`), and from
  it reverse mode (``vjp_from_jvp``: the tangent map is plain JAX plus the linear
  bridges, which transpose into each other),
- ``batch`` (vmap): the primitive rebuilt on batched types, batch at logical dim 0.

Inside ``abstract_eval`` (``primitives._calls``) a primitive is not bound: calling it returns an
abstract Spyre array of its output type (no data) and lists the primitive. Its
constructor is its layout rule, so this is exactly the type and the copies a
computation would have: the planner evaluates lowering rules this way.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreInternalError, SpyreUnsupportedError
from .._jax import GradAccum, HiPrim, ShapedArray, Zero, transpose_from_jvp, vjp_from_jvp
from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec
from ..layout._lanes import lane_text
from ._array import MOVES, SpyreArray, SpyreType, batched_type
from ._calls import abstract_calls, current_executor, current_recorder, unwatched, watched
from ._eager import differentiable, eager_call, eager_jvp, eager_transpose, run_eagerly
from ._rounding import Rounding

__all__ = [
    "Image",
    "SpyrePrim",
    "Wrap",
    "abstract",
    "image",
    "is_spyre",
    "normalize_axes",
    "wrap",
]

_PVARY: list[Any] = []  # spyrejax.primitives._collectives registers its pvary here


def abstract(aval: Any) -> Any:
    """A value of type ``aval`` with no data: a Spyre array over a shape-only image."""
    if is_spyre(aval):
        return SpyreArray(jax.ShapeDtypeStruct(aval.layout.device_size, aval.dtype), aval)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


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


def _declared_params(cls: type) -> frozenset[str]:
    """Names annotated on ``cls`` and its bases below :class:`SpyrePrim`, without a value."""
    names = set()
    for klass in cls.__mro__:
        if klass is SpyrePrim:
            break
        for name, hint in vars(klass).get("__annotations__", {}).items():
            is_classvar = str(hint).startswith(("ClassVar", "typing.ClassVar"))
            if not name.startswith("_") and not is_classvar and name not in vars(klass):
                names.add(name)
    return frozenset(names)


class SpyrePrim(HiPrim):
    """A primitive on Spyre arrays; subclasses set avals/params and define ``kernel``.

    Subclasses declare their parameters as class annotations without a value (``layout:
    SpyreTensorLayout``) and set the same names in ``self.params``, which hijax copies
    onto the instance; a class that declares parameters and sets others is an internal
    error. Annotations starting with ``_`` or marked ``ClassVar`` are no parameters.

    Attributes:
        role: what the primitive does with data: ``"compute"``; ``"view"``, its output
            is a view of its input's image (no memory of its own); ``"copy"``, the
            program's own copies into a fresh layout (slice, concatenate, pad, a
            reshape that is no view); ``"restickify"``, a copy into another layout.
            Copies and restickifies say how many elements in :attr:`moves`.
        eager_jit: whether an eager call runs the kernel as one compiled program
            (``primitives._eager``); no for transfers (the host engine) and the bridges.
        eager_rules: whether its autodiff rules applied eagerly (``jax.grad`` outside
            ``jax.jit``) run as one compiled program each (``primitives._eager``); no
            for the bridges, whose rules are each other.
        takes_gaps: whether its kernel reads and writes layouts with gaps (a window of
            a larger buffer, see ``SpyreTensorLayout.with_gap``); the others refuse
            such operands and results by name (a ``LayoutError``: the planner moves them).
        takes_arrangements: whether its kernel reads and writes layouts whose elements
            sit in a non-standard element arrangement (``layout.arrangement``); the
            others refuse them by name, so the planner restickifies first.
        takes_lanes: whether its kernel reads lane-strided views (``x[..., ::2]`` in
            place: ``primitives._lanes``); the others refuse them by name.
        param_names: the parameters the class declares.
    """

    role: ClassVar[str] = "compute"
    eager_jit: ClassVar[bool] = True
    eager_rules: ClassVar[bool] = True
    takes_gaps: ClassVar[bool] = False
    takes_arrangements: ClassVar[bool] = False
    takes_lanes: ClassVar[bool] = False
    param_names: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.param_names = _declared_params(cls)

    def __init__(self) -> None:
        if self.param_names and self.params.keys() != self.param_names:
            raise SpyreInternalError(
                f"{type(self).__name__} sets parameters {sorted(self.params)} but declares "
                f"{sorted(self.param_names)}; declare each as a class annotation"
            )
        if not self.takes_gaps:
            self._refuse_gaps()
        if not self.takes_arrangements:
            self._refuse_arrangements()
        if not self.takes_lanes:
            self._refuse_lanes()
        varying = frozenset().union(*(_vma(a) for a in _flat(self.in_avals)))
        if isinstance(self.out_aval, SpyreType):
            vma = self.out_vma(varying | self.out_aval.vma)
            if vma != self.out_aval.vma:
                self.out_aval = replace(self.out_aval, vma=vma)
        super().__init__()

    def _typed(self) -> Iterator[tuple[str, SpyreType]]:
        """Each Spyre-typed operand and result, with what it is ("operand", "result")."""
        for what, avals in (("operand", self.in_avals), ("result", self.out_aval)):
            for a in _flat(avals):
                if isinstance(a, SpyreType):
                    yield what, a

    def _refuse_gaps(self) -> None:
        """Raise a LayoutError naming the primitive if an operand or result has gaps."""
        for what, a in self._typed():
            if a.layout.has_gaps:
                raise LayoutError(
                    f"{type(self).__name__} does not take layouts with gaps: its {what} "
                    f"{a.str_short()} is a window of a larger buffer; restickify it first"
                )

    def _refuse_arrangements(self) -> None:
        """Raise a LayoutError naming the primitive if an operand or result is arranged."""
        for what, a in self._typed():
            if a.layout.is_arranged:
                raise LayoutError(
                    f"{type(self).__name__} reads elements in their standard places: its "
                    f"{what} {a.str_short()} is in element arrangement "
                    f"{a.layout.arrangement.value} (what the card's 16 <-> 32-bit "
                    "conversion emits); restickify it to the standard arrangement first"
                )

    def _refuse_lanes(self) -> None:
        """Raise a LayoutError naming the primitive if an operand or result is lane-strided."""
        for what, a in self._typed():
            if hasattr(a.layout, "lanes"):
                raise LayoutError(
                    f"{type(self).__name__} does not read lane-strided views: its {what} "
                    f"{a.str_short()} lies on lanes {lane_text(a.layout)} of "
                    "a buffer's sticks; restickify it first"
                )

    def out_vma(self, varying: frozenset[str]) -> frozenset[str]:
        """Mesh axes the result varies over, given those of the operands (their union)."""
        return varying

    @property
    def moves(self) -> int:
        """Elements this primitive moves between layouts (0 unless it copies)."""
        return 0

    # --- its device side: what a division of it over the cores computes -------------------
    # A divided primitive (elementwise ops, astype, reductions, matmuls) defines both
    # ``space`` and ``core_kernel`` (and ``core_rounding`` if its per-core result may round
    # otherwise); the device model and ``emulate="cores"`` read them.

    space_kind: ClassVar[str | None] = None
    """The ``kind`` of the space :meth:`space` builds (``"reduce"``...); None: not divided."""

    def space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace | None:
        """Its iteration space for a division over the cores, None if it is not divided.

        Args:
            ins: its operands' specs (their types' shapes, layouts and views).
            out: its result's spec.

        Raises:
            DeviceError: when its operands have no space (a matmul of rank < 2...).
        """
        return None

    def space_key(self) -> Hashable:
        """What its space depends on besides its class and its operand and result types."""
        return ()

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """Its per-core compute: every core's result from its LX data (``emulate="cores"``).

        Args:
            div: its division (over :meth:`space`).
            vals: per operand, every core's data in the space's iteration order,
                ``[cores, *local shape]`` (see ``spyrejax.device._coremaps``).

        Returns:
            Every core's result in iteration order: ``[cores, *local shape]`` of the
            output (partial results of a split reduced dim already combined).

        Raises:
            SpyreInternalError: for a primitive that is not divided.
        """
        raise SpyreInternalError(f"{type(self).__name__} is not divided: it has no core kernel")

    def core_rounding(self, div: WorkDivision) -> Rounding | None:
        """How far its result per core (:meth:`core_kernel`) may round from the whole-image one.

        ``emulate="cores"``'s check mode compares the two within this bound. None (the
        default): the same bits on every data position.

        Args:
            div: its division (over :meth:`space`).
        """
        return None

    @property
    def out_avals(self) -> tuple[Any, ...]:
        """Every output's abstract value (``out_aval`` is a tuple for several outputs)."""
        return self.out_aval if isinstance(self.out_aval, tuple) else (self.out_aval,)

    def _results(self, outs: Any) -> Any:
        """Outputs in the primitive's structure: one value, or a tuple of several."""
        return tuple(outs) if isinstance(self.out_aval, tuple) else outs[0]

    def __call__(self, *args: Any) -> Any:
        called = abstract_calls()
        if called is None:
            rec = current_recorder()
            out = self._bind(args)
            if rec is not None:
                rec(self, args, out)
            return out
        called.append(self)
        return self._results([abstract(a) for a in self.out_avals])

    def _bind(self, args: tuple[Any, ...]) -> Any:
        """The result of the primitive: from the executor if it runs it, else bound."""
        run = current_executor()
        if run is not None:
            with unwatched():
                out = run(self, args)
            if out is not None:
                return out
        if self.eager_jit and eager_call(self, args):
            with unwatched(executor=False):  # the call the eager jit traces is this one
                return run_eagerly(self, args)
        return super().__call__(*args)

    def kernel(self, *args: jax.Array) -> Any:
        """The emulator kernel: device images (and plain arrays) in, image(s) out.

        A primitive with several outputs (a tuple ``out_aval``) returns a tuple.
        """
        raise NotImplementedError(f"{type(self).__name__} has no kernel")

    def tangent_kernel(self, *args: jax.Array) -> jax.Array:
        """The function differentiated for ``jvp``; the kernel unless overridden."""
        return self.kernel(*args)

    def expand(self, *args: Any) -> Any:
        """Run the kernel on the inputs' device images."""
        lo = [a.image if isinstance(a, SpyreArray) else a for a in args]
        outs = self.kernel(*lo)
        outs = outs if isinstance(self.out_aval, tuple) else (outs,)
        pairs = zip(outs, self.out_avals, strict=True)
        return self._results([SpyreArray(o, a) if is_spyre(a) else o for o, a in pairs])

    def pp_params(self) -> dict[str, Any]:
        """Parameters shown in printed jaxprs (Spyre types in their short form)."""
        shown = {}
        for k, v in self.params.items():
            if k.startswith("_"):
                continue
            shown[k] = v.str_short() if isinstance(v, SpyreType) else v
        return shown

    # -- autodiff -------------------------------------------------------------------

    def _rule_eagerly(self, args: Any) -> bool:
        """Whether a rule applied to ``args`` runs as one program (``primitives._eager``).

        As for a call: eager and keyed; and no executor, recorder or abstract evaluation
        is watching the primitives the rule calls.
        """
        return self.eager_rules and not watched() and eager_call(self, args)

    def jvp(self, primals: Any, tangents: Any) -> tuple[Any, Any]:
        """Forward mode: ``jax.jvp`` of the kernel on the device images.

        Applied eagerly (concrete values, no trace above), the rule runs as one program.
        """
        if self._rule_eagerly((primals, tangents)):
            return eager_jvp(self, primals, tangents)
        out = self(*primals)
        avals = self.out_avals
        if not any(differentiable(a.dtype) for a in avals):
            return out, self._results([Zero(a.to_tangent_aval()) for a in avals])
        lo_p, lo_t = [], []
        out_vma = self.out_aval.vma if is_spyre(self.out_aval) else frozenset()
        for p, t, aval in zip(primals, tangents, self.in_avals, strict=True):
            lo = image(p) if is_spyre(aval) else p
            missing = out_vma - aval.vma if is_spyre(aval) else frozenset()
            if missing and not isinstance(t, Zero) and _PVARY:
                # A value the same on every card meets per-card values (JAX's pvary):
                # its tangent is marked varying, so its cotangent is summed over cards.
                t = _PVARY[0](t, tuple(sorted(missing)))
            lo_p.append(lo)
            lo_t.append(_lo_tangent(t, lo, aval))
        _, t_out = jax.jvp(self.tangent_kernel, tuple(lo_p), tuple(lo_t))
        t_outs = t_out if isinstance(self.out_aval, tuple) else (t_out,)
        result = []
        for t, a in zip(t_outs, avals, strict=True):
            if not differentiable(a.dtype):
                result.append(Zero(a.to_tangent_aval()))
            else:
                result.append(wrap(t, a.to_tangent_aval()) if is_spyre(a) else t)
        return out, self._results(result)

    vjp_fwd = vjp_from_jvp.vjp_fwd

    def vjp_bwd_retval(self, res: Any, out_ct: Any) -> Any:
        """Reverse mode: the transpose of the tangent map (:meth:`jvp`'s), per operand.

        Applied eagerly (the backward pass of a ``jax.grad`` outside ``jax.jit``), it runs
        as one program.
        """
        if self._rule_eagerly((res, out_ct)):
            return eager_transpose(self, res, out_ct)
        return transpose_from_jvp(self, res, out_ct)

    # -- vmap -----------------------------------------------------------------------

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        """Parameters of the primitive rebuilt for a leading batch dim of ``size``."""
        if self.params:
            raise SpyreUnsupportedError(
                f"primitive {type(self).__name__} does not support the transformation jax.vmap"
            )
        return {}

    def align_batched(self, args: list[Any], batched: tuple[bool, ...]) -> list[Any]:
        """vmap: the operands, batched at dim 0, ready for the batched primitive.

        Primitives whose operands broadcast right-aligned (elementwise ops, matmul's
        batch dims) give lower-rank batched operands size-1 dims after their batch dim
        (``primitives._views.align_batch_dims``); the rest take them as they are.
        """
        return args

    def batch(self, axis_data: Any, args: Any, dims: Any) -> tuple[Any, int]:
        """vmap: move batch dims to 0 and rebuild the primitive on batched types."""
        if all(d is None for d in dims):  # hijax also asks when nothing is batched
            return self(*args), None
        moved, batched = [], []
        for a, d, aval in zip(args, dims, self.in_avals, strict=True):
            if d is None:
                moved.append(a)
            elif is_spyre(aval):
                moved.append(MOVES.to_front(a, d))  # a restickify unless slices are views
            else:
                moved.append(jnp.moveaxis(a, d, 0))
            batched.append(d is not None)
        flags = tuple(batched)
        moved = self.align_batched(moved, flags)
        params = self.batch_params(flags, axis_data.size)
        new = type(self)(*[jax.typeof(a) for a in moved], **params)
        return new(*moved), self._results([0] * len(self.out_avals))


def _flat(avals: Any) -> list[Any]:
    if isinstance(avals, list | tuple):
        return [a for x in avals for a in _flat(x)]
    return [avals]


def _vma(aval: Any) -> frozenset[str]:
    """The mesh axes an operand varies over (Spyre types and plain arrays alike)."""
    if isinstance(aval, SpyreType):
        return aval.vma
    mat = getattr(aval, "mat", None)
    return frozenset(getattr(mat, "varying", ()))


def _lo_tangent(t: Any, lo_primal: Any, aval: Any) -> Any:
    if not differentiable(aval.dtype):
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

    eager_jit = False  # no kernel to compile: the image as it is
    eager_rules = False  # its rules are the other bridge: nothing to compile
    takes_gaps = True
    takes_arrangements = True  # a bridge: the image as it is
    takes_lanes = True

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

    eager_jit = False  # no kernel to compile: the image as it is
    eager_rules = False  # its rules are the other bridge: nothing to compile
    takes_gaps = True
    takes_arrangements = True  # a bridge: the image as it is
    takes_lanes = True

    type: SpyreType

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

    def align_batched(self, args: list[Any], batched: tuple[bool, ...]) -> list[Any]:
        """vmap: the operands, batched at dim 0, ready for the batched primitive.

        Primitives whose operands broadcast right-aligned (elementwise ops, matmul's
        batch dims) give lower-rank batched operands size-1 dims after their batch dim
        (``primitives._views.align_batch_dims``); the rest take them as they are.
        """
        return args

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
