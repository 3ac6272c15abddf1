"""Writes in place per core (issue 26): ``Place`` and ``Assemble`` under ``emulate="cores"``.

On the card a piece written into a window of a larger buffer is its producer's stores:
each core writes its box of the piece into its window (SuperDSC front/back gaps). Under
``emulate="cores"`` ``Place`` runs so, and ``Assemble`` (the destination made of its
pieces) per core too, each divided as the op that produced its operand; the check mode
compares them per core with their whole-image kernels. ``SliceView`` moves nothing and
stores nothing: it stays whole (its readers' loads carry the window's gaps).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit, rand
from oracles import same_bits

import spyrejax as sj
from spyrejax.device import divide_op
from spyrejax.lowering.program._cores import checking_cores, dividing, injecting

F16 = np.float16
WRITES = ("place", "assemble")


def _concat(a, b):
    return jnp.concatenate([a * 2 + 1, jnp.tanh(b)], axis=0)


def _pad(a):
    return jnp.pad(jnp.tanh(a), ((3, 5), (0, 0)), constant_values=1.5)


def _update(cache, k):
    return jax.lax.dynamic_update_slice(cache, k * 2, (0, 0, 8, 0))


def _rotate_half(x):
    d = x.shape[-1] // 2
    return jnp.concatenate([-x[..., d:], x[..., :d]], -1) * 0.5 + x


CASES = {
    "concatenate": (_concat, [(128, 64), (64, 64)], {"place": 2, "assemble": 1}),
    "pad": (_pad, [(32, 64)], {"place": 1}),
    "update": (_update, [(1, 2, 64, 64), (1, 2, 8, 64)], {"place": 1, "assemble": 1}),
    "rotate_half": (_rotate_half, [(16, 2, 128)], {"place": 2, "assemble": 1}),
}


def _run_both(f, args, **jit):
    """The default and the cores mode's results (on the host), and the per-core writes."""
    seen = []

    def watched(space, machine, hint):
        div = divide_op(space, machine, hint)
        seen.append(space.opfunc)
        return div

    want = sj.to_host(sj.jit(f, **jit)(*args))
    with dividing(watched):
        got = sj.to_host(sj.jit(f, emulate="cores", **jit)(*args))
    return got, want, seen


@pytest.mark.parametrize("name", list(CASES))
def test_writes_in_place_run_per_core_and_give_the_default_bits(name):
    f, shapes, writes = CASES[name]
    args = [rand(s, F16, seed=k) for k, s in enumerate(shapes)]
    jit = {"donate_argnums": 0} if name == "update" else {}
    assert sj.explain(sj.jit(f, **jit), *args).copy_cost == 0 or name == "pad"
    got, want, seen = _run_both(f, args, **jit)
    assert same_bits(got, want)
    assert {w: seen.count(w) for w in WRITES if seen.count(w)} == writes
    assert_matches_jax_jit(f, *args, exact=name != "rotate_half", ops=3)


@pytest.mark.parametrize("name", list(CASES))
def test_the_check_compares_every_write_per_core(name):
    f, shapes, writes = CASES[name]
    args = [rand(s, jnp.float32, seed=k) for k, s in enumerate(shapes)]
    jit = {"donate_argnums": 0} if name == "update" else {}
    with checking_cores() as check:
        sj.to_host(sj.jit(f, **jit)(*args))
        jax.effects_barrier()
    assert check.take() == [] and not check.fallbacks
    assert {w: check.checked[w] for w in WRITES if check.checked[w]} == writes
    assert "slice_view" not in check.checked  # moves nothing, stores nothing: whole


def test_the_check_sees_a_core_writing_its_box_into_the_wrong_window_place():
    def swap_cores(prim, div, vals):  # the writes' cores 0 and 1 trade their data
        if div.space.opfunc not in WRITES:
            return vals
        return [v.at[0].set(v[1]).at[1].set(v[0]) for v in vals]

    args = rand((128, 64), jnp.float32), rand((64, 64), jnp.float32, seed=1)
    with checking_cores() as check, injecting(swap_cores):
        sj.to_host(sj.jit(_concat)(*args))
        jax.effects_barrier()
    found = {m.op for m in check.take()}
    assert found == set(WRITES)
