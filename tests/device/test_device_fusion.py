"""Fused kernels: the chains torch-spyre runs as one kernel, found over the listed ops and
costed as one (one launch, DDR traffic only for the kernel's inputs and outputs); and
``explain`` of a whole Granite-3.3-8B decoder layer from shapes alone."""

import re
from functools import partial

import jax
import jax.numpy as jnp
import models
import numpy as np
import pytest

import spyrejax as sj
from spyrejax.device import Machine

S = jax.ShapeDtypeStruct
F16 = np.float16
F32 = np.float32


def layer_norm(x, w, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * w + b


def einsum_attention(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(F16)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


QKV = [S((1, 128, 4, 64), F16)] * 3
FAMILIES = {
    "softmax": (lambda s: jax.nn.softmax(s, -1), [S((8, 256, 512), F16)]),
    "layer_norm": (layer_norm, [S((64, 512), F16), S((512,), F16), S((512,), F16)]),
    "rms_norm": (models.rms_norm, [S((64, 512), F16), S((512,), F16)]),
    "attention": (jax.nn.dot_product_attention, QKV),
    "attention (einsum)": (einsum_attention, QKV),
    "reduction": (lambda x: x.sum(0), [S((64, 512), F16)]),  # a float32 cast feeds it
    "matmul_epilogue": (
        lambda x, w, b: jax.nn.gelu(x @ w + b),
        [S((64, 512), F16), S((512, 256), F16), S((256,), F16)],
    ),
    "matmul_epilogue (silu)": (
        lambda x, w: jax.nn.silu(x @ w),
        [S((64, 512), F16), S((512, 256), F16)],
    ),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_one_fused_kernel(name):
    f, args = FAMILIES[name]
    with jax.numpy_dtype_promotion("standard"):  # jax.nn's attention scales by a float32
        d = sj.explain(f, *args).device
    (g,) = d.groups
    assert g.family == name.split()[0] and g.in_lx
    kernels = [d.ops[i] for i in g.ops if d.ops[i].desc.kind != "view"]
    assert len(kernels) >= 2 and all(op.group == g.index for op in kernels)
    assert sum(op.cost.launch_s for op in kernels) == pytest.approx(d.machine.launch_s)
    assert g.time_s == pytest.approx(sum(op.time_s for op in kernels))
    assert g.time_s < g.unfused_s
    if "matmul" in name or "attention" in name:
        assert any(op.opfunc in ("matmul", "batchmatmul") for op in kernels)


def test_a_fused_softmax_reads_its_input_and_writes_its_output_once():
    n = 8 * 256 * 512 * 2
    d = sj.explain(lambda s: jax.nn.softmax(s, -1), S((8, 256, 512), F16)).device
    (g,) = d.groups
    kernels = [d.ops[i] for i in g.ops]
    assert sum(op.read_bytes for op in kernels) == n
    assert sum(op.write_bytes for op in kernels) == n
    assert d.time_s == pytest.approx(g.time_s) and g.time_s < g.unfused_s
    # The same traffic as x * 2, read and written in one stream (the turnaround of both
    # counts), a reduction's read at its own, lower bandwidth: a little more time.
    scale = sj.explain(lambda s: s * 2, S((8, 256, 512), F16)).time_s
    assert scale < g.time_s < 1.25 * scale


TINY = S((4, 1, 4096), F16)  # spec section 8's tiny add takes about 1 us


@pytest.mark.parametrize("name", ["softmax", "rms_norm"])
def test_each_op_of_a_fused_kernel_is_a_stage_with_its_own_setup(name):
    f, args = FAMILIES[name]
    args = [S(TINY.shape[-1:], F16) if a.ndim == 1 else TINY for a in args]
    d = sj.explain(f, *args).device
    (g,) = d.groups
    m = d.machine
    stages = [d.ops[i] for i in g.ops if d.ops[i].cost.stage_s]
    add = sj.explain(lambda a, b: a + b, TINY, TINY).time_s
    # tiny data: every stage (casts ride along) takes about the floor (the first reads
    # 32 KiB from DDR, a little over it), the kernel one launch
    assert len(stages) >= 5 and all(op.opfunc != "astype" for op in stages[1:])
    assert g.time_s == pytest.approx(len(stages) * m.stage_s + m.launch_s, rel=0.05)
    assert g.time_s > 4 * add  # the card: several times what the tiny add takes
    assert Machine.ktir_cpu().stage_s == 0


def test_granite_sized_norms_and_softmax_take_at_least_their_ddr_bytes_at_100_gbs():
    arg = S((1, 32, 512, 512), F16)
    r = sj.explain(lambda s: jax.nn.softmax(s, -1), arg)
    assert r.time_s > 2 * arg.size * 2 / 100e9 + r.device.machine.launch_s
    x, w = S((512, 4096), F16), S((4096,), F16)
    r = sj.explain(models.rms_norm, x, w)
    assert r.time_s > (2 * x.size + w.size) * 2 / 100e9 + r.device.machine.launch_s


def _bytes(d, g):
    ops = [d.ops[i] for i in g.ops]
    return sum(op.read_bytes for op in ops), sum(op.write_bytes for op in ops)


@pytest.mark.parametrize("axis", [0, -1])
def test_a_softmax_whose_rows_do_not_fit_lx_streams_them_in_two_passes(axis):
    # lx_fraction 0.02: 41,943 B a core. Over axis 0 a core's share of one column (the
    # max's division leaves it hundreds of the 4096 rows, a 128-byte stick each) does
    # not fit; over the last axis a row (64 float32, two sticks) does.
    m = Machine.spyre(lx_fraction=0.02)
    x = S((4096, 64), np.float32)  # 1 MiB, dense sticks
    d = sj.explain(lambda s: jax.nn.softmax(s, axis), x, machine=m).device
    (g,) = d.groups
    read, written = _bytes(d, g)
    assert written == x.size * 4  # the output alone: no intermediate leaves the kernel
    if axis == -1:
        assert g.in_lx and g.passes == 1 and read == x.size * 4
        return
    assert not g.in_lx and g.passes == 2
    assert "two passes, rows over LX" in g.describe()
    summary = str(sj.explain(lambda s: jax.nn.softmax(s, axis), x, machine=m))
    assert "fused kernels (1): softmax (two passes, rows over LX) at " in summary
    assert read == 2 * x.size * 4  # pass 1 (max and sum), pass 2 (the output)


def test_a_kernel_streams_its_rows_again_only_to_broadcast_its_reductions_back():
    from spyrejax.device._fusion import Fusion
    from spyrejax.device._kernels import first_pass, row_passes

    d = sj.explain(lambda s: jax.nn.softmax(s, 0), S((256, 64), np.float32)).device
    (g,) = d.groups
    descs = [op.desc for op in d.ops]
    whole = Fusion(g.family, g.ops, g.internal, g.ops[0])
    assert row_passes(descs, whole) == 2  # sub(x, max) makes rows again
    first = {descs[i].opfunc for i in first_pass(descs, whole)}
    assert {"max", "sub", "exp", "sum"} <= first and "div" not in first
    stats = tuple(i for i in g.ops if descs[i].output[1].shape != (256, 64))
    assert row_passes(descs, Fusion(g.family, stats, frozenset(), stats[0])) == 1


def test_norms_over_a_leading_axis_measure_its_column_not_the_last_dim():
    m = Machine.spyre(lx_fraction=0.02)
    x, w = S((4096, 64), np.float32), S((64,), np.float32)
    norm = lambda x, w: x * jax.lax.rsqrt((x * x).mean(0, keepdims=True) + 1e-6) * w  # noqa: E731
    d = sj.explain(norm, x, w, machine=m).device
    (g,) = d.groups
    read, written = _bytes(d, g)
    assert g.family == "rms_norm" and g.passes == 2 and not g.in_lx
    assert written == x.size * 4 and 2 * x.size * 4 <= read < 2 * x.size * 4 + 4096


def test_an_epilogue_whose_rows_do_not_fit_lx_sends_them_through_ddr():
    m = Machine.spyre(lx_fraction=0.0005)  # 838 B a core: a stick a value, 9 values
    f, args = FAMILIES["matmul_epilogue"]
    d = sj.explain(f, *args, machine=m).device
    (g,) = d.groups
    assert not g.in_lx and g.passes == 1 and "through DDR" in g.describe()
    assert _bytes(d, g)[1] > 2 * 64 * 256 * 2  # intermediates written out


@pytest.mark.parametrize("name", ["attention", "attention (einsum)"])
def test_a_flash_attention_over_a_long_key_length_keeps_its_intermediates_in_lx(name):
    # one query token against 131,072 keys: a row of its float32 scores is 512 KiB,
    # over the 410 KiB of LX, but the kernel streams the keys a block at a time and
    # holds a stick of each score-shaped value per query row (it was "through DDR",
    # its scores written and read back: 1,214 us where the kernel is 225)
    f, _ = FAMILIES[name]
    q, kv = S((1, 1, 1, 64), F16), S((1, 131072, 1, 64), F16)
    with jax.numpy_dtype_promotion("standard"):
        r = sj.explain(f, q, kv, kv)
    d = r.device
    (g,) = d.groups
    assert g.family == "attention" and g.in_lx and g.passes == 1
    assert "through DDR" not in str(r)
    read, written = _bytes(d, g)
    assert read == (q.size + 2 * kv.size) * 2  # q, k and v once: no score read back
    assert written < 64 * 1024  # the output (<= 64 sticks): no score written
    assert g.time_s < g.unfused_s / 3


def test_an_epilogue_on_a_wide_matmul_keeps_its_intermediates_in_lx():
    # 65,536 columns: a row is 128 KiB of each of its 9 values, but the epilogue's
    # elementwise ops take the matmul's output block a stick at a time: only the
    # result leaves the kernel
    f, _ = FAMILIES["matmul_epilogue"]
    x, w, b = S((16, 128), F16), S((128, 65536), F16), S((65536,), F16)
    d = sj.explain(f, x, w, b).device
    (g,) = d.groups
    assert g.family == "matmul_epilogue" and g.in_lx
    read, written = _bytes(d, g)
    assert written == 16 * 65536 * 2
    assert read <= (x.size + w.size + b.size) * 2 + 128 * 1024  # the bias's sticks


def test_a_kernel_on_fewer_cores_moves_its_bursts_on_those_cores():
    # 16 rows, 379 sticks (prime: no split): every op on 16 cores, each core's slice
    # of x and of the output 47 KiB, one burst (under ddr_burst_bytes)
    x = S((16, 64 * 379), F16)
    d = sj.explain(lambda s: jax.nn.softmax(s, -1), x).device
    (g,) = d.groups
    m = d.machine
    assert {d.ops[i].division.cores_used for i in g.ops if d.ops[i].division} == {16}
    assert x.size * 2 // 16 <= m.ddr_burst_bytes
    bursts = 2 * x.size * 2 / (16 * m.ddr_burst_core_bw)  # load x, then store the output
    assert bursts < g.time_s < bursts + m.launch_s + 1e-6


def test_a_cast_feeding_a_reduction_is_one_kernel_reading_its_input_once():
    """jnp upcasts a half sum to float32: the cast, the sum and the cast back are one
    kernel that reads the input once and keeps the float32 copy in LX (it was three
    kernels writing and reading that copy through DDR: 366 us for this shape)."""
    x = S((1024, 4096), F16)
    d = sj.explain(lambda a: a.sum(0), x).device
    (g,) = d.groups
    assert g.family == "reduction" and g.in_lx
    assert [d.ops[i].opfunc for i in g.ops] == ["astype", "sum", "astype"]
    assert sum(op.read_bytes for op in d.ops) == x.size * 2
    assert sum(op.write_bytes for op in d.ops) == 4096 * 2
    scale = sj.explain(lambda a: a * 2, x).time_s  # reads what the sum reads, and writes
    assert x.size * 2 / d.machine.ddr_bw < g.time_s < scale < g.unfused_s / 2


def test_a_reduction_spread_back_over_its_rows_is_not_a_reduction_kernel():
    """``x - x.sum(0)`` reads the sums back against every row: the sum keeps its cast
    prologue and epilogue in its kernel, the subtraction runs after it."""
    d = sj.explain(lambda a: a - a.sum(0), S((64, 512), F16)).device
    (g,) = d.groups
    assert g.family == "reduction"
    sub = next(op for op in d.ops if op.opfunc == "sub")
    assert sub.group is None and sub.index not in g.ops


def test_ops_neither_feeding_a_reduction_nor_on_its_result_alone_are_no_reduction_kernel():
    """An optimizer's moment update of a bias gradient, ``0.9 * m + x.sum(0)``: ``0.9 * m``
    only joins the chain at the add (a GPT step's whole AdamW update, 550 ops, was one
    kernel for a few such sums)."""
    d = sj.explain(lambda x, m: 0.9 * m + x.sum(0), S((64, 512), F32), S((512,), F32)).device
    assert d.groups == ()


def test_a_relayout_in_a_kernel_reads_a_value_it_keeps_in_lx_from_lx():
    """A layer norm's ``rsqrt`` relaid out for its multiply, the relaid value read again
    by the backward pass after the kernel: the relayout reads the kept ``rsqrt`` through
    the LX port (no DDR read), and writes its result out for the backward."""

    def norm(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)

    # In float16: in float32 the planner keeps the rsqrt on its stick since it charges the
    # kernel's values their LX traffic (lowering._traffic.chained), and nothing is relaid.
    f = jax.grad(lambda x, w: ((norm(x) @ w) ** 2).sum())
    d = sj.explain(f, S((128, 256), F16), S((256, 256), F16)).device
    relayouts = [
        (d.ops[i], g)
        for g in d.groups
        for i in g.ops
        if d.ops[i].desc.kind == "restickify" and d.ops[i].desc.inputs[0][0] in g.internal
    ]
    out = [op for op, g in relayouts if op.desc.output[0] not in g.internal]
    assert out, "the case under test: a relaid value leaving its kernel"
    assert all(op.read_bytes == 0 for op, _ in relayouts)
    assert all(op.write_bytes == op.desc.output[1].nbytes for op in out)


def test_a_bfloat16_residual_widened_for_its_norm_reads_its_operands_once():
    """``h = x + y`` in bfloat16, widened for an RMS norm and read rounded after it: jax.jit
    keeps the float32 sum for the norm (excess precision) and rounds it for the other
    reader; one sum, so ``x`` and ``y`` are read once (they were twice: by the bfloat16
    add and again by the float32 one, the Granite layer's residual 8 MiB more)."""

    def f(x, y, w):
        h = x + y
        return models.rms_norm(h, w) + h

    x, w = S((64, 512), jnp.bfloat16), S((512,), jnp.bfloat16)
    d = sj.explain(f, x, x, w).device
    made = {op.desc.output[0] for op in d.ops}
    inputs = {n for op in d.ops for n, _ in op.desc.inputs} - made
    readers = [op for op in d.ops for n, _ in op.desc.inputs if n in inputs]
    assert sum(op.read_bytes for op in d.ops) == 2 * x.size * 2 + w.size * 2
    assert len([op for op in readers if op.desc.kind != "view"]) == 2  # x and y: once each


def test_chains_of_no_family_are_not_fused():
    r = sj.explain(lambda a, b: jnp.tanh(a * b + 1), S((64, 512), F16), S((64, 512), F16))
    assert r.device.groups == ()
    assert all(op.group is None for op in r.ops)


def test_a_value_read_after_the_kernel_is_written_out():
    def f(s):
        e = jnp.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True), e  # e leaves the kernel

    d = sj.explain(f, S((64, 512), F16)).device
    (g,) = d.groups
    exp = next(d.ops[i] for i in g.ops if d.ops[i].opfunc == "exp")
    assert exp.desc.output[0] not in g.internal and exp.write_bytes == 64 * 512 * 2


def test_pieces_placed_in_a_buffer_read_after_the_kernel_are_written_and_read_whole():
    """Rotate-half's ``concatenate`` written in place: each half is a piece its kernel
    writes into q's buffer (a ``place`` view), and the attention reads all of q."""

    def f(x, w, c, s, k, v):
        y = x @ w
        a, b = y[:, :64], y[:, 64:]
        q = jnp.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        p = jax.nn.softmax((q @ k.T).astype(np.float32), -1).astype(v.dtype)
        return p @ v

    rows, half = S((256, 64), F16), S((512, 128), F16)
    d = sj.explain(f, S((256, 256), F16), S((256, 128), F16), rows, rows, half, half).device
    epilogue, attention = d.groups
    assert (epilogue.family, attention.family) == ("matmul_epilogue", "attention")
    assert any(d.ops[i].opfunc == "place" for i in epilogue.ops)  # the case under test
    q_bytes = 256 * 128 * 2
    assert sum(d.ops[i].write_bytes for i in epilogue.ops) == q_bytes  # both halves
    scores = next(d.ops[i] for i in attention.ops if d.ops[i].opfunc == "matmul")
    assert scores.read_bytes == q_bytes  # k is read by its relayout in the kernel


def test_explain_names_the_fused_kernels_and_times_each_line():
    r = sj.explain(FAMILIES["layer_norm"][0], *FAMILIES["layer_norm"][1])
    text = str(r)
    assert re.search(r"fused kernels \(1\): layer_norm at test_device_fusion\.py:\d+", text)
    assert "device us" in text and "fused #0 layer_norm" in str(r.device)
    assert sum(r.line_times.values()) == pytest.approx(r.time_s)


ATTENTION = {  # q, k and v shapes [batch, tokens, heads, head dim], and causal
    "prefill 512 against 4096": ((1, 512, 32, 128), (1, 4096, 32, 128), False),
    "GQA (8 KV heads)": ((1, 512, 32, 128), (1, 4096, 8, 128), False),
    "decode (batch 4, GQA)": ((4, 1, 32, 128), (4, 4096, 8, 128), False),
    "causal 512": ((1, 512, 32, 128), (1, 512, 32, 128), True),
}


@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_a_granite_sized_attention_is_one_kernel_near_its_pt_and_ddr_bounds(case):
    """Issue 25: attention at Granite sizes, fp16, runs as ONE kernel.

    The bounds: the two matmuls' MACs at the PT peak, q, k, v and the output read or
    written once at the DDR's best (section 8's 150 GB/s), and the softmax's bytes
    through the LX ports; the kernel takes at least the largest, and no more than the
    largest with the matmul model's efficiency or the x * 2 sweep's 100 GB/s, plus a
    launch and its stages (the scores never go to DDR).
    """
    qs, kvs, causal = ATTENTION[case]
    q, kv = S(qs, F16), S(kvs, F16)
    with jax.numpy_dtype_promotion("standard"):
        d = sj.explain(partial(jax.nn.dot_product_attention, is_causal=causal), q, kv, kv).device
    m = d.machine
    (g,) = d.groups
    macs = 2 * qs[0] * qs[1] * qs[2] * kvs[1] * qs[3]
    operands = (2 * q.size + 2 * kv.size) * 2
    assert g.family == "attention" and g.in_lx and d.macs == macs
    moved = sum(d.ops[i].read_bytes + d.ops[i].write_bytes for i in g.ops)
    if not causal:  # no intermediate leaves LX (a causal mask is read from outside)
        assert moved == pytest.approx(operands, rel=0.01)  # (decode's q: a few sticks)
    pt = macs / (m.peak_macs_per_s * m.cores)  # 477 us for the first at 32,768 MAC/cycle
    stages = sum(1 for i in g.ops if d.ops[i].cost.stage_s) * m.stage_s
    # the vector units pass the scores through the cores' LX ports (128 B/cycle/core),
    # once per op of the softmax: GQA's 4 heads per K row make that the larger term
    lx = sum(d.ops[i].cost.lx_s for i in g.ops)
    lower = max(pt, operands / 150e9, lx)
    upper = max(pt / m.matmul_efficiency, operands / 100e9, lx) + m.launch_s + stages
    assert lower < g.time_s < upper


# --- a whole Granite-3.3-8B decoder layer -----------------------------------------------------


@pytest.fixture(scope="module")
def granite():
    weights = models.granite_structs()
    prefill = sj.explain(models.granite_prefill, weights, S((512, 4096), F16))
    decode = sj.explain(models.granite_decode, weights, *models.granite_decode_structs())
    return prefill, decode


@pytest.mark.parametrize("which", ["prefill", "decode"])
def test_a_granite_layer_is_explained_from_shapes_with_its_fused_kernels(granite, which):
    r = granite[which == "decode"]
    families = sorted(g.family for g in r.device.groups)
    assert families.count("rms_norm") == 2 and "attention" in families
    assert "matmul_epilogue" in families
    assert r.time_s > 0 and r.device.lx_peak <= r.device.lx_budget
    times = [row.device_s for row in r.lines]
    assert times == sorted(times, reverse=True)  # the summary's rows: costliest first
    assert sum(times) == pytest.approx(r.time_s)
    assert "fused kernels" in str(r) and "attention at models.py" in str(r)


def test_granite_decode_streams_its_weights_near_the_measured_rate(granite):
    _, decode = granite
    mlp = [g for g in decode.device.groups if g.family == "matmul_epilogue"]
    weights = 3 * 4096 * 12800 * 2  # w1, w3, w2: the MLP's weights, read once
    mlp_s = sum(decode.line_times[line] for line in decode.line_times if "swiglu" in line)
    assert mlp and 120e9 < weights / mlp_s < 180e9  # spec section 8: 145-157 GB/s


def _decode_attention(granite):
    _, decode = granite
    (g,) = [g for g in decode.device.groups if g.family == "attention"]
    return decode.device, g


def test_granite_decode_attention_streams_its_cache_near_the_ddr_rate(granite):
    """Issue 25 item 6: decode's attention reads its K and V caches once, from DDR at the
    streaming rate, and the rest stays in LX: ``q @ K^T`` with K laid out anew as the
    matmul loads it (not ``K @ q^T`` with the 4 query heads of a KV head padded to a stick
    and the scores spilled), ``P @ V`` reading V as it is stored."""
    d, g = _decode_attention(granite)
    cache = 2 * 4 * 4096 * 8 * 128 * 2  # K and V [batch, T, KV heads, head dim] fp16
    bound = cache / d.machine.ddr_bw
    assert g.in_lx and bound < g.time_s < 1.5 * bound


def test_granite_decode_attention_values_fill_their_sticks(granite):
    """No value of decode's attention with a dim that can fill a stick pads over twice its
    data (issue 26): the scores are stuck on the keys, q, k, v and the output on the head
    dim. (A row's max and sum are sparse, one per stick: spec section 2.5.)"""
    d, g = _decode_attention(granite)
    values = {n: t for i in g.ops for n, t in (*d.ops[i].desc.inputs, d.ops[i].desc.output)}
    padded = {
        n: t.nbytes / (t.itemsize * np.prod(t.shape))
        for n, t in values.items()
        if max(t.shape) >= 64
    }
    assert len(padded) > 20 and max(padded.values()) <= 2, padded


def test_the_budget_is_recorded_with_the_layer(granite):
    prefill, _ = granite
    wide = sj.explain(
        models.granite_prefill,
        models.granite_structs(),
        S((512, 4096), F16),
        machine=Machine.spyre(lx_fraction=0.8),
    )
    assert prefill.lx_fraction == 0.2 and wide.lx_fraction == 0.8


def test_a_value_a_kernel_writes_out_is_not_read_back_by_its_own_next_op():
    # The softmax's shifted scores are also a result: written to DDR once, and the
    # kernel's exp reads them from its LX tile, not from DDR again.
    def f(x):
        s = x - x.max(-1, keepdims=True)
        e = jnp.exp(s)
        return e / e.sum(-1, keepdims=True), s

    d = sj.explain(f, S((256, 1024), F16)).device
    (g,) = d.groups
    by = {d.ops[i].desc.opfunc: d.ops[i] for i in g.ops}
    assert g.family == "softmax" and g.in_lx
    assert by["sub"].write_bytes == 256 * 1024 * 2  # written once: it leaves the kernel
    assert by["exp"].read_bytes == 0
    assert sum(d.ops[i].read_bytes for i in g.ops) == 256 * 1024 * 2  # x, once


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_the_fusion_pass_and_the_planner_read_one_rule_of_what_a_chain_holds():
    """``device._fusion.CHAIN_SPACES`` of the listed ops' spaces and of the primitives'."""
    from types import SimpleNamespace

    from spyrejax.device._fusion import _fusible
    from spyrejax.lowering._spaces import divided_space
    from spyrejax.lowering._traffic import _chain_kernel
    from spyrejax.primitives import SpyrePrim

    for cls in _subclasses(SpyrePrim):  # a space of its own, and its kind said
        divided = cls.space is not SpyrePrim.space
        assert (cls.space_kind is not None) == divided, cls.__name__
    x, w = sj.to_device(np.ones((8, 70), F32)), sj.to_device(np.ones((70, 16), F32))
    made = []
    with sj.primitives.recording(lambda p, args, out: made.append(p)):
        sj.exp(x).sum(), sj.astype(x, F16), x @ w, sj.restickify(x, dim_order=[1, 0])
    kinds = {}
    for p in made:
        found = divided_space(p)
        desc = SimpleNamespace(kind="copy", opfunc=type(p).__name__.lower(), space=None, inputs=())
        if found is not None:
            desc = SimpleNamespace(kind="compute", opfunc=found[0].opfunc, space=found[0])
        kinds[type(p).__name__] = (_chain_kernel(p), _fusible(desc) and desc.kind == "compute")
    assert kinds == {
        "Exp": (True, True),
        "Sum": (True, True),
        "Astype": (True, True),
        "Matmul": (False, False),
        "Restickify": (False, False),
    }, kinds
