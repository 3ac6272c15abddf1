"""Layout cases shared by the tests: the spec's conformance vectors and more."""

import math

import pytest

# Spec section 11: (size, dim_order, device_size, stride_map), fp16, contiguous host.
SPEC_VECTORS = [
    ([], None, [1, 64], [-1, -1]),
    ([120], None, [2, 64], [64, 1]),
    ([128], None, [2, 64], [64, 1]),
    ([512, 240], None, [4, 512, 64], [64, 240, 1]),
    ([512, 256], None, [4, 512, 64], [64, 256, 1]),
    ([512, 8, 240], None, [8, 4, 512, 64], [240, 64, 1920, 1]),
    ([512, 256], [1, 0], [8, 256, 64], [16384, 1, 256]),
    ([512, 8, 256], [1, 0, 2], [512, 4, 8, 64], [2048, 64, 256, 1]),
    ([512, 256], [0, 1, -1], [256, 1, 512, 64], [1, -1, 256, -1]),
    ([256], [0, -1], [1, 256, 64], [-1, 1, -1]),
    ([1024, 256], None, [4, 1024, 64], [64, 256, 1]),
    ([128, 256, 512], None, [256, 8, 128, 64], [512, 64, 131072, 1]),
    ([5, 100, 150], None, [100, 3, 5, 64], [150, 64, 15000, 1]),
    ([5, 100, 150], [1, 0, 2], [5, 3, 100, 64], [15000, 64, 150, 1]),
]

# The vectors for tests that move every element of a tensor through an engine and check
# it against the brute-force oracle: the 16M-element one runs with ``make test-slow``
# (test_layout checks its coordinates by the rule in ``make test``).
SPEC_VECTORS_MOVED = [
    pytest.param(*v, marks=pytest.mark.slow) if math.prod(v[0]) > 4_000_000 else v
    for v in SPEC_VECTORS
]

# Spec section 11: explicit layouts that must round-trip (size, device_size, stride_map).
SPEC_EXPLICIT = [
    ([60], [1, 64], [64, 1]),
    ([40, 60], [1, 60, 64], [3840, 1, 60]),
    ([40, 60], [1, 512, 64], [64, 60, 1]),
    ([60], [1, 512, 64], [64, 0, 1]),
]

# More explicit layouts: tiled (one host dim over three device dims), folded, broadcast.
MORE_EXPLICIT = [
    ([300], [2, 3, 64], [192, 64, 1]),
    ([40, 60], [38, 64], [64, 1]),
    ([7, 40, 60], [7, 38, 64], [2400, 64, 1]),
    ([3, 100], [3, 4, 2, 64], [100, 0, 64, 1]),
    ([30, 200], [4, 32, 64], [64, 200, 1]),
    ([1, 70], [1, 2, 64], [-1, 64, 1]),
]
