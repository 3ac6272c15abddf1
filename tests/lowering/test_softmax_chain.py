"""A softmax read by matmuls runs as one kernel whose padding is zero (``Softmax``), and
attention's chain from product to product by groups of heads when its scores are large."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spyrejax as sj
from spyrejax.lowering.program._groups import BROADCAST, batch_groups
from spyrejax.lowering.program._softmax import softmax_chains
from spyrejax.primitives._masks import data_mask
from spyrejax.primitives._softmax import Softmax, softmax_with_zero_padding
from spyrejax.primitives._tuning import tuned
from tests.helpers import assert_close, assert_matches_jax_jit, rand


def _attention(q, k, v, mask_value=-1e9):
    t = q.shape[-2]
    s = jnp.einsum("hqd,hkd->hqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, mask_value)
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)


def _qkv(t=40, d=20, heads=2):
    return [rand((heads, t, d), seed=i) for i in range(3)]


def _chains(fn, *args):
    lowered = sj.jit(fn).lower(*args)
    return softmax_chains(lowered.graph, lowered.plan)


def test_causal_attention_runs_its_softmax_as_one_kernel():
    q, k, v = _qkv()
    (chain,) = _chains(_attention, q, k, v).values()
    # reduce_max, max(-inf, .), broadcast, sub, exp, reduce_sum, broadcast (then div)
    assert chain.axis == 2 and len(chain.skipped) == 7
    assert_matches_jax_jit(_attention, q, k, v, reduce_len=40, ops=8)


def test_lines_of_minus_inf_are_nan_as_in_jax_jit():
    scores = np.array(rand((2, 40, 40)))
    scores[:, 0] = -np.inf  # softmax of a line of -inf is NaN
    v = rand((2, 40, 20), seed=1)
    f = lambda s, v: jax.nn.softmax(s, axis=-1) @ v  # noqa: E731
    assert len(_chains(f, scores, v)) == 1
    got = assert_matches_jax_jit(f, scores, v, reduce_len=40, ops=8)
    assert np.isnan(got[:, 0]).all() and not np.isnan(got[:, 1:]).any()


def test_probabilities_read_elsewhere_keep_the_op_by_op_run():
    q, k, v = _qkv()

    def both(q, k, v):
        p = jax.nn.softmax(jnp.einsum("hqd,hkd->hqk", q, k), axis=-1)
        return p, p @ v

    assert _chains(both, q, k, v) == {}
    p, _ = sj.jit(both)(q, k, v)
    assert p.type.pad is sj.PadFill.POISON
    assert_matches_jax_jit(both, q, k, v, reduce_len=40, ops=8)


def test_the_kernel_writes_zeros_into_the_padding():
    x = sj.to_device(rand((3, 40)))
    p = softmax_with_zero_padding(x, 1)
    assert p.type.pad is sj.PadFill.ZERO and p.type.layout == x.type.layout
    image = np.asarray(sj.image(p))
    assert (image[~np.asarray(data_mask(p.type))] == 0).all()
    assert_close(sj.to_host(p), jax.nn.softmax(rand((3, 40)), axis=1), reduce_len=40, ops=5)


@pytest.mark.parametrize(
    "x, axis",
    [
        (rand((3, 40), jnp.bfloat16), 1),  # float32 only: half floats round per op
        (rand((3, 40)), 0),  # the padding is along dim 1, not the softmax's
    ],
)
def test_the_kernel_refuses_what_it_cannot_run(x, axis):
    with pytest.raises(sj.SpyreTypeError, match="softmax: needs a float32 image"):
        Softmax(sj.to_device(x).type, axis=axis)


def _grouped(fn, *args):
    lowered = sj.jit(fn).lower(*args)
    return batch_groups(lowered.graph, lowered.plan, softmax_chains(lowered.graph, lowered.plan))


_SMALL_GROUPS = {"batch_loop_min_bytes": 0, "batch_group_bytes": 2 * 40 * 64 * 4}


@pytest.mark.plain_program
def test_attention_runs_by_groups_of_heads_with_the_same_numbers():
    q, k, v = _qkv(heads=4)
    with tuned(**_SMALL_GROUPS):
        (groups,) = _grouped(_attention, q, k, v)
        assert groups.groups == 2 and groups.nodes[-1].prim == "dot_general"
        # q, k, v, the mask (one slice broadcast over the heads) and the -1e9 fill
        assert len(groups.inputs) == 5 and sum(d == BROADCAST for *_, d in groups.inputs) == 1
        assert_matches_jax_jit(_attention, q, k, v, reduce_len=40, ops=8)
        assert _loops(_attention, q, k, v)  # the program runs the loop
    assert _grouped(_attention, q, k, v) == []  # small scores: one pass
    assert not _loops(lambda *a: _attention(*a), q, k, v)  # (a fresh trace)


@pytest.mark.plain_program
@pytest.mark.parametrize(("heads", "steps"), [(2, 0), (3, 2), (5, 3)])
def test_a_batch_the_groups_do_not_divide_takes_an_overlapping_last_step(heads, steps):
    # Groups of two heads: 3 heads in steps at 0 and 1, 5 in steps at 0, 2 and 3 (the
    # last step clamped back, recomputing one head); a batch of 2 cannot be cut.
    q, k, v = _qkv(heads=heads)
    with tuned(**_SMALL_GROUPS):
        found = _grouped(_attention, q, k, v)
        assert [(g.groups, g.size) for g in found] == ([(steps, 2)] if steps else [])
        assert_matches_jax_jit(_attention, q, k, v, reduce_len=40, ops=8)
        assert _loops(_attention, q, k, v) == bool(steps)


def _loops(fn, *args):
    """Whether the compiled program of ``sj.jit(fn)`` holds a loop (XLA's ``while``)."""
    return re.search(r"= .* while\(", sj.jit(fn).lower(*args).compile().as_text()) is not None


@pytest.mark.parametrize(
    "attend",
    [lambda x, kv: _attention(x, x, x), lambda x, kv: _attention(x, kv, kv)],
    ids=["self-attention", "shared k and v"],
)
def test_a_value_read_by_both_products_runs(attend):
    # One value read in two layouts (both products' operands) cannot be one image per
    # step: the chain runs whole, with the same numbers.
    x, kv, _ = _qkv(heads=4)
    with tuned(**_SMALL_GROUPS):
        assert_matches_jax_jit(attend, x, kv, reduce_len=40, ops=8)


def test_a_softmax_over_the_batch_dim_is_not_run_by_groups():
    q, k, v = _qkv(heads=4)

    def across_heads(q, k, v):
        s = jnp.einsum("hqd,hkd->hqk", q, k)
        return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=0), v)

    with tuned(**_SMALL_GROUPS):
        assert _grouped(across_heads, q, k, v) == []
        assert_matches_jax_jit(across_heads, q, k, v, reduce_len=40, ops=8)
