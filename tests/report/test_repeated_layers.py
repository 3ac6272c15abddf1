"""A model's repeated layers are searched once: ``explain`` grows linearly with depth.

The planner searches a node's options once per signature (its primitive and parameters,
and the types its inputs are available in with their relative costs), and the device
model divides an op once per geometry, and costs it (and finds its LX streams) once per
division, its iteration space taken once per primitive and types: identical layers after
the first reuse all of these (issue 24: ``explain`` of a deep training step). Counting
the evaluations pins that.
"""

from collections import Counter

import jax
import jax.numpy as jnp
import pytest

import spyrejax as sj
from spyrejax.device import _plan
from spyrejax.lowering._planner import _Planner
from spyrejax.lowering.program import _device
from spyrejax.primitives._elementwise import Elementwise


def _layers(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w) + x
    return x


def _searches(monkeypatch: pytest.MonkeyPatch, layers: int) -> tuple[Counter, float]:
    """How often the planner searches, the device model divides, costs and streams an
    op, and an elementwise op's space is made; and the predicted time."""
    counts: Counter = Counter()

    def counted(owner, name):
        function = getattr(owner, name)

        def run(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        monkeypatch.setattr(owner, name, run)

    counted(_Planner, "_candidates")
    counted(_plan, "divide_op")
    counted(_plan, "op_cost")
    counted(_plan, "_streams")
    counted(_plan, "_same_slices")
    counted(Elementwise, "space")
    monkeypatch.setattr(_device, "_SPACES", {})  # the spaces kept across programs
    x = jax.ShapeDtypeStruct((16, 96), jnp.float32)
    ws = [jax.ShapeDtypeStruct((96, 96), jnp.float32)] * layers
    report = sj.explain(_layers, x, ws)
    monkeypatch.undo()
    return counts, report.time_s


def test_repeated_layers_search_once(monkeypatch):
    few, few_s = _searches(monkeypatch, 3)
    many, many_s = _searches(monkeypatch, 6)
    assert all(
        few[k] > 0
        for k in ("_candidates", "divide_op", "op_cost", "_streams", "space", "_same_slices")
    )
    assert many == few
    # Each layer still runs: the deeper model's predicted time grows with its layers.
    assert many_s > 1.5 * few_s
