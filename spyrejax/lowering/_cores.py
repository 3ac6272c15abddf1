"""Per-core emulation: ``spyrejax.jit(f, emulate="cores")`` runs each op as the cores would.

Every op the device model divides (elementwise ops, ``astype``, reductions, matmuls)
runs here instead of with its whole-image kernel, vectorised over the cores:

1. **load**: each core's box of every operand moves from the DDR image into an LX
   image by the descriptors of :func:`spyrejax.device.core_dci` (one gather for all
   cores: the descriptors of every core are core 0's moved by the core's offset);
2. **compute**: the core's kernel runs on its LX data, read in the order of the op's
   iteration space (one variable per output and reduced dim, counted from the core's
   slice); a reduction or matmul whose reduced dim is split leaves partial results
   that the partners sharing an output box combine (the ring);
3. **store**: each core's LX result moves back into a fresh DDR image (poison where no
   core writes) by its store descriptors.

The result's padding then gets what its type promises (poison, or zeros for ``pad=0``).
A position no core writes stays poison, so a division that does not tile the output
exactly once shows up as NaN, never as a plausible number. Ops the device model does
not divide (views, restickifies, copies, ``iota``) run as in the default mode.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import DeviceError, SpyreInternalError, SpyreUnsupportedError
from ..device import Machine, WorkDivision, core_dci, divide_op
from ..layout._segments import row_major_strides
from ..primitives._array import PadFill, SpyreType
from ..primitives._astype import Astype
from ..primitives._base import image, wrap
from ..primitives._elementwise import Elementwise
from ..primitives._masks import masked, poison
from ..primitives._matmul import Matmul
from ..primitives._reduce import Reduce
from ..primitives._values import accumulator
from ._device import _space, _spec

__all__ = ["CoreExecutor"]

_DIVIDED = (Elementwise, Astype, Reduce, Matmul)


class CoreExecutor:
    """Runs divided primitives core by core (vectorised); see the module docstring.

    Attributes:
        machine: the machine whose cores the ops are divided over.
    """

    def __init__(self, machine: Machine | None = None) -> None:
        self.machine = machine or Machine.spyre()

    def __call__(self, prim: Any, args: tuple[Any, ...]) -> Any:
        """The result of ``prim`` on ``args`` computed per core, or None (run it as usual)."""
        if not isinstance(prim, _DIVIDED) or not isinstance(prim.out_aval, SpyreType):
            return None
        types = [*prim.in_avals, prim.out_aval]
        if any(math.prod(t.shape) == 0 for t in types):
            return None
        ins = [_spec(t, f"in{k}") for k, t in enumerate(prim.in_avals)]
        try:
            _, _, space = _space(prim, ins, _spec(prim.out_aval, "out"))
        except DeviceError:
            return None  # the device model does not divide it either
        div = divide_op(space, self.machine)
        _check_supported(div)
        cores = div.cores_used
        starts = _starts(div)
        vals = [_to_space(div, k, _load(div, k, image(a)), starts) for k, a in enumerate(args)]
        result = _kernel(prim, div, vals, starts)
        out = len(space.operands) - 1
        lx = _from_space(div, out, result, starts, cores)
        img = _store(div, out, lx)
        t = prim.out_aval
        return wrap(masked(img, t, 0 if t.pad is PadFill.ZERO else poison(t.dtype)), t)


# --- what can run per core ---------------------------------------------------------------


def _check_supported(div: WorkDivision) -> None:
    """Every data device dim of every operand walks one iteration variable.

    Raises:
        SpyreUnsupportedError: for a device dim that folds several logical dims.
    """
    for op in div.space.operands:
        for j, d in enumerate(op.tensor.dims):
            if d.is_data and op.walks[j] is None:
                raise SpyreUnsupportedError(
                    f'emulate="cores": {div.space.opfunc} reads {op.tensor.name} whose device '
                    f"dim {j} folds logical dims {d.dims}; per-core execution needs each "
                    "device dim to walk one logical dim (restickify first, or use the "
                    "default mode)"
                )


# --- DDR <-> LX by descriptors ---------------------------------------------------------


def _affine(sizes: tuple[int, ...], strides: tuple[int, ...]) -> jax.Array:
    """``dot(i, strides)`` over the loop nest ``sizes`` (innermost first), flattened."""
    shape = tuple(reversed(sizes))
    idx = jnp.zeros(shape, np.int32)
    for k, st in enumerate(strides):
        axis = len(sizes) - 1 - k
        idx = idx + jax.lax.broadcasted_iota(np.int32, shape, axis) * st
    return idx.reshape(-1)


def _descriptors(div: WorkDivision, operand: int, load: bool) -> list[tuple[Any, np.ndarray]]:
    """Core 0's descriptors and, per descriptor, every core's DDR offset.

    Raises:
        SpyreInternalError: if some core's loop nest is not core 0's moved in DDR.
    """
    dcis = [core_dci(div, operand, c, load=load) for c in range(div.cores_used)]
    out = []
    for i, d0 in enumerate(dcis[0]):
        offs = []
        for dci in dcis:
            d = dci[i]
            ddr, lx = (d.offset_src, d.offset_dst) if load else (d.offset_dst, d.offset_src)
            same = d.size == d0.size and d.stride_src == d0.stride_src
            if (
                not same
                or d.stride_dst != d0.stride_dst
                or lx != (d0.offset_dst if load else d0.offset_src)
            ):
                raise SpyreInternalError(
                    f"internal error: the per-core loop nests of {div.space.opfunc} differ "
                    "in more than their DDR offset; please report it"
                )
            offs.append(ddr)
        out.append((d0, np.asarray(offs, np.int64)))
    return out


def _load(div: WorkDivision, operand: int, img: jax.Array) -> jax.Array:
    """Every core's LX image of an operand: ``[cores, box elements]``."""
    n = math.prod(div.box_shape(operand, 0))
    flat = img.reshape(-1)
    lx = jnp.full((div.cores_used, n), poison(img.dtype), img.dtype)
    for d, offs in _descriptors(div, operand, load=True):
        src = jnp.asarray(offs, np.int32)[:, None] + _affine(d.size, d.stride_src)[None, :]
        dst = d.offset_dst + _affine(d.size, d.stride_dst)
        lx = lx.at[:, dst].set(flat[src], unique_indices=True)
    return lx


