"""The compiled XLA program names the Spyre op behind each instruction (profiles, counts)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import rand

import spyrejax as sj


def _op_names(text: str, opcode: str) -> list[str]:
    """The ``op_name`` metadata of every ``opcode`` instruction of an HLO text."""
    pattern = rf"= \S+ {opcode}\(.*?op_name=\"([^\"]*)\""
    return re.findall(pattern, text)


def test_each_kernel_and_planned_move_carries_its_spyre_name():
    a, b = rand((64, 96), np.float32, 0), rand((96, 80), np.float32, 1)

    def f(a, b):
        return (a @ b).T @ a  # the transposed product is restickified for the second

    lowered = sj.jit(f).lower(a, b)
    moves = sum(len(m) for m in lowered.plan.moves.values())
    assert moves >= 1
    text = lowered.compile().as_text()
    assert "spyre.dot_general" in text and "spyre.restickify" in text
    # every transpose XLA keeps belongs to a kernel or a transfer, each by its own name
    names = _op_names(text, "transpose")
    assert names and all("/spyre." in n for n in names), names
    assert any("spyre.to_device" in n for n in names)  # the host arguments' tiling


@pytest.mark.plain_program  # under --emulate-check the ops run per core: no write-out
def test_a_summed_cotangent_is_computed_once():
    """``add_any`` (a residual stream's gradient) is written out: XLA does not recompute
    the elementwise chain behind it inside each of its readers (layer after layer)."""
    ws = [rand((96, 96), np.float32, i, low=-0.1, high=0.1) for i in range(3)]
    x = rand((64, 96), np.float32, 9, low=-1.0, high=1.0)

    def loss(ws, x):
        for w in ws:
            x = x + jnp.tanh(x @ w) * x
        return (x * x).sum()

    grad = jax.grad(loss)
    sums = str(jax.make_jaxpr(grad)(ws, x)).count("add_any")
    assert sums == 5
    text = sj.jit(grad).lower(ws, x).compile().as_text()
    adds = [n for n in _op_names(text, "add") if n.endswith("spyre.add_any/add")]
    assert len(adds) == sums  # 13 before: three of them fused into later kernels too
