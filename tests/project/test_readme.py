"""The README and every docs/ page as a reader follows them: each python block runs as written.

A page's blocks run in order in one namespace of their own (a page may build on its own
earlier blocks, never on another page's). A page whose code changes JAX's configuration
or uses several devices (the many cards page sets ``jax_num_cpu_devices``, which JAX takes
only before its first use) runs in a fresh Python process, as a reader pasting the page
would, so its settings neither depend on nor leak into the test process.
"""

import code
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# Code that changes JAX's configuration or needs several devices runs in a fresh process:
# the test process already has 8 CPU devices (conftest.py), a reader's Python has one.
FRESH_PROCESS = ("jax.config.update(", "make_mesh", "shard_map", "jax.devices(")


def python_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def run_blocks(path: pathlib.Path) -> None:
    namespace: dict = {}
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), namespace)


def test_readme_python_examples_run():
    assert python_blocks(README)
    run_blocks(README)


def test_readme_gives_the_two_commands_first():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1)
    assert first_block.splitlines()[0].startswith("make demo")
    assert first_block.splitlines()[1].startswith("make test")


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_docs_page_examples_run(page):
    script = "\n".join(python_blocks(page))
    if not any(word in script for word in FRESH_PROCESS):
        run_blocks(page)
        return
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


class _PasteConsole(code.InteractiveConsole):
    """The interactive interpreter a reader pastes into, compiling without running."""

    syntax_errors = 0

    def runcode(self, code_obj):  # compiling is the check: nothing runs
        return None

    def showsyntaxerror(self, filename=None, **kwargs):
        self.syntax_errors += 1


@pytest.mark.parametrize("page", [README, *PAGES], ids=["README.md"] + [p.name for p in PAGES])
def test_every_block_pastes_into_the_interactive_interpreter(page):
    """A blank line ends a block in the REPL: none inside a def, one after a with/def."""
    for block in python_blocks(page):
        console = _PasteConsole()
        for line in [*block.splitlines(), ""]:
            console.push(line)
        assert console.syntax_errors == 0, block


def test_docs_pages_are_in_the_site_and_link_each_other():
    """Every page and every notebook has its place in mkdocs.yml's nav."""
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert f": {page.name}" in nav, page.name
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{notebook.stem}.md" in nav, notebook.name


def test_code_map_is_current():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "code_map.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout
