"""A textbook equinox GPT trains with optax through spyrejax.jit, unchanged.

The model is written as equinox's documentation and examples write one (embeddings,
``eqx.nn.MultiheadAttention`` with a causal mask, ``jax.vmap`` over ``eqx.nn.Linear``
and ``eqx.nn.LayerNorm``, a GELU MLP, integer-label cross-entropy, ``optax.adamw``),
and its training step is handed to ``spyrejax.jit`` as it is handed to ``jax.jit``.
Both trajectories run side by side; the losses must agree at every step.
"""

from collections import Counter

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import assert_close
from models import GPT, gpt_setup, gpt_train_step, loss_fn

import spyrejax as sj
from spyrejax import primitives as sp
from spyrejax.lowering._graph import Scalar
from spyrejax.lowering._registry import watching
from spyrejax.primitives._stick import default_type, stick_options


@pytest.fixture(autouse=True)
def _standard_promotion():
    """optax raises ``0.9 ** count`` (a Python float, an int32 count) as JAX promotes it."""
    with jax.numpy_dtype_promotion("standard"):
        yield


# (vocab, d, heads, seq, batch): padded sticks (67 and 48 float32 values pad to 96 and
# 64, seq 12 to 32) and a shape whose vocab and width fill their sticks exactly.
SHAPES = {"padded": (67, 48, 4, 12, 3), "unpadded": (64, 32, 2, 8, 2)}


def _setup(shape, dtype=jnp.float32, layers=2):
    return gpt_setup(*shape, layers=layers, dtype=dtype)


def _tol(shape):
    """Two layers of products of up to 4d terms, softmaxes of seq and vocab terms."""
    vocab, d = shape[:2]
    return {"reduce_len": 9 * max(4 * d, vocab), "ops": 40}


@pytest.mark.parametrize("name", ["padded", pytest.param("unpadded", marks=pytest.mark.slow)])
def test_gpt_trains_like_jax_jit(name):
    shape = SHAPES[name]
    params, static, ids, labels = _setup(shape)
    opt = optax.adamw(1e-2)
    step = gpt_train_step(static, opt)
    traces = []

    def counted(*args):
        traces.append(1)
        return step(*args)

    ref_step, spy_step = jax.jit(step), sj.jit(counted)
    ref = spy = (params, opt.init(params))
    losses = []
    for _ in range(4):
        *ref, want = ref_step(*ref, ids, labels)
        *spy, got = spy_step(*spy, ids, labels)  # outputs feed the next step as they are
        assert_close(sj.to_host(got), want, **_tol(shape))
        losses.append(float(want))
    assert losses[-1] < losses[0]  # it trains
    # Host arrays in at step 1, SpyreArrays in the default layouts of their shapes back:
    # a fixed point at once, one compiled program for every step.
    assert len(traces) == 1


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
def test_gpt_half_precision_loss_and_grads(dtype):
    shape = SHAPES["padded"]
    params, static, ids, labels = _setup(shape, dtype)

    def loss(p, ids, labels):
        return loss_fn(eqx.combine(p, static), ids, labels)

    assert_close(sj.to_host(sj.jit(loss)(params, ids, labels)), jax.jit(loss)(params, ids, labels))
    got = jax.tree.map(sj.to_host, sj.jit(jax.grad(loss))(params, ids, labels))
    # Both compute in the half dtype with float32 sums: a couple of half roundings of
    # each gradient, relative to the largest of its parameter's.
    want = jax.jit(jax.grad(loss))(params, ids, labels)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        scale = float(jnp.abs(w.astype(jnp.float32)).max())
        assert_close(g, w, reduce_len=_tol(shape)["reduce_len"], ops=2, scale=scale)


def test_gpt_trains_through_filter_jit_as_through_eqx_filter_jit():
    """The most textbook form: the whole model (static fields and all) through filter_jit.

    One layer: what this adds to the two-layer training test is the pytree path.
    """
    shape = SHAPES["padded"]
    vocab, d, heads, seq, batch = shape
    model = GPT(vocab, d, heads, 1, seq, jax.random.PRNGKey(0))
    ids = jax.random.randint(jax.random.PRNGKey(1), (batch, seq), 0, vocab)
    labels = jnp.roll(ids, -1, axis=1)
    opt = optax.adamw(1e-2)

    def step(model, opt_state, ids, labels):
        value, grads = eqx.filter_value_and_grad(loss_fn)(model, ids, labels)
        updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, value

    state = opt.init(eqx.filter(model, eqx.is_array))
    ref = spy = (model, state)
    for _ in range(2):
        *ref, want = eqx.filter_jit(step)(*ref, ids, labels)
        *spy, got = sj.filter_jit(step)(*spy, ids, labels)
        assert_close(sj.to_host(got), want, **_tol(shape))
    assert isinstance(spy[0], GPT) and spy[0].blocks[0].attn.num_heads == heads


