"""A layout algebra on CuTe-style ``shape:stride`` layouts (issue 26, item 5).

A :class:`CuteLayout` is a function from coordinates to offsets: a (hierarchical) shape
and a stride of the same profile, ``offset = sum(coord_i * stride_i)`` over its leaves.
A one-dimensional index enters a shape colexicographically (the leftmost leaf varies
fastest), as in CuTe. The operations are the ones CuTe defines, computed exactly:
:func:`coalesce`, :func:`composition`, :func:`complement`, :func:`logical_divide`,
:func:`logical_product` and :func:`right_inverse`. Where CuTe's rules would need a
divisibility that the operands lack, the result is refused with
:class:`~spyrejax.LayoutConversionError` rather than approximated; where the function is
well defined without it (a shape taken inside one mode), it is returned.

Spyre layouts enter the algebra through :mod:`._convert` (a layout bound to a host
shape is the CuTe layout ``host coordinate -> device offset``).

Pure Python: no NumPy, no JAX.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Union

from .._errors import LayoutConversionError

__all__ = [
    "CuteLayout",
    "IntTuple",
    "coalesce",
    "complement",
    "composition",
    "logical_divide",
    "logical_product",
    "make_layout",
    "right_inverse",
]

IntTuple = Union[int, tuple["IntTuple", ...]]  # noqa: UP007 (a recursive alias needs Union)


def _check(t: object, what: str) -> IntTuple:
    if isinstance(t, bool):
        raise LayoutConversionError(f"{what} must be an int or a tuple of them, got {t!r}")
    if isinstance(t, int):
        return int(t)
    if isinstance(t, tuple | list):
        return tuple(_check(x, what) for x in t)
    raise LayoutConversionError(f"{what} must be an int or a tuple of them, got {t!r}")


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of an int tuple, outermost-left first."""
    if isinstance(t, int):
        return (t,)
    return tuple(x for sub in t for x in flatten(sub))


def _congruent(a: IntTuple, b: IntTuple) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(_congruent(x, y) for x, y in zip(a, b, strict=True))


def _fmt(t: IntTuple) -> str:
    return str(t) if isinstance(t, int) else "(" + ",".join(_fmt(x) for x in t) + ")"


@dataclass(frozen=True)
class CuteLayout:
    """A CuTe layout ``shape:stride``: coordinates to offsets.

    Attributes:
        shape: an int or a nested tuple of ints (every leaf >= 1).
        stride: an int tuple of the same profile (leaves may be 0: broadcast).

    Example:
        >>> layout = CuteLayout.parse("(4,2,8):(1,32,4)")
        >>> layout(5), layout.size, str(layout)
        (33, 64, '(4,2,8):(1,32,4)')
    """

    shape: IntTuple
    stride: IntTuple

    def __post_init__(self) -> None:
        shape, stride = _check(self.shape, "shape"), _check(self.stride, "stride")
        if not _congruent(shape, stride):
            raise LayoutConversionError(
                f"shape {_fmt(shape)} and stride {_fmt(stride)} differ in profile"
            )
        if any(s < 1 for s in flatten(shape)):
            raise LayoutConversionError(f"shape {_fmt(shape)} has a leaf < 1")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    @classmethod
    def parse(cls, text: str) -> CuteLayout:
        """A layout from CuTe's printed form, ``(4,(2,8)):(1,(32,4))`` or ``8:1``.

        Raises:
            LayoutConversionError: if the text is not ``shape:stride``.
        """
        parts = text.replace(" ", "").split(":")
        if len(parts) != 2:
            raise LayoutConversionError(f"not a CuTe layout 'shape:stride': {text!r}")
        return cls(_parse_tuple(parts[0], text), _parse_tuple(parts[1], text))

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    @property
    def leaves(self) -> tuple[tuple[int, int], ...]:
        """``(size, stride)`` of every leaf mode, fastest first."""
        return tuple(zip(flatten(self.shape), flatten(self.stride), strict=True))

    @property
    def rank(self) -> int:
        """Top-level modes (1 for an int shape)."""
        return 1 if isinstance(self.shape, int) else len(self.shape)

    def mode(self, i: int) -> CuteLayout:
        """Top-level mode ``i`` as a layout."""
        if isinstance(self.shape, int):
            if i:
                raise LayoutConversionError(f"layout {self} has one mode, not {i + 1}")
            return self
        assert isinstance(self.stride, tuple)
        return CuteLayout(self.shape[i], self.stride[i])

    @property
    def size(self) -> int:
        """Coordinates in the domain: the product of the shape."""
        return math.prod(flatten(self.shape))

    @property
    def cosize(self) -> int:
        """One past the largest offset (for non-negative strides)."""
        return 1 + sum((n - 1) * abs(d) for n, d in self.leaves)

    def __call__(self, coord: IntTuple) -> int:
        """The offset of a coordinate: an int (colexicographic) or a congruent tuple."""
        return _crd2idx(_check(coord, "coordinate"), self.shape, self.stride)


