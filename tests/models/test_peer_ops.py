"""Per-model op lists run through spyrejax.jit against jax.jit (issue 26 item 6).

Our lists (tests/peer_ops_lists/*.json, format in tests/peer_ops.py and docs/testing.md)
hold the ops of Granite-3.3-8B, Llama-3.1-8B and GPT-OSS-20B at prefill and decode sizes.
``pytest --peer-ops DIR`` (or ``SPYREJAX_PEER_OPS=DIR``) also runs torch-spyre's own
``model_ops_tests/*.yaml`` files from DIR; without it nothing else is read.
"""

import os
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import assert_matches, check_each_side_by_side
from peer_ops import LISTS, Case, host_dtype, layout_of, operand, our_cases, same_placement, stated

import spyrejax as sj


def _params(cases):
    out = []
    for c in cases:
        marks = []
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        if c.xfail:
            marks.append(pytest.mark.xfail(strict=True, reason=c.xfail))
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


OURS = [c for path in sorted(LISTS.glob("*.json")) for c in our_cases(path)]


def pytest_generate_tests(metafunc):
    if "torch_case" not in metafunc.fixturenames:
        return
    folder = metafunc.config.getoption("--peer-ops") or os.environ.get("SPYREJAX_PEER_OPS")
    reason = None
    if not folder:
        reason = "torch-spyre's op lists run with --peer-ops DIR or SPYREJAX_PEER_OPS=DIR"
    else:
        try:
            import yaml  # noqa: F401
        except ImportError:
            reason = "reading torch-spyre's YAML files needs PyYAML (pip install pyyaml)"
    if reason is not None:
        metafunc.parametrize(
            "torch_case", [pytest.param(None, marks=pytest.mark.skip(reason=reason))]
        )
        return
    from peer_ops import torch_spyre_cases

    metafunc.parametrize("torch_case", _params(torch_spyre_cases(Path(folder))))


def _prepare(case: Case) -> tuple[list, list]:
    """A case's host operands, and the arguments spyrejax.jit takes (placed ones moved)."""
    rng = np.random.default_rng(0)
    hosts = [operand(spec, rng) for spec in case.operands]
    args = []
    for spec, x in zip(case.operands, hosts, strict=True):
        given = spec.get("device_layout")
        if given is None:
            args.append(x)
            continue
        layout = layout_of(given, x.dtype)
        if stated(given, x.shape):
            ours = sj.SpyreTensorLayout(x.shape, x.dtype)
            assert same_placement(layout, ours, x.shape), (layout, ours)
        args.append(sj.to_device(x, layout))
    return hosts, args


def _check(case: Case, out, want) -> None:
    """spyrejax.jit's result ``out`` against jax.jit's: dtypes, values, stated layouts."""
    assert_matches(jax.tree.map(sj.to_host, out), want, reduce_len=case.reduce_len, ops=case.ops)
    if stated(case.result_layout, np.shape(want)):
        want_layout = layout_of(case.result_layout, host_dtype(str(want.dtype)))
        assert same_placement(out.layout, want_layout, np.shape(want)), (out.layout, want_layout)


def run_case(case: Case) -> None:
    """Run one op through spyrejax.jit and jax.jit; check values and stated layouts."""
    hosts, args = _prepare(case)
    _check(case, sj.jit(case.fn)(*args), jax.jit(case.fn)(*hosts))


def run_side_by_side(cases: list[Case]) -> None:
    """Run ``cases`` as one program under each jit (``helpers.check_each_side_by_side``).

    Only cases with no stated layout come here (:func:`_alone`), so each runs on its host
    operands and is checked as :func:`run_case` checks it: dtypes and values.
    """

    def check(name, got, want):
        case = by_id[name]
        assert_matches(got, want, reduce_len=case.reduce_len, ops=case.ops)

    by_id = {case.id: case for case in cases}
    assert not any(_alone(case) for case in cases), "a stated layout runs alone"
    check_each_side_by_side({c.id: (c.fn, _prepare(c)[0]) for c in cases}, check)


def _alone(case: Case) -> bool:
    """Whether a case runs under its own id: marked xfail or skip, or with a stated layout.

    A layout an operand is given or the result must have is the planner's business, and
    the planner sees the whole program: side by side, an op's result layout may differ
    from its layout alone (granite's fms-rope-pairs-view did). Values do not.
    """
    placed = any(spec.get("device_layout") is not None for spec in case.operands)
    return bool(case.skip or case.xfail or placed or case.result_layout is not None)


LISTED = sorted({c.id.split("/")[0] for c in OURS})


