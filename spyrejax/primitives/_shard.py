"""Spyre arrays across cards: ``spyrejax.P`` and the block types of ``jax.shard_map``.

A :class:`P` names, like ``jax.sharding.PartitionSpec``, the mesh axes each *logical*
dim is split over. A logical dim split ``k`` ways becomes a block of the device image:
its outermost device dim is cut into ``k`` equal slabs, one per card, so every card's
block is the global layout restricted to the block (the same bytes, no copy). The
block boundary must fall on a step of that outermost device dim: for the stick dim, on
a stick boundary.

``jax.shard_map`` asks a hijax type for its per-card type (``shard``) and back
(``unshard``), and asks the spec for the ``PartitionSpec`` of each lowered component
(``to_lo``): here the one device image. That image spec depends on the layout, which
the spec learns when ``shard``/``unshard`` first sees it (a spec is *bound* to one
image spec; a second argument needing another one is an error rather than a silent
mismatch).

Pure Python over the layout core, at trace time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from jax.sharding import PartitionSpec

from .._errors import LayoutError, SpyreInternalError, SpyreTypeError, SpyreUnsupportedError
from .._jax import HiPspec
from ..layout._segments import Segment, row_major_strides

__all__ = ["P", "Stack", "residual_spec", "resize_dim", "shard_type", "unshard_type"]

_Names = tuple[str, ...]

SpyreType = Any
"""A ``primitives._array.SpyreType`` (which imports this module, so not imported here)."""


class P(HiPspec):
    """A ``PartitionSpec`` over the logical dims of a Spyre array (for ``jax.shard_map``).

    Takes the same positional arguments as ``jax.sharding.PartitionSpec``: one entry per
    leading logical dim, ``None`` (not split), a mesh axis name or a tuple of names.

    Example:
        >>> import spyrejax as sj
        >>> sj.P(None, "x")
        spyrejax.P(None, 'x')

    Give each argument of ``shard_map`` its own ``P`` when their layouts differ: the
    first array a spec meets fixes the ``PartitionSpec`` of the device images it stands
    for (see :meth:`to_lo`).
    """

    def __init__(self, *partitions: str | tuple[str, ...] | None) -> None:
        for p in partitions:
            ok = (
                p is None
                or isinstance(p, str)
                or (isinstance(p, tuple) and all(isinstance(n, str) for n in p))
            )
            if not ok:
                raise SpyreTypeError(
                    f"spyrejax.P entries are None, a mesh axis name or a tuple of names; got {p!r}"
                )
        self.partitions = partitions
        self._image: PartitionSpec | None = None
        self._check_vma = True  # False once used in a shard_map with check_vma=False

    def names(self, ndim: int) -> tuple[_Names, ...]:
        """The mesh axis names splitting each of ``ndim`` logical dims."""
        if len(self.partitions) > ndim:
            raise LayoutError(
                f"{self!r} has {len(self.partitions)} entries for a rank-{ndim} array"
            )
        parts = [*self.partitions, *([None] * (ndim - len(self.partitions)))]
        return tuple(() if p is None else (p,) if isinstance(p, str) else p for p in parts)

    def bind(self, image: PartitionSpec) -> None:
        """Fix the device image's spec (the first use); a different one later raises."""
        if self._image is None:
            self._image = image
        elif self._image != image:
            raise LayoutError(
                f"{self!r} stands for device images split as {self._image} and as {image}: "
                "the arrays it is used for have different layouts. Give each argument "
                "(and output) of shard_map its own spyrejax.P"
            )

    @property
    def image(self) -> PartitionSpec | None:
        """The device image's ``PartitionSpec`` once bound, else None."""
        return self._image

    def to_lo(self) -> list[PartitionSpec]:
        """The ``PartitionSpec`` of the device image (hijax's lowering of the spec)."""
        if self._image is None:
            raise SpyreTypeError(f"{self!r} was not used for a Spyre array in shard_map")
        return [self._image]

    def note_check_vma(self, check_vma: bool) -> None:
        """Record that a ``shard_map`` with this ``check_vma`` uses the spec."""
        self._check_vma = self._check_vma and check_vma

    def to_tangent_spec(self) -> P:
        """Tangents share the layout, so the split (see :meth:`to_ct_spec`)."""
        return self.to_ct_spec()

    def to_ct_spec(self) -> P:
        """Cotangents share the layout, so the split.

        A replicated argument's cotangent is summed over the cards by the transposes
        of the ``pvary`` that Spyre primitives insert where it meets per-card values.

        Raises:
            SpyreUnsupportedError: under ``check_vma=False``, where JAX sums cotangents
                with ``jax.lax.psum``, which takes plain arrays only.
        """
        if not self._check_vma:
            raise SpyreUnsupportedError(
                "differentiating jax.shard_map(..., check_vma=False) over Spyre arrays: "
                "JAX then sums the cards' gradients with jax.lax.psum, which takes plain "
                "arrays; use check_vma=True (the default)"
            )
        return self

    def __repr__(self) -> str:
        return f"spyrejax.P({', '.join(map(repr, self.partitions))})"


