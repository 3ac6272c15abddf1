"""Values with no Spyre format (complex, uint8) stay on the host, in visible host regions."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, rand

import spyrejax as sj


def rope_complex(x, base=10000.0):
    """Rotary embeddings as Meta's Llama writes them: pairs rotated as complex numbers."""
    seq, _, hd = x.shape
    freqs = 1.0 / base ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd)
    angles = jnp.outer(jnp.arange(seq, dtype=jnp.float32), freqs)
    cis = jnp.exp(1j * angles.astype(jnp.complex64))
    y = jax.lax.complex(x[..., 0::2], x[..., 1::2]) * cis[:, None, :]
    return jnp.stack([y.real, y.imag], axis=-1).reshape(x.shape)


def _on_host(fn, *args, regions=1):
    """``sj.jit(fn)`` warns of its host regions; ``explain`` lists them with their bytes.

    ``regions``: how many, or None for at least one.
    """
    with pytest.warns(sj.SpyreFallbackWarning, match=r"host region \("):
        got = jax.tree.map(sj.to_host, sj.jit(fn)(*args))
    report = sj.explain(fn, *args)
    assert len(report.fallbacks) == regions if regions else report.fallbacks
    assert all(fb.prim.startswith("host region (") and fb.to_host_bytes for fb in report.fallbacks)
    return got, jax.jit(fn)(*args), report


@pytest.mark.parametrize("hd", [20, 64])  # padded and full float32 sticks
def test_complex_rotary_embeddings_and_their_gradient(hd):
    x = rand((12, 4, hd))
    got, want, report = _on_host(lambda x: rope_complex(x) * 2.0, x)
    assert_close(got, want, ops=6)
    (fb,) = report.fallbacks
    assert fb.prim.startswith("host region (complex64: ") and "exp" in fb.prim
    assert re.search(r"test_regions\.py:\d+ \(rope_complex\)", fb.line)
    assert fb.to_device_bytes == x.size * 4  # the rotated pairs come back as real values
    grad = jax.grad(lambda x: (rope_complex(x) ** 2).sum())
    got, want, _ = _on_host(grad, x, regions=None)
    assert_close(got, want, ops=12)


def test_fft_magnitudes():
    x = rand((6, 70))
    got, want, _ = _on_host(lambda x: jnp.abs(jnp.fft.rfft(x, axis=-1)).sum(-1), x)
    assert_close(got, want, reduce_len=70, ops=8, scale=float(np.abs(want).max()))


def test_uint8_values_stay_on_the_device():
    # uint8 has a Spyre format (raw bits in 8-bit sticks): no host region.
    x = rand((6, 70), low=0.0, high=25.0)

    def f(x):
        return (x * 10).astype(jnp.uint8).astype(jnp.float32) + 1.0

    np.testing.assert_array_equal(np.asarray(sj.to_host(sj.jit(f)(x))), np.asarray(jax.jit(f)(x)))
    assert sj.explain(f, x).fallbacks == ()


def test_a_device_op_between_two_host_ops_joins_the_region():
    """A real value computed from a complex one and feeding another runs on the host too."""

    def f(x):
        z = jax.lax.complex(x, x * 0.5)
        s = jnp.sum(jnp.real(z)).astype(jnp.complex64)
        return jnp.real(z * s), jnp.tanh(x)

    x = rand((3, 37))
    got, want, report = _on_host(f, x)
    assert "reduce_sum" in report.fallbacks[0].prim
    assert_close(got, want, reduce_len=x.size, ops=4)


def test_a_complex_loop_carry_runs_the_loop_on_the_host():
    def f(x):
        c = jax.lax.scan(lambda c, _: (c * (1 + 1j), None), x.astype(jnp.complex64), None, length=3)
        return c[0].real

    x = rand((6, 70))
    got, want, _ = _on_host(f, x)
    assert_close(got, want, ops=6)


def test_complex_results_and_fallback_error_raise():
    x = rand((3, 37))
    with pytest.raises(sj.SpyreUnsupportedError, match=r"returns a complex64 value.*\.real"):
        sj.jit(lambda x: jax.lax.complex(x, x))(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(sj.SpyreUnsupportedError, match=r"host region \(complex64"):
            sj.jit(lambda x: jnp.abs(jax.lax.complex(x, x)), fallback="error")(x)
