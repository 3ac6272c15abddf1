"""Tracing and planning run with the cyclic garbage collector paused, then restore it."""

import gc

import jax
import jax.numpy as jnp
import pytest

import spyrejax as sj


def test_the_first_call_and_explain_plan_with_the_collector_paused():
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x * 2

    x = jnp.ones((4, 64), jnp.float32)
    assert gc.isenabled()
    sj.jit(f)(x)
    sj.explain(f, jax.ShapeDtypeStruct((8, 64), jnp.float32))
    assert seen == [False, False] and gc.isenabled()


def test_the_collector_is_restored_after_an_error_and_left_off_if_it_was():
    def bad(x):
        raise ValueError("in the user's function")

    with pytest.raises(ValueError, match="user's function"):
        sj.jit(bad)(jnp.ones(3))
    assert gc.isenabled()
    gc.disable()
    try:
        sj.jit(lambda x: x + 1)(jnp.ones(3))
        assert not gc.isenabled()
    finally:
        gc.enable()
