import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import spyrejax as sj
from spyrejax import DataFormats


def test_enum_values_are_torch_spyres():
    expected = {
        "SEN169_FP16": 0,
        "IEEE_FP32": 1,
        "INVALID": 2,
        "SEN143_FP8": 3,
        "SEN152_FP8": 4,
        "SEN153_FP9": 5,
        "SENINT2": 6,
        "SENINT4": 7,
        "SENINT8": 8,
        "SENINT16": 9,
        "SENINT24": 10,
        "IEEE_INT64": 11,
        "IEEE_INT32": 12,
        "SENUINT32": 13,
        "SENUINT2": 14,
        "IEEE_FP16": 15,
        "BOOL": 16,
        "BFLOAT16": 17,
        "SEN18F_FP24": 18,
    }
    assert {f.name: int(f) for f in DataFormats} == expected


@pytest.mark.parametrize(
    ("dtype", "fmt", "eps"),
    [
        (np.float16, DataFormats.SEN169_FP16, 64),
        (jnp.bfloat16, DataFormats.SEN169_FP16, 64),
        (np.bool_, DataFormats.SEN169_FP16, 64),
        (np.float32, DataFormats.IEEE_FP32, 32),
        (ml_dtypes.float8_e4m3fn, DataFormats.SEN143_FP8, 128),
        (ml_dtypes.float8_e5m2, DataFormats.SEN152_FP8, 128),
        (np.int8, DataFormats.SENINT8, 128),
        (np.int32, DataFormats.IEEE_INT32, 32),
        (np.uint32, DataFormats.SENUINT32, 32),
        ("float16", DataFormats.SEN169_FP16, 64),
    ],
)
def test_host_dtype_mapping_and_eps(dtype, fmt, eps):
    assert sj.format_for_dtype(dtype) is fmt
    assert fmt.elems_per_stick() == eps


# torch-spyre gives these formats no device stick geometry (its elems_per_stick is 0).
NO_GEOMETRY = {
    DataFormats.INVALID,
    DataFormats.SEN153_FP9,
    DataFormats.SENINT24,
    DataFormats.SEN18F_FP24,
}


def test_every_format_with_geometry_has_a_stick_size():
    for fmt in DataFormats:
        if fmt in NO_GEOMETRY:
            with pytest.raises(sj.LayoutError, match=fmt.name):
                fmt.elems_per_stick()
        else:
            assert fmt.elems_per_stick() * fmt.bits == 8 * sj.BYTES_PER_STICK


@pytest.mark.parametrize("fmt", sorted(NO_GEOMETRY - {DataFormats.INVALID}), ids=str)
def test_no_layout_uses_a_format_without_stick_geometry(fmt):
    with pytest.raises(sj.LayoutError, match=f"{fmt.name} has no device stick geometry"):
        sj.SpyreTensorLayout.from_stride_map([2, 32], [32, 1], fmt)
    with pytest.raises(sj.LayoutError, match=fmt.name):
        sj.SpyreTensorLayout([64], fmt)


@pytest.mark.parametrize(
    ("dtype", "fmt"),
    [
        # torch-spyre's host side of a transfer (its stringToDTDataFormatPair).
        (np.float16, DataFormats.IEEE_FP16),
        (jnp.bfloat16, DataFormats.BFLOAT16),
        (np.bool_, DataFormats.SENINT8),
        (np.float32, DataFormats.IEEE_FP32),
        (ml_dtypes.float8_e4m3fn, DataFormats.SEN143_FP8),
        (ml_dtypes.float8_e5m2, DataFormats.SEN152_FP8),
        (np.int8, DataFormats.SENINT8),
        (np.int32, DataFormats.IEEE_INT32),
        (np.uint32, DataFormats.SENUINT32),
        # A device format stands for its canonical host dtype, else for itself.
        (DataFormats.SEN169_FP16, DataFormats.IEEE_FP16),
        (DataFormats.IEEE_FP32, DataFormats.IEEE_FP32),
        (DataFormats.SENINT16, DataFormats.SENINT16),
    ],
    ids=str,
)
def test_host_format_of_a_transfer(dtype, fmt):
    assert sj.host_format(dtype) is fmt


def test_fits_format():
    assert sj.fits_format(jnp.bfloat16, DataFormats.SEN169_FP16)
    assert sj.fits_format(np.bool_, DataFormats.IEEE_FP32)  # predicates follow values
    assert not sj.fits_format(np.float32, DataFormats.SEN169_FP16)
    with pytest.raises(sj.LayoutError, match="float64"):
        sj.fits_format(np.float64, DataFormats.IEEE_FP32)


def test_format_passes_through():
    assert sj.format_for_dtype(DataFormats.IEEE_INT32) is DataFormats.IEEE_INT32


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, np.uint64, np.int16, "int64"])
def test_unmapped_dtype_is_an_error_naming_it(dtype):
    with pytest.raises(sj.LayoutError, match=str(np.dtype(dtype))):
        sj.format_for_dtype(dtype)


def test_int64_error_suggests_int32():
    with pytest.raises(sj.LayoutError, match="int32"):
        sj.format_for_dtype(np.int64)


def test_not_a_dtype():
    with pytest.raises(sj.LayoutError, match="not a dtype"):
        sj.format_for_dtype(object())
    with pytest.raises(ValueError):  # LayoutError is a ValueError
        sj.format_for_dtype("not-a-dtype-name")


def test_poison_values():
    assert np.isnan(sj.poison_value(np.float16))
    assert np.isnan(sj.poison_value(jnp.bfloat16).astype(np.float32))
    assert np.isnan(sj.poison_value(np.float32))
    assert np.isnan(sj.poison_value(ml_dtypes.float8_e4m3fn).astype(np.float32))
    assert sj.poison_value(np.int8) == -128
    assert sj.poison_value(np.int32) == np.iinfo(np.int32).min
    assert sj.poison_value(np.int32).dtype == np.int32
    assert sj.poison_value(np.uint32) == np.iinfo(np.uint32).max  # all bits set, not 0
    assert sj.poison_value(np.uint32).dtype == np.uint32


def test_stick_elems_is_the_device_formats_count():
    from spyrejax.layout._dtypes import stick_elems

    # bool is stored 16-bit: a stick holds 64 of them, not its host bytes' 128.
    assert stick_elems(np.bool_) == 64 == stick_elems(np.float16) == stick_elems(jnp.bfloat16)
    assert stick_elems(np.int8) == 128 and stick_elems(np.float32) == 32
    assert stick_elems(np.float64) == 16  # no format: by its host bytes
