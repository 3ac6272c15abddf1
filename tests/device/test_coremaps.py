"""The per-core maps built factored agree with the whole arrays they stand for."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.device import _coremaps as m
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


def _divisions():
    """Real divisions: a padded matmul, a pointwise op and a reduction, and a small batch."""
    x = jax.ShapeDtypeStruct((100, 70), jnp.float32)
    w = jax.ShapeDtypeStruct((70, 130), jnp.float32)
    h = jax.ShapeDtypeStruct((3, 40, 72), jnp.float16)
    programs = [
        sj.explain(lambda x, w: jnp.tanh(x @ w).sum(0), x, w),
        sj.explain(lambda h: (h * 2).sum(1), h),
    ]
    return [op.division for r in programs for op in r.device.ops]


@pytest.mark.parametrize("div", _divisions(), ids=lambda d: d.space.opfunc)
def test_the_maps_built_factored_are_the_whole_arrays_of_the_descriptors(div):
    last = len(div.space.operands) - 1
    for k in range(last):
        got = m.lx_map(div, k)
        assert (_whole(got) == m.lx_sources(div, k)).all()
        idx = m.lx_index(div, k).reshape(-1)
        assert (_whole(m.load_sources(div, k)) == m.lx_sources(div, k)[:, idx]).all()
    cores, shape = div.cores_used, m.local_shape(div, last)
    points, idx = math.prod(shape), m.lx_index(div, last).reshape(-1)
    ok = m.valid_points(div, m._walked(div, last), shape)
    ok = np.ones((cores, points), bool) if ok is None else ok.reshape(cores, points)
    held = np.full((cores, math.prod(div.box_shape(last, 0))), -1, np.int64)
    rows, cols = np.nonzero(ok)
    held[rows, idx[cols]] = rows * points + cols
    runs = m._runs(div, last, load=False)
    for (dst, got), (d, ddr, inside) in zip(m.store_runs(div, last), runs, strict=True):
        want = ddr[:, None] + m._affine(d.size, d.stride_dst)[None, :]
        want = want if inside is None else np.where(inside, want, -1)
        assert (_whole(dst) == want).all()
        assert (_whole(got) == held[:, d.offset_src + m._affine(d.size, d.stride_src)]).all()
