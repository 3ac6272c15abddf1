"""Host <-> device of a tiled image inside ``jax.jit``, as XLA FFI custom calls.

A traced transfer of its own whose last host segment is one tile dim and the sticks, the
last tile partly filled (:func:`spyrejax.dma._dma._stick_tile_dim`), is in XLA a loop of
box updates over the tiles, which writes 128-byte rows at the host row's stride: about
twice a copy's CPU time. The C++ handler in ``_tiles.cc`` writes each host row once,
in order, one stick at a time (about 1.2x a copy's; ``benchmarks/README.md`` item 30).
It runs on the CPU backend; elsewhere, or when the extension was not built,
:func:`d2h_tiles` takes the XLA loop it is given. Derivatives go through the plain XLA
formulation (the transfer is linear). :func:`h2d_tiles` is the same for host -> device
(XLA pads the host array with the fill and transposes it: about 0.15 of a copy's speed for
a ``[4096, 4000]`` float16; ``benchmarks/README.md`` item 49).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import jax
import jax.numpy as jnp
import numpy as np

try:
    from . import _tiles as _native
except ImportError:  # built without a C++ compiler or jaxlib's headers: the XLA loop runs
    _native = None

__all__ = ["FFI_D2H", "d2h_tiles", "h2d_tiles", "handler_active", "without_handler"]

_TARGET = "spyrejax_d2h_tiles"
_H2D_TARGET = "spyrejax_h2d_tiles"

#: Whether the FFI handler was built (and registered for the CPU backend).
FFI_D2H = _native is not None
if _native is not None:
    jax.ffi.register_ffi_target(_TARGET, _native.d2h_tiles(), platform="cpu")
    jax.ffi.register_ffi_target(_H2D_TARGET, _native.h2d_tiles(), platform="cpu")

Loop = Callable[[jax.Array], jax.Array]

_WITHOUT_HANDLER: ContextVar[bool] = ContextVar("spyrejax_without_handler", default=False)


@contextlib.contextmanager
def without_handler() -> Iterator[None]:
    """Transfers traced inside the block take XLA's loop, as where the handler was not built."""
    token = _WITHOUT_HANDLER.set(True)
    try:
        yield
    finally:
        _WITHOUT_HANDLER.reset(token)


def handler_active() -> bool:
    """Whether traced transfers take the handler (built, and not inside :func:`without_handler`)."""
    return FFI_D2H and not _WITHOUT_HANDLER.get()


def d2h_tiles(
    image: jax.Array, tile_dim: int, width: int, shape: tuple[int, ...], loop: Loop
) -> jax.Array:
    """The host tensor of ``shape`` in ``image``, whose sticks run along ``tile_dim``.

    ``image`` is ``[..., count, ..., lanes]`` (``count`` tiles at ``tile_dim``, the
    other dims in host order); row ``r`` of the result (the other dims flattened) holds
    tile ``t``'s stick at columns ``[t * lanes, (t + 1) * lanes)``, cut at ``width``.
    ``loop`` is the same transfer in XLA, run where the handler cannot be.
    """
    if not handler_active():
        return loop(image)
    attrs = _tiling_attrs(image.shape, tile_dim, width)
    rows = int(attrs["outer"] * attrs["inner"])

    def native(x: jax.Array) -> jax.Array:
        call = jax.ffi.ffi_call(
            _TARGET,
            jax.ShapeDtypeStruct((rows, width), x.dtype),
            vmap_method="sequential",
        )
        return call(x, **attrs).reshape(shape)

    @jax.custom_jvp
    def run(x: jax.Array) -> jax.Array:
        return jax.lax.platform_dependent(x, cpu=native, default=loop)

    @run.defjvp
    def _jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
        return run(primals[0]), loop(tangents[0])

    return run(image)


def _tiling_attrs(shape: tuple[int, ...], tile_dim: int, width: int) -> dict[str, np.int64]:
    """The handlers' extents of an image of ``shape`` tiled at ``tile_dim``."""
    return {
        "outer": np.int64(int(np.prod(shape[:tile_dim]))),
        "count": np.int64(shape[tile_dim]),
        "inner": np.int64(int(np.prod(shape[tile_dim + 1 : -1]))),
        "lanes": np.int64(shape[-1]),
        "width": np.int64(width),
    }


def h2d_tiles(
    x: jax.Array,
    fill: jax.Array,
    image_shape: tuple[int, ...],
    tile_dim: int,
    width: int,
    loop: Callable[[jax.Array, jax.Array], jax.Array],
) -> jax.Array:
    """The image of ``image_shape`` of host tensor ``x``, its sticks along ``tile_dim``.

    The inverse of :func:`d2h_tiles`: ``x``, read as rows of ``width`` elements (its
    tiling's last size: a stick may hold more than one host dim), is cut into the tiles'
    sticks; the last tile's padding lanes hold ``fill`` (a scalar of ``x``'s
    dtype). ``loop(x, fill)`` is the same transfer in XLA, run where the handler cannot
    be, and for tangents (with a zero fill: the padding does not depend on ``x``).
    """
    if not handler_active():
        return loop(x, fill)
    attrs = _tiling_attrs(image_shape, tile_dim, width)
    rows = int(attrs["outer"] * attrs["inner"])

    def native(x: jax.Array) -> jax.Array:
        call = jax.ffi.ffi_call(
            _H2D_TARGET, jax.ShapeDtypeStruct(image_shape, x.dtype), vmap_method="sequential"
        )
        return call(x.reshape(rows, width), fill.reshape(1), **attrs)

    @jax.custom_jvp
    def run(x: jax.Array) -> jax.Array:
        return jax.lax.platform_dependent(x, cpu=native, default=lambda x: loop(x, fill))

    @run.defjvp
    def _jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
        (t,) = tangents
        return run(primals[0]), loop(t, jnp.zeros((), t.dtype))

    return run(x)
