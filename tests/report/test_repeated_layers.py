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

import spyrejax as sj
from spyrejax._counts import counting
from spyrejax.lowering.program._device import spaces_apart

STEPS = (
    "plan.search",
    "device.divide",
    "device.cost",
    "device.streams",
    "device.same_slices",
    "space.elementwise",
)


def _layers(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w) + x
    return x


def _searches(layers: int) -> tuple[Counter, float]:
    """How often the planner searches, the device model divides, costs and streams an
    op, and an elementwise op's space is made; and the predicted time."""
    x = jax.ShapeDtypeStruct((16, 96), jnp.float32)
    ws = [jax.ShapeDtypeStruct((96, 96), jnp.float32)] * layers
    with spaces_apart(), counting() as counts:  # not the spaces kept across programs
        report = sj.explain(_layers, x, ws)
    return Counter({k: counts[k] for k in STEPS}), report.time_s


def test_repeated_layers_search_once():
    few, few_s = _searches(3)
    many, many_s = _searches(6)
    assert all(few[k] > 0 for k in STEPS), few
    assert many == few
    # Each layer still runs: the deeper model's predicted time grows with its layers.
    assert many_s > 1.5 * few_s
