"""Attention's second product, written ``V^T @ P^T`` by ``jax.nn.dot_product_attention``
and the einsum form, runs swapped (``P @ V``) and writes its result in the layout the
caller gets: no copy after the fused kernel."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spyrejax as sj
from tests.helpers import assert_matches_jax_jit, rand

S = jax.ShapeDtypeStruct


def _einsum_attention(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


ATTENTIONS = {"jax.nn": jax.nn.dot_product_attention, "einsum": _einsum_attention}


def _outside(report):
    """The device ops that run a kernel outside the fused attention."""
    return [
        op.desc.opfunc
        for op in report.device.ops
        if op.group is None and op.desc.kind not in ("view", "fill")
    ]


@pytest.mark.parametrize(
    ("name", "batch", "kv_heads"),
    [("einsum", 1, 4), ("einsum", 2, 4), ("jax.nn", 1, 4), ("jax.nn", 2, 4), ("jax.nn", 1, 2)],
)
def test_attention_writes_its_result_where_the_caller_gets_it(name, batch, kv_heads):
    # fp16 [B, T, N, H] as the docs' case, small: before, the second product made
    # out^T stuck on the queries (v restickified onto the keys, p onto the queries) and
    # a reshape's copy (jax.nn) or a restickify (einsum) laid it out as returned; GQA
    # (2 KV heads: jax.nn's [K, G] heads reshaped to K * G) had the same copy
    q, kv = S((batch, 16, 4, 64), np.float16), S((batch, 64, kv_heads, 64), np.float16)
    with jax.numpy_dtype_promotion("standard"):
        r = sj.explain(ATTENTIONS[name], q, kv, kv)
    assert [g.family for g in r.device.groups] == ["attention"]
    assert _outside(r) == [] and r.copy_cost == 0
    assert r.restickify_cost == kv.size  # k onto the keys for q @ k^T: nothing else


@pytest.mark.parametrize(("name", "kv_heads"), [("einsum", 4), ("jax.nn", 4), ("jax.nn", 2)])
def test_the_swapped_second_product_gives_jax_jits_numbers(name, kv_heads):
    q = rand((2, 16, 4, 64), seed=0)
    k, v = (rand((2, 64, kv_heads, 64), seed=s) for s in (1, 2))
    assert _outside(sj.explain(ATTENTIONS[name], q, k, v)) == []
    assert_matches_jax_jit(ATTENTIONS[name], q, k, v, reduce_len=64, ops=8)


@pytest.mark.parametrize("kv_heads", [2, 8])
def test_decode_attention_writes_its_result_where_the_caller_gets_it(kv_heads):
    # One query token (decode, batch 4): with GQA (2 KV heads, 4 query heads each) the
    # swapped product's M is a KV head's 4 query heads, not its 1 token. Laid out M
    # first, the heads came out G outside K, and merging [K, G] into the result's N
    # copied it (benchmarks/README item 61: 16,384 elements, 1 us, at Granite's decode);
    # laid out queries first the heads keep the caller's order, the merge a view.
    q, kv = S((4, 1, 8, 64), np.float16), S((4, 64, kv_heads, 64), np.float16)
    with jax.numpy_dtype_promotion("standard"):
        r = sj.explain(jax.nn.dot_product_attention, q, kv, kv)
    assert [g.family for g in r.device.groups] == ["attention"]
    assert _outside(r) == [] and r.copy_cost == 0


@pytest.mark.parametrize("kv_heads", [2, 8])
def test_decode_attention_gives_jax_jits_numbers(kv_heads):
    q = rand((4, 1, 8, 64), seed=0)
    k, v = (rand((4, 64, kv_heads, 64), seed=s) for s in (1, 2))
    assert_matches_jax_jit(jax.nn.dot_product_attention, q, k, v, reduce_len=64, ops=8)
