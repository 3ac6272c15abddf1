"""Convolutions and pooling through spyrejax.jit: patches copies into matmuls and reductions."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from blocks import CNN
from helpers import assert_matches, check_each_side_by_side, rand
from helpers import assert_matches_jax_jit as _close

import spyrejax as sj

DTYPES = (jnp.float32, jnp.bfloat16)


# (lhs shape, rhs shape, conv_general_dilated keywords); 40 and 70 channels pad their
# sticks, 64 fill them in both dtypes.
CONVS = {
    "1d_stride_pad": ((2, 3, 11), (4, 3, 3), {"window_strides": (2,), "padding": ((1, 2),)}),
    "2d_kernel_dilation": (
        (2, 3, 9, 10),
        (5, 3, 3, 2),
        {"window_strides": (1, 2), "padding": "SAME", "rhs_dilation": (2, 1)},
    ),
    "2d_input_dilation": (
        (1, 4, 6, 5),
        (3, 4, 3, 3),
        {"window_strides": (1, 1), "padding": ((2, 2), (1, 0)), "lhs_dilation": (2, 2)},
    ),
    "3d": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), {"window_strides": (1, 2, 1), "padding": "VALID"}),
    "feature_groups": (
        (2, 6, 8, 8),
        (9, 2, 3, 3),
        {"window_strides": (1, 1), "padding": "SAME", "feature_group_count": 3},
    ),
    "depthwise": (
        (2, 4, 8, 8),
        (4, 1, 3, 3),
        {"window_strides": (1, 1), "padding": "SAME", "feature_group_count": 4},
    ),
    "batch_groups": (
        (4, 3, 8, 8),
        (6, 3, 3, 3),
        {"window_strides": (1, 1), "padding": "VALID", "batch_group_count": 2},
    ),
    "negative_padding": (
        (1, 3, 10, 10),
        (4, 3, 3, 3),
        {"window_strides": (1, 1), "padding": ((-1, 1), (0, -2))},
    ),
    "nhwc_padded_sticks": (
        (2, 9, 10, 3),
        (3, 3, 3, 40),
        {
            "window_strides": (1, 1),
            "padding": "SAME",
            "dimension_numbers": ("NHWC", "HWIO", "NHWC"),
        },
    ),
    "nhwc_whole_sticks": (
        (2, 5, 4, 64),
        (1, 1, 64, 64),
        {
            "window_strides": (1, 1),
            "padding": "VALID",
            "dimension_numbers": ("NHWC", "HWIO", "NHWC"),
        },
    ),
    "nchw_wide": ((2, 70, 6, 6), (150, 70, 3, 3), {"window_strides": (2, 1), "padding": "SAME"}),
}


def _conv(kw):
    return lambda x, w: jax.lax.conv_general_dilated(x, w, **kw)


def _products(lhs, rhs, kw):
    """Terms summed per output element, and per gradient element (upper bounds)."""
    dn = jax.lax.conv_dimension_numbers(lhs, rhs, kw.get("dimension_numbers"))
    groups = kw.get("feature_group_count", 1)
    window = math.prod(rhs[d] for d in dn.rhs_spec[2:])
    k = window * lhs[dn.lhs_spec[1]] // groups
    out = jax.eval_shape(_conv(kw), jnp.zeros(lhs), jnp.zeros(rhs)).shape
    positions = math.prod(out) // out[dn.out_spec[1]]
    return k, max(k, positions, window * rhs[dn.rhs_spec[0]])


def _conv_grad(kw):
    conv = _conv(kw)
    return jax.grad(lambda x, w: jnp.sin(conv(x, w)).sum(), argnums=(0, 1))


def _matches(tolerances):
    """A check of :func:`check_each_side_by_side`: ``_close``'s, each case's tolerance."""

    def check(name, got, want):
        assert_matches(got, want, **tolerances[name])

    return check


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_values_and_gradients(dtype):
    # Every case and its gradient side by side in one program (one compile instead of 22;
    # each result has the bits of the case alone).
    cases, tolerances = {}, {}
    for case in sorted(CONVS):
        lhs, rhs, kw = CONVS[case]
        k, grad_len = _products(lhs, rhs, kw)
        cases[case] = (_conv(kw), [rand(lhs, dtype, 0), rand(rhs, dtype, 1)])
        tolerances[case] = {"reduce_len": k}
        cases[f"{case} grad"] = (_conv_grad(kw), [rand(lhs, dtype, 0), rand(rhs, dtype, 1)])
        tolerances[f"{case} grad"] = {"reduce_len": grad_len, "ops": 3}
    check_each_side_by_side(cases, _matches(tolerances))


def test_conv_preferred_element_type():
    """bfloat16 operands, a float32 result that was never rounded to bfloat16."""
    x, w = rand((2, 3, 9, 70), jnp.bfloat16), rand((4, 3, 3, 3), jnp.bfloat16, 1)
    kw = {"window_strides": (1, 2), "padding": "SAME", "preferred_element_type": jnp.float32}
    _close(_conv(kw), x, w, reduce_len=27)


def test_explain_charges_the_patches_copy():
    """The patches matrix [1, batch * positions, window * channels] is charged at its size."""
    x, w = rand((2, 3, 9, 10), jnp.float32), rand((5, 3, 3, 3), jnp.float32, 1)
    conv = _conv({"window_strides": (1, 1), "padding": "SAME"})
    report = sj.explain(conv, x, w)
    patches = sj.SpyreTensorLayout([1, 2 * 9 * 10, 27], jnp.float32)
    kernel = sj.SpyreTensorLayout([1, 27, 5], jnp.float32)
    costs = sorted(cost for what, cost in report.copies if what.startswith("conv_general"))
    assert costs == sorted(math.prod(t.device_size) for t in (patches, kernel))
    assert costs[-1] > 9 * x.size  # each input element once per window covering it
    assert "Windows" in report.jaxpr and "Matmul" in report.jaxpr
    # explain plans what a call runs: its host arrays moved first, in their default
    # layouts; the plan's cost also holds the result's return to its default layout.
    plan = sj.jit(conv).lower(sj.to_device(x), sj.to_device(w)).plan
    assert report.copy_cost + report.restickify_cost == plan.cost
    assert all(r.reason.startswith("returned in the default") for r in report.restickifies)


POOLS = {
    "max_2x2": lambda x: jax.lax.reduce_window(
        x, -jnp.inf, jax.lax.max, (1, 2, 2), (1, 2, 2), "VALID"
    ),
    "max_padded_dilated": lambda x: jax.lax.reduce_window(
        x,
        -jnp.inf,
        jax.lax.max,
        (1, 2, 3),
        (1, 1, 2),
        ((0, 0), (1, 0), (0, 2)),
        base_dilation=(1, 2, 1),
        window_dilation=(1, 1, 2),
    ),
    "min_same": lambda x: jax.lax.reduce_window(
        x, jnp.inf, jax.lax.min, (2, 2, 3), (1, 1, 2), "SAME"
    ),
    "sum_same": lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (2, 2, 3), (1, 1, 2), "SAME"),
}


def _pool_grad(pool):
    return jax.grad(lambda x: jnp.sin(pool(x).astype(jnp.float32)).sum())


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_window_values_and_gradients(dtype):
    # Every pool, shape and gradient side by side in one program (one compile instead of
    # 14; each result has the bits of the case alone).
    cases, tolerances = {}, {}
    for case in sorted(POOLS):
        for shape in [(3, 9, 70), (2, 6, 64)]:
            cases[f"{case} {shape}"] = (POOLS[case], [rand(shape, dtype)])
            tolerances[f"{case} {shape}"] = {"reduce_len": 12}
            if case == "max_padded_dilated":
                continue  # JAX defines no gradient of max pooling with window dilation
            cases[f"{case} {shape} grad"] = (_pool_grad(POOLS[case]), [rand(shape, dtype)])
            tolerances[f"{case} {shape} grad"] = {"reduce_len": 12, "ops": 3}
    check_each_side_by_side(cases, _matches(tolerances))


@pytest.mark.parametrize("dtype", DTYPES)
def test_generic_reduce_window_starts_from_its_init(dtype):
    """An init that is no identity: each window starts from it; padding does not count."""
    x = rand((3, 9, 70), dtype)
    pad = ((0, 0), (1, 1), (1, 0))
    for init, op in ((0.0, jax.lax.max), (1.5, jax.lax.add), (-0.5, jax.lax.min)):
        _close(
            lambda x, i=init, o=op: jax.lax.reduce_window(
                x, x.dtype.type(i), o, (1, 2, 3), (1, 2, 2), pad
            ),
            x,
            reduce_len=6,
        )

    def product(x):
        return jax.lax.reduce_window(x, x.dtype.type(1), jax.lax.mul, (1, 2, 3), (1, 2, 2), pad)

    with pytest.raises(
        sj.SpyreUnsupportedError, match=r"reduce_window with the combiner \['mul'\]"
    ):
        sj.jit(product)(x)


def _apply(module, x):
    return module(x)


def _cast(tree, dtype):
    return jax.tree.map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, tree)


@pytest.mark.parametrize("dtype", DTYPES)
def test_equinox_convolutions_and_pools(dtype):
    """Conv1d/2d/3d and MaxPool2d/AvgPool2d modules; the pools' gradients."""
    key = jax.random.PRNGKey(0)
    conv1 = _cast(eqx.nn.Conv1d(3, 5, 4, stride=2, padding=1, key=key), dtype)
    conv2 = _cast(eqx.nn.Conv2d(3, 6, 3, padding="SAME", groups=3, key=key), dtype)
    conv3 = _cast(eqx.nn.Conv3d(2, 4, (2, 3, 3), stride=(1, 2, 1), key=key), dtype)
    # Side by side in one program (one compile instead of 9; same bits each).
    cases = {
        "conv1d": (_apply, [conv1, rand((3, 40), dtype)]),
        "conv2d": (_apply, [conv2, rand((3, 9, 70), dtype, 1)]),
        "conv3d": (_apply, [conv3, rand((2, 4, 7, 33), dtype, 2)]),
    }
    tolerances = {
        "conv1d": {"reduce_len": 12, "ops": 2},
        "conv2d": {"reduce_len": 9, "ops": 2},
        "conv3d": {"reduce_len": 36, "ops": 2},
    }
    for i, pool in enumerate(
        (eqx.nn.MaxPool2d(2, 2), eqx.nn.AvgPool2d(3, 2, padding=1), eqx.nn.MaxPool2d(3, 1, 1))
    ):
        cases[f"pool{i}"] = (lambda x, pool=pool: pool(x), [rand((3, 9, 70), dtype, 1)])
        tolerances[f"pool{i}"] = {"reduce_len": 9, "ops": 2}  # pools hold functions
        cases[f"pool{i} grad"] = (_pool_grad(pool), [rand((3, 9, 70), dtype, 1)])
        tolerances[f"pool{i} grad"] = {"reduce_len": 9, "ops": 3}
    check_each_side_by_side(cases, _matches(tolerances))


