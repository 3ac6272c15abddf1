"""A model's repeated layers are searched once: ``explain`` grows linearly with depth.

The planner searches a node's options once per signature (its primitive and parameters,
and the types its inputs are available in with their relative costs), and the device
model divides an op once per geometry: identical layers after the first reuse both
(issue 24: ``explain`` of a deep training step). Counting the searches pins that.
"""

from collections import Counter

import jax
import jax.numpy as jnp
import pytest

import spyrejax as sj
from spyrejax.device import _plan
from spyrejax.lowering._planner import _Planner


def _layers(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w) + x
    return x


def _searches(monkeypatch: pytest.MonkeyPatch, layers: int) -> tuple[Counter, float]:
    """How often the planner searches and the device model divides, and the time."""
    counts: Counter = Counter()
    candidates, divide_op = _Planner._candidates, _plan.divide_op

    def counted_candidates(self, u, r):
        counts["candidates"] += 1
        return candidates(self, u, r)

    def counted_divide(*args, **kwargs):
        counts["divide"] += 1
        return divide_op(*args, **kwargs)

    monkeypatch.setattr(_Planner, "_candidates", counted_candidates)
    monkeypatch.setattr(_plan, "divide_op", counted_divide)
    x = jax.ShapeDtypeStruct((16, 96), jnp.float32)
    ws = [jax.ShapeDtypeStruct((96, 96), jnp.float32)] * layers
    report = sj.explain(_layers, x, ws)
    monkeypatch.undo()
    return counts, report.time_s


def test_repeated_layers_search_once(monkeypatch):
    few, few_s = _searches(monkeypatch, 3)
    many, many_s = _searches(monkeypatch, 6)
    assert few["candidates"] > 0 and few["divide"] > 0
    assert many == few
    # Each layer still runs: the deeper model's predicted time grows with its layers.
    assert many_s > 1.5 * few_s
