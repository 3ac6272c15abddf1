"""spyrejax benchmarks: the emulator against native JAX and against memory bandwidth.

Every figure is the median of at least 9 timed runs after a warm-up, each ended with
``block_until_ready``; the runs of the things a ratio compares are interleaved, a ratio
is the median of the paired runs' ratios and their quartiles give the spread. Results
print as a table and are written as JSON with the machine and the versions.

    python benchmarks/bench.py [--quick] [--out results.json] [--only NAME...]

``--quick`` runs the same cases at a quarter of the size, the whole programs at their
small size, plan time at 8 layers only (under a minute on two cores).

Sections: compute cases (aligned and padded), whole programs (a GPT training step, a
Llama-style block, a scan over 8 layers), DMA throughput, compile time, plan time
against layer count, ``explain`` of a Granite-3.3-8B decoder layer (prefill and decode,
from shapes), dispatch of a tiny program, and the spyrejax side of the comparison with
ktir-cpu (its figures quoted from issue 18).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pathlib
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import models
import numpy as np
import optax

import spyrejax as sj

try:  # POSIX only: page faults are reported where it exists
    import resource
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

RUNS = 9
MAX_RUNS = 101
BUDGET_S = 0.2  # per function: fast cases get more runs (up to MAX_RUNS)


def _block(x: Any) -> Any:
    for leaf in jax.tree.leaves(x):
        if isinstance(leaf, sj.SpyreArray):
            leaf.image.block_until_ready()
        elif hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
    return x


def timed_runs(
    fns: dict[str, Callable[[], Any]],
    runs: int = RUNS,
    budget_s: float = BUDGET_S,
    usage: dict[str, dict[str, list[float]]] | None = None,
) -> dict[str, list[float]]:
    """Seconds of every run of each function, their runs interleaved, after one warm-up each.

    Interleaving (a, b, c, a, b, c, ...) exposes every function to the same background
    load, so the ratios between them are steadier than back-to-back medians. Fast
    functions get more than ``runs`` runs, as many as fit in ``budget_s`` seconds for
    the slowest of them (at most :data:`MAX_RUNS`). ``usage``, if given, receives per
    function the CPU seconds of each run (``"cpu"``: every thread of the process, so
    XLA's pool too) and its minor page faults (``"faults"``), see :func:`_usage`.
    """
    slowest = 0.0
    for fn in fns.values():
        t0 = time.perf_counter()
        _block(fn())
        slowest = max(slowest, time.perf_counter() - t0)
    runs = max(runs, min(MAX_RUNS, int(budget_s / max(slowest, 1e-9))))
    times: dict[str, list[float]] = {k: [] for k in fns}
    for k in fns if usage is not None else ():
        usage[k] = {"cpu": [], "faults": []}
    for _ in range(runs):
        for k, fn in fns.items():
            before = _usage() if usage is not None else (0.0, 0)
            t0 = time.perf_counter()
            _block(fn())
            times[k].append(time.perf_counter() - t0)
            if usage is not None:
                after = _usage()
                usage[k]["cpu"].append(after[0] - before[0])
                usage[k]["faults"].append(after[1] - before[1])
    return times


def _usage() -> tuple[float, int]:
    """CPU seconds of the process (all threads) and its minor page faults so far.

    On a shared machine CPU time moves less with other jobs than wall time. Minor
    faults count fresh pages first touched: XLA's CPU runtime allocates a program's
    temporaries with ``malloc`` on every call, and a block over glibc's largest mmap
    threshold (32 MiB) comes as fresh pages each time (``benchmarks/README.md``: the kernel
    rows of issue 24, page faults).
    """
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0
    return time.process_time(), faults


def timed_together(
    fns: dict[str, Callable[[], Any]], runs: int = RUNS, budget_s: float = BUDGET_S
) -> dict[str, float]:
    """Median seconds of each function (see :func:`timed_runs`)."""
    return {k: statistics.median(v) for k, v in timed_runs(fns, runs, budget_s).items()}


def ratio_spread(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """Quartiles of the ratios of interleaved runs (run i of ``num`` over run i of ``den``).

    The middle one is the headline ratio: the ratio of the two medians can fall outside
    the quartiles of the paired ratios when the load changes during the runs, and then
    the figure and its spread disagree.
    """
    q1, q2, q3 = statistics.quantiles([a / b for a, b in zip(num, den, strict=True)], n=4)
    return q1, q2, q3


def _compare(
    native: Callable[[], Any], emulated: Callable[[], Any], runs: int = RUNS
) -> dict[str, Any]:
    """Interleaved runs of both: medians, the median of the paired ratios and its quartiles.

    Also the median CPU seconds of each, the median of their paired ratios, and the minor
    page faults of a call (median), from the same runs.
    """
    usage: dict[str, dict[str, list[float]]] = {}
    times = timed_runs({"native": native, "emulated": emulated}, runs, usage=usage)
    t_native, t_emul = (statistics.median(times[k]) for k in ("native", "emulated"))
    q1, ratio, q3 = ratio_spread(times["emulated"], times["native"])
    cpu_native, cpu_emul = (statistics.median(usage[k]["cpu"]) for k in ("native", "emulated"))
    cpu_pairs = [
        (e, n)
        for e, n in zip(usage["emulated"]["cpu"], usage["native"]["cpu"], strict=True)
        if n > 0
    ]
    cpu_ratio = statistics.median(e / n for e, n in cpu_pairs) if cpu_pairs else float("nan")
    return {
        "native_s": t_native,
        "spyrejax_s": t_emul,
        "ratio": ratio,
        "ratio_q1": q1,
        "ratio_q3": q3,
        "native_cpu_s": cpu_native,
        "spyrejax_cpu_s": cpu_emul,
        "cpu_ratio": cpu_ratio,
        "native_faults": statistics.median(usage["native"]["faults"]),
        "spyrejax_faults": statistics.median(usage["emulated"]["faults"]),
    }


# --- compute cases -----------------------------------------------------------------------


def _rand(
    shape: tuple[int, ...], dtype: Any = jnp.float32, seed: int = 0, scale: float = 1.0
) -> Any:
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale, dtype)


def chain(x: Any) -> Any:
    for _ in range(2):
        x = jnp.tanh(x * 1.01 + 0.5)
        x = jnp.exp(-x) - 0.25
        x = jnp.maximum(x, -1.0) * x
        x = jax.nn.sigmoid(x)
    return x


def softmax(x: Any) -> Any:
    return jax.nn.softmax(x, axis=-1)


def layer_norm(x: Any, g: Any, b: Any) -> Any:
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def mlp(x: Any, w1: Any, w2: Any) -> Any:
    return jax.nn.gelu(x @ w1) @ w2


def attention(q: Any, k: Any, v: Any) -> Any:
    t, d = q.shape[-2], q.shape[-1]
    s = jnp.einsum("hqd,hkd->hqk", q, k) / np.float32(np.sqrt(d))
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, -1e9)
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)


def compute_cases(scale: int) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The compute cases at ``1/scale`` of full size along one dim."""
    tokens = 4096 // scale
    return {
        f"chain of 8 elementwise ops, {2**22 // scale} elements": (
            chain,
            (_rand((2048 // scale, 2048)),),
        ),
        f"matmul {1024 // scale}x1024x1024 float32": (
            lambda a, b: a @ b,
            (_rand((1024 // scale, 1024)), _rand((1024, 1024), seed=1)),
        ),
        f"matmul {1024 // scale}x1024x1024 bfloat16": (
            lambda a, b: a @ b,
            (_rand((1024 // scale, 1024), jnp.bfloat16), _rand((1024, 1024), jnp.bfloat16, 1)),
        ),
        f"softmax {4096 // scale}x4096": (softmax, (_rand((4096 // scale, 4096)),)),
        f"layer norm {8192 // scale}x1024": (
            layer_norm,
            (_rand((8192 // scale, 1024)), _rand((1024,), seed=1), _rand((1024,), seed=2)),
        ),
        f"MLP block {tokens} tokens 1024->4096->1024": (
            mlp,
            (
                _rand((tokens, 1024)),
                _rand((1024, 4096), seed=1, scale=0.03),
                _rand((4096, 1024), seed=2, scale=0.03),
            ),
        ),
        f"causal attention 8 heads {1024 // scale} tokens dim 64": (
            attention,
            tuple(_rand((8, 1024 // scale, 64), seed=s, scale=0.3) for s in range(3)),
        ),
        **padded_cases(scale),
    }


def padded_cases(scale: int) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The case families on shapes that fill their last stick partly (issue 18's sizes).

    A stick holds 128 bytes: 32 float32 or 64 bfloat16 elements, so 1000, 2000, 3000
    and 80 leave a partial last stick (users' shapes mostly do). The dim that scales is
    the outermost one; the padded ones keep their size.
    """
    tokens = 4000 // scale
    bf16 = jnp.bfloat16
    return {
        f"padded: chain of 8 elementwise ops, {3000 // scale}x3000": (
            chain,
            (_rand((3000 // scale, 3000)),),
        ),
        f"padded: matmul {1000 // scale}x1000x1000 float32": (
            lambda a, b: a @ b,
            (_rand((1000 // scale, 1000)), _rand((1000, 1000), seed=1)),
        ),
        f"padded: softmax {2048 // scale}x2000 float32": (softmax, (_rand((2048 // scale, 2000)),)),
        f"padded: softmax {2048 // scale}x2000 float32{PLACED}": (
            softmax,
            (_rand((2048 // scale, 2000)),),
        ),
        f"padded: layer norm {4096 // scale}x1000 bfloat16": (
            layer_norm,
            (_rand((4096 // scale, 1000), bf16), _rand((1000,), bf16, 1), _rand((1000,), bf16, 2)),
        ),
        f"padded: MLP block {tokens} tokens 1000->4000->1000": (
            mlp,
            (
                _rand((tokens, 1000)),
                _rand((1000, 4000), seed=1, scale=0.03),
                _rand((4000, 1000), seed=2, scale=0.03),
            ),
        ),
        f"padded: MLP block {tokens} tokens 1000->4000->1000{WEIGHTS}": (
            mlp,
            (
                _rand((tokens, 1000)),
                _rand((1000, 4000), seed=1, scale=0.03),
                _rand((4000, 1000), seed=2, scale=0.03),
            ),
        ),
        f"padded: causal attention 8 heads {1000 // scale} tokens dim 80": (
            attention,
            tuple(_rand((8, 1000 // scale, 80), seed=s, scale=0.3) for s in range(3)),
        ),
    }


WEIGHTS = ", weights row-major"
"""The suffix of a case whose weights are placed (``SpyreJit.place``) the way a matmul
reads them in place: row-major with zero padding (issue 24)."""


PLACED = ", placed"
"""The suffix of a case whose input is placed (``SpyreJit.place``) as its reductions read
it: a softmax's with -inf padding, the max's identity (issue 24)."""


def _to_device(name: str, args: tuple[Any, ...], emulated: Any) -> tuple[Any, ...]:
    """A case's arguments on the device, in default layouts; in a :data:`WEIGHTS` or
    :data:`PLACED` case then placed by ``emulated.place``, once, as a user would."""
    device_args = jax.tree.map(sj.to_device, args)
    placed = name.endswith((WEIGHTS, PLACED))
    return emulated.place(*device_args) if placed else device_args


def bench_compute(scale: int, only: list[str]) -> list[dict[str, Any]]:
    """Emulated (spyrejax.jit on SpyreArrays) vs native (jax.jit on host arrays)."""
    rows = []
    for name, (fn, args) in compute_cases(scale).items():
        if only and not any(o in name for o in only):
            continue
        native = jax.jit(fn)
        emulated = sj.jit(fn)
        device_args = _to_device(name, args, emulated)
        row = _compare(
            lambda native=native, args=args: native(*args),
            lambda f=emulated, device_args=device_args: f(*device_args),
        )
        got = np.asarray(emulated(*device_args), np.float32)
        err = float(np.max(np.abs(got - np.asarray(native(*args), np.float32))))
        rows.append({"case": name, **row, "max_abs_err": err})
        _print_row(name, row)
    return rows


def _print_row(name: str, row: dict[str, Any]) -> None:
    print(
        f"  {name:52} native {row['native_s'] * 1e3:9.2f} ms"
        f"  spyrejax {row['spyrejax_s'] * 1e3:9.2f} ms  ratio {row['ratio']:5.2f}"
        f" [{row['ratio_q1']:.2f}-{row['ratio_q3']:.2f}]  CPU {row['cpu_ratio']:5.2f}"
        f"  page faults {row['native_faults']:.0f} / {row['spyrejax_faults']:.0f}",
        flush=True,
    )


def _ratio(r: dict[str, Any]) -> str:
    """A ratio with the quartiles of the interleaved runs' ratios, when measured."""
    if "ratio_q1" not in r:
        return f"{r['ratio']:.2f}"
    return f"{r['ratio']:.2f} [{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}]"


# --- DMA throughput ------------------------------------------------------------------------


_H2D = jax.jit(sj.dma_h2d, static_argnames="layout")
_D2H = jax.jit(sj.dma_d2h, static_argnames=("shape", "layout"))


def dma_cases(mib: int) -> dict[str, tuple[tuple[int, ...], Any, Any]]:
    """Shapes of ``mib`` MiB of float16 (and one of bfloat16), their layouts and dtypes.

    The bfloat16 case shows the price of bit-exact bfloat16 inside ``jax.jit``: into a
    padded image, the bitcast back from the bits XLA moves is a pass of its own (see
    ``spyrejax.dma._dma.from_bits``).
    """
    elems = mib * 2**20 // 2
    cols = 4096
    rows = elems // cols
    odd = 4000  # a partial last stick: 4000 = 62 * 64 + 32
    f16, bf16 = np.dtype(np.float16), np.dtype(jnp.bfloat16)
    return {
        f"{mib} MiB default layout ({rows}, {cols})": ((rows, cols), None, f16),
        f"{mib} MiB stick on dim 0 ({rows}, {cols})": ((rows, cols), [1, 0], f16),
        f"{mib} MiB partial last stick ({elems // odd}, {odd})": ((elems // odd, odd), None, f16),
        f"{mib} MiB bfloat16, partial last stick ({elems // odd}, {odd})": (
            (elems // odd, odd),
            None,
            bf16,
        ),
    }


DMA_TARGET = {
    "4096 x 4000 float16, partial last stick (issue 24)": ((4096, 4000), None, np.dtype(np.float16))
}
"""Issue 24's transfer row: 31.25 MiB whose last stick is half full."""


def bench_dma(
    mib: int, only: list[str], cases: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """H2D and D2H GB/s next to a NumPy copy of the same bytes.

    The transfers are the calls a user makes, ``dma_h2d`` from a NumPy array and
    ``dma_d2h`` of a device image, eagerly (the host engine runs stick-granular ones);
    the same transfers inside ``jax.jit`` (XLA; a partial last stick's d2h the FFI
    handler of ``spyrejax/dma/_tiles.cc``) are reported beside them.

    Ratios are against ``x.copy()``: like a transfer, it produces a new array, so both
    pay for first-touching fresh pages. A copy into an existing array
    (``np.copyto``), which does not, is reported too.
    """
    rows = []
    for name, (shape, order, dtype) in (cases or dma_cases(mib)).items():
        if only and not any(o in name for o in only):
            continue
        host_np = np.random.default_rng(0).standard_normal(shape, dtype=np.float32).astype(dtype)
        host = jnp.asarray(host_np)
        layout = sj.SpyreTensorLayout(shape, dtype, order)
        image = _H2D(host, layout)
        nbytes = host_np.nbytes
        dst = np.empty_like(host_np)
        times = timed_together(
            {
                "copyto": lambda dst=dst, host_np=host_np: np.copyto(dst, host_np),
                "copy": host_np.copy,
                "h2d": lambda x=host_np, layout=layout: sj.dma_h2d(x, layout),
                "d2h": lambda im=image, s=shape, layout=layout: sj.dma_d2h(im, s, layout),
                "h2d_jit": lambda host=host, layout=layout: _H2D(host, layout),
                "d2h_jit": lambda im=image, s=shape, layout=layout: _D2H(im, s, layout),
            }
        )
        t_copyto, t_copy = times.pop("copyto"), times.pop("copy")
        row = {
            "case": name,
            "bytes": nbytes,
            "copy_GBps": nbytes / t_copy / 1e9,
            "copyto_GBps": nbytes / t_copyto / 1e9,
        }
        for key, t in times.items():
            row[f"{key}_GBps"] = nbytes / t / 1e9
            row[f"{key}_vs_copy"] = t_copy / t
        rows.append(row)
        cells = (f"  {k} {row[f'{k}_GBps']:6.2f} ({row[f'{k}_vs_copy']:4.2f}x)" for k in times)
        print(f"  {name:44} copy {row['copy_GBps']:6.2f} GB/s" + "".join(cells), flush=True)
    return rows


# --- compile time -------------------------------------------------------------------------


def bench_compile(
    scale: int, only: list[str], gpt: str | None = None, runs: int = RUNS
) -> list[dict[str, Any]]:
    """Trace + plan + compile of spyrejax.jit vs trace + compile of jax.jit (medians of
    ``runs`` each, from cleared caches).

    The MLP and attention cases at ``1/scale`` size, and with ``gpt`` (a size of
    :data:`GPT_SIZES`) the GPT training step: its first call (issues 18 and 24).
    """
    cases = {
        k: v
        for k, v in compute_cases(scale).items()
        if k.removeprefix("padded: ").startswith(("MLP", "causal")) and WEIGHTS not in k
    }
    if gpt:
        cases.update(
            (k, v)
            for k, v in program_cases(gpt).items()
            if k.startswith("GPT training") and "dropout" not in k
        )
    rows = []
    for name, (fn, args) in cases.items():
        if only and not any(o in name for o in only):
            continue
        device_args = jax.tree.map(sj.to_device, args)

        # Caches are cleared before each measurement: every compile starts from scratch.
        def native(fn=fn, args=args) -> float:
            jax.clear_caches()
            t0 = time.perf_counter()
            jax.jit(fn).lower(*args).compile()
            return time.perf_counter() - t0

        def emulated(fn=fn, device_args=device_args) -> float:
            jax.clear_caches()
            t0 = time.perf_counter()
            sj.jit(fn).lower(*device_args).compile()
            return time.perf_counter() - t0

        t_native = statistics.median(native() for _ in range(runs))
        t_emul = statistics.median(emulated() for _ in range(runs))
        rows.append(
            {"case": name, "native_s": t_native, "spyrejax_s": t_emul, "ratio": t_emul / t_native}
        )
        print(
            f"  {name:52} native {t_native:6.2f} s  spyrejax {t_emul:6.2f} s"
            f"  ratio {t_emul / t_native:5.2f}",
            flush=True,
        )
    return rows


# --- whole programs -------------------------------------------------------------------


# (vocab, d, heads, seq, batch, layers): the textbook GPT's training step.
GPT_SIZES = {"small": (256, 128, 4, 64, 4, 2), "large": (1024, 256, 8, 128, 8, 4)}
# (d, heads, kv_heads, seq, ff): a Llama-style block (ff about 8/3 d: a partial stick).
LLAMA_SIZES = {"small": (256, 4, 2, 128, 688), "large": (512, 8, 4, 512, 1376)}
# The same in bfloat16 (issue 24's row: d 512, 256 tokens).
LLAMA_BF16_SIZES = {"small": (256, 4, 2, 64, 688), "large": (512, 8, 4, 256, 1376)}
DROPOUT = 0.1  # the GPT step with dropout: a user's model
SCAN_SIZES = {"small": (128, 4, 2, 64, 344), "large": (256, 4, 2, 256, 688)}
SCAN_LAYERS = 8


def gpt_step(
    vocab: int, d: int, heads: int, seq: int, batch: int, layers: int, dropout: float = 0.0
) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The GPT training step (forward, loss, grad, ``optax.adamw``) and its arguments
    (with ``dropout``, a PRNG key last: dropout on)."""
    params, static, ids, labels = models.gpt_setup(
        vocab, d, heads, seq, batch, layers, dropout=dropout
    )
    opt = optax.adamw(1e-3)
    args = (params, opt.init(params), ids, labels)
    if dropout:
        args += (jax.random.PRNGKey(3),)
    return models.gpt_train_step(static, opt), args


def program_cases(size: str) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The whole-program cases at one of two sizes (``small`` for ``--quick``)."""
    vocab, d, heads, seq, batch, layers = GPT_SIZES[size]
    ld, lh, lkv, lseq, lff = LLAMA_SIZES[size]
    sd, sh, skv, sseq, sff = SCAN_SIZES[size]
    bd, bh, bkv, bseq, bff = LLAMA_BF16_SIZES[size]
    llama = functools.partial(models.llama_block, heads=lh, kv_heads=lkv)
    llama_bf16 = functools.partial(models.llama_block, heads=bh, kv_heads=bkv)
    scan = functools.partial(models.llama_layers, heads=sh, kv_heads=skv)
    bf16 = jnp.bfloat16
    gpt = f"GPT training step (adamw), {layers} layers d {d} seq {seq} batch {batch}"
    return {
        gpt: gpt_step(vocab, d, heads, seq, batch, layers),
        f"{gpt}, dropout {DROPOUT}": gpt_step(vocab, d, heads, seq, batch, layers, DROPOUT),
        f"Llama block forward, d {ld} ff {lff} seq {lseq} ({lh} heads, {lkv} kv)": (
            llama,
            (models.llama_params(ld, lh, lkv, lff), _rand((lseq, ld), seed=1)),
        ),
        f"Llama block forward bfloat16, d {bd} ff {bff} seq {bseq} ({bh} heads, {bkv} kv)": (
            llama_bf16,
            (models.llama_params(bd, bh, bkv, bff, dtype=bf16), _rand((bseq, bd), bf16, seed=1)),
        ),
        f"Llama block forward bfloat16, d {bd} ff {bff} seq {bseq} ({bh} heads, {bkv} kv)"
        f"{WEIGHTS}": (
            llama_bf16,
            (models.llama_params(bd, bh, bkv, bff, dtype=bf16), _rand((bseq, bd), bf16, seed=1)),
        ),
        f"scan over {SCAN_LAYERS} Llama layers, d {sd} ff {sff} seq {sseq}": (
            scan,
            (models.llama_params(sd, sh, skv, sff, layers=SCAN_LAYERS), _rand((sseq, sd), seed=1)),
        ),
    }


def _max_err(got: Any, want: Any) -> float:
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    return max(
        float(np.max(np.abs(np.asarray(sj.to_host(g), np.float32) - np.asarray(w, np.float32))))
        for g, w in pairs
    )


def bench_programs(size: str, only: list[str]) -> list[dict[str, Any]]:
    """Whole programs: spyrejax.jit on device-resident arguments vs jax.jit."""
    rows = []
    for name, (fn, args) in program_cases(size).items():
        if only and not any(o in name for o in only):
            continue
        native, emulated = jax.jit(fn), sj.jit(fn)
        device_args = _to_device(name, args, emulated)
        row = _compare(
            lambda native=native, args=args: native(*args),
            lambda f=emulated, device_args=device_args: f(*device_args),
        )
        err = _max_err(emulated(*device_args), native(*args))
        rows.append({"case": name, **row, "max_abs_err": err, "size": size})
        _print_row(name, row)
    return rows


# --- plan time against layer count -------------------------------------------------------


PLAN_LAYERS = (8, 16, 32, 48)


def gpt_step_structs(
    layers: int, scanned: bool = False, size: str = "large"
) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The GPT's training step (``size`` of :data:`GPT_SIZES`) with ``layers`` layers, its
    arguments as ``jax.ShapeDtypeStruct`` values (nothing allocated); ``scanned``: its
    blocks stacked and run by a ``lax.scan`` (``models.ScannedGPT``)."""
    vocab, d, heads, seq, batch, _ = GPT_SIZES[size]

    def structs(x: Any) -> bool:
        return isinstance(x, jax.ShapeDtypeStruct)

    kind = models.ScannedGPT if scanned else models.GPT
    model = eqx.filter_eval_shape(kind, vocab, d, heads, layers, seq, jax.random.key(0))
    params, static = eqx.partition(model, structs)
    opt = optax.adamw(1e-3)
    ids = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    return models.gpt_train_step(static, opt), (params, jax.eval_shape(opt.init, params), ids, ids)


@contextlib.contextmanager
def _stage_times() -> Iterator[dict[str, float]]:
    """Seconds spent inside ``sj.SpyreJit._trace`` (JAX's own trace of the function) and
    ``sj.SpyreJit._lower`` (the graph and the layout plan) while the block runs: the stages
    of one ``spyrejax.explain`` call, measured inside it (a separate ``trace(...).lower()``
    of ShapeDtypeStructs plans another signature, host inputs, than the call's), and
    the equations of the plain JAX trace."""
    times = {"trace": 0.0, "plan": 0.0, "equations": 0}
    saved = {"trace": sj.SpyreJit._trace, "plan": sj.SpyreJit._lower}

    def timed(stage: str) -> Callable[..., Any]:
        method = saved[stage]

        @functools.wraps(method)
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                out = method(*args, **kwargs)
            finally:
                times[stage] += time.perf_counter() - t0
            if stage == "trace":
                times["equations"] += len(out[0].jaxpr.eqns)
            return out

        return run

    sj.SpyreJit._trace, sj.SpyreJit._lower = timed("trace"), timed("plan")  # type: ignore[method-assign]
    try:
        yield times
    finally:
        sj.SpyreJit._trace, sj.SpyreJit._lower = saved["trace"], saved["plan"]  # type: ignore[method-assign]


def bench_plan_scale(layer_counts: Sequence[int], only: list[str]) -> list[dict[str, Any]]:
    """``explain`` of a GPT training step with more and more layers, in three stages.

    One cold ``spyrejax.explain(step, *structs)`` call per layer count (after a
    one-layer warm-up: JAX's and equinox's own caches), split into trace (JAX's own
    trace of the function), plan (the graph and the layout plan) and the rest of
    explain (the Spyre-level jaxpr, the device model: every op divided, LX placement,
    costs; the report). From 8 layers, the same step with its blocks in a ``lax.scan``
    too (``scanned``: what a model traced once per layer costs).
    """
    if only and not any(o in "plan time" for o in only):
        return []
    step, args = gpt_step_structs(1)
    sj.explain(step, *args)  # warm-up: JAX's and equinox's own caches
    rows = []
    runs = [(n, False) for n in layer_counts] + [(n, True) for n in layer_counts if n >= 8]
    for layers, scanned in runs:
        step, args = gpt_step_structs(layers, scanned)
        with _stage_times() as stages:
            t0, c0 = time.perf_counter(), time.process_time()
            report = sj.explain(step, *args)
            total, cpu = time.perf_counter() - t0, time.process_time() - c0
        eqns = int(stages["equations"])
        row = {
            "layers": layers,
            "scanned": scanned,
            "equations": eqns,
            "device_ops": len(report.ops),
            "trace_s": stages["trace"],
            "plan_s": stages["plan"],
            "explain_s": total - stages["trace"] - stages["plan"],
            "total_s": total,
            "cpu_s": cpu,  # the process's CPU time: what a loaded machine's wall time hides
            "ms_per_equation": total / eqns * 1e3,
        }
        rows.append(row)
        print(
            f"  {layers:3} layers{', scanned' if scanned else ''}, {eqns:6} equations,"
            f" {row['device_ops']:6} device ops: trace"
            f" {row['trace_s']:6.2f} s  plan {row['plan_s']:6.2f} s  explain"
            f" {row['explain_s']:6.2f} s  total {row['total_s']:6.2f} s (CPU {cpu:6.2f} s)",
            flush=True,
        )
    return rows


# --- emulate="cores" -----------------------------------------------------------------


CORES_LAYERS = 2


def bench_cores(size: str, only: list[str], runs: int = 3) -> list[dict[str, Any]]:
    """``sj.jit(step, emulate="cores")`` against ``sj.jit(step)`` on a GPT training step
    of :data:`CORES_LAYERS` layers: trace + plan + compile (one run each, cleared caches),
    then steps (median of ``runs`` interleaved runs)."""
    vocab, d, heads, seq, batch, _ = GPT_SIZES[size]
    name = f'emulate="cores": GPT training step, {CORES_LAYERS} layers d {d} seq {seq}'
    if only and not any(o in name for o in only):
        return []
    step, args = gpt_step(vocab, d, heads, seq, batch, CORES_LAYERS)
    device_args = jax.tree.map(sj.to_device, args)
    compiled, compile_s = {}, {}
    for key, emulate in (("default", None), ("cores", "cores")):
        jax.clear_caches()
        t0 = time.perf_counter()
        compiled[key] = sj.jit(step, emulate=emulate).lower(*device_args).compile()
        compile_s[key] = time.perf_counter() - t0
    times = timed_runs({k: functools.partial(f, *device_args) for k, f in compiled.items()}, runs)
    step_s = {k: statistics.median(v) for k, v in times.items()}
    row = {
        "case": name,
        "compile_default_s": compile_s["default"],
        "compile_cores_s": compile_s["cores"],
        "compile_ratio": compile_s["cores"] / compile_s["default"],
        "step_default_s": step_s["default"],
        "step_cores_s": step_s["cores"],
        "step_ratio": step_s["cores"] / step_s["default"],
    }
    print(
        f"  {name}: compile {row['compile_cores_s']:.1f} s vs {row['compile_default_s']:.1f} s"
        f" ({row['compile_ratio']:.1f}x), step {row['step_cores_s'] * 1e3:.0f} ms vs"
        f" {row['step_default_s'] * 1e3:.0f} ms ({row['step_ratio']:.1f}x)",
        flush=True,
    )
    return [row]


# --- explain of a Granite-3.3-8B decoder layer -----------------------------------------


def granite_cases() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """A Granite-3.3-8B layer (fp16) as prefill and decode, from shapes alone."""
    weights = models.granite_structs()
    tokens = jax.ShapeDtypeStruct((512, models.GRANITE["d"]), jnp.float16)
    return {
        "Granite-3.3-8B layer, prefill (batch 1, 512 tokens)": (
            models.granite_prefill,
            (weights, tokens),
        ),
        "Granite-3.3-8B layer, decode (batch 4, one token, KV cache 4096)": (
            models.granite_decode,
            (weights, *models.granite_decode_structs()),
        ),
    }


def bench_granite(only: list[str]) -> list[dict[str, Any]]:
    """``spyrejax.explain`` of a Granite layer: seconds from a fresh function (trace,
    plan, device model with fused kernels, report), one run each; and what it predicts."""
    rows = []
    for name, (fn, args) in granite_cases().items():
        if only and not any(o in name for o in only):
            continue
        fresh = functools.wraps(fn)(lambda *a, fn=fn: fn(*a))  # nothing cached for it
        t0 = time.perf_counter()
        report = sj.explain(fresh, *args)
        seconds = time.perf_counter() - t0
        groups = report.device.groups
        row = {
            "case": name,
            "explain_s": seconds,
            "device_ops": len(report.ops),
            "predicted_us": report.time_s * 1e6,
            "attention_us": sum(g.time_s for g in groups if g.family == "attention") * 1e6,
            "fused_kernels": len(groups),
            "families": sorted({g.family for g in groups}),
            "lx_fraction": report.lx_fraction,
        }
        rows.append(row)
        print(
            f"  {name}: explain {seconds:.2f} s, {row['device_ops']} device ops,"
            f" {len(groups)} fused kernels, predicted {row['predicted_us']:.0f} us"
            f" (attention {row['attention_us']:.0f} us)",
            flush=True,
        )
    return rows


# --- dispatch --------------------------------------------------------------------------


DISPATCH_CALLS = 100  # calls per timed run


def bench_dispatch(only: list[str]) -> list[dict[str, Any]]:
    """Per-call time of a tiny program (``x * 2 + 1`` on 8 float32) called repeatedly.

    Each run makes :data:`DISPATCH_CALLS` calls on the same argument and waits for the
    last result; 51 runs, interleaved.
    """
    name = "x * 2 + 1 on 8 float32, called repeatedly"
    if only and not any(o in name for o in only):
        return []

    def f(x: Any) -> Any:
        return x * 2 + 1

    x = jnp.arange(8, dtype=jnp.float32)

    def loop(fn: Callable[[Any], Any], x: Any) -> Callable[[], Any]:
        def run() -> Any:
            for _ in range(DISPATCH_CALLS):
                y = fn(x)
            return y

        return run

    row = _compare(loop(jax.jit(f), x), loop(sj.jit(f), sj.to_device(x)), runs=51)
    row = {"case": name, **row}
    for k in ("native_s", "spyrejax_s"):
        row[k] /= DISPATCH_CALLS
    print(
        f"  {name:52} jax.jit {row['native_s'] * 1e6:7.2f} us  spyrejax.jit"
        f" {row['spyrejax_s'] * 1e6:7.2f} us  ratio {_ratio(row)}",
        flush=True,
    )
    return [row]


# --- against ktir-cpu ------------------------------------------------------------------


KTIR_CPU_S = {"softmax": 5.5, "matmul": 6.9}
"""ktir-cpu's own examples on the same computations, in seconds: quoted from issue 18,
not measured here (ktir-cpu is not installed)."""


def bench_ktir(only: list[str]) -> list[dict[str, Any]]:
    """ktir-cpu's softmax and matmul examples through spyrejax.jit (and jax.jit)."""
    f16 = jnp.float16
    cases = {
        "softmax": ("softmax 4096x1024 float16", softmax, (_rand((4096, 1024), f16),)),
        "matmul": (
            "matmul 64x2048 @ 2048x8192 float16",
            lambda a, b: a @ b,
            (_rand((64, 2048), f16), _rand((2048, 8192), f16, seed=1, scale=0.03)),
        ),
    }
    rows = []
    for key, (name, fn, args) in cases.items():
        if only and not any(o in name for o in only):
            continue
        native, emulated = jax.jit(fn), sj.jit(fn)
        device_args = _to_device(name, args, emulated)
        row = _compare(
            lambda native=native, args=args: native(*args),
            lambda f=emulated, device_args=device_args: f(*device_args),
        )
        row = {"case": name, **row, "ktir_cpu_s": KTIR_CPU_S[key]}
        row["speedup_vs_ktir_cpu"] = row["ktir_cpu_s"] / row["spyrejax_s"]
        rows.append(row)
        print(
            f"  {name:40} ktir-cpu {row['ktir_cpu_s']:4.1f} s (quoted)  spyrejax"
            f" {row['spyrejax_s'] * 1e3:7.2f} ms: {row['speedup_vs_ktir_cpu']:6.0f}x",
            flush=True,
        )
    return rows


_SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6}


def _ratio_table(title: str, target: float, rows: list[dict[str, Any]], unit: str) -> list[str]:
    """A Markdown table of ``jax.jit`` and ``spyrejax.jit`` times and their ratio per case."""
    k = _SCALE[unit]
    lines = [
        "",
        f"| {title} | jax.jit | spyrejax.jit | ratio (target <= {target}) |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['native_s'] * k:.2f} {unit} | {r['spyrejax_s'] * k:.2f} {unit}"
            f" | {_ratio(r)} |"
        )
    return lines


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables (what benchmarks/README.md keeps).

    The targets in the headings are issue 18's.
    """
    m = results["machine"]
    lines = [
        f"Machine: {m['processor']}, {m['cpus']} CPUs, {m['platform']}; Python {m['python']},"
        f" JAX {m['jax']} ({m['backend']}), NumPy {m['numpy']}, spyrejax {m['spyrejax']}."
        f" Median of at least {results['runs']} interleaved runs after a warm-up (fast"
        f" cases: up to {results.get('max_runs', results['runs'])} runs); [q1-q3] are the"
        " quartiles of the interleaved runs' ratios.",
    ]
    lines += _ratio_table("compute case", 1.1, results["compute"], "ms")
    if results.get("programs"):
        lines += _ratio_table("whole program", 1.2, results["programs"], "ms")
    lines += [
        "",
        "| DMA case (float16 unless named) | copy into existing array | `x.copy()` | host -> device"
        " | device -> host | h2d in jit | d2h in jit |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["dma"]:
        cells = [f"{r['copyto_GBps']:.2f} GB/s", f"{r['copy_GBps']:.2f} GB/s"]
        for k in ("h2d", "d2h", "h2d_jit", "d2h_jit"):
            cells.append(f"{r[f'{k}_GBps']:.2f} GB/s ({r[f'{k}_vs_copy']:.2f}x)")
        lines.append(f"| {r['case']} | " + " | ".join(cells) + " |")
    lines += _ratio_table("compile (trace + plan + compile)", 2, results["compile"], "s")
    if results.get("plan_scale"):
        lines += [
            "",
            "| `explain` of a GPT training step | equations | device ops | trace | plan"
            " | rest of explain | total | CPU | per equation |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in results["plan_scale"]:
            cpu = f"{r['cpu_s']:.2f} s" if "cpu_s" in r else "-"
            lines.append(
                f"| {r['layers']} layers{', scanned' if r.get('scanned') else ''}"
                f" | {r['equations']} | {r['device_ops']}"
                f" | {r['trace_s']:.2f} s | {r['plan_s']:.2f} s | {r['explain_s']:.2f} s"
                f" | {r['total_s']:.2f} s | {cpu} | {r['ms_per_equation']:.2f} ms |"
            )
    if results.get("granite"):
        lines += [
            "",
            "| `explain` from shapes (target < 2 s) | explain | device ops | fused kernels"
            " | predicted device time (LX fraction) | its attention kernel |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results["granite"]:
            lines.append(
                f"| {r['case']} | {r['explain_s']:.2f} s | {r['device_ops']}"
                f" | {r['fused_kernels']} ({', '.join(r['families'])})"
                f" | {r['predicted_us']:.0f} us ({r['lx_fraction']:g})"
                f" | {r.get('attention_us', 0):.0f} us |"
            )
    if results.get("dispatch"):
        lines += _ratio_table("dispatch (per call)", 1.5, results["dispatch"], "us")
    if results.get("ktir"):
        lines += [
            "",
            "| against ktir-cpu | ktir-cpu (quoted from issue 18, not measured here) | jax.jit"
            " | spyrejax.jit | spyrejax's speed-up over ktir-cpu (target >= 100x) |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in results["ktir"]:
            lines.append(
                f"| {r['case']} | {r['ktir_cpu_s']:.1f} s | {r['native_s'] * 1e3:.2f} ms"
                f" | {r['spyrejax_s'] * 1e3:.2f} ms | {r['speedup_vs_ktir_cpu']:.0f}x |"
            )
    return "\n".join(lines)


TARGETS = (
    ("layer norm 4096 x 1000 bfloat16", "compute", "layer norm 4096x1000 bfloat16", "<= 1.1x"),
    ("softmax 2048 x 2000 float32", "compute", "softmax 2048x2000 float32", "<= 1.1x"),
    (
        "causal attention 8 heads x 1000 tokens x 80 float32",
        "compute",
        "attention 8 heads 1000 tokens dim 80",
        "<= 1.1x",
    ),
    ("MLP 1000 x 1000 -> 4000 -> 1000 float32", "compute", "MLP block 1000 tokens", "<= 1.1x"),
    (
        "the same MLP, weights placed row-major (pad 0)",
        "compute",
        f"MLP block 1000 tokens 1000->4000->1000{WEIGHTS}",
        "<= 1.1x",
    ),
    (
        "Llama block bfloat16 (d 512, 256 tokens, GQA, SwiGLU 1376)",
        "programs",
        "bfloat16, d 512 ff 1376 seq 256",
        "<= 1.1x",
    ),
    (
        "the same block, weights placed row-major (pad 0)",
        "programs",
        f"bfloat16, d 512 ff 1376 seq 256 (8 heads, 4 kv){WEIGHTS}",
        "<= 1.1x",
    ),
    (
        "equinox GPT training step with adamw (d 256, 4 layers, 8 x 128 tokens, vocab 1024)",
        "programs",
        "4 layers d 256 seq 128 batch 8",
        "<= 1.2x",
    ),
    ("the same step with dropout", "programs", "d 256 seq 128 batch 8, dropout", "<= 1.2x"),
    ("its first call (trace + plan + compile)", "compile", "4 layers d 256", "<= 1.5x"),
)
"""Issue 24's table: (row, section of the results, part of the case's name, target)."""


def _find(rows: list[dict[str, Any]], part: str) -> dict[str, Any] | None:
    """The last row whose case names ``part`` (the last run is the largest size)."""
    found = [r for r in rows if part in r.get("case", "")]
    for variant in ("dropout", WEIGHTS, PLACED):
        if variant not in part:
            found = [r for r in found if variant not in r["case"]]
    return found[-1] if found else None


def _usage_note(r: dict[str, Any]) -> str:
    """CPU time ratio and page faults per call of a row, where the run measured them."""
    if "cpu_ratio" not in r:
        return ""
    return (
        f"; CPU {r['cpu_ratio']:.2f}x; page faults per call"
        f" {r['native_faults']:,.0f} / {r['spyrejax_faults']:,.0f}"
    )


def targets_markdown(results: dict[str, Any]) -> str:
    """Issue 24's rows from a run, as the README's targets table (rows not run: "not run")."""
    lines = ["| case | latest | target |", "|---|---:|---:|"]
    for label, section, part, target in TARGETS:
        r = _find(results.get(section, []), part)
        head = "" if r is None else f"{r['ratio']:.2f}"
        cell = "not run" if r is None else f"{head}x{_ratio(r)[len(head) :]}{_usage_note(r)}"
        lines.append(f"| {label} | {cell} | {target} |")
    dma = _find(results.get("dma", []), "(issue 24)")
    cell = (
        "not run" if dma is None else f"{dma['h2d_jit_vs_copy']:.2f} / {dma['d2h_jit_vs_copy']:.2f}"
    )
    lines.append(
        "| transfers inside `jax.jit` (4096 x 4000 float16, partial stick), of `x.copy()`"
        f" (h2d / d2h) | {cell} | >= 0.5 |"
    )
    plan = {
        r["layers"]: r["total_s"] for r in results.get("plan_scale", []) if not r.get("scanned")
    }
    cell = " / ".join(f"{plan[n]:.1f} s" for n in PLAN_LAYERS if n in plan) or "not run"
    scanned = [r for r in results.get("plan_scale", []) if r.get("scanned")]
    if scanned:  # the same step, its blocks in a lax.scan: at 32 layers (the target's)
        deep = next((r for r in scanned if r["layers"] == 32), scanned[-1])
        cell += f" (blocks in a scan: {deep['total_s']:.1f} s at {deep['layers']})"
    lines.append(
        "| `explain` of a GPT training step from ShapeDtypeStructs,"
        f" {' / '.join(str(n) for n in PLAN_LAYERS if n in plan) or '32'} layers | {cell}"
        " | <= 2 s at 32 |"
    )
    cores = results.get("cores") or []
    cell = (
        f"{cores[0]['compile_cores_s']:.0f} s ({cores[0]['compile_ratio']:.1f}x) /"
        f" {cores[0]['step_ratio']:.1f}x default"
        if cores
        else "not run"
    )
    lines.append(
        f'| `sj.jit(f, emulate="cores")`: {CORES_LAYERS}-layer GPT step compile / step'
        f" | {cell} | <= 3x default |"
    )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Where the figures were measured."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "numpy": np.__version__,
        "spyrejax": sj.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmarks; print a table and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="quarter-size cases, one scale")
    parser.add_argument("--out", default="benchmarks/results/latest.json")
    parser.add_argument("--only", nargs="*", default=[], help="run cases whose name has these")
    parser.add_argument("--markdown", metavar="JSON", help="print a results file as tables")
    args = parser.parse_args(argv)
    if args.markdown:
        results = json.loads(pathlib.Path(args.markdown).read_text())
        print(markdown(results))
        return results
    scales = [4] if args.quick else [16, 4, 1]  # three sizes a factor of 4 apart
    mibs = [16] if args.quick else [4, 16, 64]
    results: dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "runs": RUNS,
        "max_runs": MAX_RUNS,
        "budget_s": BUDGET_S,
    }
    results["compute"], results["dma"] = [], []
    for scale in scales:
        print(f"compute, 1/{scale} size:", flush=True)
        results["compute"] += [dict(r, scale=scale) for r in bench_compute(scale, args.only)]
    for mib in mibs:
        print(f"DMA, {mib} MiB:", flush=True)
        results["dma"] += bench_dma(mib, args.only)
    print("DMA, issue 24's row:", flush=True)
    results["dma"] += bench_dma(0, args.only, DMA_TARGET)
    sizes = ["small"] if args.quick else ["small", "large"]
    results["programs"] = []
    for size in sizes:
        print(f"whole programs, {size}:", flush=True)
        results["programs"] += bench_programs(size, args.only)
    print("compile time:", flush=True)
    compile_runs = results["compile_runs"] = 5 if args.quick else RUNS
    gpt = None if args.quick else "large"
    results["compile"] = bench_compile(scales[-1], args.only, gpt, compile_runs)
    print("plan time against layer count:", flush=True)
    results["plan_scale"] = bench_plan_scale(
        PLAN_LAYERS[:1] if args.quick else PLAN_LAYERS, args.only
    )
    print('emulate="cores" against the default:', flush=True)
    results["cores"] = [] if args.quick else bench_cores("large", args.only)
    print("explain of a Granite-3.3-8B layer:", flush=True)
    results["granite"] = bench_granite(args.only)
    print("dispatch:", flush=True)
    results["dispatch"] = bench_dispatch(args.only)
    print("against ktir-cpu (its figures quoted from issue 18):", flush=True)
    results["ktir"] = bench_ktir(args.only)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    text = markdown(results) + "\n\nIssue 24's targets:\n\n" + targets_markdown(results)
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return results


if __name__ == "__main__":
    main()
