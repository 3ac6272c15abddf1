"""Test configuration: 8 CPU devices, strict dtype promotion, reproducible Hypothesis.

Hypothesis profiles (``HYPOTHESIS_PROFILE`` selects one):

- ``ci``, the default, is derandomized: every property test draws the same examples on
  every run and every machine (seeded from the test's name), so a red run reproduces.
- ``long`` keeps exploring: random seeds and many more examples. Any example it finds
  failing is added to its test with ``@example``, so the default run checks it from
  then on.

Property tests compile a small XLA program per example, so examples are counted, not
timed; the few long ones are marked ``slow``.
"""

import os

import jax

# Eight emulated cards for the many-card tests (tests/test_shard.py). JAX reads the
# device count when its CPU backend starts, so it is set here, before any test module
# computes anything; single-card tests use device 0 as before.
jax.config.update("jax_num_cpu_devices", 8)

from hypothesis import HealthCheck, settings  # noqa: E402  (after the device count)

import spyrejax  # noqa: E402, F401  (registers the spyrejax_poison_padding option)

# Kernels write poison (NaN) into the padding of every result, even where its content is
# undefined and production runs leave it (see README, "Padding"): a kernel that reads
# padding without masking it then gives NaN, which every comparison with jax.jit catches.
jax.config.update("spyrejax_poison_padding", True)

# No implicit promotion: an op mixing dtypes must say which it means (in the tests and,
# through them, in spyrejax itself).
jax.config.update("jax_numpy_dtype_promotion", "strict")

_SHARED = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("ci", max_examples=25, derandomize=True, database=None, **_SHARED)
settings.register_profile("long", max_examples=500, print_blob=True, **_SHARED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
