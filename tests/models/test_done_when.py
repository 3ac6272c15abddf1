"""Issue 15's "done when" models run through spyrejax.jit on the device, none on the host.

A Llama-style decoder block (RMSNorm, rotary position embeddings computed inside from
the positions with sin and cos, grouped-query causal attention, a SwiGLU MLP) matches
``jax.jit`` in float32 and bfloat16, with its gradient, at a shape whose sticks are
padded and one whose sticks are full; a scan over stacked Llama layers and a greedy
KV-cache decode loop with the rotary angle of a traced position match too. Then each
model of the issue (those above, a small CNN classifier, a dropout model, sort and
top_k, the textbook GPT's training step) is planned with no host fallback: its report
lists none, and no ``SpyreFallbackWarning`` is raised (the tests turn warnings into
errors; the checks below say so explicitly too).
"""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from blocks import CNN
from helpers import assert_close, rand, tol
from helpers import assert_matches_jax_jit as _close
from models import (
    gpt_train_step,
    gqa_attention,
    llama_block,
    llama_layers,
    llama_params,
    projections,
    rms_norm,
    swiglu,
)
from test_gpt import SHAPES as GPT_SHAPES
from test_gpt import _setup as gpt_setup

import spyrejax as sj

# --- a Llama-style decoder block ---------------------------------------------------


# (d, heads, kv_heads, seq, ff): d 80, head dim 20, seq 12 and ff 144 pad their sticks
# in both dtypes; 256, 128 (its halves 64), 64 and 512 fill them.
LLAMA = {"padded": (80, 4, 2, 12, 144), "aligned": (256, 2, 1, 64, 512)}


def _params(shape, dtype, seed=0, layers=None):
    d, heads, kv_heads, _, ff = shape
    return llama_params(d, heads, kv_heads, ff, dtype, seed, layers)


def _block_fn(shape):
    _, heads, kv_heads, _, _ = shape
    return lambda p, x: llama_block(p, x, heads, kv_heads)


def _sums(shape):
    """The longest sum of a layer: the products' d and ff terms, attention's seq."""
    d, _, _, seq, ff = shape
    return max(d, ff, seq)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("name", LLAMA)
def test_llama_block_matches_jax_jit(name, dtype):
    shape = LLAMA[name]
    p, x = _params(shape, dtype), rand((shape[3], shape[0]), dtype, 1)
    # Norms, seven products, rope, a softmax and residual adds, with sums of up to ff
    # terms. Each side rounds every op's result; they differ where XLA fuses an op
    # differently (an FMA, a softmax pass): about ten float32 roundings, two of bfloat16
    # (the norms and softmax run in float32 either way).
    _close(_block_fn(shape), p, x, reduce_len=_sums(shape), ops=10 if dtype == jnp.float32 else 2)


@pytest.mark.parametrize("name", LLAMA)
def test_llama_block_gradient(name):
    shape = LLAMA[name]
    p, x = _params(shape, jnp.float32), rand((shape[3], shape[0]), jnp.float32, 1)
    fn = _block_fn(shape)
    ct = rand((shape[3], shape[0]), jnp.float32, 2)
    grad = jax.grad(lambda p, x: jnp.vdot(fn(p, x), ct), argnums=(0, 1))
    # The weights' gradients sum over the sequence as well as over d or ff.
    _close(grad, p, x, reduce_len=shape[3] * _sums(shape), ops=20)


def test_scan_over_stacked_llama_layers():
    shape = LLAMA["padded"]
    stacked = _params(shape, jnp.float32, layers=3)
    x = rand((shape[3], shape[0]), jnp.float32, 1)
    _close(llama_layers, stacked, x, reduce_len=_sums(shape), ops=30)  # three blocks


def test_gqa_scores_land_stuck_on_the_keys():
    # einsum("sgrd,tgd->grst") is K @ q^T: swapped, the scores are stuck on t, which the
    # transpose, the mask and the softmax's reductions all take (none is relaid out).
    q, k, v = rand((64, 2, 2, 32), seed=5), rand((64, 2, 32), seed=6), rand((64, 2, 32), seed=7)
    mask = jnp.tril(jnp.ones((64, 64), bool))
    args = [sj.to_device(a) for a in (q, k, v, mask)]
    reasons = [r.reason for r in sj.explain(gqa_attention, *args).restickifies]
    assert not [r for r in reasons if r.startswith(("reduce_", "transpose"))], reasons
    _close(gqa_attention, q, k, v, mask, reduce_len=64)


# --- greedy decoding with a KV cache ------------------------------------------------

VOCAB, STEPS, MAX_LEN, LAYERS = 50, 6, 8, 2


def decode(stacked, emb, w_out, tok0, heads=4, kv_heads=2):
    """Greedy decoding with a KV cache: each step embeds a token and scans the stacked
    layers over it at position ``t`` (the rotary angle of the traced ``t``), each layer
    writing that position's keys and values into its cache and attending to the
    positions written so far; the argmax of the logits is the next token. Returns the
    tokens and each step's logits.
    """
    hd = stacked["wk"].shape[2] // kv_heads
    cache = jnp.zeros((LAYERS, MAX_LEN, kv_heads, hd), emb.dtype)

    def layer(h, p, ck, cv, t):
        q, k, v = projections(p, rms_norm(h, p["g1"]), t[None], heads, kv_heads)
        ck = jax.lax.dynamic_update_slice(ck, k, (t, 0, 0))
        cv = jax.lax.dynamic_update_slice(cv, v, (t, 0, 0))
        visible = (jnp.arange(MAX_LEN) <= t)[None, :]
        h = h + gqa_attention(q, ck, cv, visible).reshape(1, -1) @ p["wo"]
        return h + swiglu(p, h), (ck, cv)

    def step(carry, t):
        tok, ck, cv = carry
        h, (ck, cv) = jax.lax.scan(
            lambda h, layer_args: layer(h, *layer_args, t), emb[tok][None], (stacked, ck, cv)
        )
        logits = h[0] @ w_out
        nxt = jnp.argmax(logits).astype(jnp.int32)
        return (nxt, ck, cv), (nxt, logits)

    return jax.lax.scan(step, (tok0, cache, cache), jnp.arange(STEPS))[1]