def _parse_tuple(text: str, whole: str) -> IntTuple:
    tokens = re.findall(r"\(|\)|,|-?\d+", text)
    if "".join(tokens) != text:
        raise LayoutConversionError(f"not a CuTe layout 'shape:stride': {whole!r}")
    pos = 0

    def parse() -> IntTuple:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok != "(":
            return int(tok)
        if tokens[pos] == ")":  # (): the empty shape of a rank-0 tensor
            pos += 1
            return ()
        items = []
        while True:
            items.append(parse())
            sep = tokens[pos]
            pos += 1
            if sep == ")":
                return tuple(items)
            if sep != ",":
                raise LayoutConversionError(f"not a CuTe layout 'shape:stride': {whole!r}")

    try:
        out = parse()
    except (IndexError, ValueError):
        raise LayoutConversionError(f"not a CuTe layout 'shape:stride': {whole!r}") from None
    if pos != len(tokens):
        raise LayoutConversionError(f"not a CuTe layout 'shape:stride': {whole!r}")
    return out


def _crd2idx(coord: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    if isinstance(coord, int):
        if isinstance(shape, int):
            assert isinstance(stride, int)
            return coord * stride
        assert isinstance(stride, tuple)
        out = 0
        for sub_shape, sub_stride in zip(shape, stride, strict=True):
            n = math.prod(flatten(sub_shape))
            out += _crd2idx(coord % n, sub_shape, sub_stride)
            coord //= n
        return out
    if isinstance(shape, int) or len(coord) != len(shape):
        raise LayoutConversionError(f"coordinate {_fmt(coord)} does not fit shape {_fmt(shape)}")
    assert isinstance(stride, tuple)
    return sum(_crd2idx(c, s, d) for c, s, d in zip(coord, shape, stride, strict=True))


def _from_leaves(leaves: list[tuple[int, int]]) -> CuteLayout:
    if not leaves:
        return CuteLayout(1, 0)
    if len(leaves) == 1:
        return CuteLayout(*leaves[0])
    return CuteLayout(tuple(n for n, _ in leaves), tuple(d for _, d in leaves))


def make_layout(*layouts: CuteLayout) -> CuteLayout:
    """The layout whose top-level modes are ``layouts`` (CuTe's ``make_layout``)."""
    return CuteLayout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def coalesce(layout: CuteLayout) -> CuteLayout:
    """The same function on ``size`` indices, with the fewest leaves (flat).

    Size-1 leaves go; a leaf continuing the previous one (``d1 == n0 * d0``) merges.
    """
    out: list[tuple[int, int]] = []
    for n, d in layout.leaves:
        if n == 1:
            continue
        if out and d == out[-1][0] * out[-1][1]:
            out[-1] = (out[-1][0] * n, out[-1][1])
        else:
            out.append((n, d))
    return _from_leaves(out)


def _compose_leaf(a: list[tuple[int, int]], n: int, d: int, what: str) -> CuteLayout:
    """``A o (n:d)`` for a coalesced, flat ``A``; its last mode extends without end."""
    if n == 1:
        return CuteLayout(1, 0)
    if d == 0:
        return CuteLayout(n, 0)
    modes = list(a)
    i, rest = 0, d
    while rest > 1 and i < len(modes) - 1:  # divide the stride out of A's modes
        size, step = modes[i]
        if rest % size == 0:
            rest //= size
            i += 1
        elif size % rest == 0:
            modes[i] = (size // rest, step * rest)
            rest = 1
        else:
            raise LayoutConversionError(
                f"{what}: stride {d} does not divide into mode {size}:{step} (nor it into {d})"
            )
    if rest > 1:  # the last mode, unbounded
        modes[i] = (modes[i][0], modes[i][1] * rest)
    out: list[tuple[int, int]] = []
    rest = n
    for k in range(i, len(modes)):  # take n indices from the modes left
        size, step = modes[k]
        if k == len(modes) - 1 or rest <= size:
            out.append((rest, step))
            break
        if rest % size:
            raise LayoutConversionError(
                f"{what}: shape {n} does not divide into mode {size}:{step} (nor it into {n})"
            )
        out.append((size, step))
        rest //= size
    return coalesce(_from_leaves(out))


def composition(a: CuteLayout, b: CuteLayout) -> CuteLayout:
    """``A o B``: the layout ``x -> A(B(x))`` on ``B``'s domain, with ``B``'s profile.

    Each leaf ``n:d`` of ``B`` becomes the modes of ``A`` it walks: ``d`` is divided out
    of ``A``'s modes (each must divide the other), then ``n`` indices are taken from
    the modes left (a mode ``n`` fits inside is taken as is, without the divisibility
    CuTe asks for, since ``x < n`` never leaves it). ``B``'s leaves must not overlap
    (``d' >= n * d`` by increasing stride): then their offsets never carry across
    ``A``'s modes and the result is exactly ``A(B(x))`` (past ``size(A)``, ``A``'s last
    mode extends, as in CuTe).

    Raises:
        LayoutConversionError: where the function is not a layout of this form (a
            stride or shape that crosses a mode boundary unevenly).
    """
    flat = list(coalesce(a).leaves)
    what = f"composition {a} o {b}"
    used = sorted((d, n) for n, d in b.leaves if n > 1 and d != 0)
    for (d0, n0), (d1, _) in itertools.pairwise(used):
        if d1 < d0 * n0:  # the leaves' offsets would add up across A's modes
            raise LayoutConversionError(
                f"{what}: B's leaves {n0}:{d0} and stride {d1} overlap, so A o B is not "
                "mode by mode"
            )

    def walk(shape: IntTuple, stride: IntTuple) -> CuteLayout:
        if isinstance(shape, int):
            assert isinstance(stride, int)
            return _compose_leaf(flat, shape, stride, what)
        assert isinstance(stride, tuple)
        return make_layout(*(walk(s, d) for s, d in zip(shape, stride, strict=True)))

    return walk(b.shape, b.stride)


def complement(a: CuteLayout, cotarget: int) -> CuteLayout:
    """CuTe's complement: the layout of the offsets ``A`` does not reach, up to ``cotarget``.

    ``make_layout(A, complement(A, M))`` is a bijection onto ``[0, M)`` (rounded up to
    whole repetitions of ``A``) when ``A`` is injective.

    Raises:
        LayoutConversionError: if ``A`` has a negative stride, overlaps itself, or a
            stride that is not a multiple of the span below it.
    """
    leaves = sorted((d, n) for n, d in a.leaves if n > 1 and d != 0)
    out: list[tuple[int, int]] = []
    current = 1
    for d, n in leaves:
        if d < 0 or d % current:
            raise LayoutConversionError(
                f"complement of {a}: stride {d} is not a multiple of the span {current} below it"
            )
        if d > current:
            out.append((d // current, current))
        current = n * d
    out.append((max(1, -(-cotarget // current)), current))
    return coalesce(_from_leaves(out))


def logical_divide(a: CuteLayout, b: CuteLayout) -> CuteLayout:
    """CuTe's logical divide: ``A o (B, complement(B, size(A)))`` (tiles of ``B``, then rest)."""
    return composition(a, make_layout(b, complement(b, a.size)))


def logical_product(a: CuteLayout, b: CuteLayout) -> CuteLayout:
    """CuTe's logical product: ``A`` repeated as ``B`` says.

    ``(A, complement(A, size(A) * cosize(B)) o B)``.
    """
    return make_layout(a, composition(complement(a, a.size * b.cosize), b))


def right_inverse(a: CuteLayout) -> CuteLayout:
    """A layout ``R`` with ``A(R(i)) == i`` on the largest ``[0, size(R))`` CuTe finds.

    Leaves are taken by increasing stride while each stride is the span of those taken;
    ``R`` maps an offset back to ``A``'s colexicographic index.
    """
    weights, w = [], 1
    for n, _ in a.leaves:
        weights.append(w)
        w *= n
    out: list[tuple[int, int]] = []
    current = 1
    for d, n, weight in sorted((d, n, wt) for (n, d), wt in zip(a.leaves, weights, strict=True)):
        if n == 1:
            continue
        if d != current:
            break
        out.append((n, weight))
        current *= n
    return coalesce(_from_leaves(out))
