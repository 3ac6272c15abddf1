"""Machine profiles: the spec's constants, each with an origin, and the core setting."""

import dataclasses

import pytest

import spyrejax as sj
from spyrejax.device import Machine


def test_spyre_profile_holds_the_spec_constants():
    m = Machine.spyre()
    assert (m.cores, m.corelets, m.clock_hz, m.pt_clock_hz) == (32, 2, 1.5e9, 1.1e9)
    # Section 8: 32,768 fp16 MAC/cycle per card at 1.1 GHz, 72.1 TFLOP/s.
    assert m.peak_macs_per_cycle * 32 == 32_768
    assert m.peak_macs_per_s * 2 * 32 == pytest.approx(72.09e12, rel=1e-3)
    assert m.lx_usable == 419_430 and m.lx_alignment == 128  # lx_fraction 0.2
    assert m.span_limit == 256 * 2**20
    assert m.ring_bw == 128 * 1.5e9
    assert m.matmul_macs_per_ns == pytest.approx(1126.4)  # torch-spyre's "1,140" is the peak
    assert m.matmul_model == "calibrated"


def test_pt_rates_per_format_are_those_of_section_8():
    rates = dict(Machine.spyre().pt_dtype_rates)
    assert rates["SEN169_FP16"] == rates["BFLOAT16"] == 1.0
    assert rates["SEN143_FP8"] == rates["SEN152_FP8"] == rates["SENINT8"] == 2.0
    assert rates["SENINT4"] == 4.0
    assert rates["IEEE_FP32"] == 0.25  # an assumption, stated in its origin
    assert "assumption" in Machine.spyre().origin("pt_dtype_rates")


def test_section_8_origins_and_fitted_constants_name_their_data():
    m = Machine.spyre()
    assert "1.1 GHz" in m.origin("pt_clock_hz") and "section 8" in m.origin("pt_clock_hz")
    assert "32,768" in m.origin("peak_macs_per_cycle")
    for name in ("mm_stream_penalty", "mm_multicast_sync_s", "mm_run_s", "mm_partial_sum_bw"):
        assert m.origin(name).startswith("fitted")
        assert "granite_splits_lx0.2.txt" in m.origin(name)
    assert Machine.ktir_cpu().matmul_model == "roofline"


def test_one_read_and_one_write_stream_run_at_about_105_gb_per_s():
    m = Machine.spyre()
    b = 1e9
    seconds = 2 * b / m.ddr_bw + m.turnaround_ns_per_byte * b * 1e-9
    assert 2 * b / seconds == pytest.approx(105e9, rel=0.01)


def test_bandwidth_fraction_follows_the_table_linear_between_its_counts():
    m = Machine.spyre()
    # torch-spyre's reduction fit at 4-32 cores; 1 and 2 from section 8's pure-N split.
    got = [m.bandwidth_fraction(n) for n in (1, 2, 4, 8, 16, 32)]
    assert got == [0.16, 0.25, 0.43, 0.54, 0.54, 1.0]
    assert m.bandwidth_fraction(24) == pytest.approx(0.77)  # no step: 31 cores ~ 32
    assert m.bandwidth_fraction(31) > 0.95
    fracs = [m.bandwidth_fraction(n) for n in range(1, 33)]
    assert fracs == sorted(fracs)  # more cores never reach less of the DDR


def test_every_constant_has_an_origin():
    for m in (Machine.spyre(), Machine.ktir_cpu()):
        rows = m.table()
        assert len(rows) == len(dataclasses.fields(m)) - 2
        assert all(origin for _, _, origin in rows)
    assert Machine.spyre().origin("ddr_bw").startswith("fitted")
    assert Machine.ktir_cpu().origin("ddr_bw") == "ktir-cpu"
    with pytest.raises(sj.DeviceError, match="no constant"):
        Machine.spyre().origin("warp_size")


def test_ktir_cpu_profile_is_its_own():
    k = Machine.ktir_cpu()
    assert (k.clock_hz, k.ddr_bw, k.ring_bw) == (1e9, 0.128e12, 0.064e12)
    assert k.peak_macs_per_cycle == 512 and k.transcendental_factor == 4
    assert k.vector_lanes_per_cycle == 64


@pytest.mark.parametrize("cores", [0, 33, 2.0, -1])
def test_cores_outside_1_to_32_are_an_error(cores):
    with pytest.raises(sj.DeviceError, match="cores"):
        Machine.spyre(cores)


def test_machines_are_frozen_and_with_cores_copies():
    m = Machine.spyre()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.cores = 4
    assert m.with_cores(4).cores == 4 and m.cores == 32
