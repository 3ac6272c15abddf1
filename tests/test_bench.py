import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" / "bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_timed_together_interleaves_the_runs():
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = bench.timed_together(fns, 3, budget_s=0)
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert order == ["a", "b"] + ["a", "b"] * 3  # warm-ups, then alternating runs


def test_fast_functions_get_more_runs_within_the_budget():
    calls = []
    bench.timed_together({"f": lambda: calls.append(1)}, 3, budget_s=1.0)
    assert len(calls) == 1 + bench.MAX_RUNS


def test_quick_run_of_one_case_each_writes_every_figure(tmp_path):
    out = tmp_path / "r.json"
    only = ["matmul 256x1024x1024 float32", "16 MiB default", "MLP block 1024 tokens"]
    bench.main(["--quick", "--out", str(out), "--only", *only])
    data = json.loads(out.read_text())
    assert data["quick"] and data["runs"] >= 5
    assert {"jax", "numpy", "cpus", "platform", "spyrejax"} <= set(data["machine"])
    (mm, mlp) = data["compute"]
    assert mm["case"].startswith("matmul") and mm["ratio"] == mm["spyrejax_s"] / mm["native_s"]
    assert mm["max_abs_err"] < 1e-2 and mlp["case"].startswith("MLP")
    (dma,) = data["dma"]
    assert dma["bytes"] == 16 * 2**20
    for k in ("h2d", "d2h", "h2d_jit", "d2h_jit"):
        assert dma[f"{k}_vs_copy"] == pytest.approx(dma[f"{k}_GBps"] / dma["copy_GBps"])
    assert dma["copyto_GBps"] > 0
    (compile_row,) = data["compile"]
    assert compile_row["case"].startswith("MLP") and compile_row["ratio"] > 0


def test_padded_cases_fill_their_last_stick_partly():
    cases = bench.padded_cases(16)
    names = ("chain", "matmul", "softmax", "layer norm", "MLP", "attention")
    assert all(any(n in case for case in cases) for n in names)
    for _fn, args in cases.values():
        x = args[0]
        assert x.shape[-1] % (128 // x.dtype.itemsize) != 0
