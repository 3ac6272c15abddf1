"""The lowering rules by family; importing the package registers them all in ``RULES``."""

from . import (
    _collectives,  # noqa: F401  (shard_map and the collectives)
    _cond,  # noqa: F401  (cond, switch, and select_n with an integer index)
    _conv,  # noqa: F401  (convolutions and pooling)
    _copies,  # noqa: F401  (gathers, scatters, dynamic slices, sorts: copies through values)
    _dot,  # noqa: F401  (dot_general)
    _elementwise,  # noqa: F401  (elementwise ops, conversions, reductions)
    _in_place,  # noqa: F401  (in-place modes of concatenate, pad, dynamic_update_slice)
    _interleave,  # noqa: F401  (RoPE's stack of pairs, in place on lanes)
    _random,  # noqa: F401  (the random family)
    _scan,  # noqa: F401
    _shapes,  # noqa: F401  (shape ops, slices, concatenation, padding)
    _while,  # noqa: F401
)
from ._with_layout import with_layout

__all__ = ["with_layout"]
