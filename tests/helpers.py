"""Shared helpers for the Spyre array tests: inputs, tolerances, padding checks."""

import contextlib
import math

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from oracles import same_bits

import spyrejax as sj

FLOAT_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32)

# Shapes with and without stick padding (150 fp16 values pad to 192, 64 fit exactly).
SHAPES = ((3, 150), (2, 64))

#: Roundings two implementations of one operation may differ by: each rounds once, and
#: they may fuse differently (an FMA, another polynomial for a transcendental).
ULPS = 4


def tol(dtype, *, reduce_len=1, scale=1.0, ops=1):
    """``rtol`` and ``atol`` to compare a computed result of ``dtype`` with a reference.

    Both compute the same math in floating point and differ by rounding only:

    - each of the ``ops`` operations of a chain rounds its result, :data:`ULPS` ulps of
      ``dtype`` per operation;
    - a sum of ``reduce_len`` terms added in another order (tiles and lanes, another
      CPU's kernel) differs by about ``sqrt(reduce_len)`` roundings of its partial sums
      (a random walk), in the dtype it accumulates in: float32 for float16 and bfloat16
      (spyrejax's kernels, ``jnp`` sums and XLA's CPU dots all accumulate in it).

    The error is relative to the magnitude of the values involved, not to the result
    alone: where terms cancel, a result near zero keeps the absolute error of its
    inputs. So ``atol`` is the same relative error of ``scale``, the magnitude of the
    inputs, partial sums and result, and is never zero.

    Returns:
        ``{"rtol": ..., "atol": ...}``, for ``np.testing.assert_allclose(..., **tol(...))``.
    """
    dtype = np.dtype(dtype)
    eps = float(ml_dtypes.finfo(dtype).eps)
    acc = float(ml_dtypes.finfo(np.float32 if dtype.itemsize < 4 else dtype).eps)
    rel = ULPS * (ops * eps + math.sqrt(reduce_len) * acc)
    return {"rtol": rel, "atol": rel * scale}


def assert_close(got, want, *, reduce_len=1, ops=1, scale=None):
    """Assert two pytrees of arrays agree leaf by leaf: floats within :func:`tol`.

    Each float leaf is compared within ``tol(want.dtype, ...)``; ``scale`` defaults to
    the larger of 1 (the magnitude of :func:`rand`'s inputs) and the reference's
    largest value. Other leaves (bool, int) must be equal.
    """
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves), (len(got_leaves), len(want_leaves))
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if not jnp.issubdtype(w.dtype, jnp.floating):
            np.testing.assert_array_equal(g, w)
            continue
        wide = w.astype(np.float64)
        s = max(1.0, float(np.abs(wide).max(initial=0.0))) if scale is None else scale
        np.testing.assert_allclose(
            g.astype(np.float64),
            wide,
            **tol(w.dtype, reduce_len=reduce_len, scale=s, ops=ops),
        )


def assert_matches_jax_jit(fn, *args, exact=False, **tolerance):
    """Assert ``spyrejax.jit(fn)(*args)`` gives what ``jax.jit(fn)(*args)`` gives.

    The two pytrees must have the same structure and dtypes, and their values agree
    within :func:`assert_close`'s tolerance (``tolerance``: its ``reduce_len``, ``ops``
    and ``scale``), or bit for bit with ``exact``. The one "matches jax.jit" check of the
    suite.

    Returns:
        spyrejax's result, moved to the host.
    """
    got = jax.tree.map(sj.to_host, sj.jit(fn)(*args))
    assert_matches(got, want=jax.jit(fn)(*args), exact=exact, **tolerance)
    return got


def assert_matches(got, want, *, exact=False, **tolerance):
    """The comparison of :func:`assert_matches_jax_jit`: spyrejax's result against jax.jit's.

    For results computed elsewhere (:func:`check_each_side_by_side`'s checks): the same
    pytree structure and dtypes, and values within :func:`assert_close`'s tolerance
    (``tolerance``: its ``reduce_len``, ``ops`` and ``scale``), or bit for bit with
    ``exact``.
    """
    chex.assert_trees_all_equal_dtypes(got, want)
    if exact:
        chex.assert_trees_all_equal(got, want)
    else:
        assert_close(got, want, **tolerance)


def run_side_by_side(cases):
    """Run several cases as one program, under ``spyrejax.jit`` and under ``jax.jit``.

    ``cases`` maps a name to ``(fn, args)``. Each function runs on its own arguments, so
    the program is the cases' programs side by side, sharing no value. The planner sees
    the whole program, so a part's layouts may differ from its case's alone (a peer
    list's rope view did: a case that checks a layout runs alone, as
    tests/models/test_peer_ops.py does); its values do not: each result has the bits the
    case alone gives. It is one compile each instead of one per case (8-40% less CPU
    than the cases alone in the cases measured: docs/testing.md).

    Returns:
        ``{name: (got, want)}``: spyrejax's result moved to the host, and jax.jit's.
    """
    names = list(cases)
    counts = [len(cases[name][1]) for name in names]

    def side_by_side(*flat):
        results, start = [], 0
        for name, n in zip(names, counts, strict=True):
            results.append(cases[name][0](*flat[start : start + n]))
            start += n
        return tuple(results)

    flat = [a for name in names for a in cases[name][1]]
    got = jax.tree.map(sj.to_host, sj.jit(side_by_side)(*flat))
    want = jax.jit(side_by_side)(*flat)
    return {name: (g, w) for name, g, w in zip(names, got, want, strict=True)}


