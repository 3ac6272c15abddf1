"""Hypothesis strategies shared by the layout and DMA tests."""

import math

import hypothesis
import numpy as np
from hypothesis import strategies as st

import spyrejax as sj

MAX_ELEMENTS = 40_000


@st.composite
def shapes(draw, min_rank=0, max_rank=5, max_size=300, max_elements=MAX_ELEMENTS):
    """Ranks 0-5, sizes 1-300, total elements capped so examples stay fast."""
    rank = draw(st.integers(min_rank, max_rank))
    sizes = draw(st.lists(st.integers(1, max_size), min_size=rank, max_size=rank))
    while math.prod(sizes) > max_elements:
        k = int(np.argmax(sizes))
        sizes[k] = max(1, sizes[k] // 2)
    return tuple(sizes)


@st.composite
def dim_orders(draw, rank):
    """A random dim order, dense or (with a trailing -1) sparse; None means default."""
    if draw(st.booleans()) and rank > 0:
        return None
    order = draw(st.permutations(list(range(rank))))
    if draw(st.booleans()):
        order = [*order, -1]
    return order


@st.composite
def shapes_and_orders(draw, **shape_args):
    """A host shape (see :func:`shapes`) and a dim order for it (None: the default).

    One strategy, rather than a ``st.data()`` draw, so failing cases can be pinned with
    ``@example((shape, order), ...)``.
    """
    shape = draw(shapes(**shape_args))
    return shape, draw(dim_orders(len(shape)))


dtypes = st.sampled_from(sj.SUPPORTED_DTYPES)


@st.composite
def tiled_layouts(draw, dtype=np.float16, max_elements=3000, max_device_elements=150_000):
    """A host shape and an explicit layout for it that torch-spyre accepts.

    Built from spec section 4's rule, independently of spyrejax: each host dim of size
    > 1 is split over device dims whose steps (strides over the host dim's) decrease to
    1 and need not divide one another (padded sticks inside larger tiles), each long
    enough for the quotients it gets, sometimes with spare padding. The stick (last
    device dim, ``eps`` long) walks a host dim by step 1, or is synthetic (-1), or ties
    with another device dim's stride (a sparse layout with real strides). Some layouts
    also get a device dim tied with another, size-1 dims and a broadcast dim; the
    device dims other than the stick come in any order.
    """
    eps = sj.format_for_dtype(dtype).elems_per_stick()
    shape = draw(shapes(min_rank=1, max_rank=3, max_size=200, max_elements=max_elements))
    strides = [int(np.prod(shape[d + 1 :], dtype=np.int64)) for d in range(len(shape))]
    live = [d for d, n in enumerate(shape) if n > 1]
    kind = draw(st.sampled_from(["dense", "synthetic", "tied"])) if live else "synthetic"
    stick_dim = draw(st.sampled_from(live)) if kind == "dense" else None
    # Often one host dim gets rows (step R) of sticks (step S) that do not divide them.
    rows = [d for d in live if shape[d] >= 4]
    padded_rows = draw(st.sampled_from(rows)) if rows and draw(st.booleans()) else None
    dims, stick = [], None
    for d in live:
        n = shape[d]
        steps = draw(st.lists(st.integers(2, max(2, n - 1)), max_size=3)) if n > 2 else []
        if d == padded_rows:
            row = draw(st.integers(3, n - 1))
            stick_step = draw(st.integers(2, row - 1).filter(lambda s, row=row: row % s))
            steps += [row, stick_step]
        steps = sorted(set(steps), reverse=True)
        if d == stick_dim and (steps[-1] if steps else n) > eps:
            steps.append(draw(st.integers(2, eps)))  # a stick must hold a whole row
        span = n
        for step in [*steps, 1]:
            need = -(-span // step)
            if d == stick_dim and step == 1:
                stick = (eps, strides[d])
            else:
                dims.append((need + draw(st.integers(0, 1)), step * strides[d]))
            span = min(span, step)
    walking = [dm for dm in dims if dm[0] > 1]
    if kind == "tied" and walking:
        stick = (eps, draw(st.sampled_from(walking))[1])
    if stick is None:
        stick = (eps, -1)
    if walking and draw(st.booleans()):  # another device dim with the same stride
        dims.append(draw(st.sampled_from(walking)))
    if draw(st.booleans()):
        dims.append((draw(st.integers(2, 3)), 0))  # broadcast
    dims = list(draw(st.permutations(dims)))
    lead = draw(st.lists(st.sampled_from([-1, 0, *strides]), max_size=2))
    dims = [(1, s) for s in lead] + dims + [stick]
    sizes = [n for n, _ in dims]
    hypothesis.assume(math.prod(sizes) <= max_device_elements)
    return shape, sj.SpyreTensorLayout.from_stride_map(sizes, [s for _, s in dims], dtype)


#: Seeds of the NumPy generators that draw array contents (``oracles.random_bits``).
seeds = st.integers(0, 2**32 - 1)
