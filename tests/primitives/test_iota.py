import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import padding_is_poison

import spyrejax as sj
from spyrejax.primitives import iota


@pytest.mark.parametrize(
    ("shape", "dimension", "order"),
    [
        ((4, 150), 0, None),
        ((4, 150), 1, None),
        ((4, 150), 1, [1, 0]),
        ((3, 5, 70), 2, [2, 0, 1]),
        ((3, 5, 70), 0, [0, 1, 2, -1]),
        ((200,), 0, None),
    ],
    ids=str,
)
def test_iota_matches_lax(shape, dimension, order):
    a = iota(jnp.int32, shape, dimension, dim_order=order)
    np.testing.assert_array_equal(
        np.asarray(a), jax.lax.broadcasted_iota(jnp.int32, shape, dimension)
    )
    assert a.layout == sj.SpyreTensorLayout(shape, jnp.int32, order)
    assert padding_is_poison(a)
    f = iota(jnp.float16, shape, dimension)
    np.testing.assert_array_equal(
        np.asarray(f), jax.lax.broadcasted_iota(jnp.float16, shape, dimension)
    )


def test_iota_errors():
    with pytest.raises(sj.LayoutError, match="dimension 2 is out of range"):
        iota(jnp.int32, (4, 5), 2)
    with pytest.raises(sj.LayoutError, match="float64"):
        iota(jnp.float64, (4, 5), 0)
