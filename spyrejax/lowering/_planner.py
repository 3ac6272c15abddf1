"""The layout planner: a Spyre type for every value at the least total cost.

The planner reasons with the primitives' own types, never with a model of them. For a
node, each mode of its rule (see ``_rules``) names the stick every input needs; the
candidate input types are those the inputs can be had in (as produced, or
restickified into the default layout of a stick), and the rule's lowering is
*evaluated on them* (``primitives.abstract_eval``: the Spyre primitives' constructors
run, no data moves). A ``LayoutError`` means the mode cannot run on those types;
otherwise the evaluated output type is the planned type.

The objective is the device's memory traffic, in bytes, padding included
(:func:`traffic`): every image a primitive of the lowering reads or writes, in its
layout's ``nbytes`` (views read and write nothing). So a padded value costs what
every op that writes or reads it pays: a slice, a reduction or a broadcast lands in
the layout that costs least downstream, not only in the one that moves the fewest
elements. A restickify reads its source image and writes its target's. The cost
counts every card: a collective also costs the bytes the cards send each other, and a
``shard_map`` body what it moves times the cards it runs on (``lowering._collectives``).
A value a chain of elementwise kernels and reductions makes and reads inside itself
(``_traffic.chained``) costs its LX traffic, not DDR bytes: the card keeps it in LX.
What the plan *reports* (``Plan.cost``, ``explain``) stays the elements it moves
between layouts (spec section 7).

1. Forward dynamic programming in topological order: ``produced[v][t]`` is the least
   cost to produce ``v`` with type ``t``, over every mode of its producer and every
   candidate type of its inputs; a value can then also be had in the default type of
   any stick at one restickify more. This is exact on trees, such as the spec's cases.
2. Backward reconstruction: from the outputs, consumers *demand* the types they were
   planned on. With ``default_results`` (``spyrejax.jit``), each result is demanded in
   the default layout of its shape, the type a host argument arrives in, so a program
   fed its own results (a training loop) meets the types it was planned for. A
   producer runs once for its cheapest demanded type and again only for a demanded
   type no restickify can make (a view, a row-major product); every other demanded
   type is one restickify, so shared values move once per target type.

The interpreter then runs exactly this plan and checks every node gives its planned
type. Evaluations are cached per node signature and input types, so repeated layers
cost one evaluation; all passes are linear in the graph's size.
"""

from __future__ import annotations

import functools
import itertools
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np

from .. import primitives as sp
from .._counts import count
from .._errors import LayoutError, SpyreFallbackWarning
from ..layout._layout import SpyreTensorLayout
from ..primitives._array import PadFill, SpyreType, interned
from ..primitives._stick import SPARSE, default_type, restickify_cost, serves, stick_name, stick_of
from ..primitives._stick import stick_options as _stick_options
from ..primitives._views import ShapeView
from . import _traffic
from ._chosen import Option, option_total, options_key, searches, searches_shared
from ._graph import Graph, Node, Scalar, Value
from ._node_key import NodeKey, evaluation_key, node_key
from ._registry import HOST_FALLBACK, RULES, Mode, lower_node, rule_for
from ._traffic import MOVE_TIE, move_bytes, nbytes, read_bytes, read_tie_break, tie_break, traffic
from ._windows import Windows

__all__ = ["FALLBACKS", "Move", "Option", "Plan", "host_input_type", "plan_graph", "traffic"]

INF = float("inf")
_WARNED: dict[Any, Any] = {}  # the fallback warnings' registry (see warnings.warn_explicit)
_CANDIDATES = 2  # input types tried per input and mode: the cheapest, and one more
# The roles of primitives an option records (see ``SpyrePrim.role``): what it moves.
_CHARGED = ("copy", "restickify", "host", "collective")


@dataclass(frozen=True, eq=False)
class Move:
    """A restickify the plan inserts between a value's producer and a consumer.

    Attributes:
        value: the value moved.
        source: its type before.
        target: its type after (the default layout of a stick).
        reason: which consumer needs it, in which stick.
        consumer: that consumer (reports charge the move to its source line); None for
            a program's result.
        producer: the node that makes the value (None for an input).
    """

    value: Value
    source: SpyreType
    target: SpyreType
    reason: str
    consumer: Node | None = None
    producer: Node | None = None

    @property
    def charged_to(self) -> Node | None:
        """The node whose source line the move counts on: its consumer, else its producer."""
        return self.consumer if self.consumer is not None else self.producer

    @property
    def cost(self) -> int:
        """Elements moved: ``prod(source device_size)``."""
        return restickify_cost(self.source)


