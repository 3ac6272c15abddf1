"""SpyreArray and its abstract value SpyreType: a device image plus its Spyre layout.

``SpyreType`` is a ``jax.experimental.hijax`` ``HiType``: it carries the logical shape,
dtype, :class:`SpyreTensorLayout`, the view over the layout's base tensor and what the
padding is known to hold, so layouts appear on every variable of a printed jaxpr and
layout rules run at trace time. It lowers to one plain array: the device image, of
shape ``layout.device_size``.

Operators and methods (``+``, ``@``, ``.T``, ``.sum()``...), the tangent space
(``vspace_zero``/``vspace_add``), ``__array__`` and ``jax.typeof``'s handler are attached by
``spyrejax.primitives`` when it is imported (as JAX attaches its array methods), since
they call Spyre primitives: this module imports nothing above the layout core.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreTypeError, SpyreUnsupportedError
from .._jax import HiType, ShapedArray
from ..layout._devdims import DevDim, device_dims, is_contiguous, same_image, stick_dim
from ..layout._dtypes import format_for_dtype, host_dtype
from ..layout._lanes import lane_text
from ..layout._layout import SpyreTensorLayout
from ..layout._residency import DDR, Residency
from ..layout._segments import row_major_strides
from ._shard import residual_spec, shard_type, unshard_type

__all__ = ["MOVES", "Moves", "PadFill", "SpyreArray", "SpyreType"]

_SHORT_DTYPES = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "int8": "i8",
    "int32": "i32",
    "uint32": "u32",
    "uint16": "u16",
    "uint8": "u8",
    "bool": "bool",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
}


class PadFill(enum.Enum):
    """What the padding positions of a device image are known to hold."""

    POISON = "poison"
    """Undefined (filled with poison by transfers): kernels must mask it."""
    ZERO = "zero"
    """Zeros: a matmul may use the operand without masking its padding.

    A softmax's result (``primitives._softmax``) may hold NaN in the padding of a line
    whose data are all NaN: a product over that line is then NaN, as it is in JAX.
    """
    NEG_INF = "-inf"
    """Minus infinity (a float image ``to_device`` wrote with ``pad_value=-inf``): the
    identity of a max, so a max reduction or a softmax reads the image unmasked.

    Only transfers establish it. Views (and windows, lane views, a group's or a card's
    block) keep the image and so its fill, as they keep ``ZERO``; every op that writes
    an image states its own fill (elementwise ops, copies, in-place writes: ``POISON``
    or ``ZERO``). Readers ask ``primitives._masks.holds_identity``, which takes plain
    images only.
    """

    def holds(self, value: float) -> bool:
        """Whether the padding is known to hold ``value`` (an identity of a reduction)."""
        if self is PadFill.ZERO:
            return value == 0
        return self is PadFill.NEG_INF and value == -np.inf


def _ints(xs: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


class Moves:
    """How a Spyre array mapped along a dim whose slices are not views is moved first.

    ``primitives._mapping`` owns the rule and installs it here when the primitives are
    imported: it builds on the primitives (restickify, the DMA), which build on this
    module. ``SpyreType.dec_rank``/``lower_val`` and the primitives' batch rule call it.

    Attributes:
        mapped_type: ``(t, axis) -> SpyreType``, one slice of ``t`` after the move.
        stacked_image: ``(image, have, want) -> image``, the move on a device image.
        to_front: ``(x, axis) -> SpyreArray``, the move of a value (a restickify).
    """

    mapped_type: Callable[[SpyreType, int], SpyreType]
    stacked_image: Callable[[jax.Array, SpyreType, SpyreType], jax.Array]
    to_front: Callable[[Any, int], Any]


MOVES = Moves()


_DERIVED = frozenset({"_hash", "dims", "stick_dim", "is_view"})  # cached per SpyreType
_INTERNED: dict[tuple[Any, ...], SpyreType] = {}  # by type and metadata: SpyreType.interned
_INTERNED_KEPT = 65536


@dataclass(frozen=True)
class SpyreType(HiType):
    """The abstract value of a :class:`SpyreArray`.

    Attributes:
        shape: logical shape.
        dtype: element dtype (the host dtype; its format is ``layout.device_dtype``).
        layout: the device layout of the image.
        base_shape: the contiguous host tensor the layout was built for.
        strides: the view: host-offset strides of each logical dim over the base
            (0 for broadcast dims).
        pad: what the padding holds.
        vma: inside ``jax.shard_map``, the mesh axes the value varies over (differs from
            card to card), as JAX tracks for plain arrays with ``check_vma``: metadata
            for that check, not part of type equality.
        residency: where the value lives (:class:`spyrejax.Residency`): DDR unless the
            device model keeps it in the LX of some cores. Metadata, not part of type
            equality: only the jaxprs ``explain`` and ``Lowered.as_text`` show carry it.
        x64_dtype: in x64 mode, the 64-bit integer dtype ``jax.jit`` gives the value,
            held on the device in ``dtype`` (int64 as int32, as torch-spyre does):
            ``to_host`` returns it. Metadata, not part of type equality.
        mapped_from: for the per-example type of an array ``jax.vmap`` or ``lax.scan``
            maps over a dim whose slices are not views (``primitives._mapping``): that
            array's type and the mapped dim, which ``inc_rank`` gives back (the type of
            the value JAX batches a traced function over). Part of type equality.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    layout: SpyreTensorLayout
    base_shape: tuple[int, ...]
    strides: tuple[int, ...]
    pad: PadFill = PadFill.POISON
    vma: frozenset[str] = field(default=frozenset(), compare=False)
    residency: Residency = field(default=DDR, compare=False)
    x64_dtype: np.dtype | None = field(default=None, compare=False)
    mapped_from: tuple[SpyreType, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "vma", frozenset(self.vma))
        if not isinstance(self.residency, Residency):
            raise SpyreTypeError(
                f"SpyreType: residency must be a Residency, got {self.residency!r}"
            )
        object.__setattr__(self, "shape", _ints(self.shape))
        object.__setattr__(self, "base_shape", _ints(self.base_shape))
        object.__setattr__(self, "strides", _ints(self.strides))
        dt = host_dtype(self.dtype)
        object.__setattr__(self, "dtype", dt)
        # Predicates (bool) follow the layout of the values they were computed from.
        if dt != np.bool_ and format_for_dtype(dt) != self.layout.device_dtype:
            raise LayoutError(
                f"dtype {dt} does not match the layout's format {self.layout.device_dtype!r}"
            )
        if len(self.strides) != len(self.shape):
            raise LayoutError(f"strides {self.strides} do not match shape {self.shape}")
        self.dims  # noqa: B018  (validates the view against the layout)

    @classmethod
    def contiguous(
        cls,
        shape: tuple[int, ...],
        dtype: Any,
        layout: SpyreTensorLayout,
        pad: PadFill = PadFill.POISON,
    ) -> SpyreType:
        """The type of a fresh array whose layout was built for its own shape."""
        shape = _ints(shape)
        return cls(shape, dtype, layout, shape, row_major_strides(shape), pad)

    def canonical(self) -> SpyreType:
        """This type with the same index map, stated over its own shape where it can be.

        A view whose layout, bound to the view's own shape, walks the device image
        exactly as the view does (RoPE's pairs: ``[..., D/2, 2]`` of a ``D``-stick
        tensor, and ``[..., D]`` of the pairs' stick) is that contiguous array: views
        and the results computed from them (a fresh buffer in the operand's layout) are
        given in this form, so equal index maps compare equal and a consumer or the
        program's result asking for the default type of a shape finds it. Tried first,
        for a view stuck on its last dim: the default layout of its shape (a product laid
        out as its transpose's default, attention's ``[B, T, N, H]``; size-1 device dims
        aside, ``layout._devdims.same_image``). Broadcast views, and views no layout of their
        own shape states, are returned as they are.
        """
        if not self.is_view or any(
            s == 0 and n > 1 for n, s in zip(self.shape, self.strides, strict=True)
        ):
            return self
        layouts = [self.layout]
        if self.ndim > 1 and self.stick_dim == self.ndim - 1:
            with contextlib.suppress(LayoutError):
                layouts.insert(0, SpyreTensorLayout(self.shape, self.layout.device_dtype))
        for layout in layouts:
            try:
                flat = SpyreType.contiguous(self.shape, self.dtype, layout, self.pad)
            except LayoutError:
                continue
            if same_image(flat, self):
                return replace(flat, vma=self.vma, x64_dtype=self.x64_dtype)
        return self

    # -- derived ------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        """Logical rank."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Logical number of elements."""
        return math.prod(self.shape)

    def __hash__(self) -> int:
        # The planner and the device model key their caches on types: hash once. The
        # fields are those equality compares (all but the metadata).
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self._fields())
        return h

    def __eq__(self, other: object) -> bool:
        # The dataclass's comparison of the same fields, decided by the cached hashes
        # first: the planner compares many types that differ (issue 24).
        if self is other:
            return True
        if not isinstance(other, SpyreType):  # no subclasses: the dataclass's class test
            return NotImplemented
        return hash(self) == hash(other) and self._fields() == other._fields()

    def _fields(self) -> tuple[Any, ...]:
        """The fields equality compares (all but the metadata), in declaration order."""
        return (
            self.shape,
            self.dtype,
            self.layout,
            self.base_shape,
            self.strides,
            self.pad,
            self.mapped_from,
        )

    def interned(self) -> SpyreType:
        """This type, or the equal one with the same metadata seen first (issue 24).

        The planner keys its dicts on types: a lookup with the very object a dict holds
        compares nothing, one with an equal copy compares every field. Types a planner
        makes (its options' results, the default types) are interned so that equal ones
        are one object. A type mapped from another (``mapped_from``) is returned as it is.
        """
        if self.mapped_from is not None:
            return self
        key = (self, self.vma, self.residency, self.x64_dtype)
        found = _INTERNED.get(key)
        if found is None:
            if len(_INTERNED) >= _INTERNED_KEPT:
                _INTERNED.clear()
            found = _INTERNED[key] = self
        return found

    def __getstate__(self) -> dict[str, Any]:
        # The cached hash and properties are not pickled: a string's hash differs
        # between processes.
        return {k: v for k, v in self.__dict__.items() if k not in _DERIVED}

    # The derived properties below are functions of the (immutable) fields, read many
    # times per type by the planner and the device model: each is computed once.

    @functools.cached_property
    def dims(self) -> tuple[DevDim, ...]:
        """Tags of the device dims: which logical dims each walks."""
        return device_dims(self.layout, self.base_shape, self.shape, self.strides)

    @functools.cached_property
    def stick_dim(self) -> int | None:
        """The logical dim along the sticks, or None for a sparse array."""
        return stick_dim(self.dims)

    @functools.cached_property
    def is_view(self) -> bool:
        """Whether the logical array differs from the layout's base tensor."""
        return self.shape != self.base_shape or not is_contiguous(self.shape, self.strides)

    @property
    def weak_type(self) -> bool:
        """Spyre arrays are never weakly typed."""
        return False

    @property
    def mat(self) -> Any:
        """Varying manual axes (read by ``lax.cond``): those of the device image."""
        return self.lo_ty()[0].mat

    # -- hijax lowering -----------------------------------------------------------

    def lo_ty(self) -> list[ShapedArray]:
        """The device image's plain type."""
        return [ShapedArray(self.layout.device_size, self.dtype)]

    def lower_val(self, hi_val: SpyreArray) -> list[jax.Array]:
        """The device image of a value.

        ``lax.scan`` lowers a stacked input with its per-iteration type (JAX 0.12's
        hijax): a stack whose slices are not views of its image is first moved into
        the stacked layout of this type (``primitives._mapping``), so the loop slices
        the image's dim 0.
        """
        have = hi_val.type
        if have.ndim == self.ndim + 1 and not have.maps_in_place(0):
            return [MOVES.stacked_image(hi_val.image, have, self)]
        return [hi_val.image]

    def raise_val(self, image: jax.Array) -> SpyreArray:
        """A value of this type around a device image.

        An image with one more leading dim is a stack of them: ``lax.scan`` raises its
        stacked outputs with the per-iteration type (JAX 0.12's hijax), so the value
        gets the stacked type (:func:`batched_type`), as ``inc_rank`` gives it.
        """
        if len(image.shape) == len(self.layout.device_size) + 1:
            return SpyreArray(image, batched_type(self, int(image.shape[0])))
        return SpyreArray(image, self)

    def str_short(self, short_dtypes: bool = False, mesh_axis_types: bool = False) -> str:
        """Compact form used in jaxprs: ``f16[5,100,150]{[100,3,5,64]/[150,64,15000,1]}``.

        After the layout: ``gaps=`` (the ``(front, back)`` gaps of a window of a larger
        buffer, on the dims that have one), the element arrangement (``DL16_TO_FP32``,
        ``FP32_TO_DL16``) if not the standard one, ``lanes=1::2`` (a lane-strided view:
        lanes 1, 3, ... of a buffer's sticks), ``view=`` (a view over another base),
        ``pad=0`` (zero padding) or ``pad=-inf``, ``V:`` (the mesh axes it varies over) and
        ``@LX[c0:32]+0x4000`` (kept in the LX of cores 0..31 at that per-core byte
        address). A value with no ``@`` lives in DDR.
        """
        name = _SHORT_DTYPES.get(self.dtype.name, self.dtype.name)
        lay = self.layout
        text = f"{list(lay.device_size)}/{list(lay.stride_map)}".replace(" ", "")
        if lay.has_gaps:
            gaps = [f"{j}:{f}+{b}" for j, (f, b) in enumerate(lay.device_gaps) if f or b]
            text += f" gaps={','.join(gaps)}"
        if lay.is_arranged:
            text += f" {lay.arrangement.value}"
        if hasattr(lay, "lanes"):
            text += f" lanes={lane_text(lay)}"
        if self.is_view:
            text += f" view={list(self.base_shape)}:{list(self.strides)}".replace(", ", ",")
        if self.pad is not PadFill.POISON:
            text += f" pad={0 if self.pad is PadFill.ZERO else self.pad.value}"
        if self.vma:
            text += f" V:{','.join(sorted(self.vma))}"
        if self.residency.in_lx:
            text += f" @{self.residency}"
        return f"{name}[{','.join(map(str, self.shape))}]{{{text}}}"

    def __repr__(self) -> str:
        return f"SpyreType({self.str_short()})"

    # -- autodiff -----------------------------------------------------------------

    def to_tangent_aval(self) -> SpyreType:
        """Tangents share the layout; their padding is undefined.

        A tangent is a fresh value: mapped from nothing (``mapped_from`` dropped).
        """
        return replace(self, pad=PadFill.POISON, mapped_from=None)

    # -- shard_map: a split logical dim is a block of the device image ------------------

    def shard(self, mesh: Any, manual_axes: frozenset, check_vma: bool, spec: Any) -> SpyreType:
        """Each card's type under ``jax.shard_map``: the layout restricted to its block."""
        return shard_type(self, mesh, manual_axes, spec, check_vma)

    def unshard(self, mesh: Any, check_vma: bool, spec: Any) -> SpyreType:
        """The global type whose per-card blocks have this type."""
        return unshard_type(self, mesh, spec, check_vma)

    def nospec(self, mesh: Any, check_vma: bool, all_names: tuple[Any, ...]) -> Any:
        """The spec of a per-card value (an autodiff residual): stacked along a dim."""
        return residual_spec(self, mesh, all_names)

    def reshard(self, sharding: Any) -> SpyreType:
        """``jax.reshard`` (hijax's hook for placing a value under a sharding): refused.

        A Spyre type carries no sharding of its image, so it cannot be placed under one;
        the error names the ways that exist (``jax.device_put`` of a Spyre array is
        refused by JAX itself, before any hook).

        Raises:
            SpyreTypeError: always, pointing to ``spyrejax.device_put`` and ``shard_map``.
        """
        raise SpyreTypeError(
            f"jax.reshard of a Spyre array ({self.str_short()}) to {sharding} is not "
            "supported. Put a host array on the cards with spyrejax.device_put(x, "
            "NamedSharding(mesh, PartitionSpec(...)), layout=...) (spyrejax.to_host(x) "
            "first for a Spyre array), or split it inside jax.shard_map with spyrejax.P "
            "specs"
        )

    # -- vmap and scan: the batch dim is logical dim 0 and device dim 0 -------------

    def leading_axis_spec(self) -> int:
        """Scan and vmap map over logical dim 0."""
        return 0

    def maps_in_place(self, axis: int) -> bool:
        """Whether slices along ``axis`` are views: dim 0 and the outermost device dim."""
        d0 = self.dims[0] if self.dims else None
        return (
            axis == 0
            and self.ndim >= 1
            and d0 == DevDim((0,), 1, self.shape[0])
            and not any(0 in d.dims for d in self.dims[1:])
            and self.base_shape[:1] == self.shape[:1]
            and self.strides[0] == math.prod(self.base_shape[1:])
        )

    def dec_rank(self, size: int | None, spec: Any) -> SpyreType:
        """The per-example type of an array mapped along logical dim ``spec``.

        A view of the image where the slices are views (:meth:`maps_in_place`); else
        the type of a slice once the array is moved into its stacked layout, which
        the batch rules and ``lax.scan``'s lowering then do (``primitives._mapping``).
        """
        if not isinstance(spec, int) or isinstance(spec, bool) or not 0 <= spec < self.ndim:
            raise SpyreUnsupportedError(
                f"jax.vmap/scan cannot map {self.str_short()} along {spec!r}: spyrejax maps "
                "Spyre arrays along one of their logical dims (an integer in_axes)"
            )
        if not self.maps_in_place(spec):
            return MOVES.mapped_type(self, spec)
        lay = self.layout
        inner = SpyreTensorLayout.from_stride_map(
            lay.device_size[1:], lay.stride_map[1:], lay.device_dtype
        )
        return SpyreType(
            self.shape[1:],
            self.dtype,
            inner,
            self.base_shape[1:],
            self.strides[1:],
            self.pad,
            self.vma,
        )

    def inc_rank(self, size: int | None, spec: Any) -> SpyreType:
        """The batched type of this per-example type, mapped along logical dim ``spec``.

        The array's own type if this type was mapped from it (``mapped_from``); else a
        new logical dim that is the outermost device dim (at ``spec`` > 0, a transpose
        view of that stacked layout).
        """
        if not isinstance(spec, int) or isinstance(spec, bool) or size is None:
            raise SpyreUnsupportedError(
                f"spyrejax batches Spyre arrays along a logical dim, not {spec!r}: "
                f"{self.str_short()}"
            )
        if self.mapped_from is not None:
            t, axis = self.mapped_from
            if axis == spec and t.shape[axis] == size:
                return t
        stacked = batched_type(self, int(size))
        if spec == 0:
            return stacked
        perm = (*range(1, spec + 1), 0, *range(spec + 1, stacked.ndim))
        return replace(
            stacked,
            shape=tuple(stacked.shape[p] for p in perm),
            strides=tuple(stacked.strides[p] for p in perm),
        )


