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
from spyrejax import primitives as sp
from spyrejax._counts import counting
from spyrejax.lowering._chosen import searches_shared
from spyrejax.lowering._node_key import node_key
from spyrejax.lowering._registry import watching
from spyrejax.lowering._spaces import spaces_apart
from spyrejax.lowering.program._replay import replaying

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


def _blocks(x, ws):
    for w in ws:
        h = jax.nn.softmax(x @ w, axis=-1)
        x = x + jax.nn.gelu(h) * jnp.mean(x, axis=-1, keepdims=True)
    return x.sum(axis=0), x[:4]


def _explained(fun, layers: int, replay: bool, emulate=None) -> tuple[sj.Report, int]:
    """The report of ``fun`` on ``layers`` layers (under ``sj.jit(..., emulate=emulate)``),
    and how many node runs the record's trace lowered by their rules (replayed ones are
    not)."""
    x = jax.ShapeDtypeStruct((16, 96), jnp.float32)
    ws = [jax.ShapeDtypeStruct((96, 96), jnp.float32)] * layers
    lowered = []

    def watch(node, args, mode):
        if sp.abstract_calls() is None:  # the trace, not the planner's evaluations
            lowered.append(node)

    def fresh(x, ws):  # not the lowering an earlier explain of ``fun`` cached
        return fun(x, ws)

    with replaying(replay), watching(watch):
        report = sj.explain(sj.jit(fresh, emulate=emulate), x, ws)
    return report, len(lowered)


def test_repeated_layers_lowered_once_in_the_trace():
    """The record's trace lowers a repeated node run by its rule once, then binds what it
    bound again (``_replay``): deeper models lower no more, and the report (jaxpr, record,
    device model) is the one lowering each gives."""
    _, few = _explained(_blocks, 3, True)
    _, many = _explained(_blocks, 6, True)
    assert 0 < many == few
    replayed, _ = _explained(_blocks, 3, True)
    lowered, each = _explained(_blocks, 3, False)
    assert each > few
    assert replayed.jaxpr == lowered.jaxpr
    assert str(replayed) == str(lowered)
    assert replayed.details() == lowered.details()
    assert [repr(op) for op in replayed.ops] == [repr(op) for op in lowered.ops]
    assert replayed.time_s == lowered.time_s


def test_no_replay_while_the_cores_executor_runs():
    """Under ``emulate="cores"`` the record's trace runs the per-core executor: every node
    run is lowered by its rule, replays on or off, and the report is the default mode's."""
    with counting() as counts:
        cores, each = _explained(_blocks, 2, True, emulate="cores")
    assert counts["interpret.replay"] == 0
    assert each == _explained(_blocks, 2, False, emulate="cores")[1]
    default, _ = _explained(_blocks, 2, True)
    assert [repr(op) for op in cores.ops] == [repr(op) for op in default.ops]
    assert cores.time_s == default.time_s


def _scanned(x, ws):
    def loss(ws):
        def layer(h, w):
            return jnp.tanh(h @ w) + jax.nn.softmax(h, axis=-1), None

        return jax.lax.scan(layer, x, ws)[0].sum()

    return jax.grad(loss)(ws)


def _scan_explained(shared: bool) -> tuple[sj.Report, list]:
    """The report of a scanned model's gradient (a scan forward, one backward), and the
    (node, mode, input types) of every planner evaluation made by a rule."""
    x = jax.ShapeDtypeStruct((16, 96), jnp.float32)
    ws = jax.ShapeDtypeStruct((4, 96, 96), jnp.float32)
    evaluated = []

    def watch(node, args, mode):
        if sp.abstract_calls() is not None:  # the planner's, not the trace's
            types = tuple(getattr(a, "type", None) for a in args)  # a Spyre array's
            evaluated.append((node_key(node), mode, types))

    def fresh(x, ws):  # not the lowering an earlier explain cached
        return _scanned(x, ws)

    with searches_shared(shared), watching(watch):
        report = sj.explain(fresh, x, ws)
    return report, evaluated


def test_loop_bodies_share_the_planner_searches():
    """A scan's body is planned again for each carry type its rule tries: its planners
    share one evaluation cache, so a node is lowered once per mode and input types, and
    the report is the one planners with caches of their own give."""
    shared, once = _scan_explained(True)
    apart, each = _scan_explained(False)
    assert len(once) == len(set(once)) > 0
    assert len(each) > len(once)
    assert shared.jaxpr == apart.jaxpr
    assert str(shared) == str(apart)
    assert shared.details() == apart.details()
    assert [repr(op) for op in shared.ops] == [repr(op) for op in apart.ops]
    assert shared.time_s == apart.time_s
