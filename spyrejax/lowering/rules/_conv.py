"""Lowering rules for convolutions and pooling: a patches copy, then a matmul or a reduction.

Spyre has no convolution unit: a convolution runs as the device runs it, im2col into
the systolic array. ``conv_general_dilated`` becomes

1. a patches copy of the input (``primitives.windows``): every window of the input
   (strides, padding, input and kernel dilation applied) laid out as the matrix
   ``A[group, batch * out_positions, window * in_channels]``, stuck on its last dim,
   the matmul's k. It is charged at its device size: each input element is moved once
   per window that covers it (a 3x3 stride-1 convolution moves about 9x its input);
2. the kernel copied (the same primitive, with unit windows) into
   ``B[group, window * in_channels, out_channels]``, stuck on the output channels;
3. one batched ``matmul`` over the groups (feature groups, or batch groups, which
   JAX emits for the kernel gradient of a grouped convolution), accumulating in
   float32 for half floats and returning ``preferred_element_type``;
4. views (a reshape copy where no view exists) back to the output's dimension numbers:
   the result is stuck on the output feature dim.

The gradients of a convolution are convolutions too (input dilation, flipped kernels,
batch groups), so they lower the same way.

Pooling (``reduce_window_max``/``min``/``sum``; average pooling is a window sum and a
division) is the same patches copy, ``[window, *out]`` with the padding filled with the
reduction's identity, reduced over the window dim (a non-stick dim: the result keeps
the patches' stick); a generic ``reduce_window`` whose combiner is an add, max or min
(an init that is no identity) is that reduction combined with its init once.
``select_and_scatter_add`` (the max-pooling gradient) and
``select_and_gather_add`` are index-driven scatters: device copies through the values,
like other scatters (``primitives.lax_copy``).
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp

from ... import primitives as sp
from ..._errors import SpyreUnsupportedError
from ..._jax import reduce_window_body
from ...primitives._reduce import REDUCTION
from ...primitives._stick import SPARSE, canon, dim_order_for, stick_options
from ...primitives._windows import window_out_size
from .._graph import Node, Scalar
from .._registry import Mode, Rule, _LaxCopy, _register
from ._dot import _reshape

__all__: list[str] = []

_UNIT = (1, 1, (0, 0), 1, 1)  # a dim the window does not slide over


def _arranged(
    axes: list[tuple[str, int]], order: list[str]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``mid_shape`` and ``perm`` putting the named axes in ``order`` (others after it)."""
    names = [n for n, _ in axes]
    rest = [n for n in names if n not in order]
    perm = tuple(names.index(n) for n in [*order, *rest])
    return tuple(n for _, n in axes), perm


def _stuck_last(shape: tuple[int, ...]) -> list[int] | None:
    return dim_order_for(shape, canon(shape, len(shape) - 1))


