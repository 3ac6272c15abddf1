# spyrejax developer entry points. `make test` and `make demo` are all a fresh clone needs.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LINTED := spyrejax tests tools benchmarks setup.py

.PHONY: test test-slow test-cores demo lint format bench notebooks clean

$(PY):
	@py=$$(tools/find-python) || exit 1; \
	echo "creating $(VENV) with $$py"; \
	"$$py" -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml setup.py spyrejax/dma/_transpose.c
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,notebook]'
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# Every spyrejax.jit program of the suite with each divided op run per core as well, compared
# with the default mode (README, "The device model"). Slow: about twice `make test`.
test-cores: $(STAMP)
	$(PY) -m pytest -q -m "not slow" --emulate-check

demo: $(STAMP)
	$(PY) -m spyrejax

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
