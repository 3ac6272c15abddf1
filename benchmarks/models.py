"""Whole models shared by the tests and the benchmarks (one owner for each).

- The textbook equinox GPT (embeddings, ``eqx.nn.MultiheadAttention`` with a causal
  mask, ``jax.vmap`` over ``eqx.nn.Linear`` and ``eqx.nn.LayerNorm``, a GELU MLP),
  its integer-label cross-entropy and its ``optax`` training step.
- A Llama-style decoder block (RMSNorm, rotary embeddings computed inside, grouped-query
  causal attention, a SwiGLU MLP) and a ``lax.scan`` over stacked blocks.

The tests (``tests/models/test_gpt.py``, ``tests/models/test_done_when.py``) check these against
``jax.jit``; ``benchmarks/bench.py`` times them. Pytest finds this module through the
``pythonpath`` setting in ``pyproject.toml``; ``bench.py`` runs beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

# --- the textbook equinox GPT --------------------------------------------------------


class Block(eqx.Module):
    ln1: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    ln2: eqx.nn.LayerNorm
    fc: eqx.nn.Linear
    proj: eqx.nn.Linear
    drop: eqx.nn.Dropout

    def __init__(self, d: int, heads: int, key: Any, dropout: float = 0.0) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.ln1 = eqx.nn.LayerNorm(d)
        self.attn = eqx.nn.MultiheadAttention(heads, d, key=k1)
        self.ln2 = eqx.nn.LayerNorm(d)
        self.fc = eqx.nn.Linear(d, 4 * d, key=k2)
        self.proj = eqx.nn.Linear(4 * d, d, key=k3)
        self.drop = eqx.nn.Dropout(dropout)

    def __call__(self, x: Any, mask: Any, key: Any = None) -> Any:
        k1, k2 = (None, None) if key is None else jax.random.split(key)
        off = key is None  # no key: inference, dropout does nothing
        y = jax.vmap(self.ln1)(x)
        x = x + self.drop(self.attn(y, y, y, mask=mask), key=k1, inference=off)
        y = jax.vmap(self.ln2)(x)
        y = jax.vmap(self.proj)(jax.nn.gelu(jax.vmap(self.fc)(y)))
        return x + self.drop(y, key=k2, inference=off)


class GPT(eqx.Module):
    tok: eqx.nn.Embedding
    pos: eqx.nn.Embedding
    blocks: list
    ln: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(
        self,
        vocab: int,
        d: int,
        heads: int,
        layers: int,
        seq: int,
        key: Any,
        dropout: float = 0.0,
    ) -> None:
        keys = jax.random.split(key, layers + 3)
        self.tok = eqx.nn.Embedding(vocab, d, key=keys[0])
        self.pos = eqx.nn.Embedding(seq, d, key=keys[1])
        self.head = eqx.nn.Linear(d, vocab, use_bias=False, key=keys[2])
        self.blocks = [Block(d, heads, k, dropout) for k in keys[3:]]
        self.ln = eqx.nn.LayerNorm(d)

    def __call__(self, ids: Any, key: Any = None) -> Any:
        t = ids.shape[0]
        x = jax.vmap(self.tok)(ids) + jax.vmap(self.pos)(jnp.arange(t))
        mask = jnp.tril(jnp.ones((t, t), bool))
        keys = [None] * len(self.blocks) if key is None else jax.random.split(key, len(self.blocks))
        for block, k in zip(self.blocks, keys, strict=True):
            x = block(x, mask, k)
        return jax.vmap(self.head)(jax.vmap(self.ln)(x))


class ScannedGPT(GPT):
    """The same GPT with its blocks stacked (one array per weight, a leading layer axis)
    and run by a ``lax.scan``: JAX traces one block, whatever the depth (no dropout)."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int, key: Any) -> None:
        super().__init__(vocab, d, heads, 0, seq, key)
        keys = jax.random.split(jax.random.fold_in(key, 1), layers)
        self.blocks = eqx.filter_vmap(lambda k: Block(d, heads, k))(keys)

    def __call__(self, ids: Any, key: Any = None) -> Any:
        t = ids.shape[0]
        x = jax.vmap(self.tok)(ids) + jax.vmap(self.pos)(jnp.arange(t))
        mask = jnp.tril(jnp.ones((t, t), bool))
        params, static = eqx.partition(self.blocks, eqx.is_array)
        x = jax.lax.scan(lambda h, p: (eqx.combine(p, static)(h, mask), None), x, params)[0]
        return jax.vmap(self.head)(jax.vmap(self.ln)(x))


