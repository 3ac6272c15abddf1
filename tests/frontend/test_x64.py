"""x64 mode (``jax_enable_x64``): int64 held as int32 on the device, float64 refused or
computed in float32 on request (spyrejax.frontend._x64). Each test turns x64 on with
``jax.enable_x64`` for its own body only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj

X64 = jax.enable_x64(True)


def _programs():
    """Programs whose 64-bit values under x64 come from JAX itself, not the user."""
    return {
        "argmax": lambda x: jnp.argmax(x, axis=1),
        "one_hot": lambda x: jax.nn.one_hot(jnp.argmax(x, 1), 8, dtype=jnp.float32) * x,
        "arange": lambda x: x + jnp.arange(8, dtype=jnp.float32),
        "int_arange": lambda x: jnp.arange(8) * 3 + jnp.argmin(x, axis=0),
        "python_int": lambda x: (x * 3, jnp.sum(x > 0, axis=1)),
    }


@pytest.mark.parametrize("name", sorted(_programs()))
def test_programs_under_x64_give_jax_jits_values_and_dtypes(name):
    f = _programs()[name]
    x = rand((4, 8), jnp.float32)
    with X64:
        got, want = sj.jit(f)(x), jax.jit(f)(x)
        got = jax.tree.map(sj.to_host, got)
        assert [g.dtype for g in jax.tree.leaves(got)] == [w.dtype for w in jax.tree.leaves(want)]
        assert_close(got, want, ops=2, scale=8)


def test_random_normal_under_x64_equals_jax_jit():
    f = lambda k: jax.random.normal(k, (4, 8), jnp.float32)  # noqa: E731
    with X64:
        key = jax.random.key(0)
        got, want = sj.to_host(sj.jit(f)(key)), jax.jit(f)(key)
        assert got.dtype == want.dtype == jnp.float32
        assert_close(got, want, ops=8)


def test_int64_arguments_are_held_as_int32_and_checked_at_the_transfer():
    f = lambda i: i * 2 + 1  # noqa: E731
    with X64:
        i = np.arange(6, dtype=np.int64) - 3
        got = sj.jit(f)(i)
        assert got.dtype == jnp.int32  # on the device
        assert sj.to_host(got).dtype == jnp.int64  # returned with jax.jit's dtype
        np.testing.assert_array_equal(sj.to_host(got), jax.jit(f)(i))
        with pytest.raises(sj.LayoutError, match=r"args\[0\] \(parameter 'i'\).*2199023255552"):
            sj.jit(f)(np.array([1, 2**41]))
        with pytest.raises(sj.LayoutError, match=r"args\[0\].*Python int 4294967296"):
            sj.jit(f)(2**32)
        # to_device holds it the same way, and the dtype travels with the array.
        a = sj.to_device(i)
        assert a.dtype == jnp.int32 and sj.to_host(a).dtype == jnp.int64
        np.testing.assert_array_equal(sj.to_host(sj.jit(f)(a)), jax.jit(f)(i))
        with pytest.raises(sj.LayoutError, match=r"to_device's array.*-4294967296"):
            sj.to_device(np.array([-(2**32)]))


def test_float64_is_refused_naming_it_or_computed_in_float32_on_request():
    x = rand((4, 8), jnp.float32)
    with X64:
        widened = lambda x: x.astype(jnp.float64) + jnp.arange(8.0)  # noqa: E731
        with pytest.raises(sj.SpyreUnsupportedError, match=r"at .*test_x64.py.*float64"):
            sj.jit(widened)(x)
        with pytest.raises(sj.LayoutError, match=r"args\[0\] \(parameter 'x'\) is float64"):
            sj.jit(lambda x: x * 2)(np.ones((2, 3)))
        with pytest.raises(sj.LayoutError, match=r"float64 .*astype\(np.float32\).*float32'\)"):
            sj.to_device(np.ones((2, 3)))  # the fix, as for an argument
        with sj.float64_mode("float32"):
            assert sj.to_device(np.ones((2, 3))).dtype == jnp.float32
            got = sj.to_host(sj.jit(widened)(x))
            assert got.dtype == jnp.float32
            assert_close(got, jax.jit(widened)(x).astype(jnp.float32), scale=8)
            got = sj.to_host(sj.jit(lambda x: x * 2)(np.ones((2, 3))))
            np.testing.assert_array_equal(got, np.full((2, 3), 2, np.float32))


def test_explain_stages_and_filter_jit_under_x64():
    x = rand((4, 8), jnp.float32)
    f = lambda x: jnp.argmax(x, axis=1)  # noqa: E731
    with X64:
        assert "argmax" in {o.prim for o in sj.explain(f, x).nodes}
        assert "i32[4]" in sj.jit(f).lower(x).as_text()
        # Compiled ahead of time, it takes the same 64-bit arguments (its results: int32).
        compiled = sj.jit(lambda i: i * 2).lower(np.arange(4)).compile()
        np.testing.assert_array_equal(sj.to_host(compiled(np.arange(4))), np.arange(4) * 2)
        with pytest.raises(sj.LayoutError, match=r"leaf 0 .*4294967296"):
            compiled(np.array([0, 1, 2, 2**32]))
        got = sj.to_host(sj.filter_jit(f)(x))
        assert got.dtype == jnp.int64
        np.testing.assert_array_equal(got, jax.jit(f)(x))
