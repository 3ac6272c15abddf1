"""Fused kernels: the op chains torch-spyre's back end runs as one kernel (spec section 8).

A pass over a program's listed ops (:class:`OpDesc`), whatever listed them. It finds

- ``softmax`` (a ``max`` and a ``sum`` reduction, ``exp``, ``div``), ``layer_norm`` (two
  ``sum`` reductions and ``rsqrt``) and ``rms_norm`` (one ``sum`` and ``rsqrt``): a chain of
  elementwise ops and reductions, with whatever elementwise ops run around them (a
  residual ``add``, a scale, a mask's ``where``, the casts);
- ``attention``: a softmax chain between the matmul making its scores and the matmul
  reading its probabilities (``jax.nn.dot_product_attention`` and the einsum, softmax,
  einsum form alike);
- ``reduction``: any other chain of reductions with the elementwise ops feeding them (a
  cast, ``x * x``) and those run on their results alone (a mean's ``div``, a cast back):
  the kernel reads its input once and accumulates, its intermediates in LX (torch-spyre's
  back end fuses pointwise producers into reductions); a chain that spreads a
  reduction's result back over the rows it reduced (``x - x.max()``), or holds an op
  that neither feeds a reduction nor reads reduced values alone, is not one;
- ``matmul_epilogue``: a matmul and the elementwise ops run on its result alone (a
  bias ``add``, ``gelu``, ``silu``...).

A chain is a run of consecutive kernels in program order (ops that run no kernel, such
as views and constant fills, may sit between them), each reading a value the chain made
before it, all in one loop body or branch; a restickify (or a reshape's copy) inside a
chain is a relayout between its ops. Runs of consecutive kernels keep a group free of
cycles: an op outside a group runs before all of its ops or after them. Other chains (an
elementwise chain no matmul feeds) are not fused.

Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class OpDesc(Protocol):
    """What the pass reads of an op: ``device.OpDesc``'s fields (it imports nothing)."""

    opfunc: str
    kind: str
    inputs: tuple[tuple[str, Any], ...]
    output: tuple[str, Any]
    space: Any
    region: Any


__all__ = [
    "CHAIN_SPACES",
    "FAMILIES",
    "FILL_OPS",
    "MATMUL_OPS",
    "Fusion",
    "find_fusions",
    "is_fill",
    "is_reduction",
    "is_relayout",
]

FAMILIES = ("softmax", "layer_norm", "rms_norm", "reduction", "attention", "matmul_epilogue")
FILL_OPS = frozenset({"full"})

MATMUL_OPS = frozenset({"matmul", "batchmatmul"})
CHAIN_SPACES = frozenset({"elementwise", "reduce"})
"""The iteration spaces (``OpSpace.kind``) of the divided ops a fused chain may hold:
elementwise ops (casts among them) and reductions; a matmul heads an attention or an
epilogue instead. The one rule: read of the listed ops here (``_fusible``) and of the
primitives (``SpyrePrim.space_kind``) by the planner's objective (``lowering._traffic``)."""
_RELAYOUT_COPIES = frozenset({"reshapecopy"})


def is_relayout(desc: OpDesc) -> bool:
    """Whether an op only lays a value out anew (a restickify, a reshape's copy)."""
    return desc.kind == "restickify" or (
        desc.kind == "copy" and desc.opfunc in _RELAYOUT_COPIES and len(desc.inputs) == 1
    )


def is_fill(desc: OpDesc) -> bool:
    """Whether an op is a constant fill (a ``full``: a scalar the card broadcasts).

    Unless it is a program output, a fill is not written at full size: its readers
    read its one stick, once, and it runs no kernel of its own.
    """
    return desc.kind == "copy" and desc.opfunc in FILL_OPS and not desc.inputs


@dataclass(frozen=True)
class Fusion:
    """A chain of ops run as one kernel.

    Attributes:
        family: one of :data:`FAMILIES`.
        ops: the indices of its ops in the program (views and relayouts between them
            included), in program order.
        internal: the values made and read only inside it (not program outputs): the
            kernel keeps them in LX when they fit.
        anchor: the op that names it (its source line is the kernel's): the first
            matmul of an attention or an epilogue, else the chain's first reduction.
    """

    family: str
    ops: tuple[int, ...]
    internal: frozenset[str]
    anchor: int


def _is_kernel(d: OpDesc) -> bool:
    return d.kind != "view" and not is_fill(d)


