"""Collectives between cards inside ``jax.shard_map``: ``psum``, ``all_gather``...

JAX's ``lax.psum`` and friends take plain arrays only; these are their Spyre
counterparts, with the same arguments over logical dims. Every card holds its block in
the same layout (the body is one program), so each collective runs on the device
images as they are: a sum or permutation of whole images, or a gather, scatter or
all-to-all along the device dim that :mod:`._shard` cuts a logical dim's blocks from.
A dim whose blocks are not whole slabs of that device dim (padding, or a block inside
a stick) raises the same ``LayoutError`` as ``shard_map`` would; ``restickify`` to a
layout where it is (the default layout usually is) and retry.

Each primitive says how many bytes one card sends (:attr:`Collective.bytes_moved`, ring
algorithms), charged at the machine profile's ``card_link_bw`` by ``explain``, and as
elements (:attr:`Collective.moves`) in the planner's cost.

As in JAX with ``check_vma``, types record the mesh axes a value varies over: ``psum``
makes a value the same on every card, ``pvary`` marks one as varying (Spyre primitives
insert it in their derivatives where a replicated operand meets per-card ones). All
are linear; their transposes are JAX's (``psum`` <-> ``pvary``, ``all_gather`` <->
``psum_scatter``, ``all_to_all`` with its dims swapped, ``ppermute`` inverted).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import numpy as np

from .._errors import SpyreTypeError
from .._jax import GradAccum, Zero
from ._array import SpyreArray, SpyreType
from ._base import _PVARY, SpyrePrim
from ._shard import resize_dim

__all__ = [
    "Collective",
    "all_gather",
    "all_to_all",
    "axis_size",
    "ppermute",
    "psum",
    "psum_scatter",
    "pvary",
]

_Axes = tuple[str, ...]


def _names(axis_name: Any) -> _Axes:
    names = axis_name if isinstance(axis_name, tuple | list) else (axis_name,)
    if not names or not all(isinstance(n, str) for n in names):
        raise SpyreTypeError(
            f"axis_name must be a mesh axis name or a tuple of them: {axis_name!r}"
        )
    return tuple(names)


def axis_size(axes: _Axes) -> int:
    """Cards along the mesh axes ``axes`` (inside ``shard_map``)."""
    size = 1
    for a in axes:
        size *= jax.lax.axis_size(a)
    return size


def _spyre(x: Any, op: str) -> SpyreType:
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"spyrejax.{op} needs a SpyreArray, got {aval} (use jax.lax.{op})")
    return aval


def _image_axis(axes: _Axes) -> Any:
    return axes if len(axes) > 1 else axes[0]


class Collective(SpyrePrim):
    """A collective on device images over the mesh axes ``axes``."""

    role: ClassVar[str] = "collective"
    axes: _Axes
    size: int

    def __init__(
        self,
        aval: SpyreType,
        *,
        axes: _Axes,
        size: int,
        out_aval: SpyreType | None = None,
        **params: Any,
    ) -> None:
        self.in_avals = (aval,)
        self.out_aval = aval if out_aval is None else out_aval
        self.params = {"axes": axes, "size": size, **params}
        super().__init__()

    @property
    def bytes_moved(self) -> int:
        """Bytes one card sends."""
        raise NotImplementedError

    @property
    def moves(self) -> int:
        """Elements one card sends to others (the planner's cost, as copies count theirs)."""
        return self.bytes_moved // self.in_avals[0].dtype.itemsize

    def jvp(self, primals: Any, tangents: Any) -> tuple[Any, Any]:
        """Collectives are linear: the tangent's collective (each class transposes it)."""
        ((p,), (t,)) = primals, tangents
        if isinstance(t, Zero):
            return self(p), Zero(self.out_aval.to_tangent_aval())
        again = type(self)(jax.typeof(t), **self.params)
        return self(p), again(t)

    def _nbytes(self, t: SpyreType) -> int:
        return int(np.prod(t.layout.device_size)) * t.dtype.itemsize


class Psum(Collective):
    """All-reduce sum of the images (padding sums poison to poison)."""

    def out_vma(self, varying: frozenset[str]) -> frozenset[str]:
        """The sum is the same on every card of the summed axes."""
        return varying - set(self.params["axes"])

    @property
    def bytes_moved(self) -> int:
        """Ring all-reduce: ``2 (k-1)/k`` of the image."""
        return 2 * (self.size - 1) * self._nbytes(self.in_avals[0]) // self.size

    def kernel(self, img: jax.Array) -> jax.Array:
        return jax.lax.psum(img, self.axes)

    def transpose(self, ct: Any, accum: Any) -> None:
        """Every card had the sum: each card's share of the cotangent is all of it."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            accum.accum(pvary(ct, self.axes))


class Pvary(Collective):
    """Mark a value that is the same on every card as varying (JAX's ``pvary``).

    No data moves; what it records is that the value's cotangent, different on every
    card, must be summed over the cards (its transpose is :class:`Psum`).
    """

    def out_vma(self, varying: frozenset[str]) -> frozenset[str]:
        """Varying over the axes too."""
        return varying | set(self.params["axes"])

    @property
    def bytes_moved(self) -> int:
        """Nothing."""
        return 0

    def kernel(self, img: jax.Array) -> jax.Array:
        return img

    def transpose(self, ct: Any, accum: Any) -> None:
        """The cards' cotangents are summed."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            accum.accum(Psum(jax.typeof(ct), **self.params)(ct))


def pvary(x: SpyreArray, axes: Any) -> SpyreArray:
    """``x`` (the same on every card of ``axes``) typed as varying over them."""
    aval = _spyre(x, "pvary")
    axes = _names(axes)
    new = tuple(a for a in axes if a not in aval.vma)
    if not new:
        return x
    return Pvary(aval, axes=new, size=axis_size(new))(x)


def psum(x: SpyreArray, axis_name: Any) -> SpyreArray:
    """``jax.lax.psum`` of a Spyre array: every card gets the sum of all cards' arrays.

    As in JAX, a value the same on every card sums to ``k`` times itself.
    """
    aval = _spyre(x, "psum")
    axes = _names(axis_name)
    x = pvary(x, axes) if aval.vma else x
    return Psum(jax.typeof(x), axes=axes, size=axis_size(axes))(x)


_PVARY.append(pvary)


class PPermute(Collective):
    """Send each card's image to another card."""

    perm: tuple[tuple[int, int], ...]

    def __init__(self, aval: SpyreType, *, axes: _Axes, size: int, perm: Any) -> None:
        super().__init__(aval, axes=axes, size=size, perm=perm)

    @property
    def bytes_moved(self) -> int:
        """One image."""
        return self._nbytes(self.in_avals[0])

    def kernel(self, img: jax.Array) -> jax.Array:
        return jax.lax.ppermute(img, _image_axis(self.axes), self.perm)

    def transpose(self, ct: Any, accum: Any) -> None:
        """Send the cotangents back: the inverse permutation."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            back = tuple((b, a) for a, b in self.perm)
            accum.accum(PPermute(jax.typeof(ct), axes=self.axes, size=self.size, perm=back)(ct))


def ppermute(x: SpyreArray, axis_name: Any, perm: Any) -> SpyreArray:
    """``jax.lax.ppermute`` of a Spyre array (cards not receiving get zeros)."""
    aval = _spyre(x, "ppermute")
    axes = _names(axis_name)
    perm = tuple((int(a), int(b)) for a, b in perm)
    return PPermute(aval, axes=axes, size=axis_size(axes), perm=perm)(x)


class AllGather(Collective):
    """Concatenate the cards' blocks of logical dim ``dim`` (tiled)."""

    dim: int

    def __init__(self, aval: SpyreType, *, axes: _Axes, size: int, dim: int) -> None:
        out, self._j = resize_dim(aval, dim, size, axes, grow=True)
        super().__init__(aval, axes=axes, size=size, out_aval=out, dim=dim)

    @property
    def bytes_moved(self) -> int:
        """Ring all-gather: ``k-1`` blocks."""
        return (self.size - 1) * self._nbytes(self.in_avals[0])

    def kernel(self, img: jax.Array) -> jax.Array:
        return jax.lax.all_gather(img, _image_axis(self.axes), axis=self._j, tiled=True)

    def transpose(self, ct: Any, accum: Any) -> None:
        """Each card's block gets the sum of the cards' cotangents of it: psum_scatter."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            accum.accum(PsumScatter(jax.typeof(ct), **self.params)(ct))


def all_gather(x: SpyreArray, axis_name: Any, *, axis: int = 0, tiled: bool = True) -> SpyreArray:
    """``jax.lax.all_gather(..., tiled=True)`` of a Spyre array along logical dim ``axis``."""
    aval = _spyre(x, "all_gather")
    if not tiled:
        raise SpyreTypeError("spyrejax.all_gather concatenates (tiled=True); expand_dims first")
    axes = _names(axis_name)
    return AllGather(aval, axes=axes, size=axis_size(axes), dim=axis % max(aval.ndim, 1))(x)


class PsumScatter(Collective):
    """Sum the images and keep this card's block of logical dim ``dim``."""

    dim: int

    def __init__(self, aval: SpyreType, *, axes: _Axes, size: int, dim: int) -> None:
        out, self._j = resize_dim(aval, dim, size, axes, grow=False)
        super().__init__(aval, axes=axes, size=size, out_aval=out, dim=dim)

    @property
    def bytes_moved(self) -> int:
        """Ring reduce-scatter: ``(k-1)/k`` of the image."""
        return (self.size - 1) * self._nbytes(self.in_avals[0]) // self.size

    def kernel(self, img: jax.Array) -> jax.Array:
        return jax.lax.psum_scatter(
            img, _image_axis(self.axes), scatter_dimension=self._j, tiled=True
        )

    def transpose(self, ct: Any, accum: Any) -> None:
        """Every card's cotangent of its block goes to every card: all_gather."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            accum.accum(AllGather(jax.typeof(ct), **self.params)(ct))


def psum_scatter(
    x: SpyreArray, axis_name: Any, *, scatter_dimension: int = 0, tiled: bool = True
) -> SpyreArray:
    """``jax.lax.psum_scatter(..., tiled=True)`` of a Spyre array over a logical dim."""
    aval = _spyre(x, "psum_scatter")
    if not tiled:
        raise SpyreTypeError("spyrejax.psum_scatter keeps a block of the dim (tiled=True)")
    axes = _names(axis_name)
    dim = scatter_dimension % max(aval.ndim, 1)
    return PsumScatter(aval, axes=axes, size=axis_size(axes), dim=dim)(x)


class AllToAll(Collective):
    """Split logical dim ``split`` into blocks for the cards, concatenate along ``concat``."""

    split: int
    concat: int

    def __init__(self, aval: SpyreType, *, axes: _Axes, size: int, split: int, concat: int) -> None:
        mid, self._js = resize_dim(aval, split, size, axes, grow=False)
        out, self._jc = resize_dim(mid, concat, size, axes, grow=True)
        super().__init__(aval, axes=axes, size=size, out_aval=out, split=split, concat=concat)

    @property
    def bytes_moved(self) -> int:
        """``(k-1)/k`` of the image."""
        return (self.size - 1) * self._nbytes(self.in_avals[0]) // self.size

    def kernel(self, img: jax.Array) -> jax.Array:
        return jax.lax.all_to_all(img, _image_axis(self.axes), self._js, self._jc, tiled=True)

    def transpose(self, ct: Any, accum: Any) -> None:
        """The blocks go back: split and concatenate dims swapped."""
        if isinstance(accum, GradAccum) and not isinstance(ct, Zero):
            p = {**self.params, "split": self.concat, "concat": self.split}
            accum.accum(AllToAll(jax.typeof(ct), **p)(ct))


def all_to_all(
    x: SpyreArray, axis_name: Any, split_axis: int, concat_axis: int, *, tiled: bool = True
) -> SpyreArray:
    """``jax.lax.all_to_all(..., tiled=True)`` of a Spyre array over logical dims."""
    aval = _spyre(x, "all_to_all")
    if not tiled:
        raise SpyreTypeError("spyrejax.all_to_all splits and concatenates dims (tiled=True)")
    axes = _names(axis_name)
    n = max(aval.ndim, 1)
    return AllToAll(
        aval, axes=axes, size=axis_size(axes), split=split_axis % n, concat=concat_axis % n
    )(x)