def loss_fn(model: GPT, ids: Any, labels: Any, key: Any = None) -> Any:
    """Mean integer-label cross-entropy of the model's logits over a batch of sequences
    (with ``key``, dropout is on: one key per sequence)."""
    if key is None:
        logits = jax.vmap(model)(ids)
    else:
        logits = jax.vmap(model)(ids, jax.random.split(key, ids.shape[0]))
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def gpt_setup(
    vocab: int,
    d: int,
    heads: int,
    seq: int,
    batch: int,
    layers: int = 2,
    dtype: Any = jnp.float32,
    dropout: float = 0.0,
) -> tuple[Any, Any, Any, Any]:
    """A GPT's parameters (in ``dtype``), its static part, and a batch of ids and labels."""
    model = GPT(vocab, d, heads, layers, seq, jax.random.PRNGKey(0), dropout)
    params, static = eqx.partition(model, eqx.is_array)
    params = jax.tree.map(lambda p: p.astype(dtype), params)
    ids = jax.random.randint(jax.random.PRNGKey(1), (batch, seq), 0, vocab)
    return params, static, ids, jnp.roll(ids, -1, axis=1)


def gpt_train_step(static: Any, opt: optax.GradientTransformation) -> Callable[..., Any]:
    """``step(params, opt_state, ids, labels, key=None) -> (params, opt_state, loss)``.

    Forward, loss, gradient and the optimizer's update, as one function to jit; given a
    ``key``, the model's dropout is on.
    """

    def step(params: Any, opt_state: Any, ids: Any, labels: Any, key: Any = None) -> Any:
        def loss(p: Any) -> Any:
            return loss_fn(eqx.combine(p, static), ids, labels, key)

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


# --- a Llama-style decoder block ---------------------------------------------------


def rms_norm(x: Any, g: Any, eps: float = 1e-6) -> Any:
    """Llama's RMSNorm: the mean square in float32, the result in x's dtype."""
    x32 = x.astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * inv).astype(x.dtype) * g