def _decode_args():
    shape = LLAMA["padded"]
    emb, w_out = rand((VOCAB, shape[0]), seed=3), rand((shape[0], VOCAB), seed=4)
    return _params(shape, jnp.float32, layers=LAYERS), emb, w_out, jnp.int32(7)


def test_greedy_kv_cache_decode_over_stacked_layers():
    args = _decode_args()
    tokens, logits = jax.tree.map(sj.to_host, sj.jit(decode)(*args))
    want_tokens, want_logits = jax.jit(decode)(*args)
    d, ff = LLAMA["padded"][0], LLAMA["padded"][4]
    assert_close(logits, want_logits, reduce_len=max(d, ff), ops=20 * LAYERS)
    # Where every step's best logit leads the next by more than the tolerance, any
    # implementation within it picks the same tokens: then they must be equal.
    t = tol(jnp.float32, reduce_len=max(d, ff), ops=20 * LAYERS)
    top2 = np.sort(np.asarray(want_logits), axis=-1)[:, -2:]
    scale = np.abs(np.asarray(want_logits)).max()
    assert (top2[:, 1] - top2[:, 0] > 2 * (t["atol"] + t["rtol"] * scale)).all()
    np.testing.assert_array_equal(tokens, want_tokens)
    assert len(set(np.asarray(want_tokens).tolist())) > 2  # the tokens feed back
    # The layers' weights are laid out for the layer scan once, not for every token.
    report = sj.explain(decode, *args)
    weights = [r for r in report.restickifies if r.value.startswith(f"float32[{LAYERS}, {d}")]
    assert weights and not [r for r in weights if "in the body of" in r.reason]


# --- every "done when" model runs on the device ------------------------------------


def _cnn():
    params, static = eqx.partition(CNN(jax.random.PRNGKey(0)), eqx.is_array)
    x, y = rand((4, 1, 16, 16), jnp.float32, 2), jnp.asarray([0, 3, 7, 9])

    def loss(p, x, y):
        logits = jax.vmap(eqx.combine(p, static))(x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    return jax.value_and_grad(loss), (params, x, y)


def _dropout():
    def loss(w, x, key):
        h = jnp.tanh(x @ w)
        keep = jax.random.bernoulli(jax.random.fold_in(key, 1), 0.9, h.shape)
        return jnp.mean(jnp.where(keep, h / 0.9, 0.0) ** 2)

    return jax.value_and_grad(loss), (rand((37, 37)), rand((3, 37), seed=1), jax.random.key(2))


def _sort_top_k():
    def f(x):
        values, indices = jax.lax.top_k(x, 5)
        return jnp.sort(x, axis=0), jnp.argsort(x, axis=-1, descending=True), values, indices

    return f, (rand((6, 70)),)


def _gpt_step():
    params, static, ids, labels = gpt_setup(GPT_SHAPES["padded"])
    opt = optax.adamw(1e-2)
    return gpt_train_step(static, opt), (params, opt.init(params), ids, labels)


def _llama_model(which):
    shape = LLAMA["padded"]
    fn = _block_fn(shape)
    p, x = _params(shape, jnp.float32), rand((shape[3], shape[0]), jnp.float32, 1)
    if which == "block":
        return fn, (p, x)
    if which == "block_bf16":
        return fn, (_params(shape, jnp.bfloat16), x.astype(jnp.bfloat16))
    if which == "grad":
        return jax.grad(lambda p, x: jnp.mean(fn(p, x) ** 2), argnums=(0, 1)), (p, x)
    return llama_layers, (_params(shape, jnp.float32, layers=3), x)


MODELS = {
    "llama_block": lambda: _llama_model("block"),
    "llama_block_bf16": lambda: _llama_model("block_bf16"),
    "llama_block_grad": lambda: _llama_model("grad"),
    "scan_over_llama_layers": lambda: _llama_model("scan"),
    "kv_cache_decode": lambda: (decode, _decode_args()),
    "cnn_classifier_step": _cnn,
    "dropout_step": _dropout,
    "sort_and_top_k": _sort_top_k,
    "gpt_adamw_step": _gpt_step,
}


@pytest.mark.parametrize("name", MODELS)
def test_done_when_models_run_on_the_device(name):
    # optax promotes as JAX does by default (0.9 ** an int32 count)
    with jax.numpy_dtype_promotion("standard" if name == "gpt_adamw_step" else "strict"):
        fn, args = MODELS[name]()
        with warnings.catch_warnings():
            warnings.simplefilter("error", sj.SpyreFallbackWarning)
            report = sj.explain(fn, *args)
    assert report.fallbacks == ()
    assert all(op.fallback is None for op in report.nodes)
    assert "host fallbacks: none" in str(report)
