import functools
import importlib.util
import json
import pathlib

import jax
import jax.numpy as jnp
import pytest

import spyrejax as sj

ROOT = pathlib.Path(__file__).resolve().parents[2]
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
    assert mm["case"].startswith("matmul") and mm["ratio_q1"] <= mm["ratio"] <= mm["ratio_q3"]
    assert mm["max_abs_err"] < 1e-2 and mlp["case"].startswith("MLP")
    assert mm["cpu_ratio"] > 0 and mm["spyrejax_cpu_s"] > 0 and mm["native_cpu_s"] > 0
    assert mm["native_faults"] >= 0 and mm["spyrejax_faults"] >= 0
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


def test_ratio_spread_is_the_quartiles_of_the_paired_ratios():
    q1, q2, q3 = bench.ratio_spread([1.0, 2.0, 3.0, 4.0, 5.0], [1.0] * 5)
    assert (q1, q2, q3) == pytest.approx((1.5, 3.0, 4.5))


def test_whole_programs_plan_scale_dispatch_and_ktir_rows():
    cases = bench.program_cases("small")
    assert next(iter(cases)).startswith("GPT training step")
    assert any(n.startswith("scan over 8") for n in cases)
    (llama,) = bench.bench_programs("small", ["Llama block forward, d"])
    assert llama["max_abs_err"] < 1e-2 and llama["ratio_q1"] <= llama["ratio_q3"]
    with jax.numpy_dtype_promotion("standard"):  # optax: 0.9 ** an int32 count
        (plan,) = bench.bench_plan_scale([1], [])
    assert plan["layers"] == 1 and plan["equations"] > 100 and plan["device_ops"] > 100
    assert plan["total_s"] == pytest.approx(plan["trace_s"] + plan["plan_s"] + plan["explain_s"])
    (dispatch,) = bench.bench_dispatch([])
    assert 0 < dispatch["native_s"] < 1e-3 and dispatch["ratio"] > 0
    (softmax,) = bench.bench_ktir(["softmax"])
    assert softmax["ktir_cpu_s"] == 5.5  # quoted from the issue, not measured
    assert softmax["speedup_vs_ktir_cpu"] == softmax["ktir_cpu_s"] / softmax["spyrejax_s"]
    results = {
        "machine": bench.machine(),
        "runs": 9,
        "compute": [],
        "dma": [],
        "compile": [],
        "programs": [llama],
        "plan_scale": [plan],
        "dispatch": [dispatch],
        "ktir": [softmax],
    }
    text = bench.markdown(results)
    for heading in ("whole program", "`explain` of a GPT", "dispatch (per call)", "ktir-cpu"):
        assert heading in text


def test_scanned_gpt_step_traces_and_plans_one_block_whatever_the_depth():
    reports = {}
    for layers in (2, 3):
        step, args = bench.gpt_step_structs(layers, scanned=True, size="small")
        with jax.numpy_dtype_promotion("standard"):  # optax: 0.9 ** an int32 count
            reports[layers] = sj.explain(step, *args)
    assert len(reports[2].ops) == len(reports[3].ops)  # one block's ops, run per layer
    assert reports[3].time_s > reports[2].time_s  # each layer still runs


def test_granite_rows_time_explain_of_a_whole_layer():
    (row,) = bench.bench_granite(["decode"])
    assert row["case"].startswith("Granite-3.3-8B layer, decode") and row["explain_s"] > 0
    assert row["fused_kernels"] >= 4 and "attention" in row["families"]
    assert row["lx_fraction"] == 0.2 and 0 < row["attention_us"] < row["predicted_us"]


def test_issue_24_rows_are_cases_of_the_full_run():
    names = [*bench.compute_cases(1), *bench.compute_cases(4), *bench.program_cases("large")]
    for _label, section, part, _target in bench.TARGETS:
        if section != "compile":
            assert any(part in n for n in names), part
    gpt = [n for n in bench.program_cases("large") if n.startswith("GPT")]
    assert len(gpt) == 2 and gpt[1] == f"{gpt[0]}, dropout {bench.DROPOUT}"
    (shape, _, dtype) = next(iter(bench.DMA_TARGET.values()))
    assert shape == (4096, 4000) and dtype == "float16"


