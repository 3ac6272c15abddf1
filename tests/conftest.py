import os

from hypothesis import HealthCheck, settings

# Property tests compile a small XLA program per example, so examples are counted, not
# timed. `HYPOTHESIS_PROFILE=long` runs many more (tests marked `slow` use it anyway).
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
