"""spyrejax.device_put: per-card images built by the DMA engine (8 CPU devices)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import spyrejax as sj
from tests.helpers import assert_close, rand


def mesh(k=4):
    return jax.make_mesh((k,), ("x",))


def sharding(*parts, k=4):
    return NamedSharding(mesh(k), PartitionSpec(*parts))


SWAPPED = sj.SpyreTensorLayout((256, 32), np.float32, [1, 0])  # a column block, stuck on rows


@pytest.mark.parametrize("layout", [None, SWAPPED], ids=["default", "swapped"])
def test_per_card_layouts_survive_a_round_trip(layout):
    wh = rand((256, 128))
    w = sj.device_put(wh, sharding(None, "x"), layout)
    np.testing.assert_array_equal(sj.to_host(w), wh)
    assert len(w.image.sharding.device_set) == 4
    seen = []

    def body(a):
        seen.append(jax.typeof(a))
        return a

    f = jax.jit(
        jax.shard_map(body, mesh=mesh(), in_specs=sj.P(None, "x"), out_specs=sj.P(None, "x"))
    )
    np.testing.assert_array_equal(sj.to_host(f(w)), wh)
    assert seen[0].shape == (256, 32)
    assert seen[0].layout == (layout or sj.SpyreTensorLayout((256, 32), np.float32))


def shard_columns(shard, w):
    """The logical columns a card's image slab holds (32 per card, in mesh order)."""
    c = w.image.sharding.mesh.devices.tolist().index(shard.device)
    return slice(32 * c, 32 * (c + 1))


def test_each_card_holds_the_image_of_its_block():
    wh = rand((256, 128))
    w = sj.device_put(wh, sharding(None, "x"), SWAPPED)
    for shard in w.image.addressable_shards:
        want = sj.to_device(wh[:, shard_columns(shard, w)], SWAPPED).image
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(want))


def test_replicated_cards_share_one_block():
    xh = rand((8, 256))
    x = sj.device_put(xh, sharding())
    assert jax.typeof(x) == jax.typeof(sj.to_device(xh))
    np.testing.assert_array_equal(sj.to_host(x), xh)


def test_weights_in_the_swapped_order_give_the_unsharded_product():
    xh, wh = rand((8, 256), seed=1), rand((256, 128), seed=2)
    w = sj.device_put(wh, sharding(None, "x"), SWAPPED)

    def body(x, w):  # matmul wants B stuck on n: the card restickifies its block
        return sj.matmul(x, sj.restickify(w))

    specs = (sj.P(), sj.P(None, "x"))
    f = jax.jit(jax.shard_map(body, mesh=mesh(), in_specs=specs, out_specs=sj.P(None, "x")))
    assert_close(sj.to_host(f(sj.to_device(xh), w)), xh @ wh, reduce_len=256, scale=16)


def test_a_block_layout_that_pads_the_split_dim_is_refused():
    padded = sj.SpyreTensorLayout.from_stride_map([40, 32], [32, 1], np.float32)  # 40 rows
    with pytest.raises(sj.LayoutError, match="pads it"):
        sj.device_put(rand((128, 32)), sharding("x"), padded)


def test_a_spyre_array_or_a_bare_spec_is_refused():
    with pytest.raises(sj.SpyreTypeError, match="host array"):
        sj.device_put(sj.to_device(rand((8, 256))), sharding())
    with pytest.raises(sj.SpyreTypeError, match="NamedSharding"):
        sj.device_put(rand((8, 256)), PartitionSpec("x"))


def test_jit_of_a_function_on_sharded_inputs_equals_jax_jit():
    """Data parallelism without shard_map: XLA partitions the emulator over the cards."""
    xh, wh = rand((8, 256), seed=1), rand((256, 64), seed=2)
    x = sj.device_put(xh, sharding("x"))

    def f(a, w):
        return jax.numpy.tanh(a @ w).sum(0)

    out = sj.jit(f)(x, wh)
    assert_close(sj.to_host(out), jax.jit(f)(xh, wh), reduce_len=256 * 8, ops=3, scale=16)


def test_jax_reshard_of_a_spyre_array_points_to_spyrejax_device_put():
    x = sj.to_device(rand((8, 256)))
    with pytest.raises(sj.SpyreTypeError, match=r"spyrejax\.device_put\(x, NamedSharding"):
        jax.reshard(x, sharding("x"))
    with pytest.raises(sj.SpyreTypeError, match=r"spyrejax\.device_put"):
        jax.jit(lambda a: jax.reshard(a, sharding("x")))(x)


def test_jax_device_put_of_a_spyre_array_points_to_spyrejax_device_put():
    """JAX 0.12 refuses every hijax value in jax.device_put (a bare NotImplementedError):
    spyrejax's typeof handler, which it calls first, raises a named error instead."""
    with pytest.raises(sj.SpyreUnsupportedError, match=r"jax.device_put does not take") as e:
        jax.device_put(sj.to_device(rand((8, 256))), sharding("x"))
    assert isinstance(e.value, NotImplementedError)  # what JAX's own error was
    assert "spyrejax.device_put(x, sharding)" in str(e.value)
    assert "spyrejax.to_host(a)" in str(e.value)