def rope(x: Any, positions: Any, base: float = 10000.0) -> Any:
    """Rotary embeddings of ``x[seq, heads, hd]`` at ``positions[seq]`` (rotate-half form).

    The angles are computed here, from the positions and an iota of frequencies.
    """
    half = x.shape[-1] // 2
    freqs = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs[None, :]
    cos = jnp.cos(angles)[:, None, :].astype(x.dtype)
    sin = jnp.sin(angles)[:, None, :].astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def gqa_attention(q: Any, k: Any, v: Any, mask: Any) -> Any:
    """Grouped-query attention: ``q[s, kv, rep, hd]`` against ``k, v[t, kv, hd]``."""
    hd = q.shape[-1]
    scores = jnp.einsum("sgrd,tgd->grst", q, k).astype(jnp.float32) * hd**-0.5
    scores = jnp.where(mask, scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("grst,tgd->sgrd", weights, v)


def projections(p: dict[str, Any], h: Any, positions: Any, heads: int, kv_heads: int) -> Any:
    """The rotated queries and keys, and the values, of the normed input ``h[s, d]``."""
    s, hd = h.shape[0], p["wq"].shape[1] // heads
    q = rope((h @ p["wq"]).reshape(s, heads, hd), positions)
    k = rope((h @ p["wk"]).reshape(s, kv_heads, hd), positions)
    v = (h @ p["wv"]).reshape(s, kv_heads, hd)
    return q.reshape(s, kv_heads, heads // kv_heads, hd), k, v


def swiglu(p: dict[str, Any], x: Any) -> Any:
    """The block's normed SwiGLU MLP."""
    h = rms_norm(x, p["g2"])
    return (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]


def llama_block(p: dict[str, Any], x: Any, heads: int, kv_heads: int) -> Any:
    """One decoder layer on ``x[seq, d]``, the positions ``0..seq-1``."""
    s = x.shape[0]
    positions = jnp.arange(s)
    q, k, v = projections(p, rms_norm(x, p["g1"]), positions, heads, kv_heads)
    causal = positions[:, None] >= positions[None, :]
    x = x + gqa_attention(q, k, v, causal).reshape(s, -1) @ p["wo"]
    return x + swiglu(p, x)


def llama_params(
    d: int,
    heads: int,
    kv_heads: int,
    ff: int,
    dtype: Any = jnp.float32,
    seed: int = 0,
    layers: int | None = None,
) -> dict[str, Any]:
    """A block's weights (stacked along a leading axis of ``layers`` when given)."""
    hd = d // heads
    rng = np.random.default_rng(seed)
    lead = () if layers is None else (layers,)

    def w(n_in: int, n_out: int) -> Any:
        return jnp.asarray(rng.standard_normal((*lead, n_in, n_out)) / np.sqrt(n_in), dtype)

    def g() -> Any:
        return jnp.asarray(1.0 + 0.1 * rng.standard_normal((*lead, d)), dtype)

    return {
        "g1": g(),
        "wq": w(d, heads * hd),
        "wk": w(d, kv_heads * hd),
        "wv": w(d, kv_heads * hd),
        "wo": w(heads * hd, d),
        "g2": g(),
        "w1": w(d, ff),
        "w3": w(d, ff),
        "w2": w(ff, d),
    }


def llama_layers(stacked: dict[str, Any], x: Any, heads: int = 4, kv_heads: int = 2) -> Any:
    """``lax.scan`` over stacked decoder layers."""
    return jax.lax.scan(lambda h, p: (llama_block(p, h, heads, kv_heads), None), x, stacked)[0]


# --- a Granite-3.3-8B decoder layer, from shapes alone ---------------------------------

# Granite-3.3-8B: hidden 4096, 32 heads, 8 KV heads, head dim 128, MLP 12800.
GRANITE = {"d": 4096, "heads": 32, "kv_heads": 8, "ff": 12800}


def granite_structs(dtype: Any = jnp.float16) -> dict[str, Any]:
    """One Granite-3.3-8B layer's weights as ``jax.ShapeDtypeStruct`` values (no data)."""
    d, heads, kv, ff = GRANITE["d"], GRANITE["heads"], GRANITE["kv_heads"], GRANITE["ff"]
    hd = d // heads
    shapes = {
        "g1": (d,),
        "wq": (d, heads * hd),
        "wk": (d, kv * hd),
        "wv": (d, kv * hd),
        "wo": (heads * hd, d),
        "g2": (d,),
        "w1": (d, ff),
        "w3": (d, ff),
        "w2": (ff, d),
    }
    return {k: jax.ShapeDtypeStruct(s, dtype) for k, s in shapes.items()}


def granite_prefill(p: dict[str, Any], x: Any) -> Any:
    """The layer on one sequence ``x[tokens, d]`` (causal, positions ``0..tokens-1``)."""
    return llama_block(p, x, GRANITE["heads"], GRANITE["kv_heads"])


def _decode_one(p: dict[str, Any], x: Any, k_cache: Any, v_cache: Any, pos: Any) -> Any:
    """One sequence's next token ``x[1, d]`` against its cache ``[T, kv, hd]`` at ``pos``.

    Returns the layer's output and the token's key and value (the caller writes them
    into its cache at ``pos``: the cache already holds them, so the token attends to
    positions ``<= pos``).
    """
    heads, kv = GRANITE["heads"], GRANITE["kv_heads"]
    q, k, v = projections(p, rms_norm(x, p["g1"]), pos[None], heads, kv)
    mask = jnp.arange(k_cache.shape[0])[None, :] <= pos
    x = x + gqa_attention(q, k_cache, v_cache, mask).reshape(1, -1) @ p["wo"]
    return x + swiglu(p, x), k, v


def granite_decode(p: dict[str, Any], x: Any, k_cache: Any, v_cache: Any, pos: Any) -> Any:
    """A batch's next tokens ``x[b, 1, d]`` against caches ``[b, T, kv, hd]`` at ``pos[b]``."""
    return jax.vmap(_decode_one, in_axes=(None, 0, 0, 0, 0))(p, x, k_cache, v_cache, pos)


def granite_decode_structs(
    batch: int = 4, cache: int = 4096, dtype: Any = jnp.float16
) -> tuple[Any, ...]:
    """``granite_decode``'s arguments after the weights, as ``jax.ShapeDtypeStruct``s."""
    d, kv = GRANITE["d"], GRANITE["kv_heads"]
    hd = d // GRANITE["heads"]
    cache_shape = jax.ShapeDtypeStruct((batch, cache, kv, hd), dtype)
    return (
        jax.ShapeDtypeStruct((batch, 1, d), dtype),
        cache_shape,
        cache_shape,
        jax.ShapeDtypeStruct((batch,), jnp.int32),
    )
