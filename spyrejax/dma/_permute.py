"""A relayout between two exact tilings as one transpose of the image's finer dims.

Two layouts that tile a host tensor exactly (no padding, no gaps: each host segment is
its device dims' mixed radix) cut the host's flat index into digits, each device dim a
run of them. Where the two cuts refine each other (every stride of one divides or is
divided by every stride of the other in a chain: always so for powers of two), both
images are the same fine digits in two orders, so moving the stick from one dim to
another (a restickify) is a reshape of the source image into those digits, one
transpose and a reshape into the target image: no detour through the host order, which
XLA otherwise compiles and runs as two transposes. Pure Python (the shapes and the
permutation) in :func:`one_transpose`, applied to an image by :func:`transposed`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import jax

from ._tiling import Tiling

__all__ = ["Cut", "one_transpose", "transposed"]

# A tiling's cut: (device dims in host order, major first, walked ones only; the image's
# shape). Every device dim not listed must have size 1.
Cut = tuple[Sequence[int], Sequence[int]]


def _strides(cut: Cut) -> dict[int, tuple[int, int]]:
    """Each walked device dim's host stride range ``[lo, hi)`` in the flat host index."""
    walked, size = cut
    out, stride = {}, 1
    for j in reversed(walked):
        out[j] = (stride, stride * size[j])
        stride *= size[j]
    return out


def one_transpose(src: Cut, dst: Cut) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The fine shape of ``src``'s image and the permutation that makes ``dst``'s.

    ``dst_image = reshape(transpose(reshape(src_image, fine), perm), dst_size)``.

    Returns:
        ``(fine, perm)``, or None when the cuts do not refine each other, a device dim
        they do not walk is not of size 1, or they cut different totals.
    """
    spans = [_strides(c) for c in (src, dst)]
    for (_, size), span in zip((src, dst), spans, strict=True):
        if any(size[j] != 1 for j in range(len(size)) if j not in span):
            return None
    total = {math.prod(c[1][j] for j in c[0]) for c in (src, dst)}
    points = sorted({lo for s in spans for lo, _ in s.values()} | total)
    if len(total) != 1 or any(b % a for a, b in itertools.pairwise(points)):
        return None
    seqs = []
    for (_, size), span in zip((src, dst), spans, strict=True):
        seq = []  # the image's fine digits, in image order (each dim's major first)
        for j in range(len(size)):
            if j in span:
                lo, hi = span[j]
                seq += [p for p in reversed(points) if lo <= p < hi]
        seqs.append(seq)
    radix = {a: b // a for a, b in itertools.pairwise(points)}
    fine = tuple(radix[p] for p in seqs[0])
    where = {p: i for i, p in enumerate(seqs[0])}
    return fine, tuple(where[p] for p in seqs[1])


def transposed(bits: jax.Array, src: Tiling, dst: Tiling) -> Any:
    """``dst``'s image of ``src``'s by one transpose, or None if the tilings do not allow it.

    Both tilings must be exact (no segment padded) and their cuts refine each other
    (:func:`one_transpose`).
    """
    if src.extents != src.sizes or dst.extents != dst.sizes:
        return None
    cuts = [(t.order[: len(t.order) - t.unwalked], t.device_size) for t in (src, dst)]
    plan = one_transpose(*cuts)
    if plan is None:
        return None
    fine = jax.lax.transpose(jax.lax.reshape(bits, plan[0]), plan[1])
    return jax.lax.reshape(fine, tuple(dst.device_size))