def _fusible(d: OpDesc) -> bool:
    """An op a chain can hold: elementwise, reduction, cast, or a relayout between them."""
    if is_relayout(d):
        return True
    return d.kind == "compute" and d.space is not None and d.space.kind in CHAIN_SPACES


def _chains(descs: Sequence[OpDesc]) -> list[list[int]]:
    """Chains of fusible kernels, each reading a value made earlier in its chain.

    Several chains may be open at once (independent ops interleave in program order);
    an op reading two of them joins them; a kernel that reads a chain's values but
    cannot join it (a matmul) ends that chain. A chain's trailing views and relayouts
    are left out (they feed the ops after it).
    """
    chains: list[list[int]] = []  # by id; an open chain's values map to it in ``owner``
    closed: set[int] = set()
    owner: dict[str, int] = {}
    owned: list[list[str]] = []  # by chain id: the values given to it (to re-own on a join)

    def close(c: int) -> None:
        closed.add(c)
        ops = chains[c]
        ops.sort()  # joined chains are sorted once, here (not at each join: an optimizer's
        # update of every parameter is one chain that joins once per parameter)
        while ops and (is_relayout(descs[ops[-1]]) or descs[ops[-1]].kind == "view"):
            ops.pop()

    for i, d in enumerate(descs):
        mine = sorted({owner[n] for n, _ in d.inputs if owner.get(n, -1) >= 0} - closed)
        mine = [c for c in mine if d.region == descs[chains[c][0]].region]
        if mine and (d.kind == "view" or (_is_kernel(d) and _fusible(d))):
            c = mine[0]
            for other in mine[1:]:  # the op joins two chains
                chains[c].extend(chains[other])
                chains[other] = []
                closed.add(other)
                for n in owned[other]:
                    if owner[n] == other:
                        owner[n] = c
                        owned[c].append(n)
                owned[other] = []
            chains[c].append(i)
            owner[d.output[0]] = c
            owned[c].append(d.output[0])
        elif _is_kernel(d):
            for c in mine:
                close(c)
            if _fusible(d) and d.kind == "compute":
                owner[d.output[0]] = len(chains)
                owned.append([d.output[0]])
                chains.append([i])
    for c in range(len(chains)):
        if c not in closed:
            close(c)
    return sorted(c for c in chains if c)


def is_reduction(d: OpDesc) -> bool:
    """Whether an op is a reduction (a compute op whose iteration space reduces)."""
    return d.kind == "compute" and d.space is not None and d.space.kind == "reduce"


def _family(descs: Sequence[OpDesc], chain: list[int]) -> str | None:
    """What a chain of elementwise ops and reductions computes, if a fused family."""
    ops = [descs[i] for i in chain if descs[i].kind == "compute"]
    reductions = [d.opfunc for d in ops if d.space is not None and d.space.kind == "reduce"]
    funcs = {d.opfunc for d in ops}
    if "max" in reductions and "sum" in reductions and {"exp", "div"} <= funcs:
        return "softmax"
    if "rsqrt" in funcs and reductions.count("sum") >= 2:
        return "layer_norm"
    if "rsqrt" in funcs and reductions.count("sum") == 1:
        return "rms_norm"
    if not reductions:
        return "elementwise"
    return None if _broadcasts_a_reduction(descs, chain) else "reduction"


def _broadcasts_a_reduction(descs: Sequence[OpDesc], chain: list[int]) -> bool:
    """Whether the chain is more than reductions, what feeds them and what they feed.

    Each op must feed a reduction of the chain (a prologue: a cast, ``x * x``, a
    variance's ``(x - mean) ** 2``) or read reduced values alone, on their own shape (an
    epilogue: a mean's ``div``, a cast back). True otherwise: ``x - x.mean()`` spreads
    the reduced rows back over the whole (a second pass over each row, which only the
    softmax and norm families are); an optimizer's update of every parameter, joined to
    a bias gradient's sum by the step count they share, is no reduction kernel.
    """
    made = {descs[i].output[0]: i for i in chain}
    feeds: set[int] = set()  # the prologue: ops some reduction of the chain reads
    todo = [n for i in chain if is_reduction(descs[i]) for n, _ in descs[i].inputs]
    while todo:
        j = made.get(todo.pop())
        if j is not None and j not in feeds:
            feeds.add(j)
            todo += [n for n, _ in descs[j].inputs]
    reduced: dict[str, int] = {}  # values made from reductions' results alone: elements
    for i in chain:
        d = descs[i]
        size = math.prod(d.output[1].shape)
        seen = [reduced.get(n, 0) for n, _ in d.inputs if n in made]
        alone = bool(seen) and all(seen)
        if is_reduction(d) or (alone and d.kind != "compute"):
            reduced[d.output[0]] = size if is_reduction(d) else max(seen)
        elif d.kind != "compute" or i in feeds:
            continue
        elif alone and size <= max(seen):
            reduced[d.output[0]] = size
        else:
            return True
    return False


