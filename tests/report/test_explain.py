"""``spyrejax.explain``: a summary that reads like a profile, the details on request."""

import re

import jax
import jax.numpy as jnp
import pytest
from blocks import D, T, _two_layers, _weights
from helpers import rand, spyre_primitive_classes

import spyrejax as sj
from spyrejax._counts import counting
from spyrejax.lowering._graph import source_line


@pytest.fixture(scope="module")
def report():
    return sj.explain(_two_layers, rand((T, D)), *_weights())


def _copy_lines(report):
    """The source line of each of the report's copies (``prim at file:line:col (fn)``)."""
    return [(source_line(what.split(" at ", 1)[1]), cost) for what, cost in report.copies]


def _row(summary, line):
    """The summary rows of a line (its file name without directories)."""
    short = line.rsplit("/", 1)[-1]
    return [r for r in summary.splitlines() if r.startswith(f"  {short} ")]


def test_the_summary_of_a_transformer_block_is_short(report):
    summary = str(report)
    assert repr(report) == summary
    assert len(summary) < 3000 and len(summary.splitlines()) < 30
    assert len(report.details()) > 5 * len(summary)  # what it leaves out is on request
    assert report.restickifies and report.copies  # the block moves data both ways


def test_each_costly_line_is_listed_once_with_its_summed_cost(report):
    summary = str(report)
    restick: dict[str, int] = {}
    for r in report.restickifies:
        restick[r.line] = restick.get(r.line, 0) + r.cost
    copied: dict[str, int] = {}
    for line, cost in _copy_lines(report):
        copied[line] = copied.get(line, 0) + cost
    # Two layers call the same code: each line's cost is summed over both of them.
    assert sum(restick.values()) == report.restickify_cost
    for line in {*restick, *copied}:
        (row,) = _row(summary, line)
        cells = re.split(r"\s{2,}", row.strip())
        n_restick = sum(r.line == line for r in report.restickifies)
        n_copies = sum(c == line for c, _ in _copy_lines(report))
        assert cells[1] == (f"{restick[line]} ({n_restick})" if line in restick else "-")
        assert cells[2] == (f"{copied[line]} ({n_copies})" if line in copied else "-")
    rows = {r.line: r for r in report.lines}
    assert sum(r.restickify_cost for r in rows.values()) == report.restickify_cost
    assert sum(r.copy_cost for r in rows.values()) == report.copy_cost
    assert f"restickify_cost: {report.restickify_cost} elements moved" in summary
    assert f"copy_cost: {report.copy_cost} elements moved" in summary
    assert "host fallbacks: none" in summary


def test_the_totals_agree_with_the_plan():
    x, ws = rand((T, D)), _weights()
    lowered = sj.jit(_two_layers).lower(x, *ws)
    report = sj.explain(_two_layers, x, *ws)
    assert report.restickify_cost + report.copy_cost == lowered.plan.cost
    assert len(report.nodes) == len(lowered.plan.runs)
    assert sum(len(r.ops) for r in report.lines) == len(report.nodes)
    # Device bytes: the inputs' and every value an op allocates (views allocate none).
    inputs = sum(t.layout.nbytes for ts in lowered.plan.sources.values() for t in ts)
    assert report.source_bytes == inputs
    assert report.device_bytes == inputs + sum(r.device_bytes for r in report.lines)
    assert f"device bytes: {report.device_bytes}" in str(report)


def _scanned(x, ws):
    body = lambda c, w: (jnp.tanh(c @ w), None)  # noqa: E731 (its own source line)
    return jax.lax.scan(body, x, ws)[0]


def test_the_lines_of_a_loop_body_are_rows_whose_times_add_up():
    S = jax.ShapeDtypeStruct
    report = sj.explain(_scanned, S((64, 128), jnp.float16), S((4, 128, 128), jnp.float16))
    rows = {r.line: r for r in report.lines}
    (body,) = [line for line in report.line_times if line not in {op.line for op in report.nodes}]
    assert rows[body].device_s > 0 and rows[body].ops == ()  # the body's matmul and tanh
    assert sum(r.device_s for r in report.lines) == pytest.approx(report.time_s)
    assert sum(len(r.ops) for r in report.lines) == len(report.nodes)
    assert _row(str(report), body)  # shown in the summary
    assert str(report).startswith("spyrejax.explain: 1 op on 1 source line\n")


