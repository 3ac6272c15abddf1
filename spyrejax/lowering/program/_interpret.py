"""The interpreter: runs a planned graph with Spyre primitives (under ``jax.jit``).

It does exactly what the plan says: inputs and constants arrive in their planned
types, each node runs its planned options, and each planned restickify moves a value
into the type a consumer needs. Every node must give the type the planner evaluated
for it, and the shape and dtype of its equation; anything else is a
:class:`SpyreInternalError`, never a silently different result.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import jax
import numpy as np

from ... import primitives as sp
from ..._errors import DeviceError, SpyreInternalError
from ...device import DeviceProgram, Machine, default_machine, plan_program, validate_hint
from ...layout._layout import SpyreTensorLayout
from ...primitives._array import PadFill, SpyreType
from ...primitives._softmax import softmax_with_zero_padding
from ...primitives._widened_sum import Pointwise, widened_sum
from .._graph import Graph, Node, Scalar, Value
from .._planner import Move, Plan
from .._registry import lower_node
from .._traffic import through_ddr
from . import _record as recorded
from ._cores import CoreCheck, CoreExecutor
from ._device import (
    HintTable,
    has_hints,
    hint_table,
    hinting,
    node_hints,
    node_scope,
    resolve_hints,
)
from ._groups import BatchGroups, batch_groups, run_groups
from ._program import program_ops
from ._relaid import HALF_FLOATS, RelaidChain, map_step, relaid_chains, run_relaid
from ._replay import Replays
from ._softmax import SoftmaxChain, softmax_chains

__all__ = [
    "EMULATE_MODES",
    "Interpreter",
    "Record",
    "check_emulate",
    "device_program",
    "moved_value",
    "records",
]

EMULATE_MODES = (None, "cores")
"""How ``spyrejax.jit`` runs the ops: whole-image kernels (None) or per core."""


MATERIALIZED = frozenset({"add_any"})
"""Primitives whose results the plain emulator writes out, as the card does
(``jax.lax.optimization_barrier`` on the image): XLA fuses no kernel across them.