def test_explain_of_a_gpt_step_leads_with_a_short_summary():
    shape = SHAPES["padded"]
    params, static, ids, labels = _setup(shape)

    def loss(p, ids, labels):
        return loss_fn(eqx.combine(p, static), ids, labels)

    report = sj.explain(jax.grad(loss), params, ids, labels)
    summary, details = str(report), report.details()
    assert len(summary) < 4000 < len(details)  # the profile first, the rest on request
    assert report.fallbacks == ()
    for line in report.lines[:3]:  # the costliest lines, each shown once (file:line (fn))
        assert summary.count(line.line.rsplit("/", 1)[-1][:40]) == 1


@pytest.mark.parametrize("layers", [2, pytest.param(32, marks=pytest.mark.slow)])
def test_explain_of_a_training_step_evaluates_each_lowering_once(layers):
    """The planner evaluates each lowering once per input types, the trace once per run.

    ``explain`` plans the step (each rule's lowering evaluated on types, once per node
    signature, mode and input types: a second layer like the first costs nothing),
    then traces the program once; the device model, the residencies and the report
    read that one trace's record (before: up to four more traces of each lowering).
    Issue 27 asks it of a 32-layer step: that case runs in ``make test-slow`` (about 20 s).
    """
    planned, traced = Counter(), Counter()

    def count(node, args, mode):
        types = tuple(None if isinstance(a, Scalar) else jax.typeof(a) for a in args)
        key = (id(node), mode, types)
        (planned if sp.abstract_calls() is not None else traced)[key] += 1

    params, static, ids, labels = _setup(SHAPES["unpadded"], layers=layers)
    opt = optax.adam(1e-2)
    with watching(count):
        report = sj.explain(gpt_train_step(static, opt), params, opt.init(params), ids, labels)
    assert report.ops and report.time_s > 0
    assert traced and set(traced.values()) == {1}  # each node run traced once
    assert set(planned.values()) == {1}  # each evaluation on types once


def test_a_training_steps_values_are_restickified_not_made_again():
    """A node runs again for a type a restickify makes only where that costs less.

    A training step's totals pass ``_traffic.REBASE`` and are taken relative to their
    least; weighed against a restickify's bytes, such a total left out what the second
    run reads and writes, and the planner made values twice (this step: the loss's
    ``select_n`` and a ``broadcast_in_dim``; the 4-layer bench step: its layer norms'
    backward ``add``, which kept their backward kernels from fusing, benchmarks/README
    item 69).
    """
    params, static, ids, labels = _setup(SHAPES["unpadded"])
    opt = optax.adam(1e-2)
    lowered = sj.jit(gpt_train_step(static, opt)).lower(params, opt.init(params), ids, labels)
    again = []
    for node, options in lowered.plan.runs.items():
        if len(node.outs) != 1:
            continue
        v = node.outs[0]
        defaults = {default_type(v.shape, v.dtype, s) for s in stick_options(v.shape)}
        again += [node.prim for o in options[1:] if o.out in defaults]
    assert again == []


def test_data_parallel_step_over_8_cards_equals_the_single_card_step():
    """The batch split over 8 cards, one sequence each, with ``jax.shard_map``.

    Each card differentiates its own sequence's loss (the replicated parameters are cast
    to varying first, so ``grad`` gives the card's gradient rather than JAX's sum over
    cards), and ``pmean`` averages losses and gradients: the mean over the whole batch.
    SGD keeps the update proportional to the gradient, so a wrong average shows. One
    layer: the cards, not the depth, are what this adds to the training test.
    """
    vocab, d, heads, seq, _ = SHAPES["unpadded"]
    shape = (vocab, d, heads, seq, 8)
    params, static, ids, labels = _setup(shape, layers=1)
    opt = optax.sgd(0.1)
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = jax.sharding.PartitionSpec

    def loss(p, ids, labels):
        return loss_fn(eqx.combine(p, static), ids, labels)

    def update(params, opt_state, value, grads):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    def one_card(params, opt_state, ids, labels):
        return update(params, opt_state, *jax.value_and_grad(loss)(params, ids, labels))

    def data_parallel(params, opt_state, ids, labels):
        def card(p, ids, labels):
            p = jax.lax.pcast(p, "x", to="varying")
            return jax.lax.pmean(jax.value_and_grad(loss)(p, ids, labels), "x")

        specs = (spec(), spec("x"), spec("x"))
        f = jax.shard_map(card, mesh=mesh, in_specs=specs, out_specs=spec())
        return update(params, opt_state, *f(params, ids, labels))

    ref_step, spy_step = jax.jit(one_card), sj.jit(data_parallel)
    ref = spy = (params, opt.init(params))
    for _ in range(2):
        *ref, want_loss = ref_step(*ref, ids, labels)
        *spy, got_loss = spy_step(*spy, ids, labels)  # outputs feed the next step as they are
        assert_close(sj.to_host(got_loss), want_loss, **_tol(shape))
        assert_close(jax.tree.map(sj.to_host, spy[0]), ref[0], **_tol(shape))
