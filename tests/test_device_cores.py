"""spyrejax.jit(f, emulate="cores"): every divided op run core by core equals the default mode.

Each core's slice is loaded from the DDR image by its descriptors, the kernel runs on
the LX data and the result is stored back by descriptors: equal results prove that the
divisions tile every iteration space exactly once and that the per-core loop nests are
right. Ops that do not reassociate give the same bits; sums, means and matmuls (split-K
ones included) the same values within rounding.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand
from hypothesis import given, settings
from hypothesis import strategies as st

import spyrejax as sj
from spyrejax.device import Machine, divide_op
from spyrejax.lowering._cores import _load, _store
from spyrejax.lowering._device import _space, _spec

F16 = np.float16


def both(f, *args):
    """The host results of the default mode and of emulate="cores"."""
    want = sj.to_host(sj.jit(f)(*args))
    got = sj.to_host(sj.jit(f, emulate="cores")(*args))
    return got, want


def divisions(f, *args):
    return [op.division for op in sj.explain(f, *args).ops if op.division is not None]


# Programs whose every op is exact (no reassociation): one elementwise op, astype, max, min.
EXACT = {
    "add": (lambda a, b: a + b, lambda: (rand((100, 150)), rand((100, 150), seed=1))),
    "mul_broadcast_row": (lambda a, b: a * b, lambda: (rand((100, 150)), rand((150,), seed=1))),
    "div_broadcast_col": (lambda a, b: a / b, lambda: (rand((64, 96)), rand((64, 1), seed=1) + 3)),
    "exp_f16": (jnp.exp, lambda: (rand((512, 512), F16),)),
    "tanh_3d": (jnp.tanh, lambda: (rand((5, 100, 150)),)),
    "astype_f16": (lambda a: a.astype(F16), lambda: (rand((40, 70)),)),
    "compare": (lambda a, b: a < b, lambda: (rand((33, 200)), rand((33, 200), seed=1))),
    "where": (lambda a: jnp.where(a > 0, a, 0.5 * a), lambda: (rand((70, 130)),)),
    "int_ops": (lambda a: a * 3 + 1, lambda: (jnp.arange(300, dtype=jnp.int32).reshape(3, 100),)),
    "max_stick": (lambda a: a.max(-1), lambda: (rand((37, 300)),)),
    "max_rows": (lambda a: a.max(0), lambda: (rand((37, 300)),)),
    "min_all_split": (lambda a: a.min(), lambda: (rand((8192,)),)),
    "max_3d": (lambda a: a.max((0, 2)), lambda: (rand((5, 100, 150)),)),
}

# Programs with sums, means or matmuls (reassociated per core), and chains XLA may fuse.
CLOSE = {
    "sum_stick": (lambda a: a.sum(1), lambda: (rand((100, 150)),), 150),
    "sum_rows": (lambda a: a.sum(0), lambda: (rand((100, 150)),), 100),
    "sum_all_split": (lambda a: a.sum(), lambda: (rand((8192,)),), 8192),
    "mean_3d": (lambda a: a.mean((0, 2)), lambda: (rand((5, 100, 150)),), 750),
    "sum_f16": (lambda a: a.sum(-1), lambda: (rand((64, 1000), F16),), 1000),
    "matmul": (lambda a, b: a @ b, lambda: (rand((100, 150)), rand((150, 70), seed=1)), 150),
    "matvec_split_k": (
        lambda a, b: a @ b,
        lambda: (rand((1, 8192), F16), rand((8192, 64), F16, seed=1)),
        8192,
    ),
    "batched_matmul": (
        lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
        lambda: (rand((3, 40, 70)), rand((3, 70, 50), seed=1)),
        70,
    ),
    "softmax": (lambda a: jax.nn.softmax(a, axis=-1), lambda: (rand((64, 200)),), 200),
    "layer_norm": (
        lambda a: (a - a.mean(-1, keepdims=True)) * jax.lax.rsqrt(a.var(-1, keepdims=True) + 1e-5),
        lambda: (rand((64, 96)),),
        96,
    ),
    "attention": (
        lambda q, k, v: jax.nn.softmax(jnp.einsum("hqd,hkd->hqk", q, k) / 4.0, -1) @ v,
        lambda: tuple(rand((2, 16, 32), seed=s) for s in range(3)),
        32,
    ),
    "mlp": (
        lambda x, w1, w2: jax.nn.gelu(x @ w1) @ w2,
        lambda: (rand((32, 64)), rand((64, 128), seed=1) / 8, rand((128, 64), seed=2) / 8),
        128,
    ),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_ops_give_the_same_bits_per_core(name):
    f, make = EXACT[name]
    got, want = both(f, *make())
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", sorted(CLOSE))
def test_reassociating_programs_agree_within_rounding(name):
    f, make, n = CLOSE[name]
    got, want = both(f, *make())
    assert_close(got, want, reduce_len=n, ops=8)


def test_the_examples_really_split_the_work():
    """The cases above cover split rows, split sticks, a split reduction and split K."""
    (row,) = divisions(lambda a, b: a + b, rand((100, 150)), rand((100, 150)))
    assert row.splits["out"] == 25  # the spec's [100, 150] division
    (red,) = divisions(lambda a: a.min(), rand((8192,)))
    assert red.splits["out"] > 1 and red.space.dim("out").reduced
    (mv,) = divisions(lambda a, b: a @ b, rand((1, 8192), F16), rand((8192, 64), F16))
    assert mv.splits["in"] > 1  # split K: partial sums combined over the ring


@settings(max_examples=8, deadline=None)
@given(
    rows=st.integers(1, 70),
    cols=st.integers(1, 200),
    axis=st.sampled_from([None, 0, 1]),
)
def test_per_core_equals_default_for_any_shape(rows, cols, axis):
    a, b = rand((rows, cols)), rand((cols,), seed=1)

    def f(a, b):
        return jnp.maximum(a, b).max(axis)

    got, want = both(f, a, b)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300))
def test_load_then_store_by_descriptors_tiles_the_output_exactly_once(rows, cols):
    """Every data position of the output comes back from exactly the core that owns it."""
    t = jax.typeof(sj.to_device(rand((rows, cols))))
    space = _space(_add_prim(t), [_spec(t, "a"), _spec(t, "b")], _spec(t, "out"))[2]
    div = divide_op(space, Machine.spyre())
    img = jnp.arange(np.prod(t.layout.device_size), dtype=jnp.float32).reshape(t.layout.device_size)
    back = np.asarray(_store(div, 2, _load(div, 2, img)))
    data = ~t.layout.padding_mask(t.base_shape)
    np.testing.assert_array_equal(back[data], np.asarray(img)[data])


def _add_prim(t):
    from spyrejax.primitives._elementwise import _CLASSES

    return _CLASSES["add"](t, t)


def test_an_unknown_mode_is_a_named_error():
    with pytest.raises(sj.DeviceError, match="emulate"):
        sj.jit(jnp.sin, emulate="corelets")
