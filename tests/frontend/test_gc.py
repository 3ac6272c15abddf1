"""Planning runs without automatic collections; the collector stays the user's."""

import gc

import jax
import jax.numpy as jnp
import pytest

import spyrejax as sj
from spyrejax.lowering._registry import watching


def _collects() -> bool:
    """Whether an automatic collection can run (the collector on, its threshold in reach)."""
    return gc.isenabled() and gc.get_threshold()[0] < 1_000_000


@pytest.fixture
def lowering_sees():
    """Whether collections could run each time a rule lowered ``mul`` (plan and trace)."""
    seen = []

    def watch(node, args, mode):
        if node.prim == "mul":
            seen.append(_collects())

    with watching(watch):
        yield seen


def test_planning_collects_nothing_and_the_collector_stays_on(lowering_sees):
    seen = []

    def f(x):
        seen.append((gc.isenabled(), _collects()))
        return x * 2

    x = jnp.ones((4, 64), jnp.float32)
    threshold = gc.get_threshold()
    sj.jit(f)(x)
    sj.explain(f, jax.ShapeDtypeStruct((8, 64), jnp.float32))
    assert seen == [(True, False), (True, False)]  # on, no collection while tracing
    assert lowering_sees and not any(lowering_sees)
    assert gc.isenabled() and gc.get_threshold() == threshold


def test_the_collector_is_restored_after_an_error_and_left_off_if_it_was():
    def bad(x):
        raise ValueError("in the user's function")

    threshold = gc.get_threshold()
    with pytest.raises(ValueError, match="user's function"):
        sj.jit(bad)(jnp.ones(3))
    assert gc.isenabled() and gc.get_threshold() == threshold
    gc.disable()
    try:
        sj.jit(lambda x: x + 1)(jnp.ones(3))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_users_own_gc_calls_while_traced_stay():
    threshold = gc.get_threshold()

    def f(x):
        gc.disable()  # the user's own choices, made while spyrejax traces
        gc.set_threshold(500, *threshold[1:])
        return x * 3

    try:
        sj.jit(f)(jnp.ones((4, 64), jnp.float32))
        assert not gc.isenabled() and gc.get_threshold() == (500, *threshold[1:])
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