``add_any`` sums the cotangents of a value read along several paths (a residual
stream's gradient): its result is read by the next layer's backward and by its weight
gradients' matmuls. Fused, XLA's CPU backend recomputed the whole chain of elementwise
kernels behind it inside each of its consumers, layer after layer: in the 4-layer GPT
training step planned at exact totals (``_traffic.REBASE`` 2^36) the four fusions
holding the residual gradient had 32, 55, 77 and 100 operands (work quadratic in depth,
a third more CPU than the program of the plan then shipped, at 2^960; benchmarks/README
item 60). Written out, the exact plan (shipped since item 65) runs as fast on the CPU."""


def _materialized(x: Any) -> Any:
    """``x`` (a Spyre array) with its image written out: no XLA fusion across it."""
    return sp.wrap(jax.lax.optimization_barrier(sp.image(x)), jax.typeof(x))


def _scope_name(node: Node) -> str:
    """The name a node's kernel carries in XLA's program (``op_name`` metadata, profiles).

    ``spyre.<primitive>``: a transpose or copy of the compiled program names the Spyre
    op whose lowering made it; a planned move is ``spyre.restickify`` and a host
    argument's transfer ``spyre.to_device``.
    """
    return f"spyre.{node.prim}"


def check_emulate(emulate: Any) -> str | None:
    """``emulate`` if it is one of :data:`EMULATE_MODES`.

    Raises:
        DeviceError: naming the value and the modes.
    """
    if emulate not in EMULATE_MODES:
        raise DeviceError(f"spyrejax.jit: emulate must be None or 'cores', got {emulate!r}")
    return emulate


@dataclass(frozen=True)
class Record:
    """One restickify of the plan.

    Attributes:
        value: the value: its type and where it comes from.
        reason: which node needed it in which stick.
        source: the layout it had.
        target: the layout it got.
        cost: elements moved, ``prod(source.device_size)``.
        source_type: its type before (shows a view over ``source``).
        line: the user's source line it is charged to: the line of the node that needs
            it, or of the node that makes a program's result (``file:line (function)``).
        in_lx: relaid in LX as a matmul loads it (``LoadRelayout``): its elements move
            through the cores' LX ports, never to DDR and back.
    """

    value: str
    reason: str
    source: SpyreTensorLayout
    target: SpyreTensorLayout
    cost: int
    source_type: str = ""
    line: str = ""
    in_lx: bool = False


def records(plan: Plan) -> list[Record]:
    """The plan's restickifies (planned moves, and those a lowering makes itself)."""
    out = [
        _record(m.value, m.source, m.target.layout, m.cost, m.reason, m.charged_to)
        for m in _moves(plan)
    ]
    for node, options in plan.runs.items():
        for option in options:
            for prim in option.copies:
                if prim.role == "restickify":  # a loop's body charges say their own why
                    why = getattr(prim, "reason", "") or (
                        f"{node.describe()} asks for layout {prim.layout}"
                    )
                    value = moved_value(node, option.ins, prim)
                    src = prim.in_avals[0]
                    record = _record(value, src, prim.layout, prim.moves, why, node)
                    out.append(replace(record, in_lx=not through_ddr(prim)))
    return out


def moved_value(node: Node, ins: tuple[SpyreType | None, ...], prim: Any) -> Value | None:
    """The value a copy that ``node``'s own lowering makes moves (None: an intermediate).

    A loop body's charge (no Spyre primitive) names its value itself, or None. Of a
    primitive, a restickify moves the operand whose planned type (``ins``, the option's)
    it reads, or else the one operand of its dtype and size (a view of it made inside
    the lowering, such as a reshape); a copy of another kind (a slice, a concatenate)
    writes the node's result. Otherwise the restickify moves a value made inside the
    lowering: None.
    """
    if not isinstance(prim, sp.SpyrePrim):
        named = getattr(prim, "value", None)
        return named if isinstance(named, Value) else None
    if prim.role != "restickify":
        return node.outs[0]
    src = prim.in_avals[0]
    values = [(v, t) for v, t in zip(node.ins, ins, strict=False) if isinstance(v, Value)]
    for v, t in values:
        if t is not None and t == src:
            return v
    size = math.prod(src.shape)  # a view of one operand made inside (a reshape of it)?
    same = [v for v, _ in values if v.dtype == src.dtype and math.prod(v.shape) == size]
    return same[0] if len(same) == 1 else None


def _moves(plan: Plan) -> list[Move]:
    return [m for ms in plan.moves.values() for m in ms]


def _record(
    v: Value | None, source: SpyreType, target: Any, cost: int, reason: str, node: Node | None
) -> Record:
    if v is None:  # made inside the node's lowering
        inside = node.describe() if node is not None else "a lowering"
        what = f"{np.dtype(source.dtype).name}{list(source.shape)} (inside {inside})"
    else:
        what = f"{v.dtype.name}{list(v.shape)} ({v.origin})"
    line = node.line if node is not None else ""
    return Record(what, reason, source.layout, target, cost, source.str_short(), line)


def _check(node: Node, want: Value, out: Any, planned: SpyreType) -> Any:
    """``out`` (the value of ``want``), after checking it is what the plan and equation say.

    Raises:
        SpyreInternalError: naming the equation, what it should give and what it gave.
    """
    got = jax.typeof(out)
    if tuple(got.shape) != tuple(want.shape) or np.dtype(got.dtype) != np.dtype(want.dtype):
        raise SpyreInternalError(
            f"internal error: the lowering of {node.describe()} gave "
            f"{np.dtype(got.dtype).name}{list(got.shape)}, but the equation's result is "
            f"{np.dtype(want.dtype).name}{list(want.shape)}; please report it"
        )
    if got != planned:
        raise SpyreInternalError(
            f"internal error: the lowering of {node.describe()} gave {got.str_short()}, "
            f"but the plan evaluated {planned.str_short()}; please report it"
        )
    return out


class Interpreter:
    """Runs a graph with its plan.

    Attributes:
        graph: the graph.
        plan: its plan.
        emulate: None (each primitive's whole-image kernel) or ``"cores"`` (each op the
            device model divides runs core by core: :mod:`spyrejax.lowering.program._cores`,
            divided as the device model divides it, ``with_division`` hints included).
        machine: the machine the cores mode divides ops for (None: the device model's
            default).
        check: a :class:`CoreCheck` (``spyrejax.jit`` passes the active one,
            :func:`spyrejax.lowering.checking_cores`, ``pytest --emulate-check``): the
            default mode then runs every divided op both ways and compares them.

    A graph run inside another's per-core run (a loop body, a ``shard_map`` body, a
    ``spyrejax.jit`` called inside one) leaves its ops to the executor already running.
    """

    def __init__(
        self,
        graph: Graph,
        plan: Plan,
        emulate: str | None = None,
        machine: Machine | None = None,
        check: CoreCheck | None = None,
    ) -> None:
        self.graph = graph
        self.plan = plan
        self.emulate = check_emulate(emulate)
        self.machine = machine
        self.check = check
        self._hinted: HintTable | None = None
        self._record: recorded.Recorder | None = None
        self._hints: dict[Node, Any] | None = None
        self._replays = Replays()  # a repeated node's lowering, bound again (recorded traces)

    def run(self, *args: Any, env: dict[tuple[Value, SpyreType], Any] | None = None) -> list[Any]:
        """Outputs for inputs (Spyre arrays, or host arrays moved with default layouts).

        ``env``, if given, receives every value the program computes, keyed by its
        graph value and planned type (``Lowering`` learns which jaxpr variable holds
        which value this way).
        """
        env = {} if env is None else env
        rec = recorded.active()
        if rec is not None and not rec.executes:  # recorded: the record places the hints
            return self._run(env, args, False)
        # Every mode divides the hinted ops: a hint the device model refuses raises here,
        # not only under explain, export or emulate="cores" (no hints: nothing to do). A
        # body (loop, branch, shard_map) takes its hints from its program's table.
        table = hint_table()
        if table is None or not table.covers(node_hints(self.graph)):
            table = self.hinted_ops()  # traced before an executor is installed
        executor = self._executor()
        with hinting(table):
            if executor is None:
                # A body inside a program the per-core executor runs opens its nodes'
                # scopes: its hints reach its ops there too.
                return self._run(env, args, sp.current_executor() is not None)
            with sp.executing(executor):
                return self._run(env, args, True)

    def unchecked(self) -> Interpreter:
        """This interpreter without the per-core check (what the program is, for jaxprs).

        The check (``pytest --emulate-check``) adds its comparisons to the program it
        runs; the Spyre-level jaxpr that ``explain`` and ``Lowered.as_text`` show is the
        program itself.
        """
        if self.check is None:
            return self
        return Interpreter(self.graph, self.plan, self.emulate, self.machine)

    def _executor(self) -> CoreExecutor | None:
        if sp.current_executor() is not None:
            return None  # a body inside a per-core run: the running executor takes its ops
        if self.emulate == "cores":
            return CoreExecutor(self.machine)
        return None if self.check is None else CoreExecutor(self.machine, self.check)

    def hinted_ops(self) -> HintTable:
        """The ``with_division`` hints of the program's node runs (its bodies' too).

        Resolved on the record of one trace of the program (the device model's own,
        :func:`spyrejax.lowering.program._device.resolve_hints`): per node run, the
        geometry of the ops its hint divides.

        Raises:
            DeviceError: for a hint the device model refuses on this machine (checked in
                every mode, so a program that runs by default also explains and exports).
        """
        if self._hinted is None:  # kept once complete: a refused hint raises at every call
            if not has_hints(self.graph):  # no hint here or in a body: no record
                self._hinted = HintTable({}, frozenset())
                return self._hinted
            table = resolve_hints(self.record())
            cores = default_machine(self.machine).cores
            for hinted in table.ops.values():
                validate_hint(hinted.space, hinted.splits, cores)
            self._hinted = table
        return self._hinted

    def record(self) -> recorded.Recorder:
        """What the program binds, node run by node run: traced once (no executor).

        Made once per interpreter: its hints and every reader share it.
        """
        if self._record is None:
            with recorded.recording() as rec:
                args = [sp.abstract(self.plan.sources[v][0]) for v in self.graph.inputs]
                jax.make_jaxpr(lambda *xs: self.run(*xs))(*args)
            self._record = rec
        return self._record

    def _run(
        self, env: dict[tuple[Value, SpyreType], Any], args: tuple[Any, ...], scoped: bool
    ) -> list[Any]:
        with jax.named_scope("spyre.to_device"):  # a host argument's transfer
            for v, a in zip(self.graph.inputs, args, strict=True):
                x = a if isinstance(jax.typeof(a), SpyreType) else sp.to_device(a)
                (planned,) = self.plan.sources[v]
                env[v, planned] = x
            for c in self.graph.consts:
                for t in self.plan.sources.get(c, []):
                    env[c, t] = sp.to_device(c.const, t.layout)
        for v in self.graph.inputs:
            self._move(env, v)
        # Traced by the record or run per core, each node binds what the device runs.
        plain = recorded.active() is None and sp.current_executor() is None
        fused, skipped = self._fused if plain else ({}, set())
        for node in self.graph.nodes:
            if node in skipped:  # inside a widened sum, a softmax or a group loop
                continue
            if node in fused:  # one planned run, whose kernel computes the skipped nodes too
                (v,), (option,) = node.outs, self.plan.runs[node]
                want = option.out
                if node in self._softmaxes:  # its padding zero: the products read it unmasked
                    want = replace(want, pad=PadFill.ZERO)
                with jax.named_scope(_scope_name(node)):
                    env[v, option.out] = _check(node, v, fused[node](env), want)
            else:
                for i, option in enumerate(self.plan.runs.get(node, [])):
                    self._run_node(env, node, i, option, scoped)
                    if plain and node.prim in MATERIALIZED:
                        for v, t in zip(node.outs, option.outs, strict=True):
                            env[v, t] = _materialized(env[v, t])
            for v in node.outs:
                self._move(env, v)
        return [
            self._output(env, o, t)
            for o, t in zip(self.graph.outputs, self.plan.outputs, strict=True)
        ]

    def _run_node(
        self,
        env: dict[tuple[Value, SpyreType], Any],
        node: Node,
        i: int,
        option: Any,
        scoped: bool,
    ) -> None:
        ins = [
            u if isinstance(u, Scalar) else env[u, t]
            for u, t in zip(node.ins, option.ins, strict=True)
        ]
        table = hint_table()
        scope = (
            node_scope(node.line, table.ops.get((node, i)) if table else None, node.source)
            if scoped
            else contextlib.nullcontext()
        )
        # The planner refused host fallbacks where they are not allowed.
        with scope, jax.named_scope(_scope_name(node)), self._recorded(node, i, option, ins) as run:
            outs = self._replays.lower(node, ins, option, run)
            if run is not None:
                run.outs = list(outs)
        if len(outs) != len(node.outs):
            raise SpyreInternalError(
                f"internal error: the lowering of {node.describe()} gave {len(outs)} "
                f"results for {len(node.outs)}; please report it"
            )
        for v, out, t in zip(node.outs, outs, option.outs, strict=True):
            env[v, t] = _check(node, v, out, t)

    @functools.cached_property
    def _fused(self) -> tuple[dict[Node, Callable[[Any], Any]], set[Node]]:
        """Nodes whose kernel computes a chain ending there, and the nodes it computes.

        Per node, the kernel as a function of the environment: a reduction of a
        restickified value run on its source image (``_relaid``), a widened sum
        (``_widened``), a softmax whose padding is zero (``_softmaxes``, read unmasked by
        the products), a chain from a batched product to the product of its softmax run
        by groups of the batch dim (``_groups``).
        """
        fused: dict[Node, Callable[[Any], Any]] = {}
        for node, r in self._relaid.items():
            fused[node] = lambda env, r=r: run_relaid(r, env, self.plan)
        for node, w in self._widened.items():
            axes, dtype = node.params["axes"], node.outs[0].dtype
            fused[node] = lambda env, w=w, axes=axes, dtype=dtype: widened_sum(
                env[w.x, w.t], axes, dtype, w.then
            )
        for node, c in self._softmaxes.items():
            fused[node] = lambda env, c=c: softmax_with_zero_padding(env[c.x, c.t], c.axis)
        groups = self._groups
        for g in groups:
            fused[g.nodes[-1]] = lambda env, g=g: self._run_groups(env, g)
        chains = (*self._relaid.values(), *self._widened.values(), *self._softmaxes.values())
        skipped = {n for w in chains for n in w.skipped}
        skipped |= {n for g in groups for n in g.nodes[:-1]}
        return fused, skipped

    def _run_groups(self, env: dict[tuple[Value, SpyreType], Any], groups: BatchGroups) -> Any:
        def run_node(node: Node, ins: list[Any]) -> list[Any]:
            return lower_node(node, ins, self.plan.runs[node][0].mode, fallback=True)

        return run_groups(groups, self.plan, env, run_node, softmax_with_zero_padding)

    @functools.cached_property
    def _groups(self) -> list[BatchGroups]:
        """Attention chains run as loops over groups of their batch dim (``_groups``)."""
        return batch_groups(self.graph, self.plan, self._softmaxes)

    @functools.cached_property
    def _softmaxes(self) -> dict[Node, SoftmaxChain]:
        """Softmaxes read by matmuls only, each run as one kernel (``_softmax``)."""
        return softmax_chains(self.graph, self.plan)

    @functools.cached_property
    def _relaid(self) -> dict[Node, RelaidChain]:
        """Reductions of a restickified value run on its source image (``_relaid``)."""
        taken = {n for c in self._softmaxes.values() for n in c.skipped}
        taken |= set(self._softmaxes) | {n for g in self._groups for n in g.nodes}
        return relaid_chains(self.graph, self.plan, taken)

    @functools.cached_property
    def _widened(self) -> dict[Node, _Widened]:
        """Sums of a half float widened by a convert, maybe mapped by elementwise ops.

        Per such ``reduce_sum`` node, what it reads (see :class:`_Widened`): the convert
        and the ops in between have one reader each, one planned run, the same type in
        and out (the ops) and no restickify. The emulator runs each chain as one
        :func:`widened_sum` (the widened image is never written); the record, the
        device model and the per-core mode see every op.
        """
        readers = collections.Counter(
            u for n in self.graph.nodes for u in n.ins if isinstance(u, Value)
        )
        readers.update(o for o in self.graph.outputs if isinstance(o, Value))
        made_by = {v: n for n in self.graph.nodes for v in n.outs}
        chains = {}
        for node in self.graph.nodes:
            runs = self.plan.runs.get(node, [])
            if node in self._relaid:
                continue
            if node.prim != "reduce_sum" or len(runs) != 1 or runs[0].out.layout.is_arranged:
                continue  # an arranged sum (the stick dim kept) is no widened one's
            found = self._widening(node.ins[0], runs[0].ins[0], made_by, readers)
            if found is not None:
                chains[node] = found
        return chains

    def _widening(
        self, y: Any, t: SpyreType, made_by: dict[Value, Node], readers: Any
    ) -> _Widened | None:
        """The convert of a half float (and the maps after it) making ``y``, read as ``t``."""
        then: list[tuple[str, Any]] = []
        skipped: list[Node] = []
        while isinstance(y, Value) and readers[y] == 1 and not self.plan.moves.get(y):
            node = made_by.get(y)
            runs = self.plan.runs.get(node, []) if node is not None else []
            if node is None or len(runs) != 1 or runs[0].out != t:
                return None
            skipped.append(node)
            if node.prim == "convert_element_type":
                x = node.ins[0]
                if not (isinstance(x, Value) and x.dtype in HALF_FLOATS and y.dtype == _F32):
                    return None
                if runs[0].ins[0].layout.is_arranged:  # the sum reads the standard order
                    return None
                return _Widened(x, runs[0].ins[0], tuple(reversed(then)), tuple(skipped))
            step = map_step(node)
            if step is None or runs[0].ins[step[2]] != t or y.dtype != _F32:
                return None
            then.append(step[:2])
            y = node.ins[step[2]]
        return None

    @contextlib.contextmanager
    def _recorded(
        self, node: Node, index: int, option: Any, ins: list[Any]
    ) -> Iterator[recorded.NodeRun | None]:
        """Record the node run inside (when a record is traced)."""
        rec = recorded.active()
        if rec is None:
            yield None
            return
        if self._hints is None:
            self._hints = node_hints(self.graph)
        run = recorded.NodeRun(node, index, option, ins, self._hints.get(node))
        with rec.node(run):
            yield run

    def _move(self, env: dict[tuple[Value, SpyreType], Any], v: Value) -> None:
        for m in self.plan.moves.get(v, []):
            with jax.named_scope("spyre.restickify"):
                env[v, m.target] = sp.restickify(env[v, m.source], layout=m.target.layout)

    def _output(self, env: dict[Any, Any], o: Value | Scalar, t: SpyreType | None) -> Any:
        if isinstance(o, Scalar):
            return sp.to_device(np.asarray(o.value, dtype=o.dtype))
        return env[o, t]


_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class _Widened:
    """What a sum read through a widening reads: ``x`` as type ``t``, mapped by ``then``.

    ``skipped`` are the nodes the sum computes itself (the convert and the maps).
    """

    x: Value
    t: SpyreType
    then: Pointwise
    skipped: tuple[Node, ...]


def device_program(
    graph: Graph, plan: Plan, machine: Machine | None = None, strategy: str = "greedy"
) -> DeviceProgram:
    """A planned graph on a machine: every op divided, placed and costed."""
    ops = program_ops(graph, plan, Interpreter(graph, plan).record())
    return plan_program(ops.descs, default_machine(machine), ops.ddr, strategy)
