# spyrejax developer entry points. `make test` and `make demo` are all a fresh clone needs.
# `make docs` builds the site of docs/ into build/site (warnings are errors); `make lab`
# opens the notebooks in JupyterLab; `make code-map` regenerates docs/code-map.md;
# `make typecheck` type-checks the public API; `make public-names` regenerates
# spyrejax/primitives/_public.py from the op tables; `make figures` prints module sizes and
# function complexities (tools/code_figures.py; a test holds them to their bars).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LINTED := spyrejax tests tools benchmarks setup.py
# `make test` runs pytest in TEST_WORKERS pytest-xdist workers (one per core; tests/conftest.py
# keeps each one's XLA on one thread), then ruff, typecheck and docs (about 10 s); its measured
# time and where it goes: docs/testing.md. `make test TEST_WORKERS=` runs it in one process.
# `--dist worksteal`: a worker that runs dry takes half of the other's queue, so the run
# does not end with one worker finishing a chunk of tests while the other idles.
TEST_WORKERS ?= 2
XDIST = $(if $(TEST_WORKERS),-n $(TEST_WORKERS) --dist worksteal,)
# `make test` compiles the suite's small programs with LLVM's level-1 passes instead of
# XLA's default (level 2): 10-12% less CPU on tests/frontend/test_jit.py, every test passes
# as at level 2; both sides of each comparison compile alike. `make test-cores` keeps XLA's
# default, so each stop also runs the whole suite as users compile it (docs/testing.md).
# A level set in XLA_FLAGS by the caller wins (it comes later).
TEST_XLA_FLAGS ?= --xla_backend_optimization_level=1

.PHONY: test test-slow test-cores demo docs lab code-map public-names typecheck figures lint format bench notebooks clean

$(PY):
	@py=$$(tools/find-python) || exit 1; \
	echo "creating $(VENV) with $$py"; \
	"$$py" -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml setup.py spyrejax/dma/_transpose.c spyrejax/dma/_tiles.cc
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,notebook,docs]'
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(MAKE) --no-print-directory typecheck
	XLA_FLAGS="$(TEST_XLA_FLAGS) $$XLA_FLAGS" $(PY) -m pytest -q -m "not slow" $(XDIST) --durations=20
	$(MAKE) --no-print-directory docs

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# Every spyrejax.jit program of the suite with each divided op run per core as well, compared
# with the default mode (docs/device-model.md), in TEST_WORKERS xdist workers like `make test`
# (the workers' check counts are added up for the summary: tests/conftest.py). 15 min on a
# fresh clone of the idle 2-core VM (2026-11-28; 27 min on 2026-11-29's slower VM; issue 24's
# target is 30): docs/testing.md.
test-cores: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(XDIST) --emulate-check --durations=20

demo: $(STAMP)
	$(PY) -m spyrejax

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks

code-map: $(STAMP)
	$(PY) tools/code_map.py

public-names: $(STAMP)
	$(PY) tools/public_names.py

# The public API as IDEs see it (configured in pyproject.toml: spyrejax/__init__.py and
# tests/typecheck/); a few seconds.
typecheck: $(STAMP)
	$(VENV)/bin/basedpyright --project pyproject.toml --pythonpath $(PY)

figures: $(STAMP)
	$(PY) tools/code_figures.py

bench: $(STAMP)
	$(PY) benchmarks/bench.py $(if $(QUICK),--quick,) $(BENCH_ARGS)

notebooks: $(STAMP)
	$(PY) tools/run_notebooks.py --inplace

lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

format: $(STAMP)
	$(PY) -m ruff format $(LINTED)
	$(PY) -m ruff check --fix $(LINTED)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build spyrejax/*.so spyrejax/*/*.so
