"""Spyre primitives: JAX primitives whose abstract values carry Spyre layouts.

Each module holds one primitive family: its rule (the constructor), public wrapper,
emulator kernel and transformation rules.
"""

from . import _public
from ._arguments import target_layout
from ._astype import astype, bitcast
from ._base import SpyrePrim, abstract, image, wrap
from ._calls import abstract_calls, abstract_eval, current_executor, executing, recording
from ._collectives import all_gather, all_to_all, ppermute, psum, psum_scatter, pvary
from ._copies import concatenate, pad, reshape_copy, slice_copy
from ._device_put import device_put
from ._elementwise import elementwise
from ._elementwise_ops import ELEMENTWISE_OPS, ElementwiseOp
from ._elementwise_ops import OPS as ELEMENTWISE
from ._host import host_call
from ._iota import full, iota
from ._lax_copy import lax_copy
from ._mapping import install as _install_mapping
from ._matmul import matmul
from ._operators import install as _install
from ._public import *  # noqa: F403  (one typed name per public op, from the op tables)
from ._reduce import REDUCTIONS, REDUCTIONS_TABLE, ReductionOp, reduce
from ._restickify import compact, in_layout, restickify
from ._shard import P
from ._stick import restickify_cost
from ._transfer import to_device, to_host
from ._views import broadcast_to, expand_dims, reshape, squeeze, transpose
from ._windows import windows

_install()
_install_mapping()

__all__ = [
    "ELEMENTWISE",
    "ELEMENTWISE_OPS",
    "REDUCTIONS",
    "REDUCTIONS_TABLE",
    "ElementwiseOp",
    "P",
    "ReductionOp",
    "SpyrePrim",
    "abstract",
    "abstract_calls",
    "abstract_eval",
    "all_gather",
    "all_to_all",
    "astype",
    "bitcast",
    "broadcast_to",
    "compact",
    "concatenate",
    "current_executor",
    "device_put",
    "elementwise",
    "executing",
    "expand_dims",
    "full",
    "host_call",
    "image",
    "in_layout",
    "iota",
    "lax_copy",
    "matmul",
    "pad",
    "ppermute",
    "psum",
    "psum_scatter",
    "pvary",
    "recording",
    "reduce",
    "reshape",
    "reshape_copy",
    "restickify",
    "restickify_cost",
    "slice_copy",
    "squeeze",
    "target_layout",
    "to_device",
    "to_host",
    "transpose",
    "windows",
    "wrap",
]
__all__ += _public.__all__
