"""Shared helpers for the Spyre array tests."""

import jax.numpy as jnp
import numpy as np

import spyrejax as sj

FLOAT_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32)

# Shapes with and without stick padding (150 fp16 values pad to 192, 64 fit exactly).
SHAPES = ((3, 150), (2, 64))

TOL = {
    np.dtype(jnp.float16): {"rtol": 2e-3, "atol": 2e-3},
    np.dtype(jnp.bfloat16): {"rtol": 1.6e-2, "atol": 1.6e-2},
    np.dtype(jnp.float32): {"rtol": 2e-6, "atol": 2e-6},
}
# Reductions and matmuls accumulate in another order than jnp.
LOOSE = {
    np.dtype(jnp.float16): {"rtol": 1e-2, "atol": 2e-2},
    np.dtype(jnp.bfloat16): {"rtol": 5e-2, "atol": 1e-1},
    np.dtype(jnp.float32): {"rtol": 1e-5, "atol": 1e-4},
}


def padding_is_poison(a):
    """Whether every padding position of a Spyre array's image holds the poison bits."""
    t = a.type
    pad = np.asarray(a.image)[t.layout.padding_mask(t.base_shape)]
    poison = np.asarray(sj.poison_value(t.dtype))
    if t.dtype == np.bool_:
        return bool((pad == poison).all())
    bits = np.dtype(f"uint{8 * t.dtype.itemsize}")
    return bool((pad.view(bits) == poison.view(bits)).all())


def rand(shape, dtype, rng, low=-2.0, high=2.0):
    return jnp.asarray(rng.uniform(low, high, size=shape).astype(np.float32), dtype)