def _producer(descs: Sequence[OpDesc], writers: dict[str, int], name: str) -> int | None:
    """The op making ``name``, looking through views and relayouts."""
    i = writers.get(name)
    while i is not None and (descs[i].kind == "view" or is_relayout(descs[i])) and descs[i].inputs:
        i = writers.get(descs[i].inputs[0][0])
    return i


def _readers_through_views(
    descs: Sequence[OpDesc], readers: dict[str, list[int]], name: str
) -> list[int]:
    """The ops reading ``name`` or its views, the views included."""
    out, todo = [], [name]
    while todo:
        for j in readers.get(todo.pop(), []):
            if descs[j].kind == "view":
                todo.append(descs[j].output[0])
            out.append(j)
    return out


def find_fusions(descs: Sequence[OpDesc], keep: frozenset[str] = frozenset()) -> list[Fusion]:
    """The fused kernels of a program's ops (see the module's docstring).

    Args:
        descs: the ops in program order.
        keep: the values that live in DDR whatever happens (program inputs and outputs).
    """
    writers = {d.output[0]: i for i, d in enumerate(descs)}
    readers: dict[str, list[int]] = {}
    for i, d in enumerate(descs):
        for n, _ in d.inputs:
            readers.setdefault(n, []).append(i)
    out = []
    taken: set[int] = set()
    for chain in _chains(descs):
        found = None
        for end in _ends(descs, chain):
            found = _grow(descs, writers, readers, chain[:end], taken)
            if found is not None:
                break
        if found is None:
            continue
        family, ops = found
        taken.update(ops)
        anchor = next(
            (i for i in ops if descs[i].opfunc in MATMUL_OPS or is_reduction(descs[i])), ops[0]
        )
        out.append(Fusion(family, tuple(ops), _internal(descs, readers, ops, keep), anchor))
    return out


_MAX_CUTS = 16  # shorter chains tried when a chain cannot run as one kernel


def _ends(descs: Sequence[OpDesc], chain: list[int]) -> list[int]:
    """Where to cut a chain: whole first, then before each of its last kernels.

    A chain may reach ops that run much later (a training step's backward ops reading
    the forward's values); the longest part that can run as one kernel is kept.
    """
    cuts = [k + 1 for k in range(len(chain) - 2, 0, -1) if descs[chain[k]].kind == "compute"]
    return [len(chain), *cuts[:_MAX_CUTS]]


def _grow(
    descs: Sequence[OpDesc],
    writers: dict[str, int],
    readers: dict[str, list[int]],
    chain: list[int],
    taken: set[int],
) -> tuple[str, list[int]] | None:
    """A chain's family and ops, with the matmuls around it that join its kernel."""
    family = _family(descs, chain)
    if family is None:
        return None
    before = _feeding_matmul(descs, writers, readers, chain)
    if before in taken:
        before = None
    candidates = []
    if family == "softmax" and before is not None:
        after = _reading_matmul(descs, readers, chain)
        if after is not None:
            ops = [*_path(descs, before, chain[-1]), *chain, *_path(descs, chain[-1], after)]
            ops += _input_relayouts(descs, readers, ops)
            candidates.append(("attention", ops))
    if family == "elementwise":
        if before is None:
            return None
        candidates.append(("matmul_epilogue", [*_path(descs, before, chain[-1]), *chain]))
    else:
        candidates.append((family, chain))
    for name, ops in candidates:
        ops = sorted(set(ops))
        kernels = [i for i in ops if descs[i].kind != "view"]
        if len(kernels) >= 2 and _one_kernel(descs, ops):
            return name, ops
    return None