def test_equinox_conv_gradients():
    key = jax.random.PRNGKey(0)
    conv = eqx.nn.Conv2d(3, 6, 3, padding="SAME", groups=3, key=key)
    x = rand((3, 9, 70), jnp.float32, 1)
    grad = jax.grad(lambda c, x: jnp.sin(c(x)).sum(), argnums=(0, 1))
    _close(grad, conv, x, reduce_len=9 * 70, ops=3)


def test_small_cnn_classifier_and_its_training_gradient():
    params, static = eqx.partition(CNN(jax.random.PRNGKey(0)), eqx.is_array)
    x = rand((4, 1, 16, 16), jnp.float32, 2)
    y = jnp.asarray([0, 3, 7, 9])

    def forward(p, x):
        return jax.vmap(eqx.combine(p, static))(x)

    def loss(p, x, y):
        logits = forward(p, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    _close(forward, params, x, reduce_len=16 * 4 * 4, ops=4)
    _close(loss, params, x, y, reduce_len=16 * 4 * 4, ops=6)
    _close(jax.grad(loss), params, x, y, reduce_len=4 * 16 * 16 * 9, ops=8)
    half = _cast(params, jnp.bfloat16)
    _close(forward, half, x.astype(jnp.bfloat16), reduce_len=16 * 4 * 4, ops=4)


def test_windows_primitive():
    """Unit windows keep a dim; a window of 3 at stride 2 over a padded dim gathers."""
    x = sj.to_device(rand((5, 70), jnp.float32))
    unit, slide = (1, 1, (0, 0), 1, 1), (3, 2, (1, 1), 1, 1)
    patches = sj.primitives.windows(x, [unit, slide], fill=-1.0)
    padded = np.pad(np.asarray(sj.to_host(x)), ((0, 0), (1, 1)), constant_values=-1.0)
    want = np.stack([padded[:, k : k + 69 : 2] for k in range(3)], axis=-1)[:, None]
    np.testing.assert_array_equal(sj.to_host(patches), want)
    assert patches.type.layout.device_size[-1] == 32
    with pytest.raises(sj.LayoutError, match="no window fits"):
        sj.primitives.windows(x, [unit, (80, 1, (0, 0), 1, 1)])