def test_targets_table_has_every_row_and_says_what_was_not_run():
    row = {"native_s": 1.0, "spyrejax_s": 1.5, "ratio": 1.5}
    gpt = "GPT training step (adamw), 4 layers d 256 seq 128 batch 8"
    usage = {"cpu_ratio": 1.25, "native_faults": 378.0, "spyrejax_faults": 16769.0}
    norm = {"case": "padded: layer norm 4096x1000 bfloat16", **row, **usage}
    results = {
        "compute": [norm],
        "programs": [{"case": gpt, **row}, {"case": f"{gpt}, dropout 0.1", **row, "ratio": 2.0}],
        "plan_scale": [{"layers": 32, "total_s": 4.25}],
    }
    lines = bench.targets_markdown(results).splitlines()
    assert len(lines) == 2 + len(bench.TARGETS) + 3
    by_label = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    gpt_label = next(t[0] for t in bench.TARGETS if t[0].startswith("equinox GPT"))
    assert "| 1.50x |" in by_label[gpt_label]
    assert "| 2.00x |" in by_label["the same step with dropout"]
    norm_cell = "| 1.50x; CPU 1.25x; page faults per call 378 / 16,769 |"
    assert norm_cell in by_label[bench.TARGETS[0][0]]
    assert "| not run |" in by_label[bench.TARGETS[1][0]]
    assert any("| 4.2 s |" in line for line in lines) and lines[-1].count("not run") == 1


def test_weights_row_major_cases_place_the_weights_and_keep_their_own_row():
    name = f"Llama block forward bfloat16, d 64 ff 96 seq 8 (2 heads, 1 kv){bench.WEIGHTS}"
    args = (
        bench.models.llama_params(64, 2, 1, 96, dtype=jnp.bfloat16),
        jnp.ones((8, 64), jnp.bfloat16),
    )
    llama = sj.jit(functools.partial(bench.models.llama_block, heads=2, kv_heads=1))
    params, x = bench._to_device(name, args, llama)
    assert params["w1"].layout == sj.SpyreTensorLayout.row_major(params["w1"].shape, jnp.bfloat16)
    assert "pad=0" in params["w1"].type.str_short() and params["g1"].ndim == 1
    assert x.layout == sj.SpyreTensorLayout(x.shape, x.dtype)
    plain = name.removesuffix(bench.WEIGHTS)
    rows = [{"case": plain, "ratio": 1.3}, {"case": name, "ratio": 1.0}]
    assert bench._find(rows, "d 64 ff 96")["ratio"] == 1.3
    assert bench._find(rows, f"d 64 ff 96 seq 8 (2 heads, 1 kv){bench.WEIGHTS}")["ratio"] == 1.0


def test_the_gpt_step_with_a_key_drops_out():
    params, static, ids, labels = bench.models.gpt_setup(32, 16, 2, 8, 2, 1, dropout=0.5)
    step = bench.models.gpt_train_step(static, bench.optax.sgd(0.1))
    state = bench.optax.sgd(0.1).init(params)
    *_, plain = step(params, state, ids, labels)
    *_, dropped = step(params, state, ids, labels, jax.random.PRNGKey(0))
    assert plain != dropped and abs(float(plain) - float(dropped)) > 1e-3


def _plan_row(layers, scanned, total_s):
    return {
        "layers": layers,
        "scanned": scanned,
        "equations": 1000 * layers,
        "device_ops": 900 * layers,
        "trace_s": total_s / 4,
        "plan_s": total_s / 2,
        "explain_s": total_s / 4,
        "total_s": total_s,
        "cpu_s": total_s,
        "ms_per_equation": total_s / layers,
    }


def test_scanned_plan_rows_render_in_both_tables():
    unrolled = [_plan_row(n, False, n / 4) for n in (8, 32)]
    scanned = [_plan_row(n, True, 1.0 + n / 64) for n in (8, 32)]
    results = {"machine": bench.machine(), "runs": 5, "compute": [], "dma": [], "compile": []}
    results["plan_scale"] = unrolled + scanned
    rows = [line for line in bench.markdown(results).splitlines() if "layers" in line]
    assert "| 32 layers | 32000 | 28800 |" in rows[-3]
    assert rows[-2].startswith("| 8 layers, scanned |") and "| 1.12 s |" in rows[-2]
    assert rows[-1].startswith("| 32 layers, scanned |") and "| 1.50 s |" in rows[-1]
    (line,) = [r for r in bench.targets_markdown(results).splitlines() if "`explain`" in r]
    assert "| 2.0 s / 8.0 s (blocks in a scan: 1.5 s at 32) |" in line
    results["plan_scale"] = unrolled[:1] + scanned[:1]  # no 32-layer scan: the deepest run
    (line,) = [r for r in bench.targets_markdown(results).splitlines() if "`explain`" in r]
    assert "| 2.0 s (blocks in a scan: 1.1 s at 8) |" in line