def _input_relayouts(
    descs: Sequence[OpDesc], readers: dict[str, list[int]], ops: list[int]
) -> list[int]:
    """The restickifies of an attention's inputs (k, v) read by its matmuls alone.

    The kernel loads each block of such an input from DDR and lays it out anew in LX
    (flash-style): the restickify and the views from it to the matmul are its ops.
    """
    inside = set(ops)
    out = []
    for i in ops:
        if descs[i].opfunc not in MATMUL_OPS:
            continue
        for name, _ in descs[i].inputs:
            chain = []
            p = next((j for j in range(i) if descs[j].output[0] == name), None)
            while p is not None and descs[p].kind == "view" and descs[p].inputs:
                chain.append(p)
                src = descs[p].inputs[0][0]
                p = next((j for j in range(p) if descs[j].output[0] == src), None)
            if p is None or descs[p].kind != "restickify":
                continue
            uses = _readers_through_views(descs, readers, descs[p].output[0])
            if all(j in inside or j in chain for j in uses):
                out += [p, *chain]
    return out


def _one_kernel(descs: Sequence[OpDesc], ops: list[int]) -> bool:
    """Whether ``ops`` can run as one kernel where the last of them runs.

    No op between the first and the last reads a value they make (or a view of one):
    the ops outside run before the kernel, and its inputs are ready when it runs.
    """
    inside = set(ops)
    made: set[str] = set()
    for k in range(ops[0], ops[-1] + 1):
        d = descs[k]
        reads = any(n in made for n, _ in d.inputs)
        if k in inside or (d.kind == "view" and reads):
            made.add(d.output[0])
        elif reads:
            return False
    return True


def _feeding_matmul(
    descs: Sequence[OpDesc],
    writers: dict[str, int],
    readers: dict[str, list[int]],
    chain: list[int],
) -> int | None:
    """The matmul whose result only the chain reads (the last such, if several)."""
    inside = set(chain)
    found = None
    for i in chain:
        for name, _ in descs[i].inputs:
            p = _producer(descs, writers, name)
            if p is None or p in inside or descs[p].opfunc not in MATMUL_OPS:
                continue
            uses, todo = [], [descs[p].output[0]]
            while todo:  # its readers, through views and relayouts
                for j in _readers_through_views(descs, readers, todo.pop()):
                    uses.append(j)
                    if is_relayout(descs[j]):
                        todo.append(descs[j].output[0])
            alone = all(
                j in inside or descs[j].kind == "view" or is_relayout(descs[j]) for j in uses
            )
            if alone and descs[p].region == descs[chain[0]].region and (found is None or p > found):
                found = p
    return found


def _reading_matmul(
    descs: Sequence[OpDesc], readers: dict[str, list[int]], chain: list[int]
) -> int | None:
    """The matmul reading the chain's last result (through views and relayouts)."""
    name = descs[chain[-1]].output[0]
    while True:
        uses = [j for j in _readers_through_views(descs, readers, name) if descs[j].kind != "view"]
        if len(uses) != 1 or not is_relayout(descs[uses[0]]):
            break
        name = descs[uses[0]].output[0]
    if len(uses) != 1 or descs[uses[0]].opfunc not in MATMUL_OPS:
        return None
    j = uses[0]
    return j if descs[j].region == descs[chain[0]].region else None


def _path(descs: Sequence[OpDesc], a: int, b: int) -> list[int]:
    """``a``, ``b`` and the views and relayouts between them that carry ``a``'s value."""
    out, made = [a], {descs[a].output[0]}
    for k in range(a + 1, b):
        d = descs[k]
        if (d.kind == "view" or is_relayout(d)) and any(n in made for n, _ in d.inputs):
            out.append(k)
            made.add(d.output[0])
    return [*out, b]


def _internal(
    descs: Sequence[OpDesc], readers: dict[str, list[int]], ops: list[int], keep: frozenset[str]
) -> frozenset[str]:
    """The values made in ``ops`` and read only there, through views too.

    A value a view of the group reads escapes when the view's result does (a piece
    ``place``d into a buffer that ops after the kernel read: rotate-half's
    ``concatenate`` written in place); it is then written to DDR, not kept in LX.
    """
    inside = set(ops)

    def escapes(name: str) -> bool:
        return name in keep or any(
            j not in inside or (descs[j].kind == "view" and escapes(descs[j].output[0]))
            for j in readers.get(name, [])
        )

    out = set()
    for i in ops:
        name = descs[i].output[0]
        if readers.get(name) and not escapes(name):
            out.add(name)
    return frozenset(out)
