import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import padding_is_poison

import spyrejax as sj
from spyrejax.primitives import iota, reshape_copy


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
    a = iota(shape, jnp.int32, dimension, dim_order=order)
    np.testing.assert_array_equal(
        np.asarray(a), jax.lax.broadcasted_iota(jnp.int32, shape, dimension)
    )
    assert a.layout == sj.SpyreTensorLayout(shape, jnp.int32, order)
    assert padding_is_poison(a)
    f = iota(shape, jnp.float16, dimension)
    np.testing.assert_array_equal(
        np.asarray(f), jax.lax.broadcasted_iota(jnp.float16, shape, dimension)
    )


def test_iota_errors():
    with pytest.raises(sj.LayoutError, match="dimension 2 is out of range"):
        iota((4, 5), jnp.int32, 2)
    with pytest.raises(sj.LayoutError, match="float64"):
        iota((4, 5), jnp.float64, 0)


def test_reshape_copy_moves_data_into_the_new_shape():
    x = jnp.arange(5 * 150, dtype=jnp.float32).reshape(5, 150)
    a = sj.to_device(x)
    with pytest.raises(sj.LayoutError, match="merges a padded dim"):
        sj.reshape(a, (750,))
    r = reshape_copy(a, (750,))
    assert r.layout == sj.SpyreTensorLayout((750,), jnp.float32)
    np.testing.assert_array_equal(np.asarray(r), x.reshape(-1))
    t = reshape_copy(a, (25, 30), [1, 0])
    assert t.type.stick_dim == 0
    np.testing.assert_array_equal(np.asarray(t), x.reshape(25, 30))
    g = jax.grad(lambda x: sj.to_host(reshape_copy(sj.to_device(x), (750,))).sum())(x)
    np.testing.assert_array_equal(g, np.ones_like(x))
    with pytest.raises(sj.LayoutError, match="cannot reshape"):
        reshape_copy(a, (7, 100))
