"""The public API's conventions: jnp/lax names, one layout-argument order, jit stages."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import spyre_primitive_classes
from oracles import same_bits

import spyrejax as sj
from spyrejax import SpyreTensorLayout
from spyrejax import primitives as sp
from spyrejax.layout._lanes import laned
from spyrejax.primitives import SpyrePrim, abstract_eval
from spyrejax.primitives._in_place import (
    assemble,
    fill_around,
    place,
    slice_view,
    update_at,
    window_layout,
)
from spyrejax.primitives._lanes import lane_assemble, lane_place, lane_view
from spyrejax.primitives._restickify import load_relayout
from spyrejax.primitives._softmax import Softmax
from spyrejax.primitives._widened_sum import WidenedSum

# --- names: jnp-style functions take jnp's parameters, lax-style ones lax's ------------

NAMESAKES = [
    (sp.concatenate, jnp.concatenate, 2),  # arrays, axis
    (sp.reshape_copy, jnp.reshape, 2),  # a, shape
    (sj.reshape, jnp.reshape, 2),
    (sj.transpose, jnp.transpose, 2),
    (sj.squeeze, jnp.squeeze, 2),
    (sj.expand_dims, jnp.expand_dims, 2),
    (sj.broadcast_to, jnp.broadcast_to, 2),
    (sp.full, jnp.full, 3),  # shape, fill_value, dtype
    (sj.astype, jnp.astype, 2),
    (sj.matmul, jnp.matmul, 2),
    (sp.pad, jax.lax.pad, 3),  # operand, padding_value, padding_config
    (sp.slice_copy, jax.lax.slice, 4),  # operand, start_indices, limit_indices, strides
    (sp.iota, jax.lax.broadcasted_iota, 3),  # dtype, shape, dimension
]


def _params(fn, n):
    return [(p.name, p.default) for p in list(inspect.signature(fn).parameters.values())[:n]]


@pytest.mark.parametrize(
    ("ours", "theirs", "n"), NAMESAKES, ids=lambda f: getattr(f, "__name__", None)
)
def test_functions_take_their_namesakes_parameters(ours, theirs, n):
    assert _params(ours, n) == _params(theirs, n)


# --- one order for layout arguments ------------------------------------------------------


def _public_functions():
    objects = [getattr(sj, n) for n in sj.__all__] + [getattr(sp, n) for n in sp.__all__]
    fns = {f.__qualname__: f for f in objects if inspect.isfunction(f)}
    return [fns[name] for name in sorted(fns)]


def test_every_dim_order_is_keyword_only_after_an_optional_layout():
    checked = []
    for fn in _public_functions():
        params = inspect.signature(fn).parameters
        if "dim_order" not in params or fn is sp.target_layout:  # the rule itself
            continue
        names = list(params)
        assert names.index("layout") < names.index("dim_order"), fn.__name__
        assert params["layout"].default is None, fn.__name__
        assert params["dim_order"].kind is inspect.Parameter.KEYWORD_ONLY, fn.__name__
        assert params["dim_order"].default is None, fn.__name__
        checked.append(fn.__name__)
    assert {"to_device", "restickify", "with_layout", "full", "iota", "pad"} <= set(checked)


def test_functions_about_layouts_take_the_layout_second():
    for fn in (sj.to_device, sj.restickify, sj.with_layout):
        params = list(inspect.signature(fn).parameters.values())
        assert [(p.name, p.kind) for p in params[:3]] == [
            ("x", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            ("layout", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            ("dim_order", inspect.Parameter.KEYWORD_ONLY),
        ]
    # Functions with a jnp or lax namesake keep its positions: layouts are keywords.
    for fn, _, _ in NAMESAKES:
        params = inspect.signature(fn).parameters
        if "layout" in params:
            assert params["layout"].kind is inspect.Parameter.KEYWORD_ONLY, fn.__name__


_X = np.arange(4 * 150, dtype=np.float32).reshape(4, 150)

# Each function placing a (4, 150) float32 result, called with its layout keywords.
PLACERS = {
    "to_device": lambda **kw: sj.to_device(_X, **kw),
    "restickify": lambda **kw: sj.restickify(sj.to_device(_X), **kw),
    "with_layout": lambda **kw: sj.with_layout(sj.to_device(_X), **kw),
    "full": lambda **kw: sp.full((4, 150), 2.0, jnp.float32, **kw),
    "iota": lambda **kw: sp.iota(jnp.float32, (4, 150), 1, **kw),
    "reshape_copy": lambda **kw: sp.reshape_copy(sj.to_device(_X.reshape(600)), (4, 150), **kw),
    "slice_copy": lambda **kw: sp.slice_copy(sj.to_device(_X), (0, 0), (4, 150), **kw),
    "concatenate": lambda **kw: sp.concatenate([sj.to_device(_X[:1]), sj.to_device(_X[1:])], **kw),
    "pad": lambda **kw: sp.pad(sj.to_device(_X[:, 1:]), 0.0, [(0, 0, 0), (1, 0, 0)], **kw),
}


@pytest.mark.parametrize("name", list(PLACERS))
def test_layout_arguments_mean_the_same_everywhere(name):
    place = PLACERS[name]
    folded = sj.SpyreTensorLayout.from_stride_map([19, 32], [32, 1], jnp.float32)
    by_order = sj.SpyreTensorLayout((4, 150), jnp.float32, [1, 0])
    default = sj.SpyreTensorLayout((4, 150), jnp.float32)
    assert place(layout=folded).layout == folded
    assert place(dim_order=[1, 0]).layout == by_order
    if name != "with_layout":  # a hint needs one of the two
        assert place().layout == default
    with pytest.raises(sj.LayoutError, match="not both"):
        place(layout=folded, dim_order=[1, 0])
    with pytest.raises(sj.LayoutError, match=r"dim order goes in dim_order="):
        place(layout=[1, 0])


def test_results_match_their_namesakes():
    a = sj.to_device(_X)
    np.testing.assert_array_equal(
        np.asarray(sp.concatenate([a, a], axis=-1)), jnp.concatenate([_X, _X], axis=-1)
    )
    np.testing.assert_array_equal(
        np.asarray(sp.reshape_copy(a, (-1, 40))), jnp.reshape(_X, (-1, 40))
    )
    np.testing.assert_array_equal(
        np.asarray(sp.iota(jnp.int32, (4, 150), 0)),
        jax.lax.broadcasted_iota(jnp.int32, (4, 150), 0),
    )
    np.testing.assert_array_equal(
        np.asarray(sp.full((4, 150), 7, jnp.int32)), jnp.full((4, 150), 7)
    )
    with pytest.raises(sj.SpyreUnsupportedError, match="axis=None"):
        sp.concatenate([a, a], axis=None)


# --- jit stages, as jax.stages ---------------------------------------------------------


def _f(x, w):
    h = jnp.tanh(x @ w)
    return {"h": h, "sum": h.sum(0)}


def _inputs():
    rng = np.random.default_rng(0)
    x = sj.to_device(jnp.asarray(rng.uniform(-1, 1, (8, 150)), jnp.float32))
    w = jnp.asarray(rng.uniform(-1, 1, (150, 70)), jnp.float32)
    return x, w


def test_lower_compile_runs_what_a_call_runs():
    x, w = _inputs()
    jf = sj.jit(_f)
    lowered = jf.lower(x, w)
    assert isinstance(lowered, sj.Lowered)
    compiled = lowered.compile()
    assert isinstance(compiled, sj.Compiled)
    got, want = compiled(x, w), jf(x, w)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.type == e.type and same_bits(g.image, e.image)
    assert lowered.out_info == jax.tree.map(lambda a: a.type, want)
    assert lowered.out_types == [e.type for e in jax.tree.leaves(want)]
    assert lowered.in_avals == ([x.type, jax.ShapeDtypeStruct((150, 70), jnp.float32)], {})
    assert compiled.in_avals == lowered.in_avals and compiled.out_info == lowered.out_info
    assert "HloModule" in compiled.as_text()


def test_trace_gives_the_plain_jax_jaxpr_and_lowers_it():
    x, w = _inputs()
    traced = sj.jit(_f).trace(x, w)
    assert isinstance(traced, sj.Traced)
    assert str(traced.jaxpr) == str(jax.make_jaxpr(_f)(sj.to_host(x), w))
    assert traced.fun_name == "_f"
    assert traced.out_avals["sum"].shape == (70,)
    # out_info as jax.stages gives it; a Python scalar's weak type is kept in in_avals
    assert traced.out_info == jax.jit(_f).trace(sj.to_host(x), w).out_info
    scaled = sj.jit(lambda x, s: x * s).trace(w, 2.0)
    assert scaled.in_avals == (
        [
            jax.ShapeDtypeStruct((150, 70), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.float32, weak_type=True),
        ],
        {},
    )
    lowered = traced.lower()
    assert lowered.plan.cost == sj.explain(_f, x, w).restickify_cost


def test_as_text_is_the_spyre_level_jaxpr_with_its_layouts():
    x, w = _inputs()
    text = sj.jit(_f).lower(x, w).as_text()
    assert "Matmul" in text and "ToDevice" in text  # the stages plan w's transfer
    # explain plans what a call runs: w moved to the device first, in its default layout.
    moved = sj.jit(_f).lower(x, sj.to_device(w)).as_text()
    assert moved == sj.explain(_f, x, w).jaxpr and "ToDevice" not in moved
    lay = x.layout
    assert f"{{{list(lay.device_size)}/{list(lay.stride_map)}}}".replace(" ", "") in text

    w_lay = sj.SpyreTensorLayout((150, 70), jnp.float32)
    assert f"{{{list(w_lay.device_size)}/{list(w_lay.stride_map)}}}".replace(" ", "") in text


# Bit-compares a sum from two programs (the host argument moved inside the compiled one,
# before the call in the other); the check's extra reads change how XLA fuses each sum.
@pytest.mark.xla_fusion_bits
def test_compiled_takes_the_dynamic_arguments_and_checks_them():
    g = sj.jit(
        lambda x, axis, scale=1.0: x.sum(axis) * scale, static_argnums=1, static_argnames="scale"
    )
    _, w = _inputs()
    compiled = g.lower(w, 0, scale=2.0).compile()
    assert same_bits(compiled(w).image, g(w, 0, scale=2.0).image)  # statics left out
    with pytest.raises(sj.SpyreTypeError, match="compiled for"):
        compiled(w, w)
    with pytest.raises(sj.SpyreTypeError, match=r"float32\[150, 7\].*float32\[150, 70\]"):
        compiled(w[:, :7])
    with pytest.raises(sj.SpyreTypeError, match="leaf 0 is f32"):  # a Spyre array for a host one
        compiled(sj.to_device(w))
    with pytest.raises(sj.SpyreTypeError, match="transformation"):
        jax.jit(compiled)(w)


# --- primitive parameters are declared on their classes -----------------------------------


def _all_primitives():
    """One instance of every primitive class, built on types alone."""
    x = np.ones((4, 150), np.float32)
    with abstract_eval() as called:
        a = sj.to_device(x)
        sj.exp(a) + a
        sj.matmul(a, sj.to_device(np.ones((150, 8), np.float32)))
        sj.sum(a, 1)
        Softmax(a.type, axis=1)(a)
        half = sj.astype(a, jnp.bfloat16)
        WidenedSum(half.type, axes=(1,), keepdims=False, dtype=np.dtype(np.float32))(half)
        sj.restickify(a, dim_order=[1, 0])
        load_relayout(a, SpyreTensorLayout((4, 150), np.float32, [1, 0]))
        sj.astype(a, jnp.float16)
        sp.bitcast(a, jnp.uint32)
        sj.to_host(a)
        sj.primitives.wrap(sj.image(a), a.type)
        sj.broadcast_to(sj.squeeze(sj.expand_dims(a.T, 0), 0), (2, 150, 4))
        a.reshape(2, 2, 150)
        sp.iota(jnp.int32, (4, 150), 1)
        sp.full((4, 150), 1.0, jnp.float32)
        sp.slice_copy(a, (0, 0), (2, 10))
        slice_view(a, (0, 0), (2, 150))
        sp.concatenate([a, a])
        sp.pad(a, 0.0, [(1, 0, 0), (0, 0, 0)])
        dest, whole = SpyreTensorLayout((8, 150), np.float32), [(0, 0), (4, 0)]
        halves = [place(a, window_layout(dest, (8, 150), (4, 150), o)) for o in whole]
        assemble(halves, dest, (8, 150), whole)
        fill_around(halves[1], 0.0, dest, (8, 150), (4, 0))
        update_at(sj.to_device(np.ones((8, 150), np.float32)), a, [0, 0])
        sp.reshape_copy(a, (600,))
        lane_view(a, 0, 2)
        whole = SpyreTensorLayout((4, 150), np.float32)
        pair = sj.to_device(np.ones((4, 75), np.float32))
        lane_assemble([lane_place(pair, laned(whole, k, 2)) for k in (0, 1)], whole, (4, 150))
        sp.lax_copy(
            jax.lax.cumsum_p,
            [a],
            {"axis": 1, "reverse": False},
            (4, 150),
            np.float32,
            layout=a.layout,
        )
        sp.windows(a, [(1, 1, (0, 0), 1, 1), (3, 1, (1, 1), 1, 1)])
        sp.bitcast(a, jnp.int32)
        sp.host_call(jax.lax.erf_p, [a], {}, (4, 150), np.float32, layout=a.layout)
        cards = {"axes": ("x",), "size": 2}  # collectives, built on types (no mesh needed)
        sp._collectives.Psum(a.type, **cards)(a)
        sp._collectives.Pvary(a.type, **cards)(a)
        sp._collectives.PPermute(a.type, **cards, perm=((0, 1), (1, 0)))(a)
        sp._collectives.AllGather(a.type, **cards, dim=0)(a)
        sp._collectives.PsumScatter(a.type, **cards, dim=0)(a)
        sp._collectives.AllToAll(a.type, **cards, split=0, concat=0)(a)
    return {type(p): p for p in called}


# Families with one class per op (generated from op tables).
_ELEMENTWISE, _REDUCE = "spyrejax.primitives._elementwise", "spyrejax.primitives._reduce"


def test_every_primitive_declares_the_parameters_it_sets():
    prims = _all_primitives()
    leaves = {c for c in spyre_primitive_classes() if not c.__subclasses__()}
    per_op = {m: {c for c in leaves if c.__module__ == m} for m in (_ELEMENTWISE, _REDUCE)}
    assert leaves - set().union(*per_op.values()) <= set(prims)  # every kind was built
    assert all(classes & set(prims) for classes in per_op.values())  # one op of each family
    for cls, prim in prims.items():
        assert set(prim.params) == cls.param_names, cls.__name__
        for name in cls.param_names:
            assert getattr(prim, name) is prim.params[name]  # hijax copies them over


def test_reduce_declares_its_parameters():
    prims = _all_primitives()
    reduce = next(p for c, p in prims.items() if c.__module__ == _REDUCE)
    assert set(reduce.params) == type(reduce).param_names


def test_setting_an_undeclared_parameter_is_an_internal_error():
    class Twice(SpyrePrim):
        factor: int

        def __init__(self, aval, **params):
            self.in_avals = (aval,)
            self.out_aval = aval
            self.params = params
            super().__init__()

    aval = sj.to_device(_X).type
    assert Twice.param_names == {"factor"}
    assert Twice(aval, factor=2).factor == 2
    with pytest.raises(sj.SpyreInternalError, match=r"sets parameters \['factor', 'scale'\]"):
        Twice(aval, factor=2, scale=3)