def _spec(spec: Any) -> P:
    if isinstance(spec, P):
        return spec
    raise SpyreTypeError(
        f"a Spyre array in jax.shard_map needs a spyrejax.P spec (same arguments as "
        f"PartitionSpec, over logical dims); got {spec!r}"
    )


def _counts(mesh: Any, names: tuple[_Names, ...]) -> dict[int, int]:
    """``{logical dim: number of blocks}`` for the split dims."""
    shape = dict(mesh.shape)
    out = {}
    for d, ns in enumerate(names):
        unknown = [n for n in ns if n not in shape]
        if unknown:
            raise LayoutError(f"mesh axis {unknown[0]!r} is not in the mesh {tuple(shape)}")
        k = math.prod(shape[n] for n in ns)
        if k > 1:
            out[d] = k
    return out


def _base_dims(t: SpyreType) -> tuple[int | None, ...]:
    """The base dim each logical dim is (None for size-1 and broadcast dims)."""
    if not t.is_view:
        return tuple(range(t.ndim))
    base_strides = row_major_strides(t.base_shape)
    out: list[int | None] = []
    for n, s in zip(t.shape, t.strides, strict=True):
        hits = [
            b
            for b, (bn, bs) in enumerate(zip(t.base_shape, base_strides, strict=True))
            if bn == n and bs == s and b not in out
        ]
        if n == 1 or s == 0:
            out.append(None)
        elif hits:
            out.append(hits[0])
        else:
            raise SpyreUnsupportedError(
                f"shard_map cannot split the view {t.str_short()} (a reshape or slice of "
                "its base): spyrejax.compact(x) gives it its own layout first"
            )
    return tuple(out)


