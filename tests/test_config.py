"""The test configuration itself: what makes a red run reproducible."""

import os

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
