"""The layout algebra (CuTe's operations) and torch-spyre's element arrangements (issue 26)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax import CuteLayout, ElementArrangement, LayoutConversionError

alg = sj.algebra
L = CuteLayout.parse


def offsets(layout):
    """Brute force: the offset of every colexicographic index, leaf digits by hand."""
    out = []
    for i in range(layout.size):
        x, off = i, 0
        for n, d in layout.leaves:
            off += (x % n) * d
            x //= n
        out.append(off)
    return out


# --- CuTe's documented examples (golden) ---------------------------------------------


@pytest.mark.parametrize(
    ("op", "args", "want"),
    [
        (alg.coalesce, ("(2,(1,6)):(1,(6,2))",), "12:1"),
        (alg.coalesce, ("(4,2,8):(1,32,4)",), "(4,2,8):(1,32,4)"),
        (alg.composition, ("(6,2):(8,2)", "(4,3):(3,1)"), "((2,2),3):((24,2),8)"),
        (alg.composition, ("20:2", "(5,4):(4,1)"), "(5,4):(8,2)"),
        (alg.complement, ("4:2", 24), "(2,3):(1,8)"),
        (alg.complement, ("(2,2):(1,6)", 24), "(3,2):(2,12)"),
        (alg.logical_divide, ("(4,2,3):(2,1,8)", "4:2"), "((2,2),(2,3)):((4,1),(2,8))"),
        (alg.logical_product, ("(2,2):(4,1)", "6:1"), "((2,2),(2,3)):((4,1),(2,8))"),
        (alg.right_inverse, ("(4,2,8):(1,32,4)",), "(4,8,2):(1,8,4)"),
    ],
)
def test_cute_documented_examples(op, args, want):
    parsed = [L(a) if isinstance(a, str) else a for a in args]
    assert str(op(*parsed)) == want


def test_parse_print_and_call():
    layout = L("((64,4),1024):((1,65536),64)")
    assert str(layout) == "((64,4),1024):((1,65536),64)" and layout.rank == 2
    assert layout((70, 3)) == 6 * 1 + 1 * 65536 + 3 * 64  # 70 -> digits (6, 1)
    assert layout(70 + 256 * 3) == layout((70, 3))  # a 1-D index enters colexicographically
    assert (layout.size, layout.cosize) == (256 * 1024, 63 + 3 * 65536 + 1023 * 64 + 1)
    for bad in ("(4,2):(1)", "4:1:2", "(4,x):(1,2)", "(4,2:(1,2)"):
        with pytest.raises(LayoutConversionError):
            L(bad)


def test_uneven_strides_are_refused_by_name():
    with pytest.raises(LayoutConversionError, match="stride 3 does not divide"):
        alg.composition(L("(4,6):(1,5)"), L("4:3"))
    with pytest.raises(LayoutConversionError, match="shape 6 does not divide"):
        alg.composition(L("(4,6):(1,5)"), L("6:1"))
    with pytest.raises(LayoutConversionError, match="not a multiple"):
        alg.complement(L("(2,3):(1,3)"), 12)


# --- the laws, brute force on random small layouts -----------------------------------

SIZES = st.sampled_from([1, 2, 3, 4, 6, 8])


@st.composite
def layouts(draw, max_leaves=3):
    n = draw(st.integers(1, max_leaves))
    return CuteLayout(
        tuple(draw(SIZES) for _ in range(n)), tuple(draw(st.integers(0, 24)) for _ in range(n))
    )


@st.composite
def injective(draw):
    """A random injective layout: a permutation of the modes of a compact one, with gaps."""
    sizes = draw(st.lists(SIZES.filter(lambda n: n > 1), min_size=1, max_size=3))
    gaps = draw(st.lists(st.sampled_from([1, 2]), min_size=len(sizes), max_size=len(sizes)))
    strides, span = [], 1
    for n, g in zip(sizes, gaps, strict=True):
        strides.append(span * g)
        span *= n * g
    order = draw(st.permutations(range(len(sizes))))
    return CuteLayout(tuple(sizes[i] for i in order), tuple(strides[i] for i in order))


@settings(max_examples=200)
@given(layouts(), layouts())
def test_composition_is_function_composition(a, b):
    try:
        c = alg.composition(a, b)
    except LayoutConversionError:
        return
    fa = offsets(a)
    # Past size(A), A's last mode extends without end (CuTe's convention), here checked
    # where A has no size-1 leaf (coalescing one away changes that extension).
    extends = all(n > 1 for n, _ in a.leaves)
    for i, bi in enumerate(offsets(b)):
        if bi < a.size:
            assert offsets(c)[i] == fa[bi]
        elif extends:
            assert offsets(c)[i] == _extended(a, bi)
    assert c.size == b.size


def _extended(layout, i):
    *inner, (_, d) = layout.leaves
    off = 0
    for n, s in inner:
        off += (i % n) * s
        i //= n
    return off + i * d


@settings(max_examples=100)
@given(layouts())
def test_coalesce_keeps_the_function(a):
    c = alg.coalesce(a)
    assert offsets(c) == offsets(a) and len(c.leaves) <= len(a.leaves)


@settings(max_examples=100)
@given(injective(), st.integers(1, 4))
def test_complement_completes_an_injective_layout(a, reps):
    m = a.cosize * reps
    full = sj.CuteLayout(
        (a.shape, alg.complement(a, m).shape), (a.stride, alg.complement(a, m).stride)
    )
    image = offsets(full)
    assert len(set(image)) == len(image)  # injective
    assert sorted(image)[:m] == list(range(m))  # covers [0, M)


@settings(max_examples=100)
@given(injective(), injective())
def test_divide_and_product_are_their_definitions(a, b):
    try:
        div = alg.logical_divide(a, b)
        comp = alg.complement(b, a.size)
    except LayoutConversionError:
        return
    tiler = offsets(alg.make_layout(b, comp))
    fa = offsets(a)
    assert offsets(div) == [fa[t] if t < a.size else _extended(a, t) for t in tiler]
    try:
        prod = alg.logical_product(a, b)
    except LayoutConversionError:
        return
    assert offsets(prod.mode(0)) == fa
    assert len(set(offsets(prod))) == prod.size  # A repeated without overlap


@settings(max_examples=100)
@given(injective())
def test_right_inverse_inverts(a):
    r = alg.right_inverse(a)
    fa = offsets(a)
    assert [fa[j] for j in offsets(r)] == list(range(r.size))


# --- item 4: torch-spyre's element arrangements (golden) -------------------------------

# Written out by hand from the CuTe maps in issue 26: runs of 4 alternate between the two
# fp32 sticks of a 64-element group, and back.
DL16_TO_FP32 = [
    *(p for k in range(8) for p in (*range(4 * k, 4 * k + 4), *range(32 + 4 * k, 36 + 4 * k)))
]
FP32_TO_DL16 = [i + 8 * j + 4 * k for k in range(2) for j in range(8) for i in range(4)]


def test_arrangement_maps_are_the_golden_ones():
    dl = ElementArrangement.DL16_TO_FP32
    assert str(dl.cute) == "(4,2,8):(1,32,4)"
    assert str(ElementArrangement.FP32_TO_DL16.cute) == "(4,8,2):(1,8,4)"
    assert list(dl.positions) == DL16_TO_FP32
    assert list(dl.positions[:12]) == [0, 1, 2, 3, 32, 33, 34, 35, 4, 5, 6, 7]
    assert list(ElementArrangement.FP32_TO_DL16.positions) == FP32_TO_DL16
    assert list(ElementArrangement.STANDARD.positions) == list(range(64))
    for arr in ElementArrangement:
        assert sorted(arr.positions) == list(range(64))  # a permutation of the group


@pytest.mark.parametrize("arr", list(ElementArrangement))
def test_arrangement_inverse_law(arr):
    inv = arr.inverse
    assert inv.inverse is arr
    for a, b in ((arr, inv), (inv, arr)):
        assert str(alg.coalesce(alg.composition(a.cute, b.cute))) == "64:1"
        assert [a.positions[p] for p in b.positions] == list(range(64))
    assert offsets(alg.right_inverse(arr.cute)) == list(inv.positions)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
def test_arrangements_move_whole_groups_and_undo(dtype):
    x = np.arange(3 * 128).reshape(3, 128).astype(dtype)
    for arr in ElementArrangement:
        y = arr.apply(x)
        assert np.array_equal(arr.inverse.apply(y), x)
        assert np.array_equal(y[:, 64 + np.array(arr.positions)], x[:, 64:])
        assert np.array_equal(arr.apply(x.T, axis=0), y.T)
    with pytest.raises(sj.LayoutError, match="whole groups of 64"):
        ElementArrangement.DL16_TO_FP32.apply(np.zeros(96))


def test_no_two_arrangements_agree():
    maps = [a.positions for a in ElementArrangement]
    assert all(p != q for p, q in itertools.combinations(maps, 2))
