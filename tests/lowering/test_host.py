"""The host for the rest: a primitive without a device rule runs on the host, visibly."""

import re
import warnings

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from blocks import _block, _two_layers, _weights
from helpers import assert_close, rand
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, mlir

import spyrejax as sj
from spyrejax.lowering import RULES
from spyrejax.lowering._registry import is_host_fallback

# A primitive no device rule will ever be written for: the test's own.
cube_p = Primitive("test_cube")
cube_p.def_impl(lambda x: x * x * x)
cube_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(cube_p, mlir.lower_fun(lambda x: x * x * x, multiple_results=False))
ad.defjvp(cube_p, lambda g, x: 3.0 * x * x * g)

# And one with two results: (x^2, x^3).
powers_p = Primitive("test_powers")
powers_p.multiple_results = True
powers_p.def_impl(lambda x: (x * x, x * x * x))
powers_p.def_abstract_eval(lambda x: [jax.core.ShapedArray(x.shape, x.dtype)] * 2)
mlir.register_lowering(powers_p, mlir.lower_fun(lambda x: (x * x, x * x * x), True))

# lax primitives without a device rule today (others may gain one: they are then skipped).
_LAX_NO_RULE = [
    (name, fn)
    for name, fn in [
        ("bessel_i0e", lambda x, y: lax.bessel_i0e(x) + y),
        ("igamma", lambda x, y: lax.igamma(x, y + 1.0)),
        ("zeta", lambda x, y: lax.zeta(x + 2.0, y)),
    ]
    if name not in RULES
]


def _cubed(x):
    return cube_p.bind(jnp.tanh(x)).sum(0)


def _fallbacks(record):
    return [w for w in record if issubclass(w.category, sj.SpyreFallbackWarning)]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(8, 64), (6, 70)], ids=str)
def test_a_primitive_without_a_rule_runs_on_the_host_and_matches_jax(dtype, shape):
    x = rand(shape, dtype)
    with pytest.warns(sj.SpyreFallbackWarning, match=r"test_cube at .*test_host\.py:\d+") as rec:
        got = sj.to_host(sj.jit(_cubed)(x))
    assert len(_fallbacks(rec)) == 1
    want = jax.jit(_cubed)(x)
    chex.assert_trees_all_equal_dtypes(got, want)
    assert_close(got, want, reduce_len=shape[0], ops=4)


def test_the_warning_comes_once_per_primitive_and_line_when_planned():
    def f(x):
        for _ in range(3):  # three nodes of one primitive at one line
            x = cube_p.bind(x) * 0.5
        return x

    x = rand((4, 64))
    fun = sj.jit(f)
    with pytest.warns(sj.SpyreFallbackWarning) as rec:
        got = fun(x)
    assert len(_fallbacks(rec)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a later call runs the plan: no warning
        again = fun(x)
    assert_close(sj.to_host(got), jax.jit(f)(x), ops=9)
    chex.assert_trees_all_equal(sj.to_host(again), sj.to_host(got))


@pytest.mark.parametrize(("name", "fn"), _LAX_NO_RULE, ids=[n for n, _ in _LAX_NO_RULE])
def test_lax_primitives_without_a_rule_fall_back(name, fn):
    x, y = rand((6, 70), low=0.5, high=3.0), rand((6, 70), seed=1, low=0.5, high=3.0)
    with pytest.warns(sj.SpyreFallbackWarning, match=name):
        got = sj.to_host(sj.jit(fn)(x, y))
    assert_close(got, jax.jit(fn)(x, y), ops=20)


def test_the_gradient_of_a_fallback_is_jaxs():
    g = jax.grad(lambda x: _cubed(x).sum())
    x = rand((8, 150))
    with pytest.warns(sj.SpyreFallbackWarning):
        got = sj.to_host(sj.jit(g)(x))
    assert_close(got, jax.jit(g)(x), ops=8)
    # From outside: the host call's derivative is JAX's derivative of the primitive.
    fun = sj.jit(_cubed)
    with pytest.warns(sj.SpyreFallbackWarning):
        outside = jax.grad(lambda x: sj.to_host(fun(x)).sum())(x)
    assert_close(outside, jax.jit(g)(x), ops=8)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16], ids=str)
def test_explain_lists_every_fallback_with_the_bytes_each_way(dtype):
    x = rand((6, 70), dtype)

    def f(x):
        y = cube_p.bind(x)
        return cube_p.bind(y[:, :64]).sum(0) + y.mean(0)[:64]

    with pytest.warns(sj.SpyreFallbackWarning):
        report = sj.explain(f, x)
    falls = report.fallbacks
    assert [fb.prim for fb in falls] == ["test_cube", "test_cube"]
    assert all(re.search(r"test_host\.py:\d+ \((.*\.)?f\)$", fb.line) for fb in falls)
    item = np.dtype(dtype).itemsize  # the logical elements, in the device format
    by_size = sorted((fb.to_host_bytes, fb.to_device_bytes) for fb in falls)
    assert by_size == [(6 * 64 * item,) * 2, (6 * 70 * item,) * 2]
    summary = str(report)
    up, back = sum(fb.to_host_bytes for fb in falls), sum(fb.to_device_bytes for fb in falls)
    assert f"host fallbacks: 2 ops without a device rule run on the host, moving {up} B" in summary
    rows = [r for r in summary.splitlines() if "test_cube(host)" in r]  # one per line of f
    cells = [re.split(r"\s{2,}", r.strip())[3].split("/") for r in rows]
    assert len(rows) == 2 and [sum(int(c[i]) for c in cells) for i in (0, 1)] == [up, back]
    details = report.details()
    for fb in falls:
        assert f"{fb.prim} at {fb.line}: {fb.to_host_bytes} B to the host" in details
    assert "test_cube" in report._repr_html_().partition("<details>")[2]


