"""``jax.vmap`` and ``lax.scan`` over any dim of a Spyre array in any layout.

A mapped dim whose slices are not views of the image (not logical dim 0, or not the
outermost device dim) is restickified into a stacked layout first
(``primitives._mapping``): by each Spyre primitive's batch rule under a direct
``jax.vmap``, by ``lax.scan``'s lowering outside ``spyrejax.jit``, by the planner inside
it. Every path runs and matches ``jax.jit`` of the same program on the host values.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import spyrejax as sj
from spyrejax.primitives._mapping import mapped_type

SHAPE = (2, 3, 40)  # 40 float32: a partial last stick
X = rand(SHAPE)
LAYOUTS = {
    "default": {},
    "dim_order=[1, 0, 2]": {"dim_order": [1, 0, 2]},  # dim 0 not outermost, stick on 2
    "dim_order=[0, 2, 1]": {"dim_order": [0, 2, 1]},  # stuck on dim 1
    "dim_order=[2, 1, 0]": {"dim_order": [2, 1, 0]},  # stuck on dim 0
    "row_major": {"layout": sj.SpyreTensorLayout.row_major(SHAPE, np.float32)},
}


def _device(layout: str) -> sj.SpyreArray:
    kw = LAYOUTS[layout]
    return sj.to_device(X, kw.get("layout"), dim_order=kw.get("dim_order"))


def _ops(a):  # Spyre operators only: a direct vmap runs them as Spyre primitives
    return a * a - 2.0 * a


def _fn(a):  # any JAX: under spyrejax.jit
    return jnp.tanh(a) * 2.0 + a.sum(-1, keepdims=True)


def _loss(a):
    return jnp.sum(jnp.tanh(a) * a)


def _scanned(a):
    def body(c, r):
        c = c + r
        return c, c * 2.0

    return lax.scan(body, jnp.zeros(a.shape[1:], a.dtype), a)


def _stacked(a):  # lax.scan itself over the array (under a plain jax.jit)
    return lax.scan(lambda c, r: (c, r * 2.0 + 1.0), (), a, length=a.shape[0])[1]


# mode -> (the program on a Spyre array, the same on a host array, the longest sum)
MODES = {
    "vmap": (lambda ax: jax.vmap(_ops, in_axes=ax), lambda ax: jax.vmap(_ops, in_axes=ax), 1),
    "vmap_of_jit": (
        lambda ax: jax.vmap(sj.jit(_fn), in_axes=ax),
        lambda ax: jax.vmap(_fn, in_axes=ax),
        SHAPE[-1],
    ),
    "jit_of_vmap": (
        lambda ax: sj.jit(jax.vmap(_fn, in_axes=ax)),
        lambda ax: jax.vmap(_fn, in_axes=ax),
        SHAPE[-1],
    ),
    "vmap_of_scan": (
        lambda ax: jax.vmap(sj.jit(_scanned), in_axes=ax),
        lambda ax: jax.vmap(_scanned, in_axes=ax),
        max(SHAPE),
    ),
    "vmap_of_grad": (
        lambda ax: jax.vmap(jax.grad(sj.jit(_loss)), in_axes=ax),
        lambda ax: jax.vmap(jax.grad(_loss), in_axes=ax),
        1,
    ),
    "grad_of_vmap": (
        lambda ax: jax.grad(lambda a: sj.to_host(jax.vmap(sj.jit(_loss), in_axes=ax)(a)).sum()),
        lambda ax: jax.grad(lambda a: jax.vmap(_loss, in_axes=ax)(a).sum()),
        1,
    ),
    "scan": (lambda ax: jax.jit(_stacked), lambda ax: jax.jit(_stacked), 1),
}


def _check(layout: str, axis: int, mode: str) -> None:
    on_device, on_host, reduce_len = MODES[mode]
    if mode == "scan":
        axis = 0  # lax.scan maps dim 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no host fallback on the way
        got = on_device(axis)(_device(layout))
    want = jax.jit(on_host(axis))(X)
    got = jax.tree.map(lambda g: np.asarray(sj.to_host(g)), got)
    assert_close(got, want, reduce_len=reduce_len, ops=4, scale=max(SHAPE))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_path_maps_a_dim_that_is_not_outermost(mode):
    """Dim 1 of a default layout (dim 0 for a scan): neither is the outermost device dim."""
    _check("default", 1, mode)


@settings(max_examples=10, deadline=None)
@given(
    layout=st.sampled_from(sorted(LAYOUTS)),
    axis=st.integers(0, len(SHAPE) - 1),
    mode=st.sampled_from(sorted(MODES)),
)
def test_vmap_and_scan_map_any_dim_of_any_layout(layout, axis, mode):
    _check(layout, axis, mode)


def test_a_slice_that_is_a_view_moves_nothing():
    """Dim 0 outermost: the batch rules slice the image (no restickify in the jaxpr)."""
    a = _device("dim_order=[1, 0, 2]")
    moved = jax.make_jaxpr(jax.vmap(_ops, in_axes=0))(_device("default"))
    kept = jax.make_jaxpr(jax.vmap(_ops, in_axes=0))(a)
    assert "Restickify" in str(moved)
    assert "Restickify" not in str(kept)


def test_explain_shows_the_restickify_of_a_mapped_dim():
    """Under spyrejax.jit the planner moves what must move: the scan's stacked input."""
    report = sj.explain(jax.vmap(_scanned, in_axes=1), _device("default"))
    assert report.restickify_cost > 0
    scan = [r for r in report.restickifies if r.line and "_scanned" in r.line]
    assert any("stacked layout" in r.reason for r in scan)
    # the one other move returns the result in the default layout of its shape (issue 24)
    others = [r for r in report.restickifies if r not in scan]
    assert all(r.reason.startswith("returned in the default layout") for r in others)


def test_the_per_example_type_gives_back_the_mapped_array_type():
    """JAX batches traced functions (a jnp function's jit) over the array's own type."""
    t = jax.typeof(_device("default"))
    for axis in range(t.ndim):
        per_example = t.dec_rank(SHAPE[axis], axis)
        assert per_example == mapped_type(t, axis)
        assert per_example.inc_rank(SHAPE[axis], axis) == t
        assert per_example.shape == SHAPE[:axis] + SHAPE[axis + 1 :]
        assert per_example.to_tangent_aval().mapped_from is None
