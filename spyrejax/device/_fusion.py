"""Fused kernels: the op chains torch-spyre's back end runs as one kernel (spec section 8).

A pass over a program's listed ops (:class:`OpDesc`), whatever listed them. It finds

- ``softmax`` (a ``max`` and a ``sum`` reduction, ``exp``, ``div``), ``layer_norm`` (two
  ``sum`` reductions and ``rsqrt``) and ``rms_norm`` (one ``sum`` and ``rsqrt``): a chain of
  elementwise ops and reductions, with whatever elementwise ops run around them (a
  residual ``add``, a scale, a mask's ``where``, the casts);
- ``attention``: a softmax chain between the matmul making its scores and the matmul
  reading its probabilities (``jax.nn.dot_product_attention`` and the einsum, softmax,
  einsum form alike);
- ``matmul_epilogue``: a matmul and the elementwise ops run on its result alone (a
  bias ``add``, ``gelu``, ``silu``...).

A chain is a run of consecutive kernels in program order (ops that run no kernel, such
as views and constant fills, may sit between them), each reading a value the chain made
before it, all in one loop body or branch; a restickify (or a reshape's copy) inside a
chain is a relayout between its ops. Runs of consecutive kernels keep a group free of
cycles: an op outside a group runs before all of its ops or after them. Other chains (an
elementwise chain no matmul feeds, a reduction of another kind) are not fused.

Pure Python.
"""

from __future__ import annotations

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
    "FAMILIES",
    "FILL_OPS",
    "Fusion",
    "find_fusions",
    "is_fill",
    "is_relayout",
]

FAMILIES = ("softmax", "layer_norm", "rms_norm", "attention", "matmul_epilogue")
FILL_OPS = frozenset({"full"})

_MATMULS = frozenset({"matmul", "batchmatmul"})
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
    """

    family: str
    ops: tuple[int, ...]
    internal: frozenset[str]

    @property
    def first(self) -> int:
        """The index of its first op."""
        return self.ops[0]


def _is_kernel(d: OpDesc) -> bool:
    return d.kind != "view" and not is_fill(d)


def _fusible(d: OpDesc) -> bool:
    """An op a chain can hold: elementwise, reduction, cast, or a relayout between them."""
    if is_relayout(d):
        return True
    return d.kind == "compute" and d.space is not None and d.opfunc not in _MATMULS


def _chains(descs: Sequence[OpDesc]) -> list[list[int]]:
    """Runs of fusible kernels, each reading a value made earlier in the run."""
    chains: list[list[int]] = []
    run: list[int] = []
    made: set[str] = set()

    def close() -> None:
        while run and (is_relayout(descs[run[-1]]) or descs[run[-1]].kind == "view"):
            made.discard(descs[run.pop()].output[0])
        if run:
            chains.append(list(run))
        run.clear()
        made.clear()

    for i, d in enumerate(descs):
        reads = {n for n, _ in d.inputs}
        linked = bool(run) and bool(reads & made) and d.region == descs[run[0]].region
        if not _is_kernel(d):
            if d.kind == "view" and linked:
                run.append(i)
                made.add(d.output[0])
            continue
        if _fusible(d) and linked:
            run.append(i)
            made.add(d.output[0])
            continue
        close()
        if _fusible(d) and d.kind == "compute":
            run.append(i)
            made.add(d.output[0])
    close()
    return chains


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
    return None if reductions else "elementwise"


def _producer(descs: Sequence[OpDesc], writers: dict[str, int], name: str) -> int | None:
    """The op making ``name``, looking through views."""
    i = writers.get(name)
    while i is not None and descs[i].kind == "view" and descs[i].inputs:
        i = writers.get(descs[i].inputs[0][0])
    return i


def _readers_through_views(
    descs: Sequence[OpDesc], readers: dict[str, list[int]], name: str
) -> list[int]:
    """The ops reading ``name``, and those reading the views of it, not the views."""
    out, todo = [], [name]
    while todo:
        for j in readers.get(todo.pop(), []):
            if descs[j].kind == "view":
                todo.append(descs[j].output[0])
                out.append(j)
            else:
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
        family = _family(descs, chain)
        if family is None:
            continue
        ops = list(chain)
        before = _feeding_matmul(descs, writers, readers, ops)
        if family == "softmax" and before is not None:
            after = _reading_matmul(descs, readers, ops)
            if after is not None:
                ops = [*_between(descs, before, ops[0]), *ops, *_between(descs, ops[-1], after)]
                family = "attention"
        elif family == "elementwise":
            if before is None or before in taken:
                continue
            ops = [*_between(descs, before, ops[0]), *ops]
            family = "matmul_epilogue"
        ops = sorted(set(ops))
        if len([i for i in ops if descs[i].kind != "view"]) < 2:
            continue
        taken.update(ops)
        out.append(Fusion(family, tuple(ops), _internal(descs, readers, ops, keep)))
    return out


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
            if p is None or p in inside or descs[p].opfunc not in _MATMULS:
                continue
            uses = _readers_through_views(descs, readers, descs[p].output[0])
            alone = all(j in inside or descs[j].kind == "view" for j in uses)
            if alone and descs[p].region == descs[chain[0]].region and (found is None or p > found):
                found = p
    if found is not None and any(_is_kernel(descs[j]) for j in range(found + 1, chain[0])):
        return None  # another kernel runs between them: not one run
    return found


def _reading_matmul(
    descs: Sequence[OpDesc], readers: dict[str, list[int]], chain: list[int]
) -> int | None:
    """The matmul reading the chain's last result (through views and a relayout), next."""
    name = descs[chain[-1]].output[0]
    while True:
        uses = [j for j in _readers_through_views(descs, readers, name) if descs[j].kind != "view"]
        if len(uses) != 1 or not is_relayout(descs[uses[0]]):
            break
        name = descs[uses[0]].output[0]
    if len(uses) != 1 or descs[uses[0]].opfunc not in _MATMULS:
        return None
    j = uses[0]
    if any(_is_kernel(descs[k]) and not is_relayout(descs[k]) for k in range(chain[-1] + 1, j)):
        return None
    return j if descs[j].region == descs[chain[0]].region else None


def _between(descs: Sequence[OpDesc], a: int, b: int) -> list[int]:
    """``a``, ``b`` and the views and relayouts between them linked to ``a``."""
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
    """The values made in ``ops`` and read only there."""
    inside = set(ops)
    out = set()
    for i in ops:
        name = descs[i].output[0]
        uses = readers.get(name, [])
        if name not in keep and uses and all(j in inside for j in uses):
            out.add(name)
    return frozenset(out)