def _resize(t: SpyreType, counts: Mapping[int, int], names: Any, grow: bool) -> tuple:
    """``t`` with each logical dim in ``counts`` divided (or multiplied) by its count.

    Returns ``(new type, image partitions)``: the outermost device dim of each resized
    dim is the one cut into blocks.
    """
    base_of = _base_dims(t)
    base_counts: dict[int, int] = {}
    for d, k in counts.items():
        b = base_of[d]
        if b is None:
            raise SpyreUnsupportedError(
                f"dim {d} of {t.str_short()} is broadcast or of size 1: it cannot be split "
                f"over {k} cards"
            )
        base_counts[b] = k
    mapping = t.layout.for_host(t.base_shape)
    seg_of_base = {}
    for seg in mapping.segmentation.segments:
        for b in seg.host_dims:
            seg_of_base[b] = seg
    size = list(t.layout.device_size)
    image: list[Any] = [None] * len(size)
    outer: dict[int, tuple[int, int]] = {}  # cut device dim: (ratio, innermost base dim)
    for d, k in counts.items():
        b = base_of[d]
        if not grow and t.shape[d] % k:
            raise LayoutError(
                f"dim {d} (size {t.shape[d]}) of {t.str_short()} cannot be split into {k} "
                f"equal blocks ({t.shape[d]} % {k} != 0)"
            )
        seg = seg_of_base.get(b)
        if seg is None and grow and t.shape[d] == 1:  # one row per card: a size-1 device dim
            seg = Segment((b,), row_major_strides(t.base_shape)[b], 1, ())
        if seg is None:
            raise SpyreUnsupportedError(
                f"dim {d} of {t.str_short()} walks no device dim: it cannot be split over {k} cards"
            )
        j0, r0 = _block_dim(t, d, k, seg, grow)
        outer[j0] = (r0, seg.host_dims[-1])
        size[j0] = size[j0] * k if grow else size[j0] // k
        image[j0] = names[d] if len(names[d]) > 1 else names[d][0]
    scale = (lambda n, k: n * k) if grow else (lambda n, k: n // k)
    new_base = tuple(scale(n, base_counts.get(b, 1)) for b, n in enumerate(t.base_shape))
    old_strides = row_major_strides(t.base_shape)
    new_strides = row_major_strides(new_base)
    smap = list(t.layout.stride_map)
    for seg in mapping.segmentation.segments:
        inner = seg.host_dims[-1]
        for j, ratio in seg.axes:
            smap[j] = ratio * new_strides[inner]
    for j, (ratio, inner) in outer.items():
        smap[j] = ratio * new_strides[inner]
    lay = type(t.layout).from_stride_map(size, smap, t.layout.device_dtype)
    shape = tuple(scale(n, counts.get(d, 1)) for d, n in enumerate(t.shape))
    strides = tuple(
        s if b is None else s // old_strides[b] * new_strides[b] if s else 0
        for s, b in zip(t.strides, base_of, strict=True)
    )
    if not t.is_view:
        strides = row_major_strides(shape)
    new = replace(t, shape=shape, layout=lay, base_shape=new_base, strides=strides)
    return new, PartitionSpec(*image)


def _block_dim(t: SpyreType, d: int, k: int, seg: Any, grow: bool) -> tuple[int, int]:
    """``(device dim, ratio)`` cut into (or joined from) ``k`` blocks of logical dim ``d``.

    It is the outermost device dim walking ``d``: a block must be whole steps of it,
    never part of a stick, and the dim must hold no padding there. A card's block of
    exactly one step may sit in a size-1 device dim stepping over the whole block.

    Raises:
        LayoutError: naming the dim, the step (a stick for the stick dim) and the fix.
    """
    what = f"dim {d} (size {t.shape[d]}) of {t.str_short()}"
    if len(seg.host_dims) > 1:
        raise SpyreUnsupportedError(
            f"{what} shares its device dims with other dims (a folded layout): "
            "restickify it to a layout of its own before splitting it over cards"
        )
    lay = t.layout
    stick = lay.device_rank - 1
    eps = lay.elems_per_stick
    j0, r0 = seg.axes[0] if seg.axes else (stick, 1)
    n = t.shape[d]
    if grow and (j0 == stick or lay.device_size[j0] * r0 != seg.size):
        # A one-step block: the step over it is a size-1 device dim the segmentation skips.
        whole = [
            j
            for j in range(stick)
            if lay.device_size[j] == 1 and lay.stride_map[j] == seg.size * seg.stride
        ]
        if whole and (j0 == stick or lay.device_size[j0] * r0 >= seg.size):
            return whole[0], seg.size
    if not grow:
        block = n // k
        step = eps if j0 == stick else r0
        if block % step or (j0 == stick and block < n):
            unit = "sticks" if step == eps and (j0 == stick or r0 == eps) else "tiles"
            raise LayoutError(
                f"{what} cannot be split over {k} cards: each card's {block} elements would "
                f"end inside a {unit[:-1]} ({block / step:g} {unit} of {step} "
                f"{t.dtype.name} elements). Fix: pad dim {d} to a multiple of {k * step} "
                f"({k} cards x {step}), or split another dim"
            )
    slots = lay.device_size[j0] * r0
    if j0 == stick or slots != seg.size:
        role = "one card's block of a split dim" if grow else f"split over {k} cards"
        raise LayoutError(
            f"{what} cannot be {role}: its device image pads it ({slots} slots for "
            f"{seg.size} values), so the cards' blocks would not be whole slabs of one "
            "image. Fix: pad the dim to fill its device dims, or split another dim"
        )
    return j0, r0


def _mentioned(names: tuple[_Names, ...]) -> frozenset[str]:
    return frozenset(n for ns in names for n in ns)


def shard_type(
    t: SpyreType, mesh: Any, manual_axes: frozenset, spec: Any, check_vma: bool = True
) -> SpyreType:
    """The per-card type of ``t`` split as ``spec`` over ``mesh`` (``HiType.shard``).

    With ``check_vma`` the block varies over the mesh axes the spec splits it over.
    """
    spec = _spec(spec)
    if isinstance(spec, Stack):
        return spec.swap(t, spec.whole, spec.local)
    names = spec.names(t.ndim)
    names = tuple(tuple(n for n in ns if n in manual_axes) for ns in names)
    new, image = _resize(t, _counts(mesh, names), names, grow=False)
    spec.bind(image)
    spec.note_check_vma(check_vma)
    return replace(new, vma=t.vma | _mentioned(names)) if check_vma else new


def unshard_type(t: SpyreType, mesh: Any, spec: Any, check_vma: bool = True) -> SpyreType:
    """The global type whose blocks have type ``t`` (``HiType.unshard``).

    Raises:
        SpyreTypeError: with ``check_vma``, if ``t`` varies over a mesh axis the spec
            does not split it over (as JAX checks plain arrays): the cards' values
            differ, so there is no one replicated value to return.
    """
    spec = _spec(spec)
    if isinstance(spec, Stack):
        return replace(spec.swap(t, spec.local, spec.whole), vma=frozenset())
    names = spec.names(t.ndim)
    loose = t.vma - _mentioned(names)
    if check_vma and loose:
        raise SpyreTypeError(
            f"shard_map out_specs {spec!r} replicate the result {t.str_short()} over mesh "
            f"axes {sorted(loose)}, but it varies over them (each card has its own value): "
            "sum it with spyrejax.psum, split it over those axes in the spec, or pass "
            "check_vma=False to take one card's value"
        )
    new, image = _resize(t, _counts(mesh, names), names, grow=True)
    spec.bind(image)
    spec.note_check_vma(check_vma)
    return replace(new, vma=t.vma - _mentioned(names))


def resize_dim(
    t: SpyreType, dim: int, k: int, axes: tuple[str, ...], grow: bool
) -> tuple[SpyreType, int]:
    """``t`` with logical ``dim`` cut into (``grow``: joined from) ``k`` card blocks.

    Returns the new type and the device dim the blocks are slabs of (what a collective
    gathers or scatters along).
    """
    names = tuple(axes if d == dim else () for d in range(t.ndim))
    new, image = _resize(t, {dim: k} if k > 1 else {}, names, grow)
    cut = [j for j, p in enumerate(image) if p is not None]
    return new, cut[0] if cut else 0


class Stack(P):
    """The spec of a per-card value (an autodiff residual): each card's own value, stacked.

    Made by :func:`residual_spec` for one per-card type, it holds both types, so
    ``shard``/``unshard`` with it give them back exactly.
    """

    def __init__(self, local: SpyreType, whole: SpyreType, image: PartitionSpec) -> None:
        super().__init__()
        self.local, self.whole = local, whole
        self._image = image

    def to_tangent_spec(self) -> Stack:
        """The same stack of the tangent types."""
        return Stack(self.local.to_tangent_aval(), self.whole.to_tangent_aval(), self._image)

    def to_ct_spec(self) -> Stack:
        """The same stack of the cotangent types."""
        return self.to_tangent_spec()

    def swap(self, t: SpyreType, have: SpyreType, give: SpyreType) -> SpyreType:
        """``give`` (with ``t``'s padding) for ``t`` of type ``have``, else an internal error."""
        if replace(t, pad=have.pad) != have:
            raise SpyreInternalError(f"{t.str_short()} is not the stacked {have.str_short()}")
        return replace(give, pad=t.pad)

    def __repr__(self) -> str:
        return f"spyrejax.Stack({self.local.str_short()})"


def _stacked(t: SpyreType, k: int) -> SpyreType:
    """``t`` stacked ``k`` times in a new logical dim 0 that takes device dim 0 (size 1)."""
    lay = t.layout
    n = math.prod(t.base_shape)
    layout = type(lay).from_stride_map(
        (k, *lay.device_size[1:]), (n, *lay.stride_map[1:]), lay.device_dtype
    )
    return replace(
        t,
        shape=(k, *t.shape),
        layout=layout,
        base_shape=(k, *t.base_shape),
        strides=(n, *t.strides),
    )


def residual_spec(t: SpyreType, mesh: Any, all_names: tuple[str, ...]) -> P:
    """A spec stacking each card's own value of ``t`` (``HiType.nospec``, for autodiff).

    JAX carries a ``shard_map``'s residuals out of the forward body and into the
    backward one, one per card. A Spyre residual is stacked along the first logical dim
    whose blocks join into one image (the rule of ``unshard``), else in a new leading
    logical dim when device dim 0 has size 1 (a 0-d value, say).

    Raises:
        SpyreUnsupportedError: when neither works: ``jax.checkpoint`` the body, or give
            the value a layout without padding.
    """
    names = tuple(all_names)
    if not names:
        return P()
    k = math.prod(dict(mesh.shape)[n] for n in names)
    entry = names if len(names) > 1 else names[0]
    for d in range(t.ndim):
        split = tuple(names if i == d else () for i in range(t.ndim))
        try:
            whole, image = _resize(t, {d: k}, split, grow=True)
        except (LayoutError, SpyreUnsupportedError):
            continue
        return Stack(t, whole, image)
    if t.layout.device_rank > 1 and t.layout.device_size[0] == 1:
        image = PartitionSpec(entry, *([None] * (t.layout.device_rank - 1)))
        return Stack(t, _stacked(t, k), image)
    raise SpyreUnsupportedError(
        f"grad through shard_map: the per-card residual {t.str_short()} has no dim whose "
        "blocks join into one image; jax.checkpoint the body or give the value a layout "
        "without padding"
    )
