"""``device_put``: a host array onto several cards, each block in a layout of its choice.

Each card's block of the host array goes through the DMA engine (:func:`to_device`)
into the per-card layout, on that card; the per-card images are assembled into one
global image (``jax.make_array_from_single_device_arrays``) whose type is the
``unshard`` of the per-card type. No hi value goes through ``jax.device_put``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .._errors import SpyreTypeError
from ..layout._dtypes import host_dtype
from ..layout._layout import SpyreTensorLayout
from ._arguments import target_layout
from ._array import SpyreArray, SpyreType
from ._shard import P, unshard_type
from ._transfer import to_device

__all__ = ["device_put"]


def _logical_spec(sharding: Any) -> tuple[Any, P]:
    if not isinstance(sharding, NamedSharding):
        raise SpyreTypeError(
            f"spyrejax.device_put needs a jax.sharding.NamedSharding over logical dims, "
            f"got {sharding!r}"
        )
    spec = sharding.spec
    if not isinstance(spec, PartitionSpec):
        raise SpyreTypeError(f"the NamedSharding's spec must be a PartitionSpec, got {spec!r}")
    return sharding.mesh, P(*spec)


def device_put(
    x: Any,
    sharding: NamedSharding,
    layout: SpyreTensorLayout | None = None,
    *,
    dim_order: Any = None,
) -> SpyreArray:
    """Put a host array on the cards of a mesh, each card's block in ``layout``.

    Args:
        x: a host array (NumPy or JAX) of the global shape.
        sharding: a ``NamedSharding(mesh, PartitionSpec(...))`` over the logical dims
            of ``x`` (as for a plain JAX array).
        layout: the layout of each card's block (of the block's shape); it may differ
            from the global default (torch-spyre's tensor parallelism puts a linear
            weight's shard in the swapped matmul order). Defaults to the default layout
            of the block.
        dim_order: or the dim order of the block's default layout.

    Returns:
        A :class:`SpyreArray` of the global shape whose image is sharded over the mesh;
        inside ``jax.shard_map`` with ``spyrejax.P(*spec)`` each card sees its block in
        ``layout``.

    Raises:
        LayoutError: if the blocks cannot join into one image (a split dim padded in
            ``layout``) or the layout does not fit the block.
        SpyreTypeError: on a Spyre array or a sharding that is not a NamedSharding.
    """
    if isinstance(jax.typeof(x), SpyreType):
        raise SpyreTypeError("spyrejax.device_put takes a host array (to_host the Spyre array)")
    mesh, spec = _logical_spec(sharding)
    dtype = host_dtype(np.asarray(x).dtype if not hasattr(x, "dtype") else x.dtype)
    shape = tuple(np.shape(x))
    index_of = sharding.addressable_devices_indices_map(shape)
    blocks = {tuple((s.start, s.stop) for s in idx) for idx in index_of.values()}
    (first, *_) = index_of.values()
    block_shape = tuple(len(range(*s.indices(n))) for s, n in zip(first, shape, strict=True))
    layout = target_layout("device_put", block_shape, dtype, layout, dim_order)
    local = SpyreType.contiguous(block_shape, dtype, layout)
    whole = unshard_type(local, mesh, spec)
    image_sharding = NamedSharding(mesh, spec.to_lo()[0])
    host = np.asarray(x, dtype=dtype)
    images = {}
    for key in blocks:  # one DMA per distinct block (replicas share it)
        block = host[tuple(slice(a, b) for a, b in key)]
        images[key] = to_device(block, layout).image
    shards = [
        jax.device_put(images[tuple((s.start, s.stop) for s in idx)], device)
        for device, idx in index_of.items()
    ]
    image = jax.make_array_from_single_device_arrays(
        whole.layout.device_size, image_sharding, shards
    )
    return SpyreArray(image, whole)
