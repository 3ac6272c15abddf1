"""The machine facts of spec section 8 (the LX budget, the LX port, launch, host overhead)
and the report's own numbers (lx_peak, constant fills, slices, hints on any dim name)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spyrejax as sj
from spyrejax.device import Machine

S = jax.ShapeDtypeStruct
F16 = np.float16
MIB = 2**20

# Spec section 8: y = x * 2 in fp16, S MB in and S MB out, device ms.
X2_SWEEP_MS = {2: 0.0387, 4: 0.0801, 8: 0.1649, 16: 0.3383, 32: 0.6626}


# --- the scratchpad budget --------------------------------------------------------------


def test_lx_fraction_defaults_to_torch_spyres_budget_and_gives_the_usable_bytes():
    m = Machine.spyre()
    assert m.lx_fraction == 0.2 and "DXP_LX_FRAC_AVAIL" in m.origin("lx_fraction")
    assert m.lx_usable == int(2 * MIB * 0.2) and m.origin("lx_usable") == "derived"
    wide = Machine.spyre(lx_fraction=0.8)
    assert wide.lx_usable == 1_677_721  # the spec's section 1 figure
    assert dataclasses.replace(m, lx_fraction=0.8) == wide == m.with_lx_fraction(0.8)
    assert Machine.ktir_cpu(lx_fraction=0.5).lx_usable == MIB


@pytest.mark.parametrize("frac", [0, 1.5, -0.2, "0.2", True])
def test_lx_fraction_outside_0_to_1_is_an_error(frac):
    with pytest.raises(sj.DeviceError, match="lx_fraction"):
        Machine.spyre(lx_fraction=frac)


def test_every_report_records_its_lx_fraction():
    f = lambda a: jnp.exp(-a)  # noqa: E731
    r = sj.explain(f, S((64, 512), F16))
    assert r.lx_fraction == r.device.lx_fraction == 0.2
    assert "LX fraction 0.2" in str(r) and "LX fraction 0.2" in str(r.device)
    assert "LX fraction 0.2" in r._repr_html_()
    wide = sj.explain(f, S((64, 512), F16), machine=Machine.spyre(lx_fraction=0.8))
    assert wide.lx_fraction == 0.8 and "LX fraction 0.8" in str(wide)


def test_the_budget_decides_what_stays_in_lx():
    f = lambda a: jnp.exp(-a)  # noqa: E731
    arg = S((64, 8192), F16)  # 32 KiB per core: fits 0.2 of LX
    assert sj.explain(f, arg).ops[0].lx_output
    big = S((4096, 8192), F16)  # 2 MiB per core: fits no budget
    assert not sj.explain(f, big, machine=Machine.spyre(lx_fraction=0.8)).ops[0].lx_output
    mid = S((1024, 8192), F16)  # 512 KiB per core: fits 0.8, not 0.2
    assert sj.explain(f, mid, machine=Machine.spyre(lx_fraction=0.8)).ops[0].lx_output
    assert not sj.explain(f, mid).ops[0].lx_output


# --- the LX port, launch, host overhead ---------------------------------------------------


def test_an_op_whose_operands_are_in_lx_costs_its_lx_port_time_and_its_launch():
    m = Machine.spyre()
    r = sj.explain(lambda a: jnp.exp(-a), S((64, 512), F16))
    neg, exp = r.ops
    assert neg.lx_output and exp.read_bytes == 0 and neg.write_bytes == 0
    moved = 2 * 64 * 512 * 2  # exp reads neg's result from LX and writes its own
    assert exp.cost.lx_s == pytest.approx(moved / (128 * m.clock_hz * 32))
    assert exp.cost.launch_s == m.launch_s > 0
    assert exp.time_s >= exp.cost.lx_s + m.launch_s


def test_a_tiny_add_takes_about_a_microsecond_of_device_time():
    r = sj.explain(lambda a, b: a + b, S((4, 1, 4096), F16), S((4, 1, 4096), F16))
    assert r.time_s == pytest.approx(1e-6, rel=0.5)  # spec section 8: about 1 us


def test_host_overhead_is_a_separate_figure_never_in_the_device_time():
    m = Machine.spyre()
    assert m.host_call_s == 2.9e-3 and m.origin("host_call_s").startswith("measured")
    r = sj.explain(lambda a, b: a + b, S((4, 1, 4096), F16), S((4, 1, 4096), F16))
    assert r.time_s < m.host_call_s / 100
    assert "host overhead per call 2.9 ms wall, not in the device time" in str(r)


@pytest.mark.parametrize("mb", sorted(X2_SWEEP_MS))
def test_x_times_2_is_within_15_percent_of_the_measured_sweep(mb):
    rows = mb * MIB // 2 // 4096
    r = sj.explain(lambda x: x * 2, S((rows, 4096), F16))
    assert r.time_s * 1e3 == pytest.approx(X2_SWEEP_MS[mb], rel=0.15)


def test_views_run_no_kernel():
    r = sj.explain(lambda x: x.reshape(2, 512, 64) * 2, S((1024, 64), F16))
    views = [op for op in r.ops if op.desc.kind == "view"]
    assert all(op.time_s == 0 and op.cost.launch_s == 0 for op in views)


# --- the report's own numbers ---------------------------------------------------------------


def softmax(s):
    return jax.nn.softmax(s, -1)


@pytest.mark.parametrize("frac", [0.2, 0.8])
def test_lx_peak_is_the_highest_placed_byte_never_over_the_budget(frac):
    m = Machine.spyre(lx_fraction=frac)
    d = sj.explain(softmax, S((16, 1024, 1024), F16), machine=m).device
    assert d.lx_peak == d.lx.peak <= d.lx_budget == m.lx_usable
    assert max(op.lx_peak for op in d.ops) <= d.lx_peak
    if frac == 0.8:  # exp takes sub's 1 MiB in place: counted once
        assert d.lx_peak == 1_114_112


def test_a_constant_fill_is_one_stick_read_once():
    def masked(s):
        return jnp.where(s > 0, s, -jnp.inf)

    r = sj.explain(masked, S((4, 256, 1024), F16))
    fills = [op for op in r.ops if op.opfunc == "full"]
    assert fills and all(op.write_bytes == 128 and op.cost.launch_s == 0 for op in fills)
    (where,) = [op for op in r.ops if op.opfunc == "where"]
    s_bytes = 4 * 256 * 1024 * 2
    assert where.read_bytes <= s_bytes * 2 + 128  # s and the mask, not a full -inf tensor


def test_a_fill_that_is_a_program_output_is_written_whole():
    r = sj.explain(lambda: jnp.full((256, 1024), 3.0, F16))
    (fill,) = [op for op in r.ops if op.opfunc == "full"]
    assert fill.write_bytes == 256 * 1024 * 2


def test_a_slice_is_charged_what_it_reads():
    r = sj.explain(lambda x: x[:4], S((1024, 4096), F16))
    (copy,) = r.ops
    assert copy.read_bytes == 4 * 4096 * 2


def test_a_slice_across_the_sticks_reads_whole_sticks():
    # a column holds one element of a stick in each row: the card reads every stick
    r = sj.explain(lambda x: x[:, -1], S((1024, 4096), F16))
    (copy,) = [op for op in r.ops if op.opfunc == "slicecopy"]
    assert copy.read_bytes == 1024 * 128
    r = sj.explain(lambda x: x[:, 3, :5], S((16, 8, 100), np.float32))
    (copy,) = [op for op in r.ops if op.opfunc == "slicecopy"]
    assert copy.read_bytes == 16 * 128  # a stick of 32 in each of 16 rows


def test_with_division_takes_every_dim_name_even_x():
    def f(a):
        return sj.with_division(a * 2, x=4)

    a = np.ones((16, 64, 64), F16)
    np.testing.assert_array_equal(f(a), a * 2)  # the identity under plain JAX
    (op,) = sj.explain(f, S(a.shape, F16)).ops
    assert op.division.splits["x"] == 4
