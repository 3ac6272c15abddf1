"""The test configuration itself: what makes a red run reproducible and strict."""

import os
import warnings

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci", reason="another profile")
def test_the_default_hypothesis_profile_draws_the_same_examples_every_run():
    assert settings().derandomize and settings().database is None
    drawn = []

    @given(st.integers(0, 2**32 - 1))
    def draw(n):
        drawn.append(n)

    draw()
    first = list(drawn)
    drawn.clear()
    draw()
    assert first == drawn and len(set(first)) > 1


def test_dtype_promotion_is_strict():
    assert jax.config.jax_numpy_dtype_promotion == "strict"
    with pytest.raises(jax.dtypes.TypePromotionError):
        jnp.ones(2, jnp.float16) + jnp.ones(2, jnp.float32)


def test_warnings_are_errors():
    with pytest.raises(UserWarning):
        warnings.warn("a warning", UserWarning, stacklevel=1)
