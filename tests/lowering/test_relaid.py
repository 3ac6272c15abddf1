"""Reductions of a restickified value run on the value's source image (``_relaid``)."""

import re

import jax
import jax.numpy as jnp
import numpy as np

import spyrejax as sj
from spyrejax.lowering.program import _interpret
from spyrejax.lowering.program._cores import core_check
from spyrejax.lowering.program._relaid import relaid_chains
from tests.helpers import assert_close, rand

SHAPE = (64, 40)  # shorter than a group: the planner restickifies x onto its rows for the sums


def _layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def _args():
    shapes = (SHAPE, SHAPE[1:], SHAPE[1:])
    return [rand(s, jnp.bfloat16, np.random.default_rng(i)) for i, s in enumerate(shapes)]


def _wide_entry_arrays(hlo: str) -> list[str]:
    """The entry computation's float32 arrays of at least ``x``'s size (written whole)."""
    entry = hlo[hlo.index("\nENTRY") :]
    big = []
    for dims in re.findall(r"= f32\[([\d,]+)\]", entry):
        if np.prod([int(d) for d in dims.split(",")]) >= np.prod(SHAPE):
            big.append(dims)
    return big


def test_layer_norm_sums_read_the_source_image():
    args = [sj.to_device(a) for a in _args()]
    lowered = sj.jit(_layer_norm).lower(*args)
    chains = relaid_chains(lowered.graph, lowered.plan, set())
    # mean(x) and mean((x - m) ** 2): both read x, restickified onto its rows by the plan
    assert len(chains) == 2
    x = lowered.graph.inputs[0]
    assert {c.x for c in chains.values()} == {x}
    assert all(c.source.stick_dim == 1 and c.out.layout.is_arranged for c in chains.values())
    assert sorted(len(c.then) for c in chains.values()) == [0, 1]  # the square: a map
    got = sj.to_host(sj.jit(_layer_norm)(*args))
    assert_close(got, jax.jit(_layer_norm)(*_args()), reduce_len=SHAPE[1], ops=8)
    if core_check() is None:  # the program's text, not the per-core check's
        assert _wide_entry_arrays(lowered.compile().as_text()) == []


def test_the_planned_program_gives_the_same_values_within_rounding(monkeypatch):
    args = [sj.to_device(a) for a in _args()]
    fused = sj.to_host(sj.jit(_layer_norm)(*args))
    grad = jax.grad(lambda *a: jnp.sum(_layer_norm(*a).astype(jnp.float32) ** 2))
    fused_grad = sj.to_host(sj.jit(grad)(*args))
    monkeypatch.setattr(_interpret, "relaid_chains", lambda *a: {})
    planned = sj.jit(lambda *a: _layer_norm(*a))  # a new function: no shared lowering
    assert_close(fused, sj.to_host(planned(*args)), reduce_len=SHAPE[1], ops=8)
    plain_grad = sj.to_host(sj.jit(lambda *a: grad(*a))(*args))
    assert_close(fused_grad, plain_grad, reduce_len=SHAPE[1], ops=8)
    if core_check() is None:  # op by op, XLA wrote the relaid value in float32
        assert _wide_entry_arrays(planned.lower(*args).compile().as_text())
