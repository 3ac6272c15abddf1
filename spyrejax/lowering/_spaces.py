"""The device model's view of a divided primitive: its iteration space, kept once a process.

Every reader of a primitive's space reads it here (the program's device ops,
``lowering.program``: ``explain``, the per-core executor): a primitive's space and its
operands' specs by its :func:`geometry` (:func:`divided_space`), as the device model
keeps its division by the space's geometry (``device.divide_alike``). The layout
planner, charging a product its predicted time (branch ``devtime2-charge``, not landed:
benchmarks/README item 66), would read the same space and division.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator
from typing import Any

from .._errors import DeviceError, SpyreInternalError
from ..device import OpSpace, TensorSpec, divisions_apart
from ..primitives._array import SpyreType
from ..primitives._base import SpyrePrim

__all__ = [
    "divided_space",
    "geometry",
    "spaces_apart",
    "type_spec",
]


def type_spec(t: SpyreType, name: str, buffer: str = "") -> TensorSpec:
    """The device model's spec of a value of type ``t`` (its shape, layout, view)."""
    return TensorSpec(t.shape, t.layout, t.dims, name, t.base_shape, t.strides, buffer)


def geometry(prim: SpyrePrim) -> Hashable:
    """What a divided primitive's space and division depend on (ops of one geometry alike).

    Its class, ``space_key()``, operand and result types (equal types have equal shapes,
    layouts and views).
    """
    return (type(prim), prim.space_key(), tuple(prim.in_avals), prim.out_aval)


def divided_space(prim: Any) -> tuple[OpSpace, list[TensorSpec]] | None:
    """The iteration space of a primitive the device model divides, and its operands' specs.

    None for a primitive it does not divide: one that defines no ``space()``
    (``SpyrePrim.space``), or not on Spyre operands.
    """
    if not isinstance(prim, SpyrePrim) or type(prim).space is SpyrePrim.space:
        return None
    if not isinstance(prim.out_aval, SpyreType):
        return None
    if not all(isinstance(t, SpyreType) for t in prim.in_avals):
        return None
    key = geometry(prim)
    if key not in _SPACES:
        if len(_SPACES) >= _SPACES_KEPT:
            _SPACES.clear()
        _SPACES[key] = _divided_space(prim)
    found = _SPACES[key]
    return None if found is None else (found[0], list(found[1]))


_SPACES: dict[Any, tuple[OpSpace, tuple[TensorSpec, ...]] | None] = {}
_SPACES_KEPT = 8192
"""The spaces of the primitives seen, by :func:`geometry` (a repeated layer's ops share one)."""


def _divided_space(prim: SpyrePrim) -> tuple[OpSpace, tuple[TensorSpec, ...]] | None:
    specs = [type_spec(t, f"in{k}") for k, t in enumerate(prim.in_avals)]
    specs.append(type_spec(prim.out_aval, "out"))
    try:
        space = prim.space(specs[:-1], specs[-1])
    except DeviceError:
        return None
    if space is None:
        return None
    if space.kind != prim.space_kind:  # SpyrePrim.space_kind: what the planner reads
        raise SpyreInternalError(
            f"{type(prim).__name__}.space built a {space.kind!r} space; its space_kind "
            f"says {prim.space_kind!r}"
        )
    return space, tuple(specs)


@contextlib.contextmanager
def spaces_apart() -> Iterator[None]:
    """Inside the block, no space or division kept before is read (tests).

    A hook for tests that count how often one program makes a space or divides an op:
    what is made inside is dropped at the end and the process's kept ones come back.
    """
    kept = dict(_SPACES)
    _SPACES.clear()
    try:
        with divisions_apart():
            yield
    finally:
        _SPACES.clear()
        _SPACES.update(kept)
