import contextlib
import io
import subprocess
import sys

import pytest

from spyrejax._demo import main


@pytest.fixture(scope="module")
def out():
    """What the demo prints, run once for the module's tests."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main()
    return text.getvalue()


def test_demo_prints_the_seed_examples(out):
    assert "device[i0*65536 + i1*64 + i2] = host[i0*64 + i1*256 + i2]" in out
    assert "size=[22, 5, 1, 100]" in out and "offsets=(128, 640)" in out
    assert "stride_map =[15000, 64, 150, 1]" in out
    assert "host_index -> None" in out
    assert "padding positions: 21000, all still poison (NaN): 21000" in out
    assert "device -> host is bit-exact: True" in out
    assert "= Matmul a b" in out and "row sums: f32[8]{[1,8,32]/[-1,1,-1]} (sparse: True)" in out
    assert "restickify(a.T) moves 1280 elements" in out
    assert "a @ (b + c.T)  restickify_cost =  16384" in out
    assert "(a @ b) @ c    restickify_cost =      0" in out
    assert "causal attention: f32[64,64]" in out


def test_demo_ends_with_a_model_checked_against_jax_jit_and_its_predicted_time(out):
    model = out[out.index("== a model") :]
    assert "spyrejax.jit matches jax.jit: True" in model
    assert "spyrejax.explain:" in model and "predicted time on spyre (32 cores" in model
    assert float(model.split("predicted time on the card: ")[1].split(" us")[0]) > 0


def test_python_dash_m_runs_the_demo():
    done = subprocess.run(
        [sys.executable, "-m", "spyrejax"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "bit-exact: True" in done.stdout