@dataclass
class Plan:
    """The planner's decisions.

    Attributes:
        runs: for every live node, the options it runs (usually one).
        sources: the type each graph input and constant arrives in; constants may be
            built in several (one per type their consumers need, at no cost).
        moves: the restickifies, grouped by value, in the order they can run.
        outputs: the planned type of each graph output (None for scalars).
    """

    runs: dict[Node, list[Option]] = field(default_factory=dict)
    sources: dict[Value, list[SpyreType]] = field(default_factory=dict)
    moves: dict[Value, list[Move]] = field(default_factory=dict)
    outputs: list[SpyreType | None] = field(default_factory=list)

    @property
    def restickify_cost(self) -> int:
        """Elements moved by restickifies, planned ones and those inside lowerings."""
        planned = sum(m.cost for ms in self.moves.values() for m in ms)
        inside = sum(p.moves for o in self.options() for p in o.copies if p.role == "restickify")
        return planned + inside

    @property
    def copy_cost(self) -> int:
        """Elements moved by the program's own copies (slices, concatenates...)."""
        return sum(p.moves for o in self.options() for p in o.copies if p.role == "copy")

    @property
    def collective_cost(self) -> int:
        """Elements the cards send each other in collectives (every card's, summed)."""
        return sum(p.moves for o in self.options() for p in o.copies if p.role == "collective")

    @property
    def cost(self) -> int:
        """Every element the plan moves: between layouts, and between cards."""
        return self.restickify_cost + self.copy_cost + self.collective_cost

    def options(self) -> list[Option]:
        """Every option the plan runs."""
        return [o for opts in self.runs.values() for o in opts]

    def out_type(self, node: Node, index: int = 0) -> SpyreType:
        """The type a node's (first) run gives its output ``index``."""
        return self.runs[node][0].outs[index]


def host_input_type(shape: tuple[int, ...], dtype: Any) -> SpyreType:
    """The type of a host input moved to the device by ``to_device`` (default layout)."""
    return SpyreType.contiguous(shape, dtype, SpyreTensorLayout(shape, dtype))


@functools.lru_cache(maxsize=65536)
def _default(shape: tuple[int, ...], dtype: np.dtype, stick: int) -> SpyreType:
    return default_type(shape, dtype, stick).interned()


def _defaults(v: Value) -> list[SpyreType]:
    return [_default(v.shape, v.dtype, s) for s in _stick_options(v.shape)]


FALLBACKS = ("warn", "error")
"""What ``spyrejax.jit(f, fallback=...)`` does with a primitive without a device rule."""


def plan_graph(
    graph: Graph,
    input_types: dict[Value, SpyreType],
    fallback: str = "warn",
    donated: frozenset[Value] = frozenset(),
    *,
    default_results: bool = False,
) -> Plan:
    """Plan types for a graph whose inputs arrive in ``input_types``.

    A one-result primitive without a device rule runs on the host (``"warn"``: a
    :class:`SpyreFallbackWarning` once per primitive and source line) or raises
    (``"error"``). The ``donated`` inputs' buffers may be updated in place.

    With ``default_results``, every result the graph computes is given in the default
    layout of its shape (:func:`host_input_type`; a result known to have zero padding
    keeps that promise), restickified where it is made in another; an argument
    returned as it is and a value put in a layout with ``with_layout`` keep their
    types. Without, a result has the type it is cheapest in (loop and branch bodies,
    whose results their loop's carries take).

    Raises:
        SpyreUnsupportedError: for a primitive with no lowering rule (naming its line)
            that cannot, or with ``fallback="error"`` may not, run on the host.
        LayoutError: for a node no mode of which can run, naming it and the layouts.
    """
    with searches_shared():  # the loop bodies' planners share the graph's searches
        return _Planner(graph, input_types, fallback == "warn", donated, default_results).plan()


