"""A restickify between exact tilings is one transpose of the image's finer dims."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from oracles import random_bits, same_bits

import spyrejax as sj
from spyrejax.dma._permute import one_transpose


def test_cuts_that_do_not_refine_each_other_are_refused():
    # 96 elements cut 3 x 32 and 2 x 48: the strides 32 and 48 divide neither way.
    assert one_transpose(([0, 1], (3, 32)), ([0, 1], (2, 48))) is None
    # A dim no cut walks must be of size 1 (a synthetic stick holds padding).
    assert one_transpose(([0, 1], (3, 32)), ([1], (32, 3))) is None
    assert one_transpose(([0, 1], (3, 32)), ([1], (1, 96))) == ((3, 32), (0, 1))


def test_moving_the_stick_of_an_exact_matrix_is_one_transpose():
    # [1024, 256] float32 stuck on dim 1, image [8 sticks, 1024 rows, 32 lanes], to dim
    # 0, image [32 sticks, 256, 32]: the fine digits [8, 32, 32, 32] permuted once.
    src = sj.SpyreTensorLayout((1024, 256), jnp.float32)
    dst = sj.SpyreTensorLayout((1024, 256), jnp.float32, [1, 0])
    assert one_transpose(([1, 0, 2], src.device_size), ([0, 2, 1], dst.device_size)) == (
        (8, 32, 32, 32),
        (1, 0, 3, 2),
    )


DTYPES = [np.float32, np.float16, jnp.bfloat16, np.int8]


@given(
    dtype=st.sampled_from(DTYPES),
    sizes=st.lists(st.sampled_from([1, 2, 3]), min_size=2, max_size=3),
    orders=st.data(),
)
def test_exact_restickifies_are_the_dmas_bit_for_bit_in_one_transpose(dtype, sizes, orders):
    eps = 128 // np.dtype(dtype).itemsize  # elements per stick: every dim whole sticks
    shape = tuple(s * eps for s in sizes)
    perms = list(itertools.permutations(range(len(shape))))
    src_order = orders.draw(st.sampled_from(perms))
    dst_order = orders.draw(st.sampled_from(perms))
    x = random_bits(shape, dtype, np.random.default_rng(sum(shape)))
    a = sj.to_device(x, sj.SpyreTensorLayout(shape, dtype, list(src_order)))
    target = sj.SpyreTensorLayout(shape, dtype, list(dst_order))
    move = jax.jit(lambda a: sj.restickify(a, target))
    got = move(a)
    assert got.layout == target and same_bits(sj.to_host(got), x)
    assert move.lower(a).as_text().count("stablehlo.transpose") <= 1
