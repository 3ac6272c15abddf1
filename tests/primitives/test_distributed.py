"""A data-parallel step across two processes under ``jax.distributed`` (issue 28).

JAX's own multi-process runtime on localhost: two processes of two CPU devices each,
gloo collectives over loopback, a mesh with Explicit axes over the four devices. Each
process runs the step under ``spyrejax.jit`` and ``jax.jit`` and prints the largest
difference. Skipped, with the reason, where the platform cannot start the runtime.

Run as a script, this file is one worker: ``python test_distributed.py <id> <port>``.
"""

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import tol

_READY, _RESULT, _SKIP = "READY", "RESULT", "SKIP"
_TIMEOUT = 240  # seconds for both processes, start-up and compiles included


def _worker(pid: int, port: int) -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            f"127.0.0.1:{port}", num_processes=2, process_id=pid, initialization_timeout=60
        )
    except Exception as err:  # the platform cannot: say why, for the test to skip
        print(_SKIP, type(err).__name__, str(err).splitlines()[0][:200], flush=True)
        return
    print(_READY, flush=True)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import spyrejax as sj

    mesh = jax.make_mesh((4,), ("d",))  # Explicit axes, over both processes' devices
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    xs = rng.standard_normal((16, 8)).astype(np.float32)
    ys = rng.standard_normal((16, 4)).astype(np.float32)

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    def step(w, x, y):
        # w is replicated, so its gradient is summed over the cards (shard_map's
        # check_vma): divided by their number, the mean of the cards' gradients.
        return w - 0.1 * jax.grad(loss)(w, x, y) / 4

    f = jax.shard_map(step, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P())
    rows = NamedSharding(mesh, P("d"))
    mine = slice(pid * 8, pid * 8 + 8)  # this process's half of the batch
    x = jax.make_array_from_process_local_data(rows, xs[mine])
    y = jax.make_array_from_process_local_data(rows, ys[mine])
    wr = jax.make_array_from_process_local_data(NamedSharding(mesh, P()), w)
    want = np.asarray(jax.jit(f)(wr, x, y).addressable_shards[0].data)
    got = np.asarray(sj.to_host(sj.jit(f)(wr, x, y)))
    # The same step on one host, in float64: what both must be close to.
    g = sum(
        xs[i : i + 4].T.astype(np.float64) @ (xs[i : i + 4] @ w - ys[i : i + 4])
        for i in range(0, 16, 4)
    )
    exact = w - 0.1 * (2 / (4 * 4)) * g / 4
    errors = np.abs(got - want).max(), np.abs(got - exact).max()
    print(_RESULT, *errors, np.abs(exact).max(), flush=True)
    jax.distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_data_parallel_step_across_two_processes_matches_jax_jit():
    port = _free_port()
    # The workers run this file as a script: helpers.py's folder (tests/) goes on their path.
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(pid), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for pid in range(2)
    ]
    deadline = time.monotonic() + _TIMEOUT
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outs.append(out)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        outs = [p.communicate()[0] for p in procs]
        if not all(_READY in o for o in outs):
            pytest.skip("jax.distributed did not start on localhost in time")
        pytest.fail(f"the two processes did not finish in {_TIMEOUT} s:\n" + "\n".join(outs))
    skips = [line for o in outs for line in o.splitlines() if line.startswith(_SKIP)]
    if skips:
        pytest.skip(f"jax.distributed cannot run here: {skips[0]}")
    results = [line.split() for o in outs for line in o.splitlines() if line.startswith(_RESULT)]
    assert len(results) == 2, "\n".join(outs)
    for _, vs_jit, vs_exact, scale in results:
        # One float32 gradient step: each card sums 4 rows' products of 8 terms, the
        # cards' sums are summed (16 x 8 products), then a scale and a subtraction.
        bound = tol(np.float32, reduce_len=16 * 8, ops=4, scale=float(scale))["atol"]
        assert float(vs_jit) < bound and float(vs_exact) < bound, (results, bound)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]))
