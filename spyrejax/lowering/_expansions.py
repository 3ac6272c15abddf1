"""Primitives the graph replaces by JAX code in other primitives, which have device rules.

- ``tile`` (``jnp.tile``, equinox's rotary embeddings) is a broadcast to
  ``[r0, s0, r1, s1, ...]`` and a reshape to ``[r0 * s0, r1 * s1, ...]``, as JAX's own
  lowering writes it: a view and a reshape (a view where the layout allows, else a
  charged copy).
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

from .._jax import ClosedJaxpr, HiPrim, HiType, expand_hi_primitive

__all__ = ["expand", "needs_expansion"]


def needs_expansion(eqn: Any) -> bool:
    """Whether the graph replaces an equation by the code :func:`expand` gives."""
    name = eqn.primitive.name
    if name == "tile":
        return True
    return name == "call_hi_primitive" and _is_plain(eqn.params.get("_prim"))


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
        fn = functools.partial(expand_hi_primitive, eqn.params["_prim"])
    structs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    return jax.make_jaxpr(fn)(*structs)


def _tile(x: jax.Array, *, reps: tuple[int, ...]) -> jax.Array:
    pairs = [(r, s) for r, s in zip(reps, x.shape, strict=True)]
    spread = tuple(n for pair in pairs for n in pair)
    y = jax.lax.broadcast_in_dim(x, spread, tuple(range(1, 2 * x.ndim, 2)))
    return jax.lax.reshape(y, tuple(r * s for r, s in pairs))
