"""astype between 16-bit and 32-bit formats in the card's staggered order (issue 26, item 4).

The card's conversion emits DL16_TO_FP32 / FP32_TO_DL16; ``sp.astype(..., arranged=True)``
keeps that order. The planner keeps the standard order: the device model does not divide
arranged ops over the cores, so the card's order would be predicted slower.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_matches_jax_jit

import spyrejax as sj
from spyrejax import LayoutError
from spyrejax import primitives as sp

F16, BF16, F32 = jnp.float16, jnp.bfloat16, jnp.float32
PAIRS = [(F16, F32), (BF16, F32), (F32, F16), (F32, BF16)]


def rand(shape, dtype, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def closed_chain(dst):
    """Convert, compute position by position, convert back: the order never matters."""

    def f(x):
        y = x.astype(dst)
        return (y * y + 1.0).astype(x.dtype)

    return f


def arranged_in_plan(fn, *args):
    text = str(sj.explain(fn, *args).details())
    return "DL16_TO_FP32" in text or "FP32_TO_DL16" in text


@pytest.mark.parametrize(("src", "dst"), PAIRS)
@pytest.mark.parametrize("shape", [(8, 100), (3, 70), (2, 3, 130)])
def test_astype_matches_jax_jit_on_padded_shapes(shape, src, dst):
    x = rand(shape, src)
    assert_matches_jax_jit(closed_chain(dst), x, exact=True)
    assert_matches_jax_jit(lambda x: x.astype(dst), x, exact=True)


def test_the_planner_keeps_the_standard_order_the_device_model_divides():
    # A chain in the card's order would be costed on one core (no division of arranged
    # ops): the planner keeps the standard order, divided, with nothing restickified.
    x = rand((512, 4096), F16)
    report = sj.explain(closed_chain(F32), x)
    assert not arranged_in_plan(closed_chain(F32), x)
    assert not report.restickifies
    converts = [op for op in report.ops if op.desc.opfunc == "astype"]
    assert len(converts) == 2 and all(op.division.cores > 1 for op in converts)


def test_arranged_astype_eagerly_and_refusals():
    x = rand((3, 100), F16)
    d = sj.to_device(x)
    a = sp.astype(d, F32, arranged=True)
    assert "DL16_TO_FP32" in jax.typeof(a).str_short()
    np.testing.assert_array_equal(np.asarray(sj.to_host(a)), np.asarray(x, np.float32))
    b = sp.astype(sp.elementwise("mul", a, a), F16)  # the conversion back: standard order
    assert not jax.typeof(b).layout.is_arranged
    np.testing.assert_array_equal(np.asarray(sj.to_host(b)), np.asarray(x * x))
    with pytest.raises(LayoutError, match="Sum reads elements in their standard places"):
        sp.reduce("sum", a, (1,))
    with pytest.raises(LayoutError, match="16-bit and 32-bit"):
        sp.astype(d, jnp.int8, arranged=True)
    with pytest.raises(LayoutError, match="already in DL16_TO_FP32"):
        sp.astype(a, F16, arranged=True)
    restored = sp.restickify(a, sj.SpyreTensorLayout((3, 100), np.float32))
    np.testing.assert_array_equal(np.asarray(sj.to_host(restored)), np.asarray(x, np.float32))


@pytest.mark.parametrize("shape", [(3, 20), (2, 32), (5,)])
def test_a_stick_dim_within_one_stick_converts_onto_a_pair_of_sticks(shape):
    x = rand(shape, F16)
    a = sp.astype(sj.to_device(x), F32, arranged=True)
    lay = jax.typeof(a).layout
    assert lay.arrangement.value == "DL16_TO_FP32" and -1 in lay.stride_map
    assert 2 in lay.device_size  # the group's second stick: a synthetic dim of 2
    np.testing.assert_array_equal(np.asarray(sj.to_host(a)), np.asarray(x, np.float32))
    b = sp.astype(sp.elementwise("mul", a, a), F16)
    assert not jax.typeof(b).layout.is_arranged
    np.testing.assert_array_equal(np.asarray(sj.to_host(b)), np.asarray(x * x))


def test_arranged_chains_differentiate_and_vmap():
    x = rand((8, 128), F16)

    def loss(x):
        return jnp.sum((jnp.tanh(x.astype(F32)) * 2.0).astype(F16).astype(F32))

    assert_matches_jax_jit(jax.grad(loss), x, ops=4)
    assert_matches_jax_jit(jax.vmap(closed_chain(F32)), x, exact=True)
