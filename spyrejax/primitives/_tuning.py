"""The sizes at which kernels switch strategy, and the hook that changes them.

Each threshold was measured on the host (its docstring says where); a kernel reads it
when it is traced. :func:`tuned` changes them for the kernels traced inside it, so a
test can take a large-image path on a small image without touching module internals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

__all__ = ["Tuning", "tuned", "tuning"]


@dataclass(frozen=True)
class Tuning:
    """The thresholds, in bytes.

    Attributes:
        staged_reduction_bytes: images larger than this reduce over tiles and lanes in
            two stages (``_reduce_data._staged``): fused in one pass, XLA's CPU reduction
            walks the image a stick at a time across tiles, 2x slower than native once
            the image leaves the cache.
        tile_group_bytes: the most bytes of a matmul's B (in the accumulator's dtype)
            one step of the tile loop converts (``_matmul._tile_groups``): small enough
            to stay in cache between the conversion and the dot.
        tile_loop_min_bytes: the least bytes of B worth the tile loop: a smaller copy
            stays in the last-level cache, and the loop's steps cost more than it
            (measured). A quarter of it when B's k is padded: one dot then pads B and
            copies it again.
        batch_loop_min_bytes: attention's scores image above which the emulator runs
            the chain from the first product to the second as a loop over groups of the
            batch dim (``lowering/program/_groups.py``): the program's temporaries then
            stay under glibc's 32 MiB mmap threshold, which maps a larger block afresh on
            every call (measured at 8 x 1000 x 1024 float32: 1.90x -> 1.30x of
            ``jax.jit`` in pure JAX, ``benchmarks/README.md`` item 29).
        batch_group_bytes: the most bytes of the scores one step of that loop computes.
    """

    staged_reduction_bytes: int = 16 * 2**20
    tile_group_bytes: int = 2 << 20
    tile_loop_min_bytes: int = 16 << 20
    batch_loop_min_bytes: int = 24 << 20
    batch_group_bytes: int = 8 << 20


_DEFAULT = Tuning()
_TUNING: ContextVar[Tuning | None] = ContextVar("spyrejax_tuning", default=None)


def tuning() -> Tuning:
    """The thresholds kernels traced now use."""
    return _TUNING.get() or _DEFAULT


@contextlib.contextmanager
def tuned(**changes: int) -> Iterator[Tuning]:
    """Kernels traced inside the block use these thresholds (fields of :class:`Tuning`).

    Example:
        >>> with tuned(staged_reduction_bytes=0) as t:
        ...     t.staged_reduction_bytes
        0
    """
    now = replace(tuning(), **changes)
    token = _TUNING.set(now)
    try:
        yield now
    finally:
        _TUNING.reset(token)
