"""Hypothesis strategies shared by the layout and DMA tests."""

import math

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
#: Seeds of the NumPy generators that draw array contents (``oracles.random_bits``).
seeds = st.integers(0, 2**32 - 1)
