"""Test configuration: 8 CPU devices, strict dtype promotion, reproducible Hypothesis.

Hypothesis profiles (``HYPOTHESIS_PROFILE`` selects one):

- ``ci``, the default, is derandomized: every property test draws the same examples on
  every run and every machine (seeded from the test's name), so a red run reproduces.
- ``long`` keeps exploring: random seeds and many more examples. Any example it finds
  failing is added to its test with ``@example``, so the default run checks it from
  then on.

Property tests compile a small XLA program per example, so examples are counted, not
timed; the few long ones are marked ``slow``.
"""

import os

# Under pytest-xdist (`make test TEST_WORKERS=2`) each worker runs XLA's CPU
# kernels on one thread: the workers already fill the cores, and XLA's thread pool would
# only compete with them. Three quarters of the suite's CPU is XLA compiling, which is
# single-threaded either way. Set before JAX starts its CPU backend.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
    ).strip()

import jax

# Eight emulated cards for the many-card tests (tests/primitives/test_shard.py). JAX reads the
# device count when its CPU backend starts, so it is set here, before any test module
# computes anything; single-card tests use device 0 as before.
jax.config.update("jax_num_cpu_devices", 8)

from hypothesis import HealthCheck, settings  # noqa: E402  (after the device count)

import spyrejax  # noqa: E402, F401  (registers the spyrejax_poison_padding option)

# Kernels write poison (NaN) into the padding of every result, even where its content is
# undefined and production runs leave it (see docs/dma.md): a kernel that reads
# padding without masking it then gives NaN, which every comparison with jax.jit catches.
jax.config.update("spyrejax_poison_padding", True)

# No implicit promotion: an op mixing dtypes must say which it means (in the tests and,
# through them, in spyrejax itself).
jax.config.update("jax_numpy_dtype_promotion", "strict")

_SHARED = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("ci", max_examples=25, derandomize=True, database=None, **_SHARED)
settings.register_profile("long", max_examples=500, print_blob=True, **_SHARED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest  # noqa: E402

# --- xdist balance ------------------------------------------------------------------------
# pytest-xdist (3.8, `--dist worksteal` as `make test` runs it) gives each worker an equal
# consecutive share of the collection, and a worker that runs dry takes half of the other's
# queue. These files hold the longest tests (seconds to tens of seconds each: the notebooks
# in their own kernels, the bench's and the models' training steps); collected last, as
# their folders sort, they ran in the final minute while the other worker idled (20 s of a
# 450 s run, 2026-11-28). Run first, they start the first worker's share and the run ends
# on short tests. Each file keeps its tests together and in order.
_LONG_FIRST = (
    "tests/project/test_notebooks.py",
    "tests/project/test_bench.py",
    "tests/models/test_gpt.py",
    "tests/lowering/rules/test_conv.py",
    "tests/models/test_done_when.py",
    "tests/project/test_demo.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    rank = {path: i for i, path in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


# --- pytest --emulate-check (make test-cores) -------------------------------------------
# Every spyrejax.jit program of the suite runs each op the device model divides both ways,
# per core and with its whole-image kernel, and compares them when it runs
# (spyrejax.lowering.checking_cores); a test whose programs gave a mismatch fails.


_CHECK = pytest.StashKey()
_UNCHECKED: list[str] = []  # tests --emulate-check ran without the check


def pytest_addoption(parser):
    parser.addoption(
        "--emulate-check",
        action="store_true",
        help='check emulate="cores" against the default mode on every spyrejax.jit program',
    )
    parser.addoption(
        "--peer-ops",
        metavar="DIR",
        default=None,
        help="also run torch-spyre's model op lists (*.yaml) in DIR (tests/models/test_peer_ops)",
    )


def pytest_configure(config):
    if config.getoption("--emulate-check"):
        from spyrejax.lowering import CoreCheck

        config.stash[_CHECK] = CoreCheck()


@pytest.fixture(autouse=True, scope="session")
def _emulate_check(pytestconfig):
    check = pytestconfig.stash.get(_CHECK, None)
    if check is None:
        yield
        return
    from spyrejax.lowering import checking_cores

    with checking_cores(check):
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    check = item.config.stash.get(_CHECK, None)
    unchecked = ("xla_fusion_bits", "plain_program")
    if check is not None and any(item.get_closest_marker(m) for m in unchecked):
        # Exact bits of a fused float chain: the check's reads of its intermediates would
        # make XLA fuse it otherwise (a rounding, not a division bug); the structure of the
        # default mode's program (the check runs every divided op whole). Run it unchecked.
        from spyrejax.lowering.program import _cores

        _UNCHECKED.append(item.nodeid)
        token = _cores._CHECK.set(None)
        try:
            return (yield)
        finally:
            _cores._CHECK.reset(token)
    result = yield
    if check is not None:
        jax.effects_barrier()
        found = check.take()
        if found:
            lines = "\n".join(f"  {m}" for m in found[:20])
            more = f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""
            raise AssertionError(
                f'emulate="cores" differs from the default mode in {len(found)} op(s):\n'
                f"{lines}{more}"
            )
    return result


def pytest_sessionfinish(session):
    """An xdist worker sends its counts to the controller (``workeroutput``)."""
    check = session.config.stash.get(_CHECK, None)
    workeroutput = getattr(session.config, "workeroutput", None)
    if check is None or workeroutput is None:
        return
    workeroutput["emulate_check"] = {
        "checked": dict(check.checked),
        "fallbacks": dict(check.fallbacks),
        "unchecked": list(_UNCHECKED),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller adds up each worker's counts for the summary."""
    check = node.config.stash.get(_CHECK, None)
    counts = getattr(node, "workeroutput", {}).get("emulate_check")
    if check is None or counts is None:
        return
    check.checked.update(counts["checked"])
    check.fallbacks.update(counts["fallbacks"])
    _UNCHECKED.extend(counts["unchecked"])


def pytest_terminal_summary(terminalreporter, config):
    check = config.stash.get(_CHECK, None)
    if check is None:
        return
    report = terminalreporter
    report.section("emulate-check")
    report.write_line(
        f"divided ops traced both ways: {sum(check.checked.values())} "
        f"({len(check.checked)} kinds: {', '.join(sorted(check.checked))})"
    )
    fell = sum(check.fallbacks.values())
    report.write_line(f"ops that cannot run per core (whole-image kernel only): {fell}")
    for reason, n in check.fallbacks.most_common():
        report.write_line(f"  {n} x {reason}")
    report.write_line(
        f"tests run unchecked (marked xla_fusion_bits or plain_program): {len(_UNCHECKED)}"
    )
    for nodeid in sorted(_UNCHECKED):
        report.write_line(f"  {nodeid}")
