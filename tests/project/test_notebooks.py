import importlib.util
import pathlib

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "tools" / "run_notebooks.py")
run_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_notebooks)


def test_the_five_notebooks_exist():
    names = [p.name for p in NOTEBOOKS]
    assert names == [
        "01_layout_tour.ipynb",
        "02_transformer_block.ipynb",
        "03_dma_and_padding.ipynb",
        "04_device_model.ipynb",
        "05_layouts_beyond.ipynb",
    ]


def test_the_environment_opens_and_converts_notebooks():
    """`make lab` (JupyterLab) and nbconvert come with the notebook extra the Makefile installs."""
    for module in ("jupyterlab", "nbconvert", "ipykernel"):
        assert importlib.util.find_spec(module) is not None, module
    makefile = (ROOT / "Makefile").read_text()
    assert "jupyter lab notebooks" in makefile and "[test,notebook,docs]" in makefile


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_fresh_without_errors(path):
    nb = run_notebooks.execute(path)  # raises CellExecutionError on any failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(
        "image/png" in o.get("data", {}) or "text/html" in o.get("data", {}) for o in outputs
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_carry_their_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
