"""The per-core maps built factored agree with the whole arrays they stand for."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spyrejax.device._coremaps import CoreMap


def _whole(m: CoreMap) -> np.ndarray:
    if m.full is not None:
        return m.full
    return np.where(m.cols[None, :] < 0, -1, m.rows[:, None] + m.cols[None, :])


def _indices(s) -> np.ndarray:
    """The flat indices a :class:`Strided` nest names, in its order (brute force)."""
    idx = np.full([n for n, _ in s.dims], s.offset, np.int64)
    for k, (n, t) in enumerate(s.dims):
        idx = idx + np.arange(n).reshape([-1 if j == k else 1 for j in range(idx.ndim)]) * t
    return idx.reshape(-1)


@st.composite
def _factors(draw):
    cores = draw(st.integers(1, 5))
    points = draw(st.integers(1, 12))
    if draw(st.booleans()):  # a strided nest: blocks of a row-major image
        step = draw(st.sampled_from([1, 2, 3]))
        cols = np.arange(points, dtype=np.int64) * step
        rows = np.arange(cores, dtype=np.int64) * draw(st.sampled_from([0, points * step, 64]))
    else:
        cols = np.asarray(draw(st.lists(st.integers(-1, 40), min_size=points, max_size=points)))
        rows = np.asarray(
            [0, *draw(st.lists(st.integers(0, 60), min_size=cores - 1, max_size=cores - 1))]
        )
    return rows.astype(np.int64), cols.astype(np.int64)


@given(_factors())
def test_a_factored_map_is_the_map_of_its_whole_array(factors):
    rows, cols = factors
    whole = np.where(cols[None, :] < 0, -1, rows[:, None] + cols[None, :])
    got, want = CoreMap.factored(rows, cols), CoreMap.of(whole)
    assert (_whole(got) == whole).all()
    assert (got.complete, got.unique, got.ascending) == (want.complete, want.unique, want.ascending)
    assert (got.strided is None) == (want.strided is None)
    if got.strided is not None:
        assert (_indices(got.strided) == whole.reshape(-1)).all()