def test_a_move_for_an_op_of_no_user_line_counts_on_that_ops_row():
    # jax.nn.dot_product_attention explained on its own: no frame of the user's, every
    # op's source is "<unknown source>"; the restickify the product needs is its row's.
    S = jax.ShapeDtypeStruct
    q, kv = S((1, 16, 4, 64), jnp.float16), S((1, 64, 2, 64), jnp.float16)
    with jax.numpy_dtype_promotion("standard"):  # its float32 logits
        report = sj.explain(jax.nn.dot_product_attention, q, kv, kv)
    assert report.restickifies
    assert [r.line for r in report.lines] == ["<unknown source>"]
    assert report.lines[0].device_s == pytest.approx(report.time_s)


def _row_sums(x):
    return jnp.sum(x, axis=-1)  # its own source line: the sum makes the result sparse


def test_a_move_of_a_result_counts_on_the_line_that_makes_it():
    # A sum over the stick dim is sparse; the result is returned in the default layout of
    # its shape, a restickify no node reads: charged to the sum's line, with the time.
    report = sj.explain(_row_sums, jax.ShapeDtypeStruct((8, 200), jnp.float32))
    (move,) = report.restickifies
    assert move.reason.startswith("returned in the default layout")
    (row,) = report.lines
    assert move.line == row.line and "test_explain.py" in row.line
    assert (row.restickifies, row.restickify_cost) == (1, report.restickify_cost)
    assert row.device_s == pytest.approx(report.time_s)


def test_details_hold_every_record(report):
    text = report.details()
    assert "Spyre-level jaxpr:" in text and report.jaxpr in text
    for r in report.restickifies:
        assert f"restickify {r.value} (cost {r.cost}): {r.reason}" in text
    for what, cost in report.copies:
        assert f"{what} (cost {cost})" in text
    for t in report.tensors:
        assert f"  {t.name}: {t.type}  [" in text
    for name, _ in (*report.input_dcis, *report.output_dcis):
        assert f"  {name}: " in text


def test_a_restickify_a_lowering_makes_names_the_operand_it_moves():
    # The contraction over (b, t) reads each operand reshaped to [32, n] and moves the
    # reshape onto its K rows inside the matmul's own lowering. The record names that
    # operand (its size and dtype are the reshape's), not the product's result, and
    # what it says it moves is what it moves.
    f = lambda x, y: jnp.einsum("btd,btf->df", x, y)  # noqa: E731
    s = jax.ShapeDtypeStruct
    report = sj.explain(f, s((4, 8, 64), jnp.float32), s((4, 8, 96), jnp.float32))
    inside = [r for r in report.restickifies if "asks for layout" in r.reason]
    assert inside, report.restickifies  # the case makes one (else it tests nothing)
    for r in inside:
        assert "(argument leaf 1)" in r.value and r.value.startswith("float32[4, 8, 96]")
        assert r.source_type.startswith("f32[32,96]") and r.cost == 32 * 96
    assert not any("dot_general" in r.value for r in report.restickifies)


@pytest.fixture(scope="module")
def both_modes():
    """explain of a function whose views are made inside lowerings, in both modes.

    The softmax's broadcasts lower to ExpandDims then BroadcastTo: the ExpandDims is
    made inside the lowering, no node's result. Under ``emulate="cores"`` the printed
    jaxpr is the per-core program (its own variable names).
    """
    f = lambda x: (jax.nn.softmax(x, axis=0), x.T)  # noqa: E731
    x = rand((8, 64))
    return {e: sj.explain(sj.jit(f, emulate=e), x) for e in (None, "cores")}


