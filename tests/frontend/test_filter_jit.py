"""spyrejax.filter_jit: equinox's filter_jit semantics on the Spyre emulator."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close, rand

import spyrejax as sj


def _mlp(seed=0):
    return eqx.nn.MLP(150, 5, 64, 2, key=jax.random.key(seed))


def _forward(model, x):
    return jax.vmap(model)(x)


def test_an_eqx_mlp_runs_as_eqx_filter_jit_runs_it():
    model, x = _mlp(), rand((8, 150), jnp.float32)
    got, want = sj.filter_jit(_forward)(model, x), eqx.filter_jit(_forward)(model, x)
    assert isinstance(got, sj.SpyreArray)
    # Three layers of products of up to 150 terms of inputs in [-2, 2].
    assert_close(sj.to_host(got), want, reduce_len=150 * 3, ops=6)
    # The model itself as the function: its weights are traced, its activation static.
    one = sj.filter_jit(model)(x[0])
    assert_close(sj.to_host(one), want[0], reduce_len=150 * 3, ops=6)


def _loss(model, x, y):
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


# optax.adam is not used: its bias correction raises 0.9 to an int32 step count
# (lax.pow of a float and an int), which spyrejax's pow does not lower yet.
_OPT = optax.sgd(0.1, momentum=0.9)


def _step(model, opt_state, x, y):
    loss, grads = eqx.filter_value_and_grad(_loss)(model, x, y)
    updates, opt_state = _OPT.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return loss, eqx.apply_updates(model, updates), opt_state


def test_an_optax_training_step_matches_eqx_filter_jit():
    model = _mlp()
    x, y = rand((8, 150), jnp.float32), rand((8, 5), jnp.float32, 1, low=-1, high=1)
    state = _OPT.init(eqx.filter(model, eqx.is_array))
    ours, theirs = (model, state), (model, state)
    step = sj.filter_jit(_step)
    for _ in range(3):
        loss, *ours = step(*ours, x, y)
        want, *theirs = eqx.filter_jit(_step)(*theirs, x, y)
        # A mean of 40 squares of three-layer products; then the update's gradients.
        assert_close(sj.to_host(loss), want, reduce_len=8 * 150 * 3, ops=12)
    new_model = ours[0]
    assert isinstance(new_model, eqx.nn.MLP) and new_model.activation is model.activation
    got = [a for a in jax.tree.leaves(new_model) if isinstance(a, sj.SpyreArray)]
    want = [a for a in jax.tree.leaves(theirs[0]) if eqx.is_array(a)]
    assert len(got) == len(want) == 6  # three layers' weights and biases, as SpyreArrays
    for g, w in zip(got, want, strict=True):
        assert_close(sj.to_host(g), w, reduce_len=8 * 150 * 3, ops=24)


def test_arrays_are_traced_and_everything_else_is_static_as_for_eqx():
    x = rand((4, 150), jnp.float32)
    calls = [
        ((x, 2.0), {}),
        ((x, 2.0), {}),  # the same static float: a hit
        ((x, 3.0), {}),  # another float: static, so a new trace
        ((np.asarray(x), 3.0), {}),  # a NumPy array is traced like a JAX one
        ((x * 2, 3.0), {}),  # new values of an array: a hit
        ((x,), {"scale": 3.0}),  # bound to the signature: the same call as (x, 3.0)
        ((x, 3.0), {"relu": True}),  # a bool changes the Python control flow
    ]
    counts = {}
    for name, jit in (("ours", sj.filter_jit), ("eqx", eqx.filter_jit)):
        traces = []

        def f(x, scale=1.0, relu=False, traces=traces):
            traces.append(1)
            y = x * scale
            return jnp.maximum(y, 0.0) if relu else y

        jitted = jit(f)
        for args, kwargs in calls:
            got = jitted(*args, **kwargs)
            want = f(*args, **kwargs)
            assert_close(np.asarray(got), want, ops=2)
        counts[name] = len(traces) - len(calls)  # f's own eager calls counted too
    assert counts["ours"] == counts["eqx"] == 3


def test_non_array_outputs_are_returned_as_they_are():
    x = rand((4, 150), jnp.float32)

    @sj.filter_jit
    def f(x, name):
        return {"y": x + 1, "name": name, "shape": x.shape, "act": jax.nn.relu}

    out = f(x, "layer")
    assert out["name"] == "layer" and out["shape"] == (4, 150) and out["act"] is jax.nn.relu
    assert isinstance(out["y"], sj.SpyreArray)
    assert_close(sj.to_host(out["y"]), x + 1)


def test_static_leaves_are_compared_with_their_types():
    def f(x, n):
        return jnp.full(x.shape, n) * 2  # int32 for an int n, float32 for a float one

    x = rand((2, 3), jnp.float32)
    for jit in (sj.filter_jit, eqx.filter_jit):
        assert jit(f)(x, 2).dtype == f(x, 2).dtype == np.int32
    assert f(x, 2.0).dtype == np.float32
    # eqx.filter_jit reuses the trace for 2 (2.0 == 2), giving int32 where f gives
    # float32; spyrejax compares static leaves' types too.
    assert eqx.filter_jit(f)(x, 2.0).dtype == np.int32
    assert sj.filter_jit(f)(x, 2.0).dtype == np.float32


def test_lowerings_are_shared_by_function_and_methods_work():
    traces = []

    def f(x, k):
        traces.append(1)
        return x * k

    x = rand((4, 150), jnp.float32)
    for _ in range(3):  # written inline in a loop, as one would with eqx.filter_jit
        sj.filter_jit(f)(x, 2.0)
    assert len(traces) == 1

    class Scaler(eqx.Module):
        w: jax.Array

        @sj.filter_jit
        def __call__(self, x):
            traces.append(1)
            return x * self.w

    w = rand((150,), jnp.float32, 1)
    assert_close(sj.to_host(Scaler(w)(x)), x * w)
    assert_close(sj.to_host(Scaler(2 * w)(x)), x * 2 * w)  # the module's array is traced
    assert len(traces) == 2


def test_bad_arguments_are_named_by_their_path():
    model, x = _mlp(), rand((8, 150), jnp.float32)
    with pytest.raises(sj.SpyreTypeError, match=r"args\[1\]\['opts'\] is a set.*hashable"):
        sj.filter_jit(lambda x, cfg: x)(x, {"opts": {1, 2}})
    bad = eqx.tree_at(lambda m: m.layers[1].bias, model, np.zeros(64, np.complex64))
    with pytest.raises(
        sj.LayoutError, match=r"filter_jit: argument args\[0\]\.layers\[1\]\.bias is complex64"
    ):
        sj.filter_jit(_forward)(bad, x)
    with pytest.raises(ValueError, match="donate"):
        sj.filter_jit(_forward, donate="some")
    with pytest.raises(sj.SpyreTypeError, match="needs a callable"):
        sj.filter_jit(3)
    # donate modes are accepted (the emulator does not reuse the buffers)
    got = sj.filter_jit(donate="all")(_forward)(model, x)
    assert_close(sj.to_host(got), _forward(model, x), reduce_len=150 * 3, ops=6)


class _BatchNormNet(eqx.Module):
    """Linear, BatchNorm over vmap's axis "batch" (a stateful layer), ReLU, Linear."""

    l1: eqx.nn.Linear
    bn: eqx.nn.BatchNorm
    l2: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.l1 = eqx.nn.Linear(6, 16, key=k1)
        self.bn = eqx.nn.BatchNorm(16, axis_name="batch", momentum=0.9, mode="batch")
        self.l2 = eqx.nn.Linear(16, 2, key=k2)

    def __call__(self, x, state):
        h, state = self.bn(self.l1(x), state)
        return self.l2(jax.nn.relu(h)), state


def _bn_loss(model, state, x, y):
    batched = jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))
    out, state = batched(x, state)
    return jnp.mean((out - y) ** 2), state


def _bn_step(model, state, opt_state, x, y):
    (loss, state), grads = eqx.filter_value_and_grad(_bn_loss, has_aux=True)(model, state, x, y)
    updates, opt_state = _OPT.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return loss, eqx.apply_updates(model, updates), state, opt_state


def test_a_batchnorm_model_trains_as_under_eqx_filter_jit():
    """BatchNorm's batch statistics are ``pmean`` over vmap's axis: reductions (issue 28)."""
    model, state = eqx.nn.make_with_state(_BatchNormNet)(jax.random.key(0))
    x, y = rand((8, 6), jnp.float32), rand((8, 2), jnp.float32, 1, low=-1, high=1)
    opt_state = _OPT.init(eqx.filter(model, eqx.is_array))
    ours, theirs = (model, state, opt_state), (model, state, opt_state)
    for _ in range(3):
        loss, *ours = sj.filter_jit(_bn_step)(*ours, x, y)
        want, *theirs = eqx.filter_jit(_bn_step)(*theirs, x, y)
        # Means over 8 rows of two layers of 16 terms; then the updates' gradients.
        assert_close(sj.to_host(loss), want, reduce_len=8 * 16 * 2, ops=12)
    # The weights and BatchNorm's running statistics (its eqx.nn.State) match.
    got = [sj.to_host(a) for a in jax.tree.leaves(ours[:2]) if isinstance(a, sj.SpyreArray)]
    want = [a for a in jax.tree.leaves(theirs[:2]) if eqx.is_array(a)]
    assert len(got) == len(want) > 6
    assert_close(got, want, reduce_len=8 * 16 * 2, ops=24)


class _Scaled(eqx.Module):
    """A module with Python float and bool fields: static under filter_jit."""

    lin: eqx.nn.Linear
    scale: float
    relu: bool

    def __init__(self, relu=True):
        self.lin, self.scale, self.relu = eqx.nn.Linear(8, 4, key=jax.random.key(0)), 2.0, relu

    def __call__(self, x):
        y = self.lin(x) * self.scale
        return jax.nn.relu(y) if self.relu else y  # Python control flow on a field


def _apply(m, x):
    return m(x)


def test_explain_export_and_stages_take_filter_jit_functions_and_modules():
    """A module's bool field is static, as for eqx.filter_jit (traced, ``if`` would fail)."""
    model, x = _Scaled(), rand((8,), jnp.float32)
    want = eqx.filter_jit(_apply)(model, x)
    structs = jax.ShapeDtypeStruct(x.shape, x.dtype)
    for fun, args in (
        (sj.filter_jit(_apply), (model, x)),
        (_apply, (model, structs)),  # a function given a module: planned as filter_jit
        (model, (x,)),  # the module itself
    ):
        report = sj.explain(fun, *args)
        assert {o.prim for o in report.nodes} >= {"dot_general", "max"}, report
        exported = sj.export(fun, *args)
        assert exported.superdsc and exported.program.ops == report.device.ops
    jitted = sj.filter_jit(_apply)
    assert "dot_general" in str(jitted.trace(model, x).jaxpr)
    lowered = jitted.lower(model, x)
    assert "ToDevice" in lowered.as_text() and lowered.plan.cost == report.restickify_cost
    # compile() is called as the function is, and gives what a call gives.
    assert_close(sj.to_host(lowered.compile()(model, x)), want, reduce_len=8, ops=3)
    cores = sj.filter_jit(_apply, emulate="cores")(model, x)
    assert_close(sj.to_host(cores), want, reduce_len=8, ops=3)
