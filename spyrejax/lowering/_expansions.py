"""Primitives the graph replaces by JAX code in other primitives, which have device rules.

- ``tile`` (``jnp.tile``, equinox's rotary embeddings) is a broadcast to
  ``[r0, s0, r1, s1, ...]`` and a reshape to ``[r0 * s0, r1 * s1, ...]``, as JAX's own
  lowering writes it: a view and a reshape (a view where the layout allows, else a
  charged copy).
- ``psum``, ``pmax`` and ``pmin`` over positional axes (what ``jax.vmap(...,
  axis_name=...)`` makes of a collective over its own axis: ``pmean`` under vmap,
  equinox's ``BatchNorm``) are the reductions ``reduce_sum``, ``reduce_max`` and
  ``reduce_min`` over those axes; a collective over named (mesh) axes stays one (see
  :func:`positional_axes`).
- JAX's own hijax primitives over plain arrays (``jnp.searchsorted``, ``jnp.nonzero``
  with a ``size``, ``jnp.ldexp``, ``jnp.frexp``, ``jax.random.choice`` through them)
  are their ``expand``: the ``lax`` code JAX lowers them to.

Each expansion is traced on the equation's abstract operands and inlined in its place,
every node at the equation's source line.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from .._jax import ClosedJaxpr, HiPrim, HiType, expand_hi_primitive, hi_prim

__all__ = ["expand", "needs_expansion", "positional_axes", "positional_reduction"]

# Collectives whose positional axes (vmap's) are a reduction over those dims.
_POSITIONAL = {
    "psum": jax.lax.reduce_sum,
    "psum_invariant": jax.lax.reduce_sum,
    "pmax": jax.lax.reduce_max,
    "pmin": jax.lax.reduce_min,
}


def positional_axes(eqn: Any) -> tuple[tuple[int, ...], tuple[Any, ...]] | None:
    """``(positional axes, named axes)`` of a collective with positional axes or none, else None.

    ``jax.vmap(..., axis_name="b")`` turns ``psum(x, "b")`` into a ``psum`` over the
    mapped dim's position (an int): a reduction of that dim, no collective at all.
    """
    if eqn.primitive.name not in _POSITIONAL:
        return None
    axes = eqn.params["axes"]
    axes = tuple(axes) if isinstance(axes, tuple | list) else (axes,)
    pos = tuple(a for a in axes if isinstance(a, int))
    named = tuple(a for a in axes if not isinstance(a, int))
    if named and not pos:
        return None
    return pos, named  # no axes at all (the transpose of a vmapped psum): the identity


def positional_reduction(
    prim: str, shape: tuple[int, ...], dtype: Any, axes: tuple[int, ...]
) -> ClosedJaxpr:
    """The reduction a collective over positional ``axes`` is, on one operand."""
    reduce = _POSITIONAL[prim]
    return jax.make_jaxpr(lambda x: reduce(x, axes))(jax.ShapeDtypeStruct(shape, dtype))


def needs_expansion(eqn: Any) -> bool:
    """Whether the graph replaces an equation by the code :func:`expand` gives."""
    name = eqn.primitive.name
    if name == "tile":
        return True
    return _is_plain(hi_prim(eqn))


def _is_plain(prim: Any) -> bool:
    """A hijax primitive of plain arrays (JAX's own), not one of Spyre types."""
    if not isinstance(prim, HiPrim):
        return False
    avals = (*prim.in_avals_flat, *prim.out_avals_flat)
    return not any(isinstance(a, HiType) for a in avals)


def expand(eqn: Any) -> ClosedJaxpr:
    """The equation as JAX code in other primitives, traced on its abstract operands."""
    if eqn.primitive.name == "tile":
        fn = functools.partial(_tile, reps=tuple(eqn.params["reps"]))
    else:
        fn = functools.partial(expand_hi_primitive, hi_prim(eqn))
    structs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    return jax.make_jaxpr(fn)(*structs)


def _tile(x: jax.Array, *, reps: tuple[int, ...]) -> jax.Array:
    pairs = [(r, s) for r, s in zip(reps, x.shape, strict=True)]
    spread = tuple(n for pair in pairs for n in pair)
    y = jax.lax.broadcast_in_dim(x, spread, tuple(range(1, 2 * x.ndim, 2)))
    return jax.lax.reshape(y, tuple(r * s for r, s in pairs))
