"""How far two runs of a divided primitive may round its result apart.

``emulate="cores"``'s check mode (``spyrejax.lowering.program._cores``) runs every divided
op per core and with its whole-image kernel and compares the two; each divided primitive
says by :meth:`~spyrejax.primitives._base.SpyrePrim.core_rounding` how far apart the two
may round (None: the same bits). The rules the primitives share are here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..device._division import WorkDivision
from ._ring import reduced
from ._values import accumulator

__all__ = ["Rounding", "float_eps", "reassociated"]


@dataclass(frozen=True)
class Rounding:
    """How far apart two roundings of one result may be, per position.

    ``|per core - whole| <= n * eps_acc * magnitude + ulps * eps_out * |whole|`` (plus
    ``n`` of the smallest normals, for flushed subnormals); ``magnitude`` is the op on
    its operands' absolute values (``sum|terms|``), computed only when ``n > 0``.
    """

    n: int
    eps_acc: float
    eps_out: float
    ulps: int = 1


def float_eps(dtype: Any) -> float | None:
    """The machine epsilon of a float dtype; None for any other dtype (exact)."""
    out = np.dtype(dtype)
    return float(jnp.finfo(out).eps) if jnp.issubdtype(out, jnp.floating) else None


def reassociated(div: WorkDivision, in_dtype: Any, out_dtype: Any) -> Rounding | None:
    """A float sum of the division's reduced dims in another order (a sum, mean, matmul).

    A float sum reassociates, and not only when its reduced dim is split: XLA orders a
    sum by the shape it reduces (lanes, tiles), and a core reduces its slice, not the
    whole image. Two orders of ``n`` terms differ by at most ``n * eps(acc) *
    sum|terms|``, then one rounding to the result's dtype. None for a result not float.
    """
    eps_out = float_eps(out_dtype)
    if eps_out is None:
        return None
    acc = np.dtype(accumulator(in_dtype) or np.dtype(out_dtype))
    n = math.prod(div.space.dim(name).extent for name in reduced(div))
    return Rounding(n, float(jnp.finfo(acc).eps), eps_out)
