"""Several stick dims per tensor (issue 26, item 1 at the layout core): the N + k loop nest.

The seeds plan layouts with ``k`` stick dims: each padded to whole sticks and tiled, so
the host <-> device map is a loop nest of ``N + k`` loops (a 2-D tensor with both dims
stick dims is laid out in stick x stick tiles, as tt-mlir tilizes in 32 x 32 tiles). A
stick "dim" may also be a group of adjacent host dims read as one index (a stick over
``2*d3 + d4``: interleaved pairs share a stick instead of each padding one).

These are ordinary stride maps: a group's tile count steps ``eps`` group elements and its
within-tile dim steps 1, and the index map folds a group's host dims into one index
(``_segments``). This module builds them and names them; ``HostMapping`` reads them back.

Pure Python: no NumPy, no JAX.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from .._errors import LayoutError

__all__ = ["expression", "stick_groups", "stick_tiled_dims"]


def stick_groups(
    stick_dims: Sequence[int | Sequence[int]], rank: int
) -> tuple[tuple[int, ...], ...]:
    """Stick dims as groups of host dims (an int is a group of one), validated.

    Raises:
        LayoutError: if a group is empty, not adjacent increasing dims, out of range, or
            groups share a dim.
    """
    groups = []
    for g in stick_dims:
        group = (g,) if isinstance(g, int) else tuple(g)
        if not group or any(not isinstance(d, int) or not 0 <= d < rank for d in group):
            raise LayoutError(f"stick dims {list(stick_dims)} name a dim outside range({rank})")
        if any(b != a + 1 for a, b in itertools.pairwise(group)):
            raise LayoutError(f"a stick over several host dims needs adjacent dims, got {group}")
        groups.append(group)
    flat = [d for g in groups for d in g]
    if not groups or len(set(flat)) != len(flat):
        raise LayoutError(f"stick dims {list(stick_dims)} must be one or more disjoint dims")
    return tuple(groups)


def stick_tiled_dims(
    shape: Sequence[int],
    strides: Sequence[int],
    groups: Sequence[tuple[int, ...]],
    eps: int,
) -> list[tuple[int, int]]:
    """``(device size, stride_map entry)`` of the stick-tiled layout, outermost first.

    Device dims: the other host dims in host order, then one tile count per stick group
    (``ceil(n / eps)``, stepping ``eps`` group elements), then one within-tile dim per
    group (``eps`` long, stepping 1), the last group's being the stick. A group's host
    dims must be contiguous in the host (they are read as one index).

    Raises:
        LayoutError: if a group's host dims are not contiguous.
    """
    placed = {d for g in groups for d in g}
    dims = [
        (1, -1) if shape[d] == 1 else (shape[d], strides[d])
        for d in range(len(shape))
        if d not in placed
    ]
    tiles, within = [], []
    for k, group in enumerate(groups):
        for a, b in itertools.pairwise(group):
            if shape[a] > 1 and strides[a] != strides[b] * shape[b]:
                raise LayoutError(
                    f"host dims {group} are not contiguous (sizes {[shape[d] for d in group]}, "
                    f"strides {[strides[d] for d in group]}), so they cannot share a stick"
                )
        n = math.prod(shape[d] for d in group)
        step = strides[group[-1]]
        last = k == len(groups) - 1
        if n == 1:
            tiles.append((1, -1))
            within.append((eps, -1) if last else (1, -1))
            continue
        count = -(-n // eps)
        tiles.append((count, step * eps) if count > 1 else (1, -1))
        within.append((eps, step))
    return dims + tiles + within


def expression(host_dims: Sequence[int], shape: Sequence[int]) -> str:
    """The index of host dims read as one, as torch-spyre prints it: ``2*d3 + d4``."""
    terms, inner = [], 1
    for d in reversed(host_dims):
        if shape[d] > 1:
            terms.append(f"d{d}" if inner == 1 else f"{inner}*d{d}")
        inner *= shape[d]
    return " + ".join(reversed(terms)) or f"d{host_dims[-1]}"