class _Conv(Rule):
    """``conv_general_dilated`` as a patches copy into a matmul (see the module doc)."""

    def modes(self, node: Node) -> list[Mode]:
        if any(isinstance(v, Scalar) for v in node.ins):
            raise SpyreUnsupportedError(f"conv_general_dilated of a scalar at {node.source}")
        out = node.outs[0]
        out_spec = node.params["dimension_numbers"].out_spec
        return [Mode((None, None), canon(out.shape, out_spec[1]))]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        p = node.params
        lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
        lhs, rhs = args
        want = node.outs[0].dtype  # lax requires one operand dtype
        gf, gb = p["feature_group_count"], p["batch_group_count"]
        groups = gf * gb
        nsp = len(lhs_spec) - 2
        ksizes = [rhs.shape[rhs_spec[2 + i]] for i in range(nsp)]
        wins = [
            (k, stride, tuple(pad), base, dil)
            for k, stride, pad, base, dil in zip(
                ksizes,
                p["window_strides"],
                p["padding"],
                p["lhs_dilation"],
                p["rhs_dilation"],
                strict=True,
            )
        ]
        batch, chans = lhs.shape[lhs_spec[0]], lhs.shape[lhs_spec[1]]
        osizes = [window_out_size(lhs.shape[lhs_spec[2 + i]], wins[i]) for i in range(nsp)]
        rows = batch // gb * math.prod(osizes)
        k = math.prod(ksizes) * (chans // gf)
        out_ch = rhs.shape[rhs_spec[0]]
        a = self._patches(lhs, lhs_spec, wins, osizes, gf, gb, (groups, rows, k))
        b = self._kernel(rhs, rhs_spec, groups, (groups, k, out_ch // groups))
        y = sp.matmul(a, b, preferred_element_type=want)  # [groups, rows, out_ch / groups]
        # Back to [batch, *out_positions, out_channels]: the groups join the channels.
        y = sp.squeeze(y, 0) if groups == 1 else sp.transpose(y, (1, 0, 2))
        y = _reshape(y, (batch // gb, *osizes, out_ch))
        where = {out_spec[0]: 0, out_spec[1]: nsp + 1}
        where.update({out_spec[2 + i]: 1 + i for i in range(nsp)})
        return [sp.transpose(y, tuple(where[d] for d in range(nsp + 2)))]

    @staticmethod
    def _patches(
        lhs: Any,
        spec: tuple[int, ...],
        wins: list[Any],
        osizes: list[int],
        gf: int,
        gb: int,
        shape: tuple[int, int, int],
    ) -> Any:
        """``A[group, batch * out_positions, window * in_channels]``, stuck on the last dim."""
        window, axes = [], []
        for d, n in enumerate(lhs.shape):
            if d == spec[0]:
                window.append(_UNIT)
                axes += [("gb", gb), ("nb", n // gb), ("_b", 1)]
            elif d == spec[1]:
                window.append(_UNIT)
                axes += [("gf", gf), ("cg", n // gf), ("_c", 1)]
            else:
                i = spec.index(d) - 2
                window.append(wins[i])
                axes += [(f"o{i}", osizes[i]), (f"k{i}", wins[i][0])]
        nsp = len(wins)
        order = ["gb", "gf", "nb", *(f"o{i}" for i in range(nsp))]
        order += [*(f"k{i}" for i in range(nsp)), "cg"]
        mid, perm = _arranged(axes, order)
        return sp.windows(
            lhs, window, mid_shape=mid, perm=perm, out_shape=shape, dim_order=_stuck_last(shape)
        )

    @staticmethod
    def _kernel(rhs: Any, spec: tuple[int, ...], groups: int, shape: tuple[int, int, int]) -> Any:
        """``B[group, window * in_channels, out_channels / group]``, stuck on the last dim."""
        axes = []
        for d, n in enumerate(rhs.shape):
            if d == spec[0]:
                axes += [("g", groups), ("og", n // groups)]
            elif d == spec[1]:
                axes.append(("i", n))
            else:
                axes.append((f"k{spec.index(d) - 2}", n))
            axes.append((f"_{d}", 1))
        nsp = len(spec) - 2
        mid, perm = _arranged(axes, ["g", *(f"k{i}" for i in range(nsp)), "i", "og"])
        window = [_UNIT] * rhs.ndim
        return sp.windows(
            rhs, window, mid_shape=mid, perm=perm, out_shape=shape, dim_order=_stuck_last(shape)
        )


_register(_Conv(), "conv_general_dilated")


class _ReduceWindow(Rule):
    """Pooling: the ``[window, *out]`` patches copy, reduced over the window dim."""

    def __init__(self, op: str) -> None:
        self.op = REDUCTION[op]

    def modes(self, node: Node) -> list[Mode]:
        if isinstance(node.ins[0], Scalar):
            raise SpyreUnsupportedError(f"{node.prim} of a scalar at {node.source}")
        return [Mode((None,), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [self._pooled(node, args[0], mode)]

    def _pooled(self, node: Node, x: Any, mode: Mode) -> Any:
        """The windows of ``x`` reduced (padding and holes hold the identity)."""
        p = node.params
        fill = self.op.identity(jnp.dtype(x.dtype))
        window = list(
            zip(
                p["window_dimensions"],
                p["window_strides"],
                (tuple(q) for q in p["padding"]),
                p["base_dilation"],
                p["window_dilation"],
                strict=True,
            )
        )
        r = x.ndim
        out = node.outs[0].shape
        shape = (math.prod(p["window_dimensions"]), *out)
        perm = (*range(1, 2 * r, 2), *range(0, 2 * r, 2))  # [*windows, *outs]
        stick = SPARSE if mode.out == SPARSE else canon(shape, mode.out + 1)
        patches = sp.windows(
            x, window, fill=fill, perm=perm, out_shape=shape, dim_order=dim_order_for(shape, stick)
        )
        return sp.reduce(self.op.name, patches, 0)


for _name in ("max", "min", "sum"):
    _register(_ReduceWindow(_name), f"reduce_window_{_name}")

# The combiner of a generic reduce_window: the reduction it is, and the op adding the init.
_COMBINERS = {"add": ("sum", sp.add), "max": ("max", sp.maximum), "min": ("min", sp.minimum)}


class _GenericReduceWindow(Rule):
    """``reduce_window`` with a combiner JAX does not name (its init is no identity).

    As XLA's CPU backend computes it, a window starts from the init value and takes
    in only the input's elements (padding and holes do not count, whatever the
    init): the patches are filled with the reduction's identity, reduced, and
    combined with the init once.
    """

    def _combiner(self, node: Node) -> tuple[str, Any]:
        jaxpr = reduce_window_body(node.params)
        eqns = getattr(jaxpr, "eqns", ())
        names = [e.primitive.name for e in eqns]
        if (
            len(node.ins) != 2
            or not isinstance(node.ins[1], Scalar)
            or names not in ([n] for n in _COMBINERS)
        ):
            raise SpyreUnsupportedError(
                f"reduce_window with the combiner {names} of {len(node.ins) // 2} operand(s) at "
                f"{node.source}: spyrejax lowers one operand, a literal init, and "
                f"{' / '.join(_COMBINERS)}"
            )
        return _COMBINERS[names[0]]

    def modes(self, node: Node) -> list[Mode]:
        self._combiner(node)
        return [Mode((None, None), s) for s in stick_options(node.outs[0].shape)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        name, combine = self._combiner(node)
        x, init = args[0], args[1].value
        y = _ReduceWindow(name)._pooled(node, x, mode)
        return [combine(y, init)]


_register(_GenericReduceWindow(), "reduce_window")

_register(_LaxCopy(), "select_and_scatter_add", "select_and_gather_add")
