"""Index-driven and cumulative ops: device copies through the values.

Gathers, scatters, dynamic slices, cumulative ops, arg-reductions and sorts, each run by
the registry's ``_LaxCopy`` rule (which the host fallback extends);
``dynamic_update_slice`` extends it with modes in place (``_in_place``).
"""

from __future__ import annotations

from .._registry import _LaxCopy, _register

_register(
    _LaxCopy(),
    "gather",
    "scatter",
    "scatter-add",
    "scatter_add",
    "scatter-sub",
    "scatter_sub",
    "scatter-mul",
    "scatter_mul",
    "scatter-min",
    "scatter_min",
    "scatter-max",
    "scatter_max",
    "dynamic_slice",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "argmax",
    "argmin",
    "reduce_precision",
    "rev",
    "reduce_prod",
    "reduce_xor",
    "sort",
    "top_k",
    "approx_top_k",
)