def _store(div: WorkDivision, operand: int, lx: jax.Array) -> jax.Array:
    """The DDR image of an operand from every core's LX image (poison where none writes)."""
    t = div.space.operands[operand].tensor
    flat = jnp.full((math.prod(t.layout.device_size),), poison(lx.dtype), lx.dtype)
    for d, offs in _descriptors(div, operand, load=False):
        src = d.offset_src + _affine(d.size, d.stride_src)
        dst = jnp.asarray(offs, np.int32)[:, None] + _affine(d.size, d.stride_dst)[None, :]
        flat = flat.at[dst.reshape(-1)].set(lx[:, src].reshape(-1))
    return flat.reshape(t.layout.device_size)


# --- LX <-> the iteration space ---------------------------------------------------------


def _starts(div: WorkDivision) -> dict[str, np.ndarray]:
    """Per variable, each core's first (global) index: ``[cores]`` small ints."""
    slices = [div.core_to_slice(c) for c in range(div.cores_used)]
    return {n: np.asarray([s[n] * div.chunk(n) for s in slices], np.int32) for n in div.space.names}


def _local_shape(div: WorkDivision, operand: int) -> tuple[int, ...]:
    """The operand's axes over the iteration space: a variable's chunk, 1 if not walked."""
    walked = {w[0] for w in div.space.operands[operand].walks if w is not None}
    return tuple(div.chunk(n) if n in walked else 1 for n in div.space.names)


