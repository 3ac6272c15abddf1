"""A reduction kernel's pass over an image's data: padding left out by a box and slabs.

The data of a padded image lie in a box at its origin (``HostMapping.data_box``), but
for what a partial last stick puts past it. :func:`reduce_data` reduces the box with a
``reduce_window`` covering it (read in place by XLA's CPU reductions, fused with their
producers and consumers), masks only the slabs past its inexact bounds with the
reduction's identity, and combines the parts; without a box it selects the identity
over the whole image. Half-float sums widen to float32 read by read (:class:`Widen`).
Large images reduce in stages (``Tuning.staged_reduction_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from ..layout._devdims import DevDim
from ._array import SpyreType
from ._axes import collapsed
from ._masks import select
from ._tuning import tuning

if TYPE_CHECKING:  # primitives._reduce calls this module: its op record for the types only
    from ._reduce import ReductionOp

__all__ = ["Widen", "data_box", "merged_runs", "reduce_data"]


def _lax_reduce(op: ReductionOp) -> Any:
    """A ``(x, axes)`` reduction: ``lax`` (no nested jit) except for bools (``jnp``)."""

    def reduce(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
        return op.jnp(x, axis=axes) if x.dtype == bool else op.lax(x, axes)

    return reduce


def _staged(
    img: jax.Array, axes: tuple[int, ...], reduce: Any, nbytes: int | None = None
) -> jax.Array:
    """``reduce(img, axes)``; for large images, lanes last when the stick is reduced.

    The outer axes are reduced first and the partial result is fenced with an
    optimization barrier. Fused in one pass with its consumers, XLA's CPU reduction over
    tile and lane axes walks the image a stick at a time across tiles: fine while the
    image stays in cache, 2x slower than native beyond it (softmax over 4096x4096;
    staged, 1.2x). Below ``Tuning.staged_reduction_bytes`` the fused pass is faster.
    ``nbytes`` is the size of the image ``img`` was reduced from (default: its own).
    """
    last = img.ndim - 1
    outer = tuple(a for a in axes if a != last)
    size = img.nbytes if nbytes is None else nbytes
    if last not in axes or not outer or size <= tuning().staged_reduction_bytes:
        return reduce(img, axes)
    partial = jax.lax.optimization_barrier(reduce(img, outer))
    return reduce(partial, (partial.ndim - 1,))


def merged_runs(
    shape: tuple[int, ...], dims: tuple[DevDim, ...], axes: tuple[int, ...]
) -> list[tuple[int, ...]]:
    """The runs of device axes a reduction merges (see ``collapsed``).

    A run never mixes reduced and kept axes: a shape with the reduced axes set to 1
    tells ``collapsed`` that they are "broadcast" where the kept ones are not.
    """
    marks = tuple(1 if j in axes else n for j, n in enumerate(shape))
    return collapsed(dims, shape, [marks])


def data_box(
    t: SpyreType, take: tuple[int, ...], runs: list[tuple[int, ...]]
) -> tuple[tuple[int, bool], ...] | None:
    """Per merged axis of the reduced image: ``(bound, exact)`` of the data box.

    See ``HostMapping.data_box``; ``runs`` number the device dims left after ``take``
    (synthetic dims read at index 0, which is always inside the box).
    """
    kept = [j for j in range(t.layout.device_rank) if j not in take]
    full = sorted([(j,) for j in take] + [tuple(kept[k] for k in r) for r in runs])
    box = t.layout.for_host(t.base_shape).data_box(full)
    if box is None:
        return None
    by_run = dict(zip((r[0] for r in full), box, strict=True))
    if any(by_run[j][0] < 1 for j in take):
        return None
    return tuple(by_run[kept[r[0]]] for r in runs)


def reduce_data(
    img: jax.Array,
    mask: jax.Array | None,
    box: tuple[tuple[int, bool], ...] | None,
    axes: tuple[int, ...],
    op: ReductionOp,
    identity: Any,
    widen: Widen | None = None,
) -> jax.Array:
    """``op`` over ``axes`` of the data positions of ``img`` (``mask`` True on data).

    Without a data ``box``, padding is replaced by the identity with a select over the
    whole image: XLA's CPU reductions (YNNPACK fusions) cannot absorb a select, so that
    is a pass of its own. With one, the box is reduced by a ``reduce_window`` whose one
    window covers it (a YNNPACK fusion reads it in place, fused with the producers and
    the consumers). What lies past an inexact bound (for a partial last stick whose
    tiles and lanes are apart, the last tile) is a slab, masked and reduced on its
    own, then combined: the select only touches the slabs. The remaining axes are
    reduced last (staged for large images). Images over ``Tuning.staged_reduction_bytes``
    reduce the axes without padding first instead (lanes: one read in memory order,
    which fuses a half float's conversion too), then the box of that small result.

    ``widen`` (a half-float sum) converts the values first, each reading on its own
    (see :class:`Widen`); those reduce the lanes first at every size (a window over
    tiles that converts ran at 1.2-2.6x of it, bfloat16 at 256-4096 rows).
    """
    reduce = _lax_reduce(op)
    wide = img if widen is None else widen.of(img)
    if mask is None:
        return _staged(wide, axes, reduce)
    fill = jnp.asarray(identity, img.dtype)
    if box is None or img.dtype == bool or any(box[a][0] < 1 for a in axes):
        return _staged(_selected(mask, img, fill, widen), axes, reduce)
    cut = [a for a in axes if box[a][0] < img.shape[a]]
    if not cut:
        return _staged(wide, axes, reduce)
    bound = [b for b, _ in box]
    inner = tuple(a for a in axes if a not in cut)
    cuts = _Cuts(mask, box, axes, cut, [a for a in cut if not box[a][1]], bound, fill, widen)
    if inner and (widen is not None or wide.nbytes > tuning().staged_reduction_bytes):
        return _reduce_large(wide, img, inner, cuts, reduce, _COMBINE[op.lax])
    return _reduce_window(wide, img, identity, cuts, reduce, _COMBINE[op.lax])


@dataclass(frozen=True)
class Widen:
    """A half-float sum's conversion to ``dtype`` (float32), read by read.

    XLA's CSE merges conversions of one image into one instruction, and YNNPACK's
    reduction fusions take no producer that has other readers: the widened image was
    then written whole (twice the bytes, a pass of its own) and read back. So the
    slabs select on the narrow image and convert after, and the box converts behind
    an optimization barrier. (Without the barrier where nothing else reads the image,
    a bfloat16 producer's conversion shared upstream still made XLA write its float32
    result: layer norm's ``(x - m) ** 2``, 1.2-1.5x slower.)
    """

    dtype: Any
    then: Callable[[jax.Array], jax.Array] | None = None

    def of(self, img: jax.Array) -> jax.Array:
        """The box's widened image (then ``then`` of it)."""
        return self._then(jax.lax.optimization_barrier(img).astype(self.dtype))

    def select(self, mask: jax.Array, img: jax.Array, fill: Any) -> jax.Array:
        """The widened values where ``mask`` holds, else ``fill``.

        Selected on the narrow image, then widened, unless ``then`` must see the values
        first (it need not map the fill to itself).
        """
        if self.then is None:
            return select(mask, img, fill).astype(self.dtype)
        return select(mask, self._then(img.astype(self.dtype)), jnp.asarray(fill, self.dtype))

    def _then(self, x: jax.Array) -> jax.Array:
        return x if self.then is None else self.then(x)


def _selected(mask: jax.Array, img: jax.Array, fill: Any, widen: Widen | None) -> jax.Array:
    return select(mask, img, fill) if widen is None else widen.select(mask, img, fill)


@dataclass(frozen=True)
class _Cuts:
    """A data box cutting some reduced axes: its slabs past inexact bounds, and the fill."""

    mask: jax.Array
    box: tuple[tuple[int, bool], ...]
    axes: tuple[int, ...]
    cut: list[int]
    slabs: list[int]
    bound: list[int]
    fill: Any
    widen: Widen | None

    def slab(self, img: jax.Array, i: int) -> jax.Array:
        """The ``i``-th slab of ``img``, padding replaced by the fill (then widened)."""
        parts = _slab(img, self.mask, self.cut, self.slabs, i, self.bound, self.box)
        return _selected(*parts, self.fill, self.widen)


def _reduce_large(
    img: jax.Array,
    narrow: jax.Array,
    inner: tuple[int, ...],
    cuts: _Cuts,
    reduce: Any,
    combine: Any,
) -> jax.Array:
    """Large images: the axes without padding first, then the box of the small result.

    The first reduction reads the image once in memory order (a window over the outer
    tile axis would walk a large image across tiles). The slabs are cut from ``narrow``
    (``img`` before a half float's widening).
    """
    part = jax.lax.optimization_barrier(reduce(img, inner))
    kept = [a for a in range(img.ndim) if a not in inner]
    at = tuple(kept.index(a) for a in cuts.cut)
    box_part = part[tuple(slice(0, cuts.bound[a]) if a in cuts.cut else slice(None) for a in kept)]
    out = reduce(box_part, at)
    for i in range(len(cuts.slabs)):
        out = combine(out, reduce(cuts.slab(narrow, i), cuts.axes))
    return out


def _reduce_window(
    img: jax.Array, narrow: jax.Array, identity: Any, cuts: _Cuts, reduce: Any, combine: Any
) -> jax.Array:
    """The box reduced by one ``reduce_window`` covering it, then the slabs, then the rest.

    The slabs are cut from ``narrow`` (``img`` before a half float's widening).
    """
    cut = cuts.cut
    window = tuple(cuts.bound[a] if a in cut else 1 for a in range(img.ndim))
    # A concrete identity picks lax's sum/max/min window primitives (with derivatives).
    init = np.asarray(identity, img.dtype)
    part = jax.lax.reduce_window(img, init, combine, window, window, "VALID")
    part = part[tuple(slice(0, 1) if a in cut else slice(None) for a in range(img.ndim))]
    for i in range(len(cuts.slabs)):
        part = combine(part, reduce(cuts.slab(narrow, i), tuple(cut)).reshape(part.shape))
    return _staged(part, cuts.axes, reduce, img.nbytes)


def _slab(
    img: jax.Array,
    mask: jax.Array,
    cut: list[int],
    slabs: list[int],
    i: int,
    bound: list[int],
    box: tuple[tuple[int, bool], ...],
) -> tuple[jax.Array, jax.Array]:
    """Slab ``i``'s mask and values: its axis past the box, the axes before it inside.

    The earlier slabs' axes and the exact cut axes (past whose bound lies padding only)
    are kept inside the box, so the slabs and the box are disjoint.
    """
    a = slabs[i]
    inside = {b for b in cut if box[b][1]} | set(slabs[:i])
    index = tuple(
        slice(bound[b], None) if b == a else slice(0, bound[b]) if b in inside else slice(None)
        for b in range(img.ndim)
    )
    return mask[index], img[index]


_COMBINE = {
    jax.lax.reduce_sum: jax.lax.add,
    jax.lax.reduce_max: jax.lax.max,
    jax.lax.reduce_min: jax.lax.min,
}
"""The binary op of each ``lax`` reduction, for windows and combining partial results."""
