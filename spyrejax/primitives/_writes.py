"""Views that stand for their producers' stores, and how ``emulate="cores"`` runs them.

On the card a result written in place (into a window of a larger buffer: SuperDSC
front/back gaps; or on lanes of its sticks) is its producer's own stores: each core
writes the box of the result it computed into its place in the destination. Nothing
moves afterwards. The emulator's images are values, so these views have whole-image
kernels that put each piece where the stores put it; under ``emulate="cores"`` they run
per core instead (``written_space``, divided as the op that produced their operand:
``spyrejax.lowering.program._cores``):

- :class:`ProducerWrite` (``Place``, ``LanePlace``): each core's box of the fresh result,
  loaded in its own layout and stored by the destination's descriptors (the gaps or
  lanes of the window), so a core that stores the wrong box shows up in the check mode;
- :class:`JoinedBits` (``Assemble``, ``LaneAssemble``): the destination made of its
  pieces; every operand's image is the destination's buffer (its window or lanes
  written), so each core reads its box of the destination from every operand and keeps,
  per element, the operand that wrote it (:meth:`JoinedBits.core_kernel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jax
import numpy as np

from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec, elementwise_space
from ..dma._dma import as_bits, from_bits
from ._base import SpyrePrim

__all__ = ["JoinedBits", "ProducerWrite", "bits_of", "core_positions", "from_bits_of"]


def bits_of(img: jax.Array, exact: bool) -> jax.Array:
    """An image as its bits (``exact``: XLA moves integers and alters no float), or as is."""
    return as_bits(img) if exact else img


def from_bits_of(x: jax.Array, dtype: Any, exact: bool) -> jax.Array:
    """The inverse of :func:`bits_of` (these moves select: bfloat16 leaves fenced)."""
    return from_bits(x, dtype, fence=True) if exact else x


def core_positions(div: WorkDivision, local: Sequence[int]) -> list[np.ndarray]:
    """Per dim of an elementwise space's output, each core's positions along it.

    ``local`` is the cores' values' shape ``[cores, *local shape]``; element ``h`` of the
    result broadcasts against it: the position along logical dim ``h`` of every local
    element (the core's slice start plus the local index).
    """
    names = div.space.names  # iteration order: the output's dims innermost first
    slices = [div.core_to_slice(c) for c in range(div.cores_used)]
    out = []
    for name in reversed(names):  # logical dim order
        axis = names.index(name) + 1
        start = np.array([s[name] * div.chunk(name) for s in slices], np.int64)
        at = start[:, None] + np.arange(local[axis])[None, :]
        view = [1] * len(local)
        view[0], view[axis] = at.shape
        out.append(at.reshape(view))
    return out


class ProducerWrite(SpyrePrim):
    """A fresh result seen where its producer's stores put it (a window or lanes).

    Subclasses set ``write_name`` (the op name the division and the check report).
    """

    write_name = "write"

    def written_space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace:
        """Each core writes its box of the result into its place in the destination."""
        return elementwise_space(self.write_name, out, ins)

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """The core's values as its producer computed them: the store places them."""
        return vals[0]


class JoinedBits(SpyrePrim):
    """A view made of pieces already in their places of its buffer, joined bit for bit.

    The emulator's images are values, so the kernel joins the pieces' images into one
    (:meth:`_join`, on their bits: XLA moves integers and alters no float; the tangent
    kernel joins the values); on the device nothing moves. ``Assemble`` joins windows,
    ``LaneAssemble`` lanes. Per core (``written_space``), each core writes its box of the
    result, taking each element from the operand :meth:`_owner` names.
    """

    role = "view"
    write_name = "join"

    def kernel(self, *imgs: jax.Array) -> jax.Array:
        return from_bits_of(self._join(tuple(bits_of(m, True) for m in imgs)), imgs[0].dtype, True)

    def tangent_kernel(self, *imgs: jax.Array) -> jax.Array:
        return self._join(imgs)

    def _join(self, parts: tuple[jax.Array, ...]) -> jax.Array:
        """The operands' images (bits or values) joined into the result's image."""
        raise NotImplementedError

    def written_space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace:
        """Each core writes its box of the result, reading every operand's there.

        Every operand's image is the result's buffer (its window or lanes written), so
        each is read as the result is laid out.
        """
        return elementwise_space(self.write_name, out, [replace(out, name=t.name) for t in ins])

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """Per element of each core's box, the bits of the operand that wrote it."""
        owner = self._owner(core_positions(div, vals[0].shape))
        bits = [as_bits(v) for v in vals]
        out = bits[0]
        for k, part in enumerate(bits[1:], 1):
            out = jax.numpy.where(owner == k, part, out)
        return from_bits(out, vals[0].dtype, fence=True)  # as the whole kernel joins them

    def _owner(self, at: list[np.ndarray]) -> Any:
        """The index of the operand holding each element at positions ``at``.

        ``at``: per logical dim of the result, positions (:func:`core_positions`).
        """
        raise NotImplementedError
