"""Batched matmul ``C[..., m, n] = A[..., m, k] @ B[..., k, n]`` on device images.

Layout rule (spec section 7): A is stuck on k; B and C are stuck on n; batch dims
broadcast. C gets the default layout of its shape, or a layout the caller gives
(stuck on n), such as ``SpyreTensorLayout.row_major``: ``[batch..., m, T(n), S(n)]``,
which is exactly the order the kernel's ``dot_general`` emits.

Kernel: one ``dot_general`` over device dims (A as lhs, B as rhs). A's k is tiled into
sticks ``(T_k, eps)``; where k is whole sticks, B's k dim is split the same way and the
contraction runs stick by stick; where it is not, A's k is merged and cut to k's data,
so the dot does no multiply-adds on padding. Padding never reaches C's data: A's padding is
masked to zero, and so is B's, unless the type records that it is already zero (``pad=0``).

XLA's dot wants B's contraction dim contiguous, so a single ``dot_general`` copies all
of B's tiled image ``[T(n), k, S(n)]`` into a row-major ``[k, n]`` (in float32 for
half-precision operands) on every call, and at small m that copy costs more than the
dot. When B's and C's leading device dim is n's tiles, B is large and A small, the
kernel instead loops (``lax.map``) over groups of those tiles: each step pads and
converts one cache-sized slice of B and runs the same dot on it, writing C's tiles in
place. Each output element is the same dot over k as before.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..device._coremaps import valid_points
from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec, matmul_space
from ..dma._dma import d2h_values, h2d_values
from ..layout._devdims import DevDim
from ..layout._dtypes import poison_value
from ..layout._layout import SpyreTensorLayout
from ._arguments import host_operand
from ._array import PadFill, SpyreArray, SpyreType, batched_layout
from ._base import SpyrePrim
from ._masks import from_data_dims, masked
from ._ring import combine
from ._rounding import Rounding, reassociated
from ._tuning import tuning
from ._values import accumulator
from ._views import align_batch_dims

__all__ = ["Matmul", "matmul"]


class _Plan:
    """The einsum over device dims, and the reshapes around it.

    Every data device dim gets a label ``(role, ratio)``: its role is the result dim it
    maps to (batch dims, m, n) or ``"k"``. B's single k device dim is padded to A's k
    tiles and split into them, so both operands carry the same k labels.
    """

    def __init__(self, a: SpyreType, b: SpyreType, out: SpyreType) -> None:
        rank = out.ndim
        letters = iter(string.ascii_letters)
        labels: dict[tuple[Any, int], str] = {}

        def label(role: Any, ratio: int) -> str:
            return labels.setdefault((role, ratio), next(letters))

        a_roles = {i: ("k" if i == a.ndim - 1 else i + rank - a.ndim) for i in range(a.ndim)}
        b_roles = {i: ("k" if i == b.ndim - 2 else i + rank - b.ndim) for i in range(b.ndim)}
        a_data, self.a_take = _data_dims(a, "A")
        b_data, self.b_take = _data_dims(b, "B")
        k_dims = [d for d in a_data if a_roles[d.dims[0]] == "k"]
        b_k = [i for i, d in enumerate(b_data) if b_roles[d.dims[0]] == "k"]
        self.has_k = a.shape[-1] > 1
        if self.has_k and (len(b_k) != 1 or b_data[b_k[0]].ratio != 1):
            raise LayoutError(
                f"matmul: B {b.str_short()} must hold k in one untiled device dim; restickify B"
            )
        self.b_k_axis = b_k[0] if self.has_k else -1
        self.k_sizes = tuple(d.size for d in sorted(k_dims, key=lambda d: -d.ratio))
        self.k_padded = math.prod(self.k_sizes)
        k_labels = [label("k", d.ratio) for d in sorted(k_dims, key=lambda d: -d.ratio)]
        a_sub = [label(a_roles[d.dims[0]], d.ratio) for d in a_data]
        b_sub = [label(b_roles[d.dims[0]], d.ratio) for d in b_data]
        sizes = {lab: d.size for lab, d in zip(a_sub + b_sub, a_data + b_data, strict=True)}
        b_free = b_sub[:]
        if self.has_k:
            b_sub[self.b_k_axis : self.b_k_axis + 1] = k_labels
        kept = set(a_sub + b_sub) - set(k_labels)
        out_sub = _out_labels(a, b, out, label, kept, sizes)
        self.subscripts = f"{''.join(a_sub)},{''.join(b_sub)}->{''.join(out_sub)}"
        self._cut_a_k(b_data, (a_sub, b_free, k_labels, out_sub), label)
        # B's and C's leading device dim are n's tiles: the product can run tile group
        # by tile group (see ``_contract_by_tiles``).
        n_tiles = labels.get((rank - 1, out.layout.elems_per_stick))
        self.by_tiles = self.has_k and n_tiles is not None and b_sub[0] == n_tiles == out_sub[0]

    def _cut_a_k(
        self,
        b_data: list[DevDim],
        subs: tuple[list[str], list[str], list[str], list[str]],
        label: Callable[[Any, int], str],
    ) -> None:
        """Contract over k's data only, when k is not whole sticks.

        A (which XLA copies into its dot's order anyway) is cut to k's data in that
        copy, instead of B being padded to A's k: the dot does none of the padding's
        multiply-adds (a head dim of 80 in 3 sticks of 32 was 20% more work), and a
        row-major B (a weight ``[..., k, n]``) is read as it is rather than copied padded
        on every call. Any other B is copied into the dot's order by XLA either way.
        """
        self.a_k_axes: tuple[int, ...] = ()
        self.k_data = b_data[self.b_k_axis].size if self.has_k else 0
        if not self.has_k or self.k_data == self.k_padded:
            return
        a_sub, b_free, k_labels, out_sub = subs
        self.a_k_axes = tuple(a_sub.index(lab) for lab in k_labels)
        b_free[self.b_k_axis] = k_lab = label("k", 0)
        rest = "".join(lab for lab in a_sub if lab not in k_labels)
        self.subscripts = f"{rest}{k_lab},{''.join(b_free)}->{''.join(out_sub)}"

    def cut_k(self, a_img: jax.Array) -> jax.Array:
        """A's image with its k dims last, merged and cut to k's data (see ``a_k_axes``)."""
        if not self.a_k_axes:
            return a_img
        rest = [i for i in range(a_img.ndim) if i not in self.a_k_axes]
        a_img = a_img.transpose((*rest, *self.a_k_axes))
        a_img = a_img.reshape((*a_img.shape[: len(rest)], -1))
        return jax.lax.slice_in_dim(a_img, 0, self.k_data, axis=-1)

    def split_k(self, b_img: jax.Array) -> jax.Array:
        """B's image (or a group of its n tiles), k zero-padded and split like A's k."""
        if not self.has_k or self.a_k_axes:
            return b_img
        ax = self.b_k_axis
        if self.k_padded > b_img.shape[ax]:  # no op where k is whole: one less to compile
            pad = [(0, 0, 0)] * b_img.ndim
            pad[ax] = (0, self.k_padded - b_img.shape[ax], 0)
            b_img = jax.lax.pad(b_img, jnp.zeros((), b_img.dtype), pad)
        return b_img.reshape(b_img.shape[:ax] + self.k_sizes + b_img.shape[ax + 1 :])


def _out_labels(
    a: SpyreType,
    b: SpyreType,
    out: SpyreType,
    label: Callable[[Any, int], str],
    kept: set[str],
    sizes: dict[str, int],
) -> list[str]:
    """The result's labels: exactly those A and B keep, at their sizes.

    Raises:
        LayoutError: if the operands tile their dims unlike the result.
    """
    out_data = [d for d in out.dims if d.is_data]
    out_sub = [label(d.dims[0], d.ratio) for d in out_data]
    if kept != set(out_sub) or any(
        sizes[lab] != d.size for lab, d in zip(out_sub, out_data, strict=True)
    ):
        raise LayoutError(
            f"matmul: A {a.str_short()} and B {b.str_short()} tile their dims unlike the "
            f"result {out.str_short()}; restickify them to default layouts"
        )
    return out_sub


def _data_dims(t: SpyreType, name: str) -> tuple[list[DevDim], tuple[int, ...]]:
    """An operand's data device dims, and the synthetic ones (taken at index 0)."""
    data, take = [], []
    for j, d in enumerate(t.dims):
        if not d.is_data:
            take.append(j)
        elif len(d.dims) != 1:
            raise LayoutError(
                f"matmul: {name} {t.str_short()} has a device dim over folded dims {d.dims}; "
                "restickify it"
            )
        else:
            data.append(d)
    return data, tuple(take)


class Matmul(SpyrePrim):
    """Batched matrix product on device images."""

    space_kind = "matmul"
    out_layout: SpyreTensorLayout | None
    preferred_element_type: Any

    def __init__(
        self,
        a: SpyreType,
        b: SpyreType,
        *,
        out_layout: SpyreTensorLayout | None = None,
        preferred_element_type: Any = None,
    ) -> None:
        out = _rule(a, b, out_layout, preferred_element_type)
        # A result format of another stick width (int8 -> int32) tiles n differently:
        # the product is computed in the operands' tiling, then moved into the result's.
        self._mid = out if out.layout.elems_per_stick == a.layout.elems_per_stick else None
        if self._mid is None:
            mid_layout = SpyreTensorLayout(out.shape, a.dtype)
            self._mid = SpyreType.contiguous(out.shape, a.dtype, mid_layout)
        self._plan = _Plan(a, b, self._mid)
        self.in_avals = (a, b)
        self.out_aval = out
        self.params = {"out_layout": out_layout, "preferred_element_type": preferred_element_type}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        pet = self.params["preferred_element_type"]
        return {} if pet is None else {"preferred_element_type": np.dtype(pet).name}

    def align_batched(self, args: list[Any], batched: tuple[bool, ...]) -> list[Any]:
        """vmap: lower-rank batched operands line their batch dim up with the others'."""
        return align_batch_dims(args, batched, self.in_avals)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        out = self.out_aval
        return {
            "out_layout": batched_layout(out.layout, out.shape, size),
            "preferred_element_type": self.params["preferred_element_type"],
        }

    def kernel(self, a_img: jax.Array, b_img: jax.Array) -> jax.Array:
        a_t, b_t = self.in_avals
        plan = self._plan
        if a_t.pad is not PadFill.ZERO:
            a_img = masked(a_img, a_t, 0)
        if b_t.pad is not PadFill.ZERO:
            b_img = masked(b_img, b_t, 0)
        a_img = plan.cut_k(_take0(a_img, plan.a_take))
        b_img = _take0(b_img, plan.b_take)
        out_dtype = self.out_aval.dtype
        acc = np.dtype(accumulator(a_t.dtype) or out_dtype)
        if np.dtype(out_dtype).itemsize > acc.itemsize:
            acc = np.dtype(out_dtype)  # int8 x int8 -> int32 accumulates in int32
        groups = _tile_groups(plan, a_img, b_img, acc) if plan.by_tiles else 1
        if groups > 1:
            out = _contract_by_tiles(plan, a_img, b_img, acc, groups)
        else:
            out = _contract_whole(plan.subscripts, a_img, plan.split_k(b_img), acc)
        if self._mid is self.out_aval:
            return from_data_dims(out.astype(out_dtype), self.out_aval)
        mid, dst = self._mid, self.out_aval
        values = d2h_values(from_data_dims(out, mid), mid.shape, mid.layout)
        return h2d_values(values.astype(out_dtype), dst.layout, poison_value(out_dtype))

    def space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace:
        """Batch dims, M, N, then K (reduced): SuperDSC's matmul names."""
        return matmul_space(ins[0], ins[1], out)

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """Each core's product over its K slice (zeros outside K), then the K partners' sum."""
        a, b = vals
        out_dtype = np.dtype(self.out_aval.dtype)
        acc = np.dtype(accumulator(self.in_avals[0].dtype) or out_dtype)
        if out_dtype.itemsize > acc.itemsize:
            acc = out_dtype
        k = div.space.names[-1]
        ok_a = valid_points(div, [k], a.shape[1:])
        ok_b = valid_points(div, [k], b.shape[1:])
        a = a.astype(acc) if ok_a is None else jnp.where(ok_a, a, 0).astype(acc)
        b = b.astype(acc) if ok_b is None else jnp.where(ok_b, b, 0).astype(acc)
        # axes: cores, batch..., M, N, K; A has N = 1 and B has M = 1.
        partial = _contract_cores(a, b, acc)
        total = combine(div, partial, lambda v, ax: jnp.sum(v, axis=ax, dtype=acc))
        return total.astype(out_dtype)

    def core_rounding(self, div: WorkDivision) -> Rounding | None:
        """A float product sums over K in another order (:func:`reassociated`)."""
        return reassociated(div, self.in_avals[0].dtype, self.out_aval.dtype)


def _contract_cores(a: jax.Array, b: jax.Array, acc: np.dtype) -> jax.Array:
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


def _contract_whole(subscripts: str, a: jax.Array, b: jax.Array, acc: Any) -> jax.Array:
    """The product in one ``dot_general`` (XLA copies B into the order its dot wants)."""
    if acc != a.dtype and not jnp.issubdtype(acc, jnp.floating):
        a, b = a.astype(acc), b.astype(acc)  # exact: int8 fits int32
    elif acc != a.dtype:
        # XLA's CPU backend runs a half x half -> float32 dot only as a fusion of its
        # own (a DotThunk refuses it), so masking and padding must not fuse into it.
        a, b = jax.lax.optimization_barrier((a, b))
    return _contract(subscripts, a, b, acc)


def _tile_groups(plan: _Plan, a: jax.Array, b: jax.Array, acc: Any) -> int:
    """How many groups of n tiles the product loops over; 1 runs it as one dot.

    A group is the most whole tiles that divide B's leading dim and fit
    ``Tuning.tile_group_bytes``. The loop pays off when B is large and A is small (small m):
    every step reads all of A again, so the steps' reads of A must stay a quarter of
    B's bytes or less (at m = 250 and more the single dot was as fast or faster).
    """
    size = np.dtype(acc).itemsize
    tiles = b.shape[0]
    tile_bytes = math.prod(b.shape[1:]) // b.shape[plan.b_k_axis] * plan.k_padded * size
    padded_k = plan.k_padded != b.shape[plan.b_k_axis]
    least = tuning().tile_loop_min_bytes // (4 if padded_k else 1)
    if tiles < 2 or tiles * tile_bytes < least:
        return 1
    most = tuning().tile_group_bytes
    fit = [g for g in range(1, tiles + 1) if tiles % g == 0 and g * tile_bytes <= most]
    groups = tiles // max(fit, default=1)
    return groups if groups * a.size * size * 4 <= tiles * tile_bytes else 1


def _contract_by_tiles(plan: _Plan, a: jax.Array, b: jax.Array, acc: Any, groups: int) -> jax.Array:
    """The product as a loop over groups of B's n tiles (B's and C's leading axis).

    Each step runs the same ``dot_general`` as ``_contract_whole`` on one group of B's
    tiles, so XLA's copy of that slice into its dot's order (and to float32 for
    float16) stays in cache; the steps' results are C's tiles in order, each element
    the same dot over k.
    """
    b = b.reshape((groups, b.shape[0] // groups, *b.shape[1:]))
    out = jax.lax.map(lambda part: _contract_whole(plan.subscripts, a, plan.split_k(part), acc), b)
    return out.reshape((-1, *out.shape[2:]))


def _contract(subscripts: str, a: jax.Array, b: jax.Array, acc: Any) -> jax.Array:
    """``einsum(subscripts, a, b)`` as one ``dot_general`` with A as lhs, B as rhs.

    The product comes out as ``[batch, A's free dims, B's free dims]``; B's free dims
    end with C's stick, so the final transpose into C's device order moves whole
    sticks. (``jnp.einsum`` may swap the operands, which on the tiled layout turns that
    transpose into an element-wise one.)
    """
    ins, out = subscripts.split("->")
    a_sub, b_sub = ins.split(",")
    batch = [c for c in a_sub if c in b_sub and c in out]
    contract = [c for c in a_sub if c in b_sub and c not in out]
    dims = (
        (tuple(a_sub.index(c) for c in contract), tuple(b_sub.index(c) for c in contract)),
        (tuple(a_sub.index(c) for c in batch), tuple(b_sub.index(c) for c in batch)),
    )
    prod = jax.lax.dot_general(a, b, dims, preferred_element_type=acc)
    order = batch + [c for c in a_sub if c not in b_sub] + [c for c in b_sub if c not in a_sub]
    return prod.transpose(tuple(order.index(c) for c in out))


def _take0(img: jax.Array, take: tuple[int, ...]) -> jax.Array:
    if not take:
        return img
    return img[tuple(0 if k in take else slice(None) for k in range(img.ndim))]


def _rule(
    a: SpyreType, b: SpyreType, out_layout: SpyreTensorLayout | None, preferred: Any
) -> SpyreType:
    if a.ndim < 2 or b.ndim < 2:
        raise LayoutError(
            f"matmul needs operands of rank >= 2, got {a.str_short()} and {b.str_short()}; "
            "use expand_dims"
        )
    if a.dtype != b.dtype:
        raise SpyreTypeError(f"matmul: dtypes differ ({a.dtype}, {b.dtype}); use astype")
    if a.shape[-1] != b.shape[-2]:
        raise LayoutError(f"matmul: contracting dims differ: A {a.shape} and B {b.shape}")
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise LayoutError(
            f"matmul: batch dims of {a.shape} and {b.shape} do not broadcast"
        ) from None
    problems = []
    if not _stuck_on_last(a):
        problems.append(f"A {a.str_short()} must be stuck on k (dim {a.ndim - 1})")
    if not _stuck_on_last(b):
        problems.append(f"B {b.str_short()} must be stuck on n (dim {b.ndim - 1})")
    if problems:
        raise LayoutError(
            "matmul: " + "; ".join(problems) + ". Restickify with "
            "spyrejax.restickify(x) (default layout: stuck on the last dim), or use "
            "spyrejax.jit, which plans it."
        )
    shape = (*batch, a.shape[-2], b.shape[-1])
    dtype = _result_dtype(a.dtype, preferred)
    layout = SpyreTensorLayout(shape, dtype) if out_layout is None else out_layout
    out = SpyreType.contiguous(shape, dtype, layout)
    if not _stuck_on_last(out):
        raise LayoutError(
            f"matmul: the result layout {layout} is not stuck on n (dim {len(shape) - 1}) of "
            f"the result {list(shape)}; use SpyreTensorLayout({list(shape)}, dtype) or "
            "SpyreTensorLayout.row_major"
        )
    return out


def _result_dtype(dtype: Any, preferred: Any) -> np.dtype:
    """The product's dtype: ``preferred_element_type`` when given, as in ``lax.dot_general``.

    Raises:
        SpyreTypeError: if ``preferred`` mixes floats and integers with the operands.
    """
    if preferred is None:
        return np.dtype(dtype)
    want = np.dtype(preferred)
    if jnp.issubdtype(want, jnp.floating) != jnp.issubdtype(dtype, jnp.floating):
        raise SpyreTypeError(
            f"matmul: preferred_element_type {want.name} must be a float for float operands "
            f"and an integer for integer operands, got operands of {np.dtype(dtype).name}"
        )
    return want


def _stuck_on_last(t: SpyreType) -> bool:
    """Stuck on the last dim; a last dim of size 1 counts (its stick has one lane)."""
    return t.stick_dim == t.ndim - 1 or (t.shape[-1] == 1 and t.stick_dim is None)


def matmul(
    a: SpyreArray,
    b: SpyreArray,
    *,
    layout: SpyreTensorLayout | None = None,
    preferred_element_type: Any = None,
) -> SpyreArray:
    """Batched matrix product of Spyre arrays, like ``jnp.matmul`` (rank >= 2).

    A must be stuck on its last dim (k) and B on its last dim (n). Batch dims broadcast.

    Args:
        a: ``[..., m, k]``, stuck on k.
        b: ``[..., k, n]``, stuck on n.
        layout: the result's layout, stuck on n; defaults to the default layout of its
            shape. ``SpyreTensorLayout.row_major(shape, dtype)`` keeps each batch's rows
            together, the order the product is computed in (what ``spyrejax.jit``
            gives batched products whose consumers accept it).
        preferred_element_type: the result dtype, as in ``lax.dot_general``: float16
            and bfloat16 products accumulate in float32 and are returned in it without
            rounding to the operands' dtype; int8 products accumulate in int32. Defaults
            to the operands' dtype.

    Raises:
        LayoutError: on mismatched shapes, operands stuck on the wrong dims, or a
            ``layout`` that does not fit the result or is not stuck on n.
        SpyreTypeError: on host arrays or different dtypes.
    """
    avals = [jax.typeof(a), jax.typeof(b)]
    for name, aval in zip("ab", avals, strict=True):
        if not isinstance(aval, SpyreType):
            raise host_operand("matmul", f"operand {name}", aval)
    return Matmul(*avals, out_layout=layout, preferred_element_type=preferred_element_type)(a, b)
