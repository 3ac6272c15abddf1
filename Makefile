# spyrejax developer entry points. `make test` and `make demo` are all a fresh clone needs.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo lint format bench notebooks clean

$(PY):
	@py=$$(tools/find-python) || exit 1; \
	echo "creating $(VENV) with $$py"; \
	"$$py" -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,notebook]'
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check spyrejax tests tools benchmarks
	$(PY) -m ruff format --check spyrejax tests tools benchmarks
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m spyrejax

bench: $(STAMP)
	$(PY) benchmarks/bench.py $(if $(QUICK),--quick,) $(BENCH_ARGS)

notebooks: $(STAMP)
	$(PY) tools/run_notebooks.py --inplace

lint: $(STAMP)
	$(PY) -m ruff check spyrejax tests tools benchmarks
	$(PY) -m ruff format --check spyrejax tests tools benchmarks

format: $(STAMP)
	$(PY) -m ruff format spyrejax tests tools benchmarks
	$(PY) -m ruff check --fix spyrejax tests tools benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
