"""Residency: where each value lives (DDR or LX of which cores), on its SpyreType."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import spyrejax as sj
from spyrejax import primitives as sp
from spyrejax._counts import counting
from spyrejax._jax import Primitive
from spyrejax.lowering._registry import RULES, Rule, _carried_modes

S = jax.ShapeDtypeStruct
F16 = np.float16
X = S((512, 512), F16)
# explain plans what a call runs: a host input (here its ShapeDtypeStruct) is moved to the
# device first, so the jaxpr's inputs are SpyreArrays of their default layouts (no ToDevice).
DEV = sj.to_device(np.zeros(X.shape, X.dtype))


def chain(x):
    return jnp.exp(x) * 2 + 1


def lines(jaxpr_text):
    """``{variable: its binding line}`` of the top-level equations and inputs."""
    out = {}
    for line in jaxpr_text.splitlines():
        for m in re.finditer(r"\b([a-z]+):[a-z0-9]+\[", line):
            out.setdefault(m.group(1), line)
    return out


def lx_mark(r):
    return f"@LX[c0:{r.cores}]+{r.offset:#x}"


# --- the value ---------------------------------------------------------------------------


def test_residency_is_frozen_hashable_and_checked():
    lx = sj.Residency.lx(32, 0x1000, 128)
    assert lx == sj.Residency.lx(32, 0x1000, 128) and hash(lx) == hash(
        sj.Residency.lx(32, 4096, 128)
    )
    assert lx != sj.Residency() and lx.in_lx and not sj.Residency().in_lx
    assert str(lx) == "LX[c0:32]+0x1000" and str(sj.Residency()) == "DDR"
    with pytest.raises(dataclasses.FrozenInstanceError):
        lx.cores = 8
    for bad in (
        dict(memory="HBM"),
        dict(memory="DDR", cores=4),
        dict(memory="LX", cores=0, nbytes=128),
        dict(memory="LX", cores=4, offset=-128, nbytes=128),
        dict(memory="LX", cores=True, nbytes=128),
    ):
        with pytest.raises(sj.DeviceError):
            sj.Residency(**bad)


def test_type_equality_and_hash_ignore_residency_and_only_lx_is_printed():
    t = sj.SpyreType.contiguous((512, 512), F16, sj.SpyreTensorLayout((512, 512), F16))
    assert t.residency == sj.Residency()
    there = dataclasses.replace(t, residency=sj.Residency.lx(32, 0x1000, 16384))
    assert there == t and hash(there) == hash(t) and {t: 1}[there] == 1
    assert "@" not in t.str_short()
    assert there.str_short() == t.str_short()[:-1] + " @LX[c0:32]+0x1000}"
    with pytest.raises(sj.SpyreTypeError, match="residency must be a Residency"):
        dataclasses.replace(t, residency="LX")


# --- the jaxprs users see ----------------------------------------------------------------


def test_a_chain_of_elementwise_ops_keeps_its_intermediates_in_lx():
    r = sj.explain(chain, X)
    exp, mul, add = r.ops
    cores = exp.division.cores_used
    assert cores == mul.division.cores_used == 32
    var = lines(r.jaxpr)
    for op, name in ((exp, "b"), (mul, "c")):
        assert f"= {op.opfunc.capitalize()}" in var[name]
        want = r.device.residency(op.desc.output[0])
        assert want.in_lx and want.cores == cores
        assert r.residency(name) == want and lx_mark(want) in var[name]
    assert r.residency("b").offset != r.residency("c").offset  # both live while mul runs
    assert r.residency("b").nbytes == 512 * 512 * 2 // cores
    # Inputs and outputs live in DDR: no mark.
    assert "@" not in var["a"] + var["d"]
    assert r.residency("a") == r.residency("d") == sj.Residency()
    assert r.device.residency(add.desc.output[0]) == sj.Residency()
    assert sj.jit(chain).lower(DEV).as_text() == r.jaxpr


def test_the_core_count_is_the_one_of_the_op_writing_the_value():
    eight = sj.Machine.spyre(cores=8)
    r = sj.explain(chain, X, machine=eight)
    assert r.residency("b").cores == r.ops[0].division.cores_used == 8
    assert "@LX[c0:8]+0x0" in lines(r.jaxpr)["b"]
    assert sj.jit(chain).lower(DEV).as_text(machine=eight) == r.jaxpr
    # A sum over dim 0 of a [512, 512] image runs on 8 cores: its result says so.
    r = sj.explain(lambda a, b: jnp.exp(a).sum(0) * b[0], X, X)
    (cast,) = [o for o in r.ops if o.opfunc == "astype" and o.division.cores_used == 8]
    assert r.device.residency(cast.desc.output[0]).cores == 8
    assert any("@LX[c0:8]" in line for line in r.jaxpr.splitlines())


def test_a_tiny_lx_keeps_everything_in_ddr():
    tiny = dataclasses.replace(sj.Machine.spyre(), lx_bytes=4096)
    assert tiny.lx_usable < 512 * 512 * 2 // 32  # one core's slice does not fit
    r = sj.explain(chain, X, machine=tiny)
    assert "@" not in r.jaxpr
    assert all(t.residency == sj.Residency() for t in r.tensors)
    assert not any(op.lx_output for op in r.ops)
    assert "@LX" in sj.explain(chain, X).jaxpr  # the same program on Spyre's LX


def test_a_value_whose_consumer_uses_other_slices_stays_in_ddr():
    mul = sj.explain(lambda a, b: jnp.exp(a) * b, X, X)
    mm = sj.explain(lambda a, b: jnp.exp(a) @ b, X, X)
    exp, matmul = mm.ops
    assert exp.division.box(1, 1) != matmul.division.box(0, 1)  # core 1's slices differ
    assert "@" not in lines(mm.jaxpr)["c"] and mm.residency("c") == sj.Residency()
    assert mul.residency("c").in_lx  # the same exp read elementwise stays in LX


def test_values_inside_one_nodes_lowering_are_annotated_too():
    twice_p = Primitive("test_exp_twice")
    twice_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))

    class _ExpTwice(Rule):
        def modes(self, node):
            return _carried_modes(node, lambda t: t)

        def lower(self, node, args, mode):
            return [sp.exp(sp.exp(args[0]))]

    RULES["test_exp_twice"] = _ExpTwice()
    try:
        r = sj.explain(lambda a: twice_p.bind(a) * 2, X)
    finally:
        del RULES["test_exp_twice"]
    first, second, _ = r.ops
    assert first.desc.output[0].endswith(".0")  # named inside the node's lowering
    assert second.lx_inputs == (first.desc.output[0],)
    var = lines(r.jaxpr)
    assert "= Exp a" in var["b"] and "= Exp b" in var["c"]
    assert r.residency("b") == r.device.residency(first.desc.output[0])
    assert r.residency("b").in_lx and r.residency("c").in_lx


def test_unknown_names_are_named_errors():
    r = sj.explain(chain, X)
    with pytest.raises(sj.DeviceError, match="'zz' is not a Spyre value"):
        r.residency("zz")
    with pytest.raises(sj.DeviceError, match="no op reads or writes a value 'nope'"):
        r.device.residency("nope")


def test_calls_do_not_plan_the_device_program():
    f = sj.jit(lambda a: jnp.exp(a) * 3 - 1)
    x = np.ones((64, 128), F16)
    with counting() as counts:
        f(x)
        lowered = f.lower(x)
        assert "@" not in str(lowered._lowering.spyre_jaxpr) and not counts["program.plan"]
        assert "@LX" in lowered.as_text() and counts["program.plan"] == 1
        # Planned once per machine: as_text and explain of the same lowering share the plan.
        assert lowered.as_text() == lowered.as_text(sj.Machine.spyre())
        assert counts["program.plan"] == 1
        lowered.as_text(sj.Machine.ktir_cpu())
        assert counts["program.plan"] == 2


def test_a_shard_map_body_shows_what_one_card_keeps_in_lx():
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    body = lambda a, w: jax.lax.psum(jnp.exp(a @ w.T) * 2 + 1, "x")  # noqa: E731
    f = jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=P(), check_vma=False)
    w = S((512, 256), F16)
    r = sj.explain(f, w, w)
    exp = next(op for op in r.ops if op.opfunc == "exp")
    assert exp.desc.output[1].shape == (128, 512)  # one card's block
    where = r.device.residency(exp.desc.output[0])
    assert where.in_lx and where.cores == exp.division.cores_used
    (line,) = [x for x in r.jaxpr.splitlines() if "= Exp" in x]
    assert "f16[128,512]" in line and lx_mark(where) in line
    assert sum("@LX" in x for x in r.jaxpr.splitlines()) == 2  # exp's and mul's results
