"""RoPE under spyrejax.jit (issue 26, items 1 and 3): sticks over pairs, and both conventions.

A ``D``-stick tensor reshaped to ``[..., D/2, 2]`` or ``[..., D/2, 1, 2]`` is a view whose
stick walks the pair dims together (stick expression ``2*d2 + d3``); pointwise ops,
broadcasting, ``astype`` and reductions over other dims keep that stick, so no value
is padded to more than twice its data. The rotation itself, in both conventions and in
torch-spyre's failing forms (the ``[..., D/2, 2]`` reshape for head dims 64 and 128,
rotate-half, ``repeat_interleave``), runs without a restickify and matches jax.jit.
"""

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_matches_jax_jit, rand
from oracles import same_bits

import spyrejax as sj
from spyrejax.device import divide_op
from spyrejax.layout._lanes import window_refusal
from spyrejax.lowering import checking_cores
from spyrejax.lowering._graph import build_graph
from spyrejax.lowering.program._cores import dividing, injecting

T, H = 4, 2


def _angles(d, dtype=jnp.float16):
    angles = rand((T, d // 2), jnp.float32, seed=1, low=-3.0, high=3.0)
    return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def rope_pairs_reshape(x, cos, sin):
    """Interleaved pairs through the reshape torch-spyre fails to lower."""
    t, h, d = x.shape
    xr = x.reshape(t, h, d // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    c, s = cos[:, None], sin[:, None]
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(t, h, d)


def rope_pairs_slices(x, cos, sin):
    """Interleaved pairs through strided slices."""
    t, h, d = x.shape
    x0, x1 = x[..., ::2], x[..., 1::2]
    c, s = cos[:, None], sin[:, None]
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(t, h, d)


def rope_fms(x, cos, sin):
    """FMS's form: a 2 x 2 rotation per pair, on ``x.reshape(T, H, D // 2, 1, 2)``."""
    t, h, d = x.shape
    rot = jnp.stack([jnp.stack([cos, -sin], -1), jnp.stack([sin, cos], -1)], -2)
    return (rot[:, None] * x.reshape(t, h, d // 2, 1, 2)).sum(-1).reshape(t, h, d)


def rope_rotate_half(x, cos, sin):
    """Rotate-half: ``concatenate([-x2, x1])`` of the halves."""
    half = x.shape[-1] // 2
    c = jnp.concatenate([cos, cos], -1)[:, None]
    s = jnp.concatenate([sin, sin], -1)[:, None]
    return x * c + jnp.concatenate([-x[..., half:], x[..., :half]], -1) * s


def rope_repeat_interleave(x, cos, sin):
    """torch's ``repeat_interleave`` spelling: each angle twice, the pairs swapped."""
    t, h, d = x.shape
    c = jnp.repeat(cos, 2, axis=-1)[:, None]
    s = jnp.repeat(sin, 2, axis=-1)[:, None]
    xr = x.reshape(t, h, d // 2, 2)
    swapped = jnp.stack([-xr[..., 1], xr[..., 0]], -1).reshape(t, h, d)
    return x * c + swapped * s


ROPES = (rope_pairs_reshape, rope_pairs_slices, rope_fms, rope_rotate_half, rope_repeat_interleave)


def _padding_bounded(report, factor=2):
    """Every value with memory of its own takes at most ``factor`` times its data."""
    big = [t for t in report.tensors if not t.view and t.device_bytes > factor * t.data_bytes]
    assert not big, [(t.name, t.type) for t in big]


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("pairs", [(2,), (1, 2)], ids=["D/2,2", "D/2,1,2"])
def test_pair_reshapes_are_views_and_pointwise_ops_keep_their_sticks(d, pairs):
    def f(x, y):
        shape = (T, H, d // 2, *pairs)
        return (x.reshape(shape) * y.reshape(shape) + 1).reshape(T, H, d)

    x, y = rand((T, H, d), jnp.float16, seed=2), rand((T, H, d), jnp.float16, seed=3)
    report = sj.explain(f, x, y)
    assert report.copy_cost == 0 and not report.restickifies
    _padding_bounded(report)
    assert_matches_jax_jit(f, x, y, ops=2)


def test_astype_and_reductions_over_other_dims_keep_a_stick_over_pairs():
    # float16 sticks of 64 pairs become float32 sticks of 32 pairs (not a padded
    # 2-wide stick: 16 times the data), and the sum over heads keeps them.
    def f(x):
        return x.reshape(T, H, 64, 2).astype(jnp.float32).sum(1)

    x = rand((T, H, 128), jnp.float16, seed=4)
    report = sj.explain(f, x)
    assert report.copy_cost == 0 and not report.restickifies
    _padding_bounded(report)
    assert_matches_jax_jit(f, x, reduce_len=H)


# What each spelling's plan reads x by: its halves are windows (SliceView) or its pairs
# lanes (two LaneViews), and the interleaved results are written on their lanes
# (LaneAssemble). A count, or None: present.
_PAIRS = {"LaneView": 2, "LaneAssemble": None}
_VIEWS = {
    rope_pairs_reshape: _PAIRS,
    rope_pairs_slices: _PAIRS,
    rope_fms: _PAIRS,
    rope_rotate_half: {"SliceView": None},
    rope_repeat_interleave: {"LaneAssemble": None},
}


@pytest.mark.parametrize(
    "dtype", [jnp.float16, jnp.bfloat16, jnp.float32], ids=["f16", "bf16", "f32"]
)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("rope", ROPES, ids=lambda f: f.__name__)
def test_rope_copies_nothing_and_matches_jax_jit(rope, d, dtype):
    # Every spelling runs with no restickify and no copy: the pairs are lanes of x
    # (strided slices, the pairs picked out of the reshape, FMS's 2 x 2 rotation summed
    # term by term: lowering._pair_sums), the halves windows of it, and each rotated
    # piece is written by its op on its lanes (or window) of the result. Rotate-half
    # with float16 D 64 has halves that cut its 64-lane stick: they are lane windows
    # (lanes=0:32, 32:64) and the rotated halves are written on them.
    x = rand((T, H, d), dtype, seed=5)
    cos, sin = _angles(d, dtype)
    report = sj.explain(rope, x, cos, sin)
    assert not report.restickifies
    assert report.copy_cost == 0 and not report.copies
    views = _VIEWS[rope]
    if rope is rope_rotate_half and d * jnp.dtype(dtype).itemsize < 2 * 128:
        views = {"LaneView": None, "LaneAssemble": None}
        assert "lanes=32:64" in report.jaxpr and "SliceView" not in report.jaxpr
    for name, n in views.items():
        found = report.jaxpr.count(f"= {name}")
        assert found == n if n is not None else found > 0, (name, found)
    assert_matches_jax_jit(rope, x, cos, sin, ops=3)


_PARTIAL = [(80, jnp.float16), (96, jnp.float16), (80, jnp.bfloat16), (80, jnp.float32)]


@pytest.mark.parametrize(("d", "dtype"), _PARTIAL, ids=["f16-80", "f16-96", "bf16-80", "f32-80"])
@pytest.mark.parametrize(
    "rope", [r for r in ROPES if r is not rope_rotate_half], ids=lambda f: f.__name__
)
def test_interleaved_ropes_at_head_dims_of_a_partial_stick_copy_nothing(rope, d, dtype):
    # D 80 or 96 in 16 bits (a stick and a partial one a row), 80 in float32: the pairs
    # stacked [..., D/2, 2] fill no whole sticks (no grouped stick), but the result's
    # sticks take each rotated half on lanes k::2 (the partial stick's too: its 16 or
    # 32 data lanes hold 8 or 16 of each), so the interleave is built in place
    # (lowering._distribute's interleave rewrite; 2,048 elements were copied).
    x = rand((T, H, d), dtype, seed=5)
    cos, sin = _angles(d, dtype)
    report = sj.explain(rope, x, cos, sin)
    assert not report.restickifies and report.copy_cost == 0 and not report.copies
    for name, n in _VIEWS[rope].items():
        found = report.jaxpr.count(f"= {name}")
        assert found == n if n is not None else found > 0, (name, found)
    assert_matches_jax_jit(rope, x, cos, sin, ops=3)


_STRADDLING = [*_PARTIAL, (96, jnp.float32)]


@pytest.mark.parametrize(
    ("d", "dtype"), _STRADDLING, ids=["f16-80", "f16-96", "bf16-80", "f32-80", "f32-96"]
)
def test_rotate_half_whose_halves_straddle_sticks_copies_nothing(d, dtype):
    # The second half x[..., D/2:] starts on lane D/2 % eps of a stick and ends in the
    # next one: no lane window (a lane view sits on one stick a piece stick). Cut at
    # every stick boundary too (lowering._distribute), each quarter lies in one stick:
    # x[..., 40:64] on lanes 40-63 of tile 0 at 16-bit D 80 (a tile window), and so do
    # the angles' quarters; each rotated quarter is written on its window of the
    # result's sticks. It copied 4,096 elements (float32: 3,584) at [4, 2, D].
    x = rand((T, H, d), dtype, seed=5)
    layout = jax.typeof(sj.to_device(x)).layout
    assert "no window of one stick" in window_refusal(layout, x.shape, d // 2, d)
    cos, sin = _angles(d, dtype)
    report = sj.explain(rope_rotate_half, x, cos, sin)
    assert not report.restickifies and report.copy_cost == 0 and not report.copies
    assert f"lanes={d // 2}:64" in report.jaxpr and "= LaneAssemble" in report.jaxpr
    assert_matches_jax_jit(rope_rotate_half, x, cos, sin, ops=3)


def test_rotate_half_cut_at_sticks_leaves_no_unread_node():
    # At 16-bit D 80 the halves are cut at x's stick boundary (lowering._distribute.
    # _refined): each quarter's slice and negation are new nodes. The original halves'
    # slices and -x[..., 40:] were left in the graph, unread, and the planner evaluated
    # them: every node's result is now read (or is an output).
    x = rand((T, H, 80), jnp.float16, seed=5)
    cos, sin = _angles(80)
    graph = build_graph(jax.make_jaxpr(rope_rotate_half)(x, cos, sin))
    read = {id(v) for n in graph.nodes for v in n.ins} | {id(v) for v in graph.outputs}
    unread = [n.prim for n in graph.nodes if not any(id(v) in read for v in n.outs)]
    assert not unread
    assert sum(n.prim == "neg" for n in graph.nodes) == 2  # one a quarter of x[..., 40:]


@pytest.mark.parametrize("shape", [(64, 8, 64), (8, 64, 64)], ids=["T64", "H64"])
def test_rotate_half_on_lanes_where_another_dim_fills_a_stick(shape):
    # Where T or H has 64 elements or more the halves on lanes (each padded to the
    # 64-lane stick) still cost the planner less than copies dense along that dim: the
    # negation's and products' results are made and read inside one chain of kernels,
    # charged at their LX traffic (lowering._traffic.chained). Nothing is copied or
    # restickified; the halves of x, cos and sin are lane windows.
    t, _, d = shape
    x = rand(shape, jnp.float16, seed=5)
    angles = rand((t, d // 2), jnp.float32, seed=1, low=-3.0, high=3.0)
    cos, sin = jnp.cos(angles).astype(jnp.float16), jnp.sin(angles).astype(jnp.float16)
    report = sj.explain(rope_rotate_half, x, cos, sin)
    assert report.copy_cost == 0 and not report.copies
    assert not report.restickifies
    assert "lanes=32:64" in report.jaxpr and "= LaneAssemble" in report.jaxpr
    assert_matches_jax_jit(rope_rotate_half, x, cos, sin, ops=3)


def test_stacked_pairs_fill_their_sticks():
    # The stack of the rotated pairs is built with its stick over both dims (the
    # default layout of [T, H, D]), so the reshape back is a view and the sum with x
    # needs no restickify; no value takes more memory than its data. The pairs picked
    # out of x.reshape(T, H, D/2, 2) are x[..., ::2] and x[..., 1::2] read in place on
    # their lanes of x's sticks (LaneView), and each rotated half is written by its op
    # on its lanes of the result (LanePlace, LaneAssemble): nothing is copied.
    def f(x, cos, sin):
        return rope_pairs_reshape(x, cos, sin) + x

    x = rand((T, H, 128), jnp.float16, seed=7)
    cos, sin = _angles(128)
    report = sj.explain(f, x, cos, sin)
    assert not report.restickifies
    assert report.copy_cost == 0 and report.jaxpr.count("LaneView") == 2
    assert report.jaxpr.count("LanePlace") == 2 and "LaneAssemble" in report.jaxpr
    _padding_bounded(report, factor=1)
    assert_matches_jax_jit(f, x, cos, sin, ops=4)


def _attention_block(rope, weights_in_heads=False):
    """Llama's attention with ``rope`` on q and k: ``(x @ w).reshape(T, H, D)``.

    ``weights_in_heads``: the projections' weights are ``[dm, H, D]`` and read by
    ``jnp.einsum("tk,khd->thd")`` (Flax's ``DenseGeneral``), not ``[dm, H * D]``.
    """

    def block(p, x, cos, sin):
        s, dm = x.shape
        hd = cos.shape[-1] * 2
        heads = dm // hd

        def project(w):
            if weights_in_heads:
                return jnp.einsum("tk,khd->thd", x, w)
            return (x @ w).reshape(s, heads, hd)

        q = rope(project(p["wq"]), cos, sin)
        k = rope(project(p["wk"]), cos, sin)
        v = project(p["wv"])
        scores = jnp.einsum("shd,thd->hst", q, k) * hd**-0.5
        causal = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
        weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        return x + jnp.einsum("hst,thd->shd", weights, v).reshape(s, dm) @ p["wo"]

    return block


def _identity(x, cos, sin):
    return x


def _moved_besides(report, name):
    """Elements a plan moves between layouts and in copies, but the copies of ``name``'s lines."""
    own = sum(line.copy_cost for line in report.lines if f"({name})" in line.line)
    return report.restickify_cost + report.copy_cost - own


@pytest.mark.parametrize("rope", ROPES, ids=lambda f: f.__name__)
def test_llama_attention_block_with_each_rope_convention(rope):
    dm, hd = 128, 64
    names = ("wq", "wk", "wv", "wo")
    p = {
        n: rand((dm, dm), jnp.float32, seed=10 + i, low=-0.1, high=0.1) for i, n in enumerate(names)
    }
    x = rand((T, dm), jnp.float32, seed=6)
    cos, sin = _angles(hd, jnp.float32)
    block = _attention_block(rope)
    assert_matches_jax_jit(block, p, x, cos, sin, reduce_len=dm, ops=8)
    # Besides the rotation's own copies, the block moves no more than it does without
    # a rotation: the rope needs no restickify of its own (rotate-half's keys move to
    # the sequence stick before it, where the plain block copies them in its reshape).
    plain = sj.explain(_attention_block(_identity), p, x, cos, sin)
    moved = _moved_besides(sj.explain(block, p, x, cos, sin), rope.__name__)
    assert moved <= _moved_besides(plain, "_identity")


def test_rotate_half_at_float16_head_dim_64_moves_nothing_in_an_attention_block():
    # The halves of q and k ((x @ w).reshape(T, H, 64): one 64-lane stick a row) are lane
    # windows of the projection's result, and each rotated half is written on its lanes
    # of a result in that same layout (the layout of [T, H * 64] over [T, H, 64]): no
    # restickify and no copy on the rope's lines, and the block moves no more than it
    # does without a rotation.
    dm, hd = 128, 64
    names = ("wq", "wk", "wv", "wo")
    p = {
        n: rand((dm, dm), jnp.float16, seed=10 + i, low=-0.1, high=0.1) for i, n in enumerate(names)
    }
    x = rand((T, dm), jnp.float16, seed=6)
    cos, sin = _angles(hd)
    block = _attention_block(rope_rotate_half)
    report = sj.explain(block, p, x, cos, sin)
    own = [line for line in report.lines if "(rope_rotate_half)" in line.line]
    assert own and all(line.copy_cost == 0 and line.restickify_cost == 0 for line in own)
    assert not [r for r in report.restickifies if "(rope_rotate_half)" in r.line]
    assert not [c for c in report.copies if "(rope_rotate_half)" in c[0]]
    assert report.jaxpr.count("lanes=32:64} = LaneView") == 4  # both halves of q and k, twice
    assert report.jaxpr.count("= LaneAssemble") == 2
    plain = sj.explain(_attention_block(_identity), p, x, cos, sin)
    moved = report.restickify_cost + report.copy_cost
    assert moved <= plain.restickify_cost + plain.copy_cost
    assert_matches_jax_jit(block, p, x, cos, sin, reduce_len=dm, ops=8)


_IN_HEADS = [*_PARTIAL, (96, jnp.bfloat16)]  # float32 96 is whole sticks: merged as before


@pytest.mark.parametrize(
    ("d", "dtype"), _IN_HEADS, ids=["f16-80", "f16-96", "bf16-80", "f32-80", "bf16-96"]
)
def test_rotate_half_on_projections_with_weights_in_heads_copies_nothing(d, dtype):
    # Weights [dm, H, D] read by einsum("tk,khd->thd"), at head dims that are no whole
    # sticks: the product runs per head (lowering.rules._dot's "heads" mode), each
    # head's D on sticks of its own (the default layout of [T, H, D]), so the weights
    # are read as they arrive (merged into one n they were copied: 122,880 elements at
    # 16-bit D 80) and the rotation's quarters are tile windows of q and k (it copied
    # 10,752 elements in 14 slices at 16 bits, 14,080 in 22 at float32).
    dm = 2 * d
    names = ("wq", "wk", "wv", "wo")
    p = {
        n: rand((dm, 2, d) if n != "wo" else (dm, dm), dtype, seed=10 + i, low=-0.1, high=0.1)
        for i, n in enumerate(names)
    }
    x = rand((T, dm), dtype, seed=6)
    cos, sin = _angles(d, dtype)
    block = _attention_block(rope_rotate_half, weights_in_heads=True)
    report = sj.explain(block, p, x, cos, sin)
    own = [line for line in report.lines if "(rope_rotate_half)" in line.line]
    assert own and all(line.copy_cost == 0 and line.restickify_cost == 0 for line in own)
    projections = [line for line in report.lines if "project" in line.line]
    assert projections and all(line.copy_cost == line.restickify_cost == 0 for line in projections)
    assert "LoadRelayout" not in report.jaxpr
    assert_matches_jax_jit(block, p, x, cos, sin, reduce_len=dm, ops=8)


@pytest.mark.parametrize(
    ("d", "dtype"), _IN_HEADS, ids=["f16-80", "f16-96", "bf16-80", "f32-80", "bf16-96"]
)
def test_rotate_half_on_projections_split_into_heads_copies_nothing(d, dtype, monkeypatch):
    # (x @ w).reshape(T, H, D) with w [dm, H * D]: the product's sticks run across the
    # heads (head 1 starts mid-stick at 16-bit D 80), so the rotation copied its
    # quarters (16-bit: 10,752 elements in 14 slices, 60.05 us predicted; float32 D 80:
    # 14,080 in 22, 81.97 us). lowering._heads rewrites it as dot_general(x,
    # w.reshape(dm, H, D)), whose per-head mode lays each weight out per head as the
    # matmul loads it (in LX, its read charged at the stored bytes): nothing is copied
    # or restickified through DDR on the rotation's or the projections' lines, and the
    # block is predicted faster than the product as written (41.23 us at 16-bit D 80,
    # 52.49 at float32 D 80).
    import spyrejax.lowering._graph as graph

    dm = 2 * d
    names = ("wq", "wk", "wv", "wo")
    p = {n: rand((dm, dm), dtype, seed=10 + i, low=-0.1, high=0.1) for i, n in enumerate(names)}
    x = rand((T, dm), dtype, seed=6)
    cos, sin = _angles(d, dtype)
    block = _attention_block(rope_rotate_half)
    report = sj.explain(block, p, x, cos, sin)
    own = [line for line in report.lines if "(rope_rotate_half)" in line.line]
    assert own and all(line.copy_cost == 0 and line.restickify_cost == 0 for line in own)
    projected = [r for r in report.restickifies if "project)" in r.line]
    assert len(projected) == 3 and all(r.in_lx for r in projected)  # q, k, v's weights
    assert not [c for c in report.copies if "project)" in c[0] or "(rope_rotate_half)" in c[0]]
    monkeypatch.setattr(graph, "split_heads", lambda g, facts: g)  # the product as written
    written = sj.explain(_attention_block(rope_rotate_half), p, x, cos, sin)
    assert written.copy_cost > 10_000 and report.time_s < 0.8 * written.time_s
    monkeypatch.undo()
    assert_matches_jax_jit(block, p, x, cos, sin, reduce_len=dm, ops=8)


def test_fms_rope_at_the_issue_shape_keeps_every_value_within_its_data():
    # The issue's figure: T 64, H 8, D 128 laid the [T, 1, D/2, 2, 2] product out at
    # 33.5 MB for 131 KB of data (its trailing 2s each padded to a stick). Now no value
    # takes more device memory than its data, and nothing is copied: the sum over each
    # pair is unrolled (lowering._pair_sums), x read on its lanes (4,096 elements were
    # copied at [4, 2, 128] before).
    t, h, d = 64, 8, 128
    x = jax.ShapeDtypeStruct((t, h, d), jnp.float16)
    c = jax.ShapeDtypeStruct((t, d // 2), jnp.float16)
    report = sj.explain(rope_fms, x, c, c)
    assert not report.restickifies and report.copy_cost == 0
    _padding_bounded(report, factor=1)
    assert report.device_bytes < 2 * 1024 * 1024


def _stack_scalars(a, b):
    return jnp.stack([a * 2, b + 1]).reshape(2, 1)  # 1-D: no pairs of a trailing dim


def _stack_keys(k):
    ks = jax.random.split(k, 4).reshape(2, 2)  # PRNG keys have no Spyre format
    pairs = jnp.stack([ks, ks.T], -1).reshape(2, 4)
    return jax.random.uniform(pairs[1, 2], (3,))


def _stack_past_the_pairs(a, b):
    # [4, 8, 2] in float16: the stick over the trailing dims takes all of them
    # (64 = 4 * 8 * 2), more than the pairs; [4, 16] is still a view of it.
    return jnp.stack([a, b + 1], -1).reshape(4, 16)


def test_stacks_the_interleave_rewrite_leaves_or_plans_as_before():
    # The three follow-ups of the interleave rewrite (3e57da1, b5f65bc, 70ac853): a
    # stack of scalars is no pair stack, a stack of keys stays on the host, and a
    # stack whose grouped stick spans more dims than the pairs still plans.
    assert_matches_jax_jit(_stack_scalars, jnp.float32(2), jnp.float32(3))
    assert_matches_jax_jit(_stack_keys, jax.random.key(3), exact=True)
    a, b = rand((4, 8), jnp.float16, seed=1), rand((4, 8), jnp.float16, seed=2)
    assert_matches_jax_jit(_stack_past_the_pairs, a, b)
    assert "Reshape[" in sj.explain(_stack_past_the_pairs, a, b).jaxpr


@pytest.mark.parametrize("rope", ROPES, ids=lambda f: f.__name__)
def test_every_rope_gives_the_default_bits_per_core(rope):
    # float16, D 128: the halves of rotate-half fill whole sticks (windows), the other
    # spellings write their pieces on lanes; per core, the same bits either way.
    x = rand((T, H, 128), jnp.float16, seed=5)
    cos, sin = _angles(128)
    got = sj.to_host(sj.jit(rope, emulate="cores")(x, cos, sin))
    assert same_bits(got, sj.to_host(sj.jit(rope)(x, cos, sin)))


def test_bfloat16_fms_converts_its_pairs_on_their_lanes_per_core():
    # bfloat16's excess-precision rule (lowering._rounding) computes FMS's pair products
    # in float32: each pair x[..., k::2] is widened by an astype, which reads it on its
    # lanes of x (a LaneView, no SliceCopy: 1,024 elements were copied at D 64). Under
    # emulate="cores" each core converts its box's lanes: the default bits, which are
    # jax.jit's, and the check mode compares every conversion per core.
    x = rand((T, H, 64), jnp.bfloat16, seed=5)
    cos, sin = _angles(64, jnp.bfloat16)
    report = sj.explain(rope_fms, x, cos, sin)
    assert report.copy_cost == 0 and "SliceCopy" not in report.jaxpr
    assert report.jaxpr.count("= LaneView") == 2
    got = sj.to_host(sj.jit(rope_fms, emulate="cores")(x, cos, sin))
    assert same_bits(got, sj.to_host(sj.jit(rope_fms)(x, cos, sin)))
    assert same_bits(got, jax.jit(rope_fms)(x, cos, sin))
    with checking_cores() as check:
        sj.to_host(sj.jit(rope_fms)(x, cos, sin))
        jax.effects_barrier()
    assert check.take() == [] and not check.fallbacks and check.checked["astype"] >= 4


@pytest.mark.parametrize("rope", [rope_pairs_slices, rope_fms], ids=lambda f: f.__name__)
def test_lane_writes_run_per_core_divided_as_their_producers(rope):
    # Each rotated piece is written on its lanes by the cores that computed it: under
    # emulate="cores" LanePlace and LaneAssemble run per core with the division the
    # device model gave the op producing the piece (explain's), give the default bits,
    # and the check mode compares them per core.
    x = rand((T, H, 128), jnp.float32, seed=5)
    cos, sin = _angles(128, jnp.float32)
    seen = []

    def watched(space, machine, hint):
        div = divide_op(space, machine, hint)
        seen.append((space.opfunc, dict(div.splits)))
        return div

    with dividing(watched):
        got = sj.to_host(sj.jit(rope, emulate="cores")(x, cos, sin))
    assert same_bits(got, sj.to_host(sj.jit(rope)(x, cos, sin)))
    writes = [splits for name, splits in seen if name.startswith("lane_")]
    assert [n for n, _ in seen if n.startswith("lane_")] == ["lane_place"] * 2 + ["lane_assemble"]
    planned = [dict(op.division.splits) for op in sj.explain(rope, x, cos, sin).ops if op.division]
    assert writes == [planned[-1]] * 3 and planned[-1]["mb"] > 1  # the stick dim split too
    with checking_cores() as check:
        sj.to_host(sj.jit(rope)(x, cos, sin))
        jax.effects_barrier()
    assert check.take() == [] and not check.fallbacks
    assert check.checked["lane_place"] == 2 and check.checked["lane_assemble"] == 1


def test_the_check_sees_a_core_writing_wrong_lanes():
    x = rand((T, H, 128), jnp.float32, seed=5)
    cos, sin = _angles(128, jnp.float32)

    def swap_cores(prim, div, vals):  # the lane writes' cores 0 and 1 trade their data
        if div.space.opfunc != "lane_place":
            return vals
        return [v.at[0].set(v[1]).at[1].set(v[0]) for v in vals]

    with checking_cores() as check, injecting(swap_cores):
        sj.to_host(sj.jit(rope_pairs_slices)(x, cos, sin))
        jax.effects_barrier()
    found = check.take()
    assert found and {m.op for m in found} == {"lane_place"}
