"""The main demo (``python -m spyrejax``, ``make demo``): from the seed layouts to a model's time.

It prints the seed examples' layouts, descriptors and loop nests, a round trip through
emulated device memory, Spyre primitives in a jaxpr, the planner's choices, and ends with a
small transformer block run through ``spyrejax.jit`` (checked against ``jax.jit``) and its
``explain`` summary with the predicted time on the card.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dma._dci import generate_dci
from .dma._dma import dma_d2h, dma_h2d
from .layout._layout import SpyreTensorLayout

__all__ = ["main"]


def _title(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 74 - len(text)))


def _show_layout(shape: tuple[int, ...], layout: SpyreTensorLayout) -> None:
    host_bytes = int(np.prod(shape)) * 128 // layout.elems_per_stick
    print(layout)
    print(
        f"  host {list(shape)} -> device {list(layout.device_size)}: "
        f"{layout.nbytes} device bytes for {host_bytes} host bytes "
        f"({layout.nbytes / host_bytes - 1:.1%} padding), dim_map {list(layout.dim_map(shape))}"
    )


def _show_dci(shape: tuple[int, ...], layout: SpyreTensorLayout) -> None:
    dci = generate_dci(shape, layout)
    for k, d in enumerate(dci):
        nest = d.loop_nest()
        print(f"  descriptor {k}: size={list(d.size)} stride_src={list(d.stride_src)} ", end="")
        print(f"stride_dst={list(d.stride_dst)} offsets=({d.offset_src}, {d.offset_dst})")
        print(
            f"    as a loop nest (ranges, host strides, device strides): {nest.ranges}, "
            f"{nest.host_strides}, {nest.device_strides}"
        )
    print("  loop nests:")
    print("    " + dci.pseudocode().replace("\n", "\n    "))


def main() -> None:
    """Print layouts, DMA descriptors and loop nests of the seed examples, and a round trip."""
    f16 = np.float16

    _title("(1024, 256) fp16: the layout spec's first example, 4 sticks per row")
    shape: tuple[int, ...] = (1024, 256)
    layout = SpyreTensorLayout(shape, f16)
    _show_layout(shape, layout)
    _show_dci(shape, layout)

    for order in (None, [1, 0, 2]):
        _title(f"(5, 100, 150) fp16, dim_order={order}: a partial last stick (150 -> 192)")
        shape = (5, 100, 150)
        layout = SpyreTensorLayout(shape, f16, order)
        _show_layout(shape, layout)
        _show_dci(shape, layout)

    _title("sparse: one element per stick, as a reduction along the stick dim leaves")
    print("  x of shape (256, 300) summed over its stick dim (300) gives 256 values:")
    layout = SpyreTensorLayout((256,), f16, [0, -1])
    _show_layout((256,), layout)
    print("  dim_order [0, -1] puts a synthetic stick dim last: lane 0 holds data, 1..63 padding")

    _title("padding that aliases a real host offset (spec section 4)")
    layout = SpyreTensorLayout.from_stride_map([256, 8, 128, 64], [500, 64, 100000, 1], f16)
    shape = (100, 200, 500)
    coord = (0, 7, 0, 63)
    print(layout)
    print(
        f"  dot({coord}, stride_map) = {int(np.dot(coord, layout.stride_map))}, the offset of "
        f"host element (0, 1, 11), but {coord} is padding: "
        f"host_index -> {layout.host_index(coord, shape)}"
    )

    _title("a round trip through emulated device memory")
    shape = (5, 100, 150)
    layout = SpyreTensorLayout(shape, f16)
    x = np.random.default_rng(0).standard_normal(shape).astype(f16)
    image = np.asarray(dma_h2d(x, layout))
    back = np.asarray(dma_d2h(image, shape, layout))
    poison = int(np.isnan(image).sum())
    print(f"  host {x.shape} {x.dtype} -> device image {image.shape} {image.dtype}")
    print(
        f"  padding positions: {int(layout.padding_mask(shape).sum())}, "
        f"all still poison (NaN): {poison}"
    )
    print(f"  image[7, 1, 4, 5] = {image[7, 1, 4, 5]!r} = x[4, 7, 69] = {x[4, 7, 69]!r}")
    exact = bool((back.view(np.uint16) == x.view(np.uint16)).all())
    print(f"  device -> host is bit-exact: {exact}")

    _primitives_demo()


def _primitives_demo() -> None:
    import jax

    from . import primitives as sp

    _title("Spyre primitives: layouts in every jaxpr")
    rng = np.random.default_rng(1)
    a = sp.to_device(rng.standard_normal((8, 150)).astype(np.float32))
    w = sp.to_device(rng.standard_normal((150, 70)).astype(np.float32))

    def block(a, w):
        h = sp.gelu(a @ w)
        return h.sum(1), h.max(0)

    print("  " + str(jax.make_jaxpr(block)(a, w)).replace("\n", "\n  "))
    s, m = jax.jit(block)(a, w)
    print(f"  row sums: {s.type.str_short()} (sparse: {s.layout.is_sparse})")
    print(f"  column maxima: {m.type.str_short()} (dense: {not m.layout.is_sparse})")
    at = a.T
    print(f"  a.T is a view: {at.type.str_short()}")
    print(f"  restickify(a.T) moves {sp.restickify_cost(at.type)} elements")

    _jit_demo()


def _jit_demo() -> None:
    import jax
    import jax.numpy as jnp

    from . import explain, jit

    _title("spyrejax.jit: a plain JAX function, layouts chosen by the planner")
    rng = np.random.default_rng(2)
    s = 128
    a, b, c = (jnp.asarray(rng.standard_normal((s, s)), jnp.float16) for _ in range(3))
    for text, fn, best in (  # the spec's cases, each with its optimum
        ("a.T + b", lambda a, b, c: a.T + b, f"S*S = {s * s}"),
        ("(a @ b) @ c", lambda a, b, c: (a @ b) @ c, "0"),
        ("a @ (b + c.T)", lambda a, b, c: a @ (b + c.T), f"S*S = {s * s}"),
    ):
        report = explain(fn, a, b, c)
        print(f"  {text:14} restickify_cost = {report.restickify_cost:6d}  (optimal: {best})")

    def attention(q, k, v):
        scores = q @ k.T / jnp.sqrt(jnp.float32(q.shape[-1]))
        mask = jnp.tril(jnp.ones((q.shape[0], q.shape[0]), bool))
        return jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1) @ v

    q, k, v = (jnp.asarray(rng.standard_normal((64, 64)), jnp.float32) for _ in range(3))
    out = jit(attention)(q, k, v)
    err = float(jnp.abs(np.asarray(out) - attention(q, k, v)).max())
    report = explain(attention, q, k, v)
    print(f"  causal attention: {out.type.str_short()}, max |spyrejax - jax| = {err:.1e}")
    print(f"  restickify_cost = {report.restickify_cost}")
    for r in report.restickifies:
        print(f"    {r.value}: {r.reason} (cost {r.cost})")

    _model_demo()


def _transformer_block(params: dict, x: Any) -> Any:
    """A pre-norm transformer block: causal multi-head attention, then a GELU MLP."""
    import jax
    import jax.numpy as jnp

    def norm(h: Any) -> Any:
        return (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)

    tokens, width = x.shape
    heads = 4
    q, k, v = ((norm(x) @ params[n]).reshape(tokens, heads, -1).transpose(1, 0, 2) for n in "qkv")
    scores = q @ k.transpose(0, 2, 1) / jnp.sqrt(jnp.float32(width // heads))
    causal = jnp.tril(jnp.ones((tokens, tokens), bool))
    attn = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1) @ v
    h = x + attn.transpose(1, 0, 2).reshape(tokens, width) @ params["o"]
    return h + jax.nn.gelu(norm(h) @ params["up"]) @ params["down"]


def _model_demo() -> None:
    import jax
    import jax.numpy as jnp

    from . import explain, jit
    from .primitives import to_device

    _title("a model: a transformer block through spyrejax.jit, and its time on the card")
    tokens, width, hidden = 64, 128, 512
    rng = np.random.default_rng(3)
    shapes = {"q": (width, width), "k": (width, width), "v": (width, width)}
    shapes |= {"o": (width, width), "up": (width, hidden), "down": (hidden, width)}
    params = {
        n: jnp.asarray(rng.standard_normal(s) / np.sqrt(s[0]), jnp.float32)
        for n, s in shapes.items()
    }
    x = jnp.asarray(rng.standard_normal((tokens, width)), jnp.float32)

    y = jit(_transformer_block)(jax.tree.map(to_device, params), to_device(x))
    ref = jax.jit(_transformer_block)(params, x)
    err = float(jnp.abs(np.asarray(y) - ref).max())
    # float32 with sums of at most 512 terms: sqrt(512) ~ 23 roundings of 6e-8 each,
    # a few times over through the layers, relative to the values' size.
    tol = 1e-5 * (1 + float(jnp.abs(ref).max()))
    print(f"  block(params, x): x f32[{tokens},{width}], 4 heads, MLP {width}->{hidden}->{width}")
    print(
        f"  spyrejax.jit matches jax.jit: {err <= tol} (max |difference| {err:.1e}, "
        f"tolerance {tol:.1e})"
    )
    report = explain(_transformer_block, params, x)
    print("  " + str(report).replace("\n", "\n  "))
    print(f"  predicted time on the card: {report.time_s * 1e6:.2f} us per call")