def _lx_index(div: WorkDivision, operand: int) -> jax.Array:
    """For each local iteration point, its position in the core's LX box (same on every core).

    A device dim walking variable ``v`` with ratio ``r`` holds the point at
    ``(v // r) % box size``: boxes start on whole slices, so local counts work.
    """
    op = div.space.operands[operand]
    shape = _local_shape(div, operand)
    box = div.box_shape(operand, 0)
    strides = row_major_strides(box)
    idx = jnp.zeros(shape, np.int32)
    for j, w in enumerate(op.walks):
        if w is None:
            continue
        var, ratio = w
        axis = div.space.names.index(var)
        v = jax.lax.broadcasted_iota(np.int32, shape, axis)
        idx = idx + (v // ratio) % box[j] * strides[j]
    return idx


def _valid(div: WorkDivision, names: list[str], shape: tuple[int, ...], starts: dict) -> Any:
    """``[cores, *shape]`` bool: the points whose variables in ``names`` are inside their extent."""
    ok = None
    for n in names:
        axis = div.space.names.index(n)
        extent = div.space.dim(n).extent
        if shape[axis] == 1 or extent == div.chunk(n) * div.splits[n]:
            continue  # one point per core, or no padding: every point is inside
        local = jax.lax.broadcasted_iota(np.int32, shape, axis)[None]
        start = jnp.asarray(starts[n]).reshape((-1,) + (1,) * len(shape))
        inside = local + start < extent
        ok = inside if ok is None else ok & inside
    return ok


def _to_space(div: WorkDivision, operand: int, lx: jax.Array, starts: dict) -> jax.Array:
    """A core's LX data in iteration order: ``[cores, *local shape]``."""
    idx = _lx_index(div, operand)
    return jnp.take(lx, idx.reshape(-1), axis=1).reshape((lx.shape[0], *idx.shape))


def _from_space(
    div: WorkDivision, operand: int, result: jax.Array, starts: dict, cores: int
) -> jax.Array:
    """Every core's LX image of the output from its result in iteration order.

    Only points inside the logical extents are written (padding points would wrap onto
    data positions of a narrower-stick operand); the rest of the box stays poison.
    """
    op = div.space.operands[operand]
    shape = _local_shape(div, operand)
    n = math.prod(div.box_shape(operand, 0))
    idx = jnp.broadcast_to(_lx_index(div, operand)[None], (cores, *shape))
    walked = [w[0] for w in op.walks if w is not None]
    ok = _valid(div, walked, shape, starts)
    if ok is not None:
        idx = jnp.where(ok, idx, n)  # out of range: dropped
    result = jnp.broadcast_to(result, (cores, *shape))
    lx = jnp.full((cores, n), poison(result.dtype), result.dtype)
    rows = jax.lax.broadcasted_iota(np.int32, (cores, *shape), 0)
    return lx.at[rows.reshape(-1), idx.reshape(-1)].set(result.reshape(-1), mode="drop")


# --- the kernels on LX data ---------------------------------------------------------------


def _kernel(prim: Any, div: WorkDivision, vals: list[jax.Array], starts: dict) -> jax.Array:
    if isinstance(prim, Matmul):
        return _matmul(prim, div, vals, starts)
    if isinstance(prim, Reduce):
        return _reduce(prim, div, vals[0], starts)
    if isinstance(prim, Astype):
        return vals[0].astype(prim.out_aval.dtype)
    return _elementwise(prim, vals)


def _elementwise(prim: Elementwise, vals: list[jax.Array]) -> jax.Array:
    """The op's own computation (``Elementwise._compute``) on the cores' data."""
    out_t = prim.out_aval
    ops: list[Any] = list(vals)
    for pos, value in prim.consts:
        ops.insert(pos, value)
    if prim.op.result == "same" and prim.op.values is None:
        ops = [o if isinstance(o, jax.Array) else jnp.asarray(o, out_t.dtype) for o in ops]
    return prim._compute(ops).astype(out_t.dtype)


def _reduced(div: WorkDivision) -> list[str]:
    return [d.name for d in div.space.dims if d.reduced]


def _combine(div: WorkDivision, partial: jax.Array, combine: Any) -> jax.Array:
    """Partial results combined over the cores that split a reduced dim (the ring).

    Cores are numbered mixed-radix over ``div.order``, fastest first; the partners of
    one output box differ only in the split reduced dim's digit.
    """
    split = [n for n in _reduced(div) if div.splits[n] > 1]
    if not split:
        return partial
    radix = tuple(div.splits[n] for n in reversed(div.order))
    axis = list(reversed(div.order)).index(split[0])
    grouped = partial.reshape(radix + partial.shape[1:])
    total = combine(grouped, axis)
    return jnp.broadcast_to(jnp.expand_dims(total, axis), grouped.shape).reshape(partial.shape)


def _reduce(prim: Reduce, div: WorkDivision, x: jax.Array, starts: dict) -> jax.Array:
    """The reduction of each core's slice, identity outside the extents, then the ring."""
    t = prim.in_avals[0]
    op = prim.op
    names = _reduced(div)
    # A broadcast (stride-0) reduced dim holds one copy: every copy takes part.
    full = tuple(
        div.chunk(n) if n in names else s for n, s in zip(div.space.names, x.shape[1:], strict=True)
    )
    x = jnp.broadcast_to(x, (x.shape[0], *full))
    ok = _valid(div, names, full, starts)
    if ok is not None:
        x = jnp.where(ok, x, jnp.asarray(op.identity(t.dtype), x.dtype))
    acc = accumulator(t.dtype) if op.additive else None
    if acc is not None:
        x = x.astype(acc)
    axes = tuple(1 + div.space.names.index(n) for n in names)

    def reduce(v: jax.Array, ax: Any) -> jax.Array:
        ax = (ax,) if isinstance(ax, int) else ax
        return op.jnp(v, axis=ax) if v.dtype == bool else op.lax(v, ax)

    partial = jnp.expand_dims(reduce(x, axes), axes)
    total = _combine(div, partial, reduce)
    if op.mean:
        total = total / math.prod(div.space.dim(n).extent for n in names)
    return total.astype(t.dtype)


def _matmul(prim: Matmul, div: WorkDivision, vals: list[jax.Array], starts: dict) -> jax.Array:
    """Each core's product over its K slice (zeros outside K), then the K partners' sum."""
    a, b = vals
    out_dtype = np.dtype(prim.out_aval.dtype)
    acc = np.dtype(accumulator(prim.in_avals[0].dtype) or out_dtype)
    if out_dtype.itemsize > acc.itemsize:
        acc = out_dtype
    k = div.space.names[-1]
    ok_a = _valid(div, [k], a.shape[1:], starts)
    ok_b = _valid(div, [k], b.shape[1:], starts)
    a = a.astype(acc) if ok_a is None else jnp.where(ok_a, a, 0).astype(acc)
    b = b.astype(acc) if ok_b is None else jnp.where(ok_b, b, 0).astype(acc)
    # axes: cores, batch..., M, N, K; A has N = 1 and B has M = 1.
    partial = _contract(a, b, acc)
    total = _combine(div, partial, lambda v, ax: jnp.sum(v, axis=ax, dtype=acc))
    return total.astype(out_dtype)


def _contract(a: jax.Array, b: jax.Array, acc: np.dtype) -> jax.Array:
    """``out[c, ..., m, n, 0] = sum_k a[c, ..., m, 0, k] * b[c, ..., 0, n, k]``."""
    a2 = a[..., :, 0, :]
    b2 = b[..., 0, :, :]
    batch = jnp.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = jnp.broadcast_to(a2, (*batch, *a2.shape[-2:]))
    b2 = jnp.broadcast_to(b2, (*batch, *b2.shape[-2:]))
    nb = len(batch)
    dims = (((nb + 1,), (nb + 1,)), (tuple(range(nb)), tuple(range(nb))))
    out = jax.lax.dot_general(a2, b2, dims, preferred_element_type=acc)
    return out[..., None]
