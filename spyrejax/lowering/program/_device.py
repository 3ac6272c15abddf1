"""The ``with_division`` hint, and the ops the device model divides.

``with_division(x, /, **splits)`` is the identity under plain JAX and a hint under
``spyrejax.jit``: the op producing ``x`` is divided with those splits (validated against
its iteration space when the program is planned). :func:`divided_space` says which
primitives the device model divides (those defining ``SpyrePrim.space``) and their
iteration space; the op a hint goes to
is the one whose result is the hinted value, in the record of the program's trace
(:func:`spyrejax.lowering.program._program.hinted_op`), and the node scopes
(:func:`node_scope`, :func:`take_hint`) are how the per-core emulation gives each hint
to that op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from ..._errors import DeviceError, SpyreInternalError
from ..._jax import Primitive, ad, batching, mlir
from ...device import OpDesc, OpSpace, TensorSpec
from ...device._space import MATMUL_NAMES, OTHER_NAMES
from ...primitives._array import SpyreType
from ...primitives._base import SpyrePrim
from .._graph import Graph, Node, Value
from .._registry import Mode, Rule, _carried_modes, _register

__all__ = [
    "Hint",
    "classify",
    "current_line",
    "divided_space",
    "node_hints",
    "node_scope",
    "spaces_apart",
    "take_hint",
    "with_division",
    "with_division_p",
]

_DIM_NAMES = frozenset({*OTHER_NAMES, *MATMUL_NAMES, "out"})

with_division_p = Primitive("spyre_with_division")
with_division_p.def_impl(lambda x, **_: x)
with_division_p.def_abstract_eval(lambda x, **_: x)
mlir.register_lowering(with_division_p, lambda ctx, x, **_: [x])
ad.deflinear2(with_division_p, lambda ct, x, **params: [with_division_p.bind(ct, **params)])
batching.primitive_batchers[with_division_p] = lambda args, dims, **params: (
    with_division_p.bind(args[0], **params),
    dims[0],
)


def with_division(x: Any, /, **splits: int) -> Any:
    """Fix how the op producing ``x`` is divided over the cores (a hint).

    Args:
        x: an array (traced or not).
        **splits: slices per SuperDSC dim name of that op's iteration space (``mb``,
            ``out``, ``in``, ``x``, ...); the dims not named are distributed as usual.

    Returns:
        ``x`` itself. Under :func:`spyrejax.jit` the device model divides the op that
        produces ``x`` with these splits (``spyrejax.explain`` and ``export`` show it).

    Raises:
        DeviceError: for an unknown dim name or a split that is not a positive int; when
            the program is planned, for a split that does not divide the dim's
            stick-adjusted extent, a product over the cores, or more than one reduction
            dim split.
    """
    if not splits:
        raise DeviceError("with_division needs at least one split, e.g. with_division(x, mb=4)")
    for name, s in splits.items():
        if name not in _DIM_NAMES:
            raise DeviceError(
                f"with_division: unknown dim {name!r}; SuperDSC dims are {sorted(_DIM_NAMES)}"
            )
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise DeviceError(f"with_division: {name}={s!r} must be a positive int")
    return with_division_p.bind(x, splits=tuple(sorted(splits.items())))


class _WithDivision(Rule):
    def modes(self, node: Node) -> list[Mode]:
        return _carried_modes(node, lambda t: t)

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [args[0]]


_register(_WithDivision(), with_division_p.name)


# --- the ops the device model divides ------------------------------------------------


def _spec(t: SpyreType, name: str) -> TensorSpec:
    return TensorSpec(t.shape, t.layout, t.dims, name, t.base_shape, t.strides)


def classify(prim: Any, ins: list[TensorSpec], out: TensorSpec) -> tuple[str, str, Any]:
    """What the device model makes of a primitive: ``(kind, op name, space)``.

    ``"compute"`` with its own iteration space (``SpyrePrim.space``) for a divided one;
    else its ``role`` (``"view"``, ``"copy"``, ``"restickify"``; any other: a copy) and
    no space.

    Raises:
        DeviceError: when a divided primitive's operands have no space.
    """
    space = _named_space(prim, [*ins, out]) if isinstance(prim, SpyrePrim) else None
    if space is not None:
        return "compute", space.opfunc, space
    role = getattr(prim, "role", "compute")
    kind = role if role in ("view", "copy", "restickify") else "copy"
    return kind, type(prim).__name__.lower(), None


def _named_space(prim: SpyrePrim, specs: list[TensorSpec]) -> OpSpace | None:
    """``prim.space`` of ``specs`` (the inputs', then the result's).

    The space :func:`divided_space` keeps for the primitive, with the specs' names, when
    the specs are its specs but for their names (a repeated layer's ops: computed once).
    """
    found = divided_space(prim)
    if found is not None and len(found[1]) == len(specs):
        space, kept = found
        if all(_unnamed(a) == _unnamed(b) for a, b in zip(kept, specs, strict=True)):
            at = {id(s): k for k, s in enumerate(kept)}
            if all(id(o.tensor) in at for o in space.operands):
                operands = tuple(replace(o, tensor=specs[at[id(o.tensor)]]) for o in space.operands)
                return replace(space, operands=operands)
    return prim.space(specs[:-1], specs[-1])


def _unnamed(s: TensorSpec) -> tuple[Any, ...]:
    return (s.shape, s.layout, s.dims, s.base_shape, s.strides)


def divided_space(prim: Any) -> tuple[OpSpace, list[TensorSpec]] | None:
    """The iteration space of a primitive the device model divides, and its operands' specs.

    None for a primitive it does not divide: one that defines no ``space()``
    (``SpyrePrim.space``), or not on Spyre operands.
    """
    if not isinstance(prim, SpyrePrim) or type(prim).space is SpyrePrim.space:
        return None
    if not isinstance(prim.out_aval, SpyreType):
        return None
    if not all(isinstance(t, SpyreType) for t in prim.in_avals):
        return None
    key = (type(prim), prim.space_key(), tuple(prim.in_avals), prim.out_aval)
    if key not in _SPACES:
        if len(_SPACES) >= _SPACES_KEPT:
            _SPACES.clear()
        _SPACES[key] = _divided_space(prim)
    found = _SPACES[key]
    return None if found is None else (found[0], list(found[1]))


_SPACES: dict[Any, tuple[OpSpace, tuple[TensorSpec, ...]] | None] = {}
_SPACES_KEPT = 8192
"""The spaces of the primitives seen, by what a space depends on (a repeated layer's ops
share one): the primitive's class and ``space_key()``, its operand and result types
(equal types have equal shapes, layouts and views)."""


@contextlib.contextmanager
def spaces_apart() -> Iterator[None]:
    """Inside the block, :func:`divided_space` starts from no kept space (tests).

    A hook for tests that count how often a space is made in one program: the spaces
    made inside are dropped at the end and the process's kept ones come back.
    """
    kept = dict(_SPACES)
    _SPACES.clear()
    try:
        yield
    finally:
        _SPACES.clear()
        _SPACES.update(kept)


def _divided_space(prim: SpyrePrim) -> tuple[OpSpace, tuple[TensorSpec, ...]] | None:
    specs = [_spec(t, f"in{k}") for k, t in enumerate(prim.in_avals)]
    specs.append(_spec(prim.out_aval, "out"))
    try:
        space = prim.space(specs[:-1], specs[-1])
    except DeviceError:
        return None
    return None if space is None else (space, tuple(specs))


# --- which op a node's hint goes to ---------------------------------------------------------


@dataclass
class _Scope:
    """A node being lowered: its line, its hinted op, the divided ops bound so far inside."""

    line: str
    source: str
    hinted: tuple[int, OpDesc] | None
    seen: int = 0
    used: bool = False


_SCOPES: ContextVar[tuple[_Scope, ...]] = ContextVar("spyrejax_node_scopes", default=())


@contextlib.contextmanager
def node_scope(
    line: str, hinted: tuple[int, OpDesc] | None = None, source: str | None = None
) -> Iterator[None]:
    """The divided ops bound inside belong to the node at ``line`` (scopes nest).

    The interpreter opens one around each node it lowers while an executor runs the
    primitives (``emulate="cores"``): a loop body's nodes open theirs inside the loop's.
    Every scope counts the divided ops bound inside it, its inner scopes' too, in
    binding order (the order the record lists them).

    Args:
        line: the node's source line (messages).
        hinted: ``(position, op)`` from :func:`hinted_op`: the node's divided op at
            that position gets ``op.hint``.
        source: the node's source (``Node.source``; default ``line``).

    Raises:
        SpyreInternalError: if the hinted op was not bound inside (the lowering bound its
            ops otherwise than when the record was traced).
    """
    scope = _Scope(line, source or line, hinted)
    token = _SCOPES.set((*_SCOPES.get(), scope))
    try:
        yield
    finally:
        _SCOPES.reset(token)
    if hinted is not None and not scope.used:
        raise SpyreInternalError(
            f"internal error: the with_division hint at {line} did not reach its op "
            f"({hinted[1].opfunc}); please report it"
        )


def current_line() -> str:
    """The source line of the innermost node being lowered ("" outside any)."""
    scopes = _SCOPES.get()
    return scopes[-1].line if scopes else ""


def _shape(s: TensorSpec) -> tuple[Any, ...]:
    return (s.shape, s.layout, s.dims)


def take_hint(prim: Any, specs: list[TensorSpec]) -> dict[str, int] | None:
    """Count a divided op in every open scope; its hint if it is a scope's hinted one.

    Raises:
        SpyreInternalError: if the op at a hinted position is not the op the device
            model gave the hint to.
    """
    hint = None
    for scope in _SCOPES.get():
        k, scope.seen = scope.seen, scope.seen + 1
        if scope.hinted is None or k != scope.hinted[0]:
            continue
        desc = scope.hinted[1]
        listed = [_shape(t) for _, t in (*desc.inputs, desc.output)]
        if listed != [_shape(t) for t in specs]:
            raise SpyreInternalError(
                f"internal error: the with_division hint at {scope.line} is for "
                f"{desc.opfunc}, but the op at its place is {type(prim).__name__}; "
                "please report it"
            )
        scope.used = True
        hint = dict(desc.hint or {})
    return hint


@dataclass(frozen=True)
class Hint:
    """A node's ``with_division`` hint: which of its results, and the splits."""

    out: int
    splits: dict[str, int]


def node_hints(graph: Graph) -> dict[Node, Hint]:
    """The ``with_division`` hint of each node whose result the user hinted.

    Raises:
        DeviceError: for hints on two results of one node (one op per node is hinted).
    """
    hinted = {
        node.ins[0]: dict(node.params["splits"])
        for node in graph.nodes
        if node.prim == with_division_p.name and isinstance(node.ins[0], Value)
    }
    out = {}
    for node in graph.nodes:
        mine = [k for k, v in enumerate(node.outs) if v in hinted]
        if len(mine) > 1:
            raise DeviceError(
                f"with_division: hints on {len(mine)} results of {node.describe()}; "
                "one node's results come from one division: hint one of them"
            )
        if mine:
            out[node] = Hint(mine[0], hinted[node.outs[mine[0]]])
    return out