def interned(t: Any) -> Any:
    """A Spyre type interned (:meth:`SpyreType.interned`), any other type as it is."""
    return t.interned() if isinstance(t, SpyreType) else t


def batched_layout(
    layout: SpyreTensorLayout, base_shape: tuple[int, ...], size: int
) -> SpyreTensorLayout:
    """A layout for ``(size, *base_shape)``: ``layout`` repeated along a new outer dim."""
    return SpyreTensorLayout.from_stride_map(
        (size, *layout.device_size),
        (math.prod(base_shape), *layout.stride_map),
        layout.device_dtype,
        arrangement=layout.arrangement,
    )


def batched_type(t: SpyreType, size: int) -> SpyreType:
    """``t`` with a batch dim of ``size`` in front (logical dim 0, device dim 0)."""
    return SpyreType(
        (size, *t.shape),
        t.dtype,
        batched_layout(t.layout, t.base_shape, size),
        (size, *t.base_shape),
        (math.prod(t.base_shape), *t.strides),
        t.pad,
        t.vma,
    )


class SpyreArray:
    """A tensor in (emulated) Spyre device memory: a device image and its type.

    Create one with :func:`spyrejax.to_device`; ``np.asarray(a)`` or
    :func:`spyrejax.to_host` brings the values back. SpyreArrays pass into and out of
    ``jax.jit`` and through ``lax.scan``/``cond``/``fori_loop``.

    Attributes:
        image: the raw device image, shape ``layout.device_size``, padding included.
        type: the :class:`SpyreType`.
    """

    __slots__ = ("__weakref__", "image", "type")  # weakly held: the per-core executor's

    image: jax.Array
    type: SpyreType

    def __init__(self, image: jax.Array, type: SpyreType) -> None:
        if tuple(image.shape) != type.layout.device_size:
            raise LayoutError(
                f"image of shape {tuple(image.shape)} does not fit {type.str_short()}"
            )
        object.__setattr__(self, "image", image)
        object.__setattr__(self, "type", type)

    @staticmethod
    def of_checked(image: jax.Array, type: SpyreType) -> SpyreArray:
        """A Spyre array around an image the caller knows fits ``type`` (not checked)."""
        x = _new_array(SpyreArray)
        _set_image(x, image)
        _set_type(x, type)
        return x

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("SpyreArray is immutable")

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical shape."""
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        """Element dtype."""
        return self.type.dtype

    @property
    def ndim(self) -> int:
        """Logical rank."""
        return self.type.ndim

    @property
    def size(self) -> int:
        """Logical number of elements."""
        return self.type.size

    @property
    def layout(self) -> SpyreTensorLayout:
        """The device layout."""
        return self.type.layout

    def block_until_ready(self) -> SpyreArray:
        """Wait for the device image to be computed."""
        self.image.block_until_ready()
        return self

    def __repr__(self) -> str:
        if isinstance(self.image, jax.ShapeDtypeStruct):  # abstract: a type, no data
            return f"SpyreArray(<abstract>, {self.type.str_short()})"
        body = np.array2string(np.asarray(self), separator=", ", threshold=50, prefix="SpyreArray(")
        return f"SpyreArray({body}, {self.type.str_short()})"


# The dispatch fast path builds a Spyre array per result: slot setters, no checks.
_new_array = object.__new__
_set_image = SpyreArray.image.__set__  # type: ignore[attr-defined]
_set_type = SpyreArray.type.__set__  # type: ignore[attr-defined]
