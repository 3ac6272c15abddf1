"""Per-model op lists run through spyrejax.jit against jax.jit (issue 26 item 6).

Our lists (tests/peer_ops_lists/*.json, format in tests/peer_ops.py and docs/testing.md)
hold the ops of Granite-3.3-8B, Llama-3.1-8B and GPT-OSS-20B at prefill and decode sizes.
``pytest --peer-ops DIR`` (or ``SPYREJAX_PEER_OPS=DIR``) also runs torch-spyre's own
``model_ops_tests/*.yaml`` files from DIR; without it nothing else is read.
"""

import os
from pathlib import Path

import chex
import jax
import numpy as np
import pytest
from helpers import assert_close, assert_matches_jax_jit
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


def run_case(case: Case) -> None:
    """Run one op through spyrejax.jit and jax.jit; check values and stated layouts."""
    rng = np.random.default_rng(0)
    hosts = [operand(spec, rng) for spec in case.operands]
    tolerance = {"reduce_len": case.reduce_len, "ops": case.ops}
    placed = [spec.get("device_layout") is not None for spec in case.operands]
    if not any(placed) and case.result_layout is None:
        assert_matches_jax_jit(case.fn, *hosts, **tolerance)
        return
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
    out = sj.jit(case.fn)(*args)
    want = jax.jit(case.fn)(*hosts)
    got = jax.tree.map(sj.to_host, out)
    chex.assert_trees_all_equal_dtypes(got, want)
    assert_close(got, want, **tolerance)
    if stated(case.result_layout, np.shape(want)):
        want_layout = layout_of(case.result_layout, host_dtype(str(want.dtype)))
        assert same_placement(out.layout, want_layout, np.shape(want)), (out.layout, want_layout)


@pytest.mark.parametrize("case", _params(OURS))
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
    }
