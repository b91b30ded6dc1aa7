# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
ENGINE := .tools/bin/durabletask-go

.PHONY: test demo demo-87 bench engine postgres venv lint clean

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint]'
	touch $@

engine: $(ENGINE)
$(ENGINE): scripts/install-engine.sh engine/main.go engine/go.mod
	scripts/install-engine.sh

postgres:
	scripts/ensure-postgres.sh

# Most tests wait (fsync, engine round trips, app restarts) rather than compute, so four
# xdist workers on two cores roughly halve the wall time; each worker starts its own
# PostgreSQL server and engines on free ports.
PYTEST_WORKERS ?= 4
test: venv engine postgres
	HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

demo: venv engine
	HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) $(PY) examples/triage/demo.py

# The seed's case: the 100-step financial agent crashes right after step 87, Dapr resumes
# it, and the counters and `histaudit verify` show only step 87 ran twice (~15 s).
demo-87: venv engine
	HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) $(PY) examples/financial_agent/demo.py

# ruff (rules and reasons in pyproject.toml), mypy --strict over src/, and import-linter's
# layer contracts (docs/adr/0003-layers.md). CI runs it before the tests.
lint: venv
	$(VENV)/bin/ruff check src tests benchmarks examples scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The full run (~40 min on 2 shared cores; `benchmarks/run.py --quick` takes ~10): ratios
# against same-run baselines, JSON + PNG in benchmarks/results/ (benchmarks/README.md).
# The built 1M-entry verify ledger is kept in BENCH_CACHE between runs.
BENCH_CACHE ?= /var/tmp/histaudit-bench
bench: venv engine postgres
	$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) $(PY) benchmarks/run.py --ledger-cache $(BENCH_CACHE) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .tools demo-out