@pytest.mark.parametrize("emulate", [None, "cores"])
def test_the_tensor_table_marks_the_views_the_program_makes(both_modes, emulate):
    """A value is a view when a view primitive made it (the record says which made each)."""
    report = both_modes[emulate]
    made = dict(re.findall(r"^\s+(\w+):.*? = (\w+)", report.jaxpr, re.M))
    views = {name for name, prim in made.items() if prim in _view_primitives()}
    assert views and {t.name for t in report.tensors if t.view} == views
    assert all(f"{t.name}: {t.type}  [view]" in report.details() for t in report.tensors if t.view)


def test_the_tensor_table_is_the_same_in_both_modes(both_modes):
    """The per-core program marks the same views, with the same bytes and residencies."""

    def table(report):
        return [
            (t.type, t.view, t.device_bytes, t.padding_overhead, t.residency)
            for t in report.tensors
        ]

    default, cores = (table(both_modes[e]) for e in (None, "cores"))
    assert sum(view for _, view, *_ in default) >= 5  # the softmax's four and x.T
    assert cores == default


def _view_primitives():
    """The names of the primitive classes whose role is ``"view"`` (the op records')."""
    return {c.__name__ for c in spyre_primitive_classes() if c.role == "view"}


def test_html_folds_the_details(report):
    page = report._repr_html_()
    head, _, folded = page.partition("<details><summary>details</summary>")
    assert folded, "the details fold"
    assert "<th>source line</th>" in head and "restickify_cost" in head
    assert "Spyre-level jaxpr" not in head and "Spyre-level jaxpr" in folded
    assert all(r.reason.split(" at ")[0] in folded for r in report.restickifies)


def test_a_library_function_passed_as_it_is_names_no_spyrejax_internals():
    """``sj.explain(jnp.matmul, ...)`` has no user line; spyrejax's tracing wrapper is not one."""
    report = sj.explain(jnp.matmul, rand((8, 64)), rand((64, 32)))
    sources = [op.source for op in report.ops] + [line.line for line in report.lines]
    assert sources and not any("_jit.py" in s or "flat_fun" in s for s in sources), sources


def test_a_function_that_moves_nothing_says_so():
    report = sj.explain(lambda a, b: jnp.tanh(a + b), rand((8, 64)), rand((8, 64)))
    assert "nothing moves between layouts" in str(report)
    assert report.restickify_cost == report.copy_cost == 0
    assert all(not r.costly for r in report.lines)
    assert "restickify_cost: 0 elements moved (0 restickifies)" in str(report)


def test_the_rows_are_made_once_when_first_asked_for():
    """``explain`` for the predicted time makes no row; the rows are made once."""
    with counting() as made:
        report = sj.explain(_two_layers, rand((T, D)), *_weights())
        assert report.time_s > 0 and report.ops and not made["explain.row"]
        nodes = report.nodes
        assert made["explain.row"] == len(nodes) > 0
        assert str(report) and report.details() and report.fallbacks == ()
        assert made["explain.row"] == len(nodes)


def test_a_deep_graph_plans_with_totals_at_the_scale_of_bytes():
    # x * x + x reads x three times: the forward totals triple per step (3^700 > 2^1024)
    # and overflowed to inf, leaving no finite option ("min() iterable argument is
    # empty"); a value's totals are now taken relative to its least past REBASE, before
    # they overflow.
    def deep(x):
        for _ in range(700):
            x = x * x + x
        return x

    r = sj.explain(deep, jax.ShapeDtypeStruct((2, 32), jnp.float32))
    assert len(r.ops) == 1400 and not r.restickifies and r.copy_cost == 0


def test_the_device_time_line_says_how_ops_are_classed():
    # Each op is classed by its larger term (compute, or memory: DDR or LX traffic), and
    # the line says so; a class of no op is left out ("0.000 us compute-bound" read as a
    # claim about the program).
    def time_line(report):
        (line,) = [r for r in str(report).splitlines() if "us of device time" in r]
        return line

    small = time_line(sj.explain(lambda x: x * 2, rand((8, 64))))
    assert "us of device time (each op by its larger term: " in small
    assert "memory-bound" in small and "compute-bound" not in small
    cube = jax.ShapeDtypeStruct((4096, 4096), jnp.float16)
    large = time_line(sj.explain(jnp.matmul, cube, cube))
    assert re.search(r"larger term: [\d.]+ us compute-bound;", large), large