@pytest.mark.parametrize("model", LISTED)
def test_model_ops_match_jax_jit(model):
    # A list's ops without a stated layout, side by side in one program per list.
    run_side_by_side([c for c in OURS if c.id.split("/")[0] == model and not _alone(c)])


@pytest.mark.parametrize("case", _params([c for c in OURS if _alone(c)]))
def test_model_op_matches_jax_jit(case):
    run_case(case)


def test_torch_spyre_model_op(torch_case):
    run_case(torch_case)


def test_every_list_names_its_sources():
    """Each list says where its numbers come from, and so does each entry."""
    import json

    for path in sorted(LISTS.glob("*.json")):
        doc = json.loads(path.read_text())
        assert doc["source"] and doc["config"], path.name
        assert all(e.get("from") for e in doc["ops"]), path.name
    assert {p.stem for p in LISTS.glob("*.json")} >= {
        "granite-3.3-8b",
        "llama-3.1-8b",
        "gpt-oss-20b",
    }


# A file in torch-spyre's model_ops format (written here, from its documented fields): the
# entries a user's file holds, one of each kind the reader maps or skips.
TORCH_SPYRE_FILE = """
test_suite_config:
  files:
    - path: tests/models/test_model_ops.py
      tests:
        - names: [TestModelOps::test_model_ops_db]
          edits:
            ops:
              include:
                - name: torch.mul
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [1, 5, 96], stride: [480, 96, 1], storage_offset: 0,
                                 dtype: torch.bfloat16, init: rand}
                      - value: 12.0
                - name: torch.Tensor.float
                  sample_inputs_func:
                    args:
                      - tensor:
                          shape: [1, 1, 41]
                          stride: [41, 41, 1]
                          storage_offset: 0
                          dtype: torch.int64
                          init: randint
                          init_args: {high: 4096}
                          device_layout:
                            device_size: [2, 1, 32]
                            stride_map: [32, -1, 1]
                            device_dtype: torch.int32
                - name: torch.neg
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [1, 2, 5, 64], stride: [1280, 640, 128, 1],
                                 storage_offset: 64, dtype: torch.float16, init: rand}
                - name: torch.matmul
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [1, 64, 1], stride: [64, 1, 1], dtype: torch.float32}
                      - tensor: {shape: [1, 1, 41], stride: [41, 41, 1], dtype: torch.float32}
                - name: torch.Tensor.transpose
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [1, 64, 41], stride: [2624, 41, 1], dtype: torch.float32}
                      - value: 1
                      - value: 2
                - name: torch.nn.functional.embedding
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [1, 7], stride: [7, 1], dtype: torch.int64, init: randint,
                                 init_args: {high: 2147483647}}
                      - tensor: {shape: [1000, 64], stride: [64, 1], dtype: torch.bfloat16}
                - name: torch.cat
                  sample_inputs_func:
                    args:
                      - tensor_list:
                          - {shape: [1, 4, 64], stride: [256, 64, 1], dtype: torch.float32}
                          - {shape: [1, 4, 64], stride: [256, 64, 1], dtype: torch.float32}
                - name: torch.Tensor.to
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [1, 64, 1], stride: [64, 1, 1], dtype: torch.float32}
                - name: torch.arange
                  sample_inputs_func:
                    args:
                      - value: 1
"""


def test_torch_spyre_files_are_read_run_or_skipped_with_a_reason(tmp_path):
    pytest.importorskip("yaml")
    from peer_ops import torch_spyre_cases

    (tmp_path / "tiny.yaml").write_text(TORCH_SPYRE_FILE)
    cases = torch_spyre_cases(tmp_path)
    assert [c.skip is None for c in cases] == [True] * 7 + [False] * 2
    assert "torch.Tensor.to" in cases[7].skip and "torch.arange" in cases[8].skip
    neg = cases[2].operands[0]
    assert (neg["strides"], neg["offset"]) == ([1280, 640, 128, 1], 64)
    for case in cases[:7]:
        run_case(case)


def test_same_placement_ignores_unit_dims_only():
    """torch-spyre's [2, 1, 32] of a [1, 1, 41] int32 is spyrejax's [1, 2, 1, 32]; another
    dim order of a [4, 41] tensor places its elements elsewhere."""
    from peer_ops import layout_of

    theirs = layout_of({"device_size": [2, 1, 32], "stride_map": [32, -1, 1]}, np.int32)
    assert same_placement(theirs, sj.SpyreTensorLayout((1, 1, 41), np.int32), (1, 1, 41))
    rows = sj.SpyreTensorLayout((4, 41), np.int32)
    cols = sj.SpyreTensorLayout((4, 41), np.int32, [1, 0])
    assert not same_placement(rows, cols, (4, 41))