def test_fallback_error_raises_the_unsupported_error():
    x = rand((8, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(sj.SpyreUnsupportedError, match=r"unsupported primitive test_cube at"):
            sj.jit(_cubed, fallback="error")(x)
    with pytest.raises(sj.SpyreTypeError, match=r"fallback='host'.*warn, error"):
        sj.jit(_cubed, fallback="host")


@pytest.mark.parametrize("shape", [(8, 64), (6, 70)], ids=str)
def test_a_primitive_with_several_results_falls_back_too(shape):
    x = rand(shape)

    def f(x):
        square, cube = powers_p.bind(x + 1.0)
        return square.T, cube * 2.0

    with pytest.warns(sj.SpyreFallbackWarning, match="test_powers"):
        got = sj.jit(f)(x)
    assert_close(jax.tree.map(np.asarray, got), jax.jit(f)(x), ops=4)
    (fb,) = sj.explain(f, x).fallbacks  # the lowering is cached: planned (and warned) once
    assert fb.to_host_bytes == x.size * 4 and fb.to_device_bytes == 2 * x.size * 4


def test_ops_with_device_rules_never_fall_back():
    x, ws = rand((16, 64)), _weights()

    def loss(x, *ws):
        return _two_layers(x, *ws).sum()

    for fn in (_block, _two_layers, jax.grad(loss, argnums=(0, 1, 6))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback warning either
            lowered = sj.jit(fn).lower(x, *ws)
            report = sj.explain(fn, x, *ws)
        assert not any(is_host_fallback(n) for n in lowered.graph.nodes)
        assert report.fallbacks == ()
        assert all(o.fallback is None for o in report.nodes)
        assert "host fallbacks: none" in str(report)


def test_debug_callbacks_run_on_the_host_for_their_effects():
    """``jax.debug.print``/``callback`` give nothing back: they run, every call, in order."""
    seen = []

    def f(x):
        jax.debug.callback(lambda v: seen.append(("in", np.asarray(v))), x.sum(0))

        def body(c, _):
            jax.debug.callback(lambda v: seen.append(("loop", np.asarray(v))), c.max())
            return c * 2.0, None

        y = jax.lax.scan(body, x, None, length=3)[0]
        jax.debug.print("total {t}", t=y.sum(), ordered=True)
        return y + 1.0

    x = rand((6, 70))
    with pytest.warns(sj.SpyreFallbackWarning, match="debug_callback at .* nothing|DMA;"):
        got = sj.jit(f)(x)
    assert_close(sj.to_host(got), jax.jit(f)(x), ops=4)
    want = [("in", np.asarray(x.sum(0)))] + [
        ("loop", np.asarray(x.max() * 2.0**i)) for i in range(3)
    ]
    jax.effects_barrier()
    assert [k for k, _ in seen[:4]] == [k for k, _ in want]
    for (_, g), (_, w) in zip(seen[:4], want, strict=True):
        assert_close(g, w, reduce_len=6)
    report = sj.explain(f, x)
    falls = sorted((fb.prim, fb.to_host_bytes, fb.to_device_bytes) for fb in report.fallbacks)
    # The column sums (70 float32) once, the loop's max (one float32) three times.
    assert falls == [("debug_callback", 12, 0), ("debug_callback", 280, 0), ("debug_print", 4, 0)]


@pytest.mark.parametrize("where", ["scan", "cond"])
def test_fallbacks_inside_loops_and_branches_are_listed_at_their_own_line(where):
    def f(x):
        if where == "scan":
            return jax.lax.scan(lambda c, _: (cube_p.bind(c) * 0.5, None), x, None, length=3)[0]
        return jax.lax.cond(x.sum() > 0, lambda v: cube_p.bind(v) * 0.5, jnp.sin, x)

    x = rand((6, 70), low=0.1, high=1.0)
    with pytest.warns(sj.SpyreFallbackWarning, match="test_cube"):
        report = sj.explain(f, x)
    (fb,) = report.fallbacks
    times = 3 if where == "scan" else 1
    assert fb.prim == "test_cube" and re.search(r"test_host\.py:\d+ \(.*lambda", fb.line)
    assert fb.to_host_bytes == fb.to_device_bytes == times * x.size * 4
    assert "test_cube(host)" in str(report)
    assert_close(sj.to_host(sj.jit(f)(x)), jax.jit(f)(x), ops=12)