def check_each_side_by_side(cases, check):
    """Check every case of ``cases`` (see :func:`run_side_by_side`) run in one program.

    ``check(name, got, want)`` asserts one case's results. Every case is checked and the
    failures are raised together, each under its case's name. If the program of all of
    them cannot be built or run, each case runs alone, so the error names its case.
    """
    try:
        results = run_side_by_side(cases)
    except Exception as error:  # re-raised below, or named per case
        results, together = None, error
    failures = []
    for name, (fn, args) in cases.items():
        try:
            if results is None:
                got = jax.tree.map(sj.to_host, sj.jit(fn)(*args))
                check(name, got, jax.jit(fn)(*args))
            else:
                check(name, *results[name])
        except Exception as error:  # collected, raised below
            failures.append(f"[{name}] {type(error).__name__}: {error}")
    if failures:
        raise AssertionError(
            f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)
        )
    if results is None:
        raise AssertionError("every case passes alone, but not side by side") from together


def spyre_primitive_classes():
    """Every primitive class spyrejax defines: ``SpyrePrim``'s subclasses at every depth."""
    from spyrejax.primitives._base import SpyrePrim

    found, todo = [], [SpyrePrim]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("spyrejax.") and sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def assert_round_trips_both_ways(x, layout, want):
    """Host -> device -> host eagerly (the engine ``dma_h2d`` picks) and inside jax.jit.

    Both images must be ``want`` bit for bit, and both transfers back must give ``x``
    bit for bit. Returns the eager image.
    """
    shape = x.shape
    eager = sj.dma_h2d(x, layout)
    jitted = jax.jit(sj.dma_h2d, static_argnames="layout")(x, layout)
    assert same_bits(eager, want)
    assert same_bits(jitted, want)
    assert same_bits(sj.dma_d2h(eager, shape, layout), x)
    d2h = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))
    assert same_bits(d2h(jitted, shape, layout), x)
    return eager


@contextlib.contextmanager
def dma_transfers():
    """Collect the DMA transfers run inside the block, as ``(direction, engine, source)``.

    Listens to the ``jax.monitoring`` event the DMA engine records for each transfer
    (``spyrejax.dma._dma.DMA_EVENT``), so a test sees which engine ran and what it was
    given without patching either.
    """
    from spyrejax.dma._dma import DMA_EVENT

    seen = []

    def listen(event, **kw):
        if event == DMA_EVENT:
            seen.append((kw["direction"], kw["engine"], kw["source"]))

    jax.monitoring.register_event_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_listener(listen)


@contextlib.contextmanager
def compiles():
    """Collect the names of the XLA programs compiled inside the block (``jit(f)``).

    Listens to ``jax.monitoring``'s ``backend_compile_duration`` event, which XLA's
    compile of each program records (a program already compiled records none).
    """
    seen = []

    def listen(event, duration, **kw):
        if event.endswith("backend_compile_duration"):
            seen.append(kw.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def rand(shape, dtype=jnp.float32, seed=0, *, low=-2.0, high=2.0):
    """Uniform values in ``[low, high)`` of ``dtype``: the tests' one random input.

    ``seed`` is an int or a NumPy Generator (successive calls then draw new values);
    either way the values are reproducible.
    """
    rng = np.random.default_rng(seed)
    values = rng.uniform(low, high, size=shape).astype(np.float32)
    if jnp.issubdtype(dtype, jnp.floating):
        # Rounded on the host (NumPy and ml_dtypes round to nearest even, as XLA's convert
        # does: the same bits) instead of by an eager XLA convert compiled per shape.
        values = values.astype(dtype)
    return jnp.asarray(values, dtype)


def padding_is_poison(a):
    """Whether every padding position of a Spyre array's image holds the poison bits."""
    t = a.type
    pad = np.asarray(a.image)[t.layout.padding_mask(t.base_shape)]
    poison = np.asarray(sj.poison_value(t.dtype))
    if t.dtype == np.bool_:
        return bool((pad == poison).all())
    bits = np.dtype(f"uint{8 * t.dtype.itemsize}")
    return bool((pad.view(bits) == poison.view(bits)).all())


@contextlib.contextmanager
def spy_divisions():
    """The divisions emulate="cores" uses inside the block, in call order."""
    from spyrejax.device import divide_op
    from spyrejax.lowering.program._cores import dividing

    seen = []

    def spy(space, machine, hint=None):
        div = divide_op(space, machine, hint)
        seen.append(div)
        return div

    with dividing(spy):
        yield seen


def division_key(div):
    """What tells two divisions apart in a comparison: op, splits, cores used."""
    return div.space.opfunc, dict(div.splits), div.cores_used