class _Planner:
    def __init__(
        self,
        graph: Graph,
        input_types: dict[Value, SpyreType],
        fallback: bool = True,
        donated: frozenset[Value] = frozenset(),
        default_results: bool = False,
    ) -> None:
        self.graph = graph
        self.inside = _traffic.chained(graph)  # values a chain of kernels keeps in LX
        self.windows = Windows(graph, donated)
        self.input_types = input_types
        self.input_shapes = {(u.shape, u.dtype) for u in input_types}
        self.fallback = fallback
        self.default_results = default_results
        self.results: dict[Value, SpyreType] = {}  # the type each result is demanded in
        self.hinted: set[Value] = set()  # values a with_layout hint puts in a layout
        self.warned: set[tuple[str, str]] = set()
        self.produced: dict[Value, dict[SpyreType, tuple[float, Option | None]]] = {}
        self.avail: dict[Value, dict[SpyreType, float]] = {}
        self.relative: set[Value] = set()  # values whose totals are rebased (_traffic.rebased)
        # Evaluations and best options (_chosen): a repeated layer's nodes search once.
        self.cache, self.chosen = searches(fallback)
        self.options: dict[Node, list[tuple[float, Option]]] = {}
        self.refusals: dict[Node, str] = {}  # the last LayoutError a node's lowering raised

    # -- forward --------------------------------------------------------------------

    def plan(self) -> Plan:
        for v in self.graph.inputs:
            self._produce(v, {self.input_types[v]: (0, None)})
        for c in self.graph.consts:
            self._produce(c, {t: (nbytes(t), None) for t in _defaults(c)})  # moved in
        for node in self.graph.nodes:
            options = self._node_options(node)
            self.options[node] = options
            for i, v in enumerate(node.outs):
                produced: dict[SpyreType, tuple[float, Option | None]] = {}
                for total, option in options:
                    if total < produced.get(option.outs[i], (INF,))[0]:
                        produced[option.outs[i]] = (total, option)
                self._produce(v, produced, any(u in self.relative for u in node.ins))
        return self._reconstruct()

    def _produce(
        self,
        v: Value,
        produced: dict[SpyreType, tuple[float, Option | None]],
        relative: bool = False,
    ) -> None:
        """Record ``v``'s totals by type (``relative``: an input's totals are rebased)."""
        self.produced[v] = _traffic.rebased(produced)  # deep graphs: byte scale
        if relative or self.produced[v] is not produced:
            self.relative.add(v)
        produced = self.produced[v]
        avail = {t: cost for t, (cost, _) in produced.items()}
        read = min(c + _traffic.source_bytes(t) for t, c in avail.items())  # a restickify's source
        # A value varies over the same mesh axes in every layout (types compare without
        # vma, so the restickified types must be given it).
        vma = frozenset().union(*(t.vma for t in avail))
        for d in _defaults(v):
            d = replace(d, vma=vma) if vma else d
            avail[d] = min(avail.get(d, INF), read + nbytes(d) + MOVE_TIE)
        self.avail[v] = avail

    def _node_options(self, node: Node) -> list[tuple[float, Option]]:
        """Every feasible option of a node with its total cost, the cheapest per outputs."""
        rule = rule_for(node, fallback=self.fallback)
        if rule is HOST_FALLBACK:
            self._warn_fallback(node)
        # A rule with many inputs that normalises them itself (a loop) takes the cheapest.
        limit = getattr(rule, "candidates", _CANDIDATES)
        best: dict[tuple[SpyreType, ...], tuple[float, Option]] = {}
        tried: list[tuple[SpyreType | None, ...]] = []
        base = node_key(node)
        modes = rule.modes(node)
        key = options_key(node, base, modes, self.avail, self.inside)
        total = lambda o: option_total(node, o, self.avail, self.inside)  # noqa: E731
        if key is not None and key in self.chosen:
            return [(total(o), o) for o in self.chosen[key]]
        for mode in modes:
            if mode.takes is not None or mode.clobbers is not None:
                choices = self.windows.choices(self, node, mode)
            else:
                choices = [
                    self._candidates(u, r, limit) for u, r in zip(node.ins, mode.ins, strict=True)
                ]
            for combo in itertools.product(*choices):
                ins = tuple(t for t, _ in combo)
                tried.append(ins)
                option = self._evaluate(node, base, mode, ins)
                if option is not None and total(option) < best.get(option.outs, (INF,))[0]:
                    best[option.outs] = (total(option), option)
        if not best:
            raise self._infeasible(node, tried)
        if key is not None:
            self.chosen[key] = [option for _, option in best.values()]
        return list(best.values())

    def _warn_fallback(self, node: Node) -> None:
        """A visible fallback: warn once per primitive and source line."""
        key = (node.prim, node.line)
        if key in self.warned:
            return
        self.warned.add(key)
        back = ", the result back in its default layout" if node.outs else ""
        warning = SpyreFallbackWarning(
            f"{node.prim} at {node.line} has no Spyre device rule: it runs on the host "
            f"(operands moved device -> host through the DMA{back}; "
            "spyrejax.explain(...).fallbacks lists the bytes). "
            "spyrejax.jit(f, fallback='error') raises instead"
        )
        where = re.match(r"(.*):(\d+):\d+", node.source)
        if where is None:
            warnings.warn(warning, stacklevel=2)
        else:  # reported at the user's line, once per process under the default filter
            file, line = where.group(1), int(where.group(2))
            warnings.warn_explicit(warning, None, file, line, registry=_WARNED)

    def _infeasible(self, node: Node, tried: list[tuple[SpyreType | None, ...]]) -> LayoutError:
        have = [
            min(self.avail[u].items(), key=lambda tc: tc[1])[0].str_short()
            for u in node.ins
            if isinstance(u, Value)
        ]
        also = {", ".join(t.str_short() for t in ins if t is not None) for ins in tried}
        also.discard(", ".join(have))
        why = self.refusals.get(node)
        return LayoutError(
            f"no layout works for {node.describe()} with inputs {', '.join(have) or '(none)'}"
            + (f" (also tried {'; '.join(sorted(also))})" if also else "")
            + (f": {why}" if why else "")
        )

    def _candidates(self, u: Value | Scalar, r: int | None, limit: int = _CANDIDATES) -> list:
        """The cheapest types ``u`` can be read in by a consumer needing stick ``r``.

        The cheapest serving type (to have, and to read: its image's bytes), and the
        default type of ``r`` when that is not it (a rule may refuse a view it can read
        from a fresh copy); else the next one; at most ``limit``, and the cheapest standard
        type too if one of them is in an element arrangement (``_traffic.with_standard``).
        """
        count("plan.search")
        if isinstance(u, Scalar):
            return [(None, 0.0)]
        ranked = sorted(
            ((t, c) for t, c in self.avail[u].items() if serves(t, r)),
            key=lambda tc: (tc[1] + read_bytes(tc[0]), read_tie_break(tc[0])),
        )
        if r is not None:
            fallback = _default(u.shape, u.dtype, r)
            if ranked and ranked[0][0] != fallback and fallback in self.avail[u]:
                rest = [tc for tc in ranked[1:] if tc[0] != fallback]
                ranked = [ranked[0], (fallback, self.avail[u][fallback]), *rest]
        return _traffic.with_standard(ranked[:limit], ranked)

    def _evaluate(
        self, node: Node, base: NodeKey | None, mode: Mode, ins: tuple[SpyreType | None, ...]
    ) -> Any:
        key = evaluation_key(base, mode, ins)
        if key is not None and key in self.cache:
            option, why = self.cache[key]
            if why:
                self.refusals[node] = why
            return option
        why = ""
        args = [u if t is None else sp.abstract(t) for u, t in zip(node.ins, ins, strict=True)]
        try:
            with sp.abstract_eval() as called:
                outs = lower_node(node, args, mode, fallback=self.fallback)
            copies = tuple(p for p in called if p.role in _CHARGED)
            types = tuple(map(interned, map(jax.typeof, outs)))  # one object per type
            last = called[-1] if called else None  # the primitive giving the result
            gives = getattr(last, "out_avals", ())[:1]
            fresh = last is not None and last.role != "view" and gives == types[:1]
            owns = fresh or mode.clobbers is not None
            view = bool(called) and all(isinstance(p, ShapeView) for p in called)
            io = _traffic.chain_io(called, ins, types[0] if types else None)
            option: Option | None = Option(
                mode, ins, types, copies, fresh, owns, traffic(called), view, io
            )
        except LayoutError as err:
            why = self.refusals[node] = str(err)
            option = None
        if key is not None:
            self.cache[key] = (option, why)
        return option

    def placed(self, node: Node, option: Option, layout: SpyreTensorLayout) -> Option | None:
        """``option`` of ``node`` with its (first) result written in ``layout`` (a window)."""
        return self._evaluate(node, node_key(node), replace(option.mode, place=layout), option.ins)

    # -- backward -------------------------------------------------------------------

    def _reconstruct(self) -> Plan:
        plan = Plan()
        demands: dict[Value, dict[SpyreType | None, Node | None]] = defaultdict(dict)
        self.hinted = {v for n in self.graph.nodes if _sets_layout(n) for v in n.outs}
        self._demand_results(demands)
        self._run_nodes(plan, demands)
        self._serve_sources(plan, demands)
        made = {
            v: options[0].outs[i]
            for node, options in plan.runs.items()
            for i, v in enumerate(node.outs)
        }
        plan.outputs = [self._output_type(plan, made, o) for o in self.graph.outputs]
        return plan

    def _demand_results(self, demands: dict[Value, dict[SpyreType | None, Node | None]]) -> None:
        """The program's results, each in the type it is returned in."""
        for out in self.graph.outputs:
            if isinstance(out, Value):
                want = self._result_type(out)
                if want is not None:
                    self.results[out] = want
                demands[out].setdefault(want, None)

    def _run_nodes(
        self, plan: Plan, demands: dict[Value, dict[SpyreType | None, Node | None]]
    ) -> None:
        """From the last node back: the options each runs, and what they demand of inputs."""
        for node in reversed(self.graph.nodes):
            wanted = [demands.pop(v, {}) for v in node.outs]
            if node.outs and not any(wanted):
                continue  # dead: nothing reads it (a node without results runs for its effects)
            if not node.outs:
                plan.runs[node] = [min(self.options[node], key=lambda to: to[0])[1]]
            elif len(node.outs) == 1:
                (v,), (w,) = node.outs, wanted
                runs = self._serve(plan, v, w, node)
                plan.runs[node] = [self.produced[v][t][1] for t in runs]
            else:
                plan.runs[node] = self._serve_outputs(plan, node, wanted)
            for option in plan.runs[node]:
                for u, t in zip(node.ins, option.ins, strict=True):
                    if isinstance(u, Value):
                        demands[u].setdefault(t, node)

    def _serve_sources(
        self, plan: Plan, demands: dict[Value, dict[SpyreType | None, Node | None]]
    ) -> None:
        """The graph's inputs (restickified where read in other types) and constants."""
        for v in self.graph.inputs:
            wanted = demands.pop(v, {})
            if wanted:
                self._serve(plan, v, wanted, None)
            plan.sources[v] = [self.input_types[v]]
        for c in self.graph.consts:  # built directly in every type they are read in
            wanted = demands.pop(c, {})
            if wanted:
                plan.sources[c] = [t for t in wanted if t is not None] or _defaults(c)[:1]

    def _serve(
        self, plan: Plan, v: Value, wanted: dict[SpyreType | None, Any], producer: Node | None
    ) -> list[Any]:
        """The types ``v``'s producer runs for; plans restickifies for the other demands."""
        produced = self.produced[v]
        movable = self._movable(v)
        runs = [t for t in wanted if t is not None and t in produced and t not in movable]

        def total(p: SpyreType) -> float:
            cost = produced[p][0]
            for d in wanted:
                if d is not None and d != p:
                    make = self._again(v, d)
                    cost += min(make, move_bytes(p, d) if d in movable else INF)
            return cost

        def unmet(p: SpyreType) -> int:  # demands a run of ``p`` leaves to restickifies
            return sum(d is not None and d != p for d in wanted)

        if not runs:  # at equal cost, the producer makes a demanded type itself (a copy)
            runs.append(min(produced, key=lambda p: (total(p), unmet(p), tie_break(p))))
        elif None in wanted and all(t.layout.has_gaps for t in runs):
            # An output is no window of another value's buffer: made once more without gaps.
            plain = [p for p in produced if not p.layout.has_gaps]
            runs.insert(0, min(plain, key=lambda p: (produced[p][0], tie_break(p))))
        moves = []
        for d, consumer in wanted.items():
            if d is None or d in runs:
                continue
            src = min(runs, key=nbytes)
            if self._again(v, d) < move_bytes(src, d):
                runs.append(d)
            else:
                moves.append(Move(v, src, d, _why(consumer, src, d, producer), consumer, producer))
        if moves:
            plan.moves[v] = moves
        return runs

    def _again(self, v: Value, d: SpyreType) -> float:
        """What making ``v`` once more in type ``d`` costs: its total, if one is known.

        A demanded type is made by ``v``'s producer again only where that costs less
        than a restickify into it (:func:`move_bytes`). A total is the whole cost of
        making ``v`` so; a rebased one (``_traffic.rebased``: past ``REBASE`` bytes,
        upstream of ``v`` or at it) is that cost less an unknown part, which a
        restickify's bytes must not be weighed against (INF: restickified; weighed so, a
        GPT step's layer norms' backward ``add`` ran twice, unfused: benchmarks item 69).
        """
        if v in self.relative or d not in self.produced[v]:
            return INF
        return self.produced[v][d][0]

    def _serve_outputs(
        self, plan: Plan, node: Node, wanted: list[dict[SpyreType | None, Any]]
    ) -> list[Option]:
        """The options a node with several outputs runs; plans the other demands' moves.

        The cheapest option runs; a demanded type it does not give is a restickify of
        its output when that is a default type, else a run of the option that gives it.
        """
        runs = [min(self.options[node], key=lambda to: (to[0], tie_break(to[1].out)))[1]]
        for i, (v, w) in enumerate(zip(node.outs, wanted, strict=True)):
            moves = []
            movable = self._movable(v)
            for d, consumer in w.items():
                if d is None or any(o.outs[i] == d for o in runs):
                    continue
                src = runs[0].outs[i]
                if d in movable and not self._again(v, d) < move_bytes(src, d):
                    moves.append(Move(v, src, d, _why(consumer, src, d, node), consumer, node))
                else:
                    runs.append(self.produced[v][d][1])
            if moves:
                plan.moves[v] = moves
        return runs

    def _output_type(
        self, plan: Plan, made: dict[Value, SpyreType], o: Value | Scalar
    ) -> SpyreType | None:
        """An output's type: as demanded, else as its node's first run gives it or it arrives."""
        if isinstance(o, Scalar):
            return None
        if o in self.results:  # served: made in it, restickified into it or built in it
            return self.results[o]
        return made[o] if o in made else plan.sources[o][0]

    def _result_type(self, v: Value) -> SpyreType | None:
        """The type result ``v`` is demanded in (None: any).

        With ``default_results``, the default layout of its shape (the type a host
        argument arrives in), or the same image known to have zero padding where ``v``
        can be made so (a stronger promise, as good); an argument returned as it is
        and a value the program put in a layout (``with_layout``) keep their types, and
        so does a value whose default layout pads it to more than twice the bytes of the
        most compact type it is made in (a trailing dim of 2 padded to a stick: RoPE's
        ``[..., D/2, 2]`` view, issue 26's "no value over twice its data bytes") unless
        an argument has its shape and dtype: a training step's new weights come back as
        its weights arrived, so a loop feeding them back meets its plan (issue 24).
        """
        if not self.default_results or v in self.input_types or v in self.hinted:
            return None
        want = host_input_type(v.shape, v.dtype)
        compact = min((nbytes(t) for t in self.produced[v]), default=nbytes(want))
        if nbytes(want) > 2 * compact and (v.shape, v.dtype) not in self.input_shapes:
            return None
        vma = frozenset().union(*(t.vma for t in self.avail[v]))
        want = replace(want, vma=vma) if vma else want
        zeroed = replace(want, pad=PadFill.ZERO)
        return zeroed if zeroed in self.produced[v] else want

    def _movable(self, v: Value) -> set[SpyreType]:
        """The types a restickify of ``v`` can be demanded in: its defaults, and its result's."""
        movable = set(_defaults(v))
        if v in self.results:
            movable.add(self.results[v])
        return movable


def _sets_layout(node: Node) -> bool:
    """Whether ``node`` puts its value in a layout the program asks for (``with_layout``)."""
    return getattr(RULES.get(node.prim), "sets_layout", False)


def _why(consumer: Node | None, source: SpyreType, target: SpyreType, producer: Node | None) -> str:
    """Why a move is made, naming the node whose line it is charged to.

    Reports read that line back from the text (``lowering._graph.reason_line``: the
    source after the first ``" at "``), so the node's description comes first.
    """
    if consumer is None:
        made = f"{producer.describe()} makes" if producer is not None else "it is"
        return f"returned in the default layout of its shape: {made} it in {source.str_short()}"
    need = stick_name(stick_of(target))
    if stick_of(source) == SPARSE and stick_of(target) != SPARSE:
        return f"compact: {consumer.describe()} needs it dense, stuck on {need}"
    have = stick_name(stick_of(source))
    if stick_of(source) == stick_of(target):
        return f"{consumer.describe()} refused its layout; copied to the default layout of {need}"
    return f"{consumer.describe()} needs it stuck on {need} (it is on {have})"
