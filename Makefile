# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
# The other SDK layout (src/histaudit/sdk.py): dapr 1.18 + dapr-ext-workflow 1.18, with
# dapr-agents 1.0.9, which pins that layout, and Diagrid's runners for the OpenAI Agents
# SDK and LangGraph (the extras openai-agents, langgraph); `make test` runs the
# SDK-dependent tests and the agent tests (tests/agents) in it.
VENV118 := .venv-sdk118
# Strands and CrewAI on Diagrid's runners (the extras strands, crewai), beside dapr-agents
# 1.0.9 (diagrid's base runner imports it) on the same dapr 1.18 layout, with OpenTelemetry
# held where both stacks agree (constraints/frameworks2.txt); `make test` runs
# tests/frameworks2 in it. Its own venv: crewai brings chromadb, lancedb and litellm, which
# the OpenAI Agents SDK and LangGraph tests need not install. Install measured on the
# 2-core machine: 1 min 43 s with no pip cache (49 s of CPU), 83 s warm (51 s), ≈ 1.4 GB.
VENVFW2 := .venv-frameworks2
ENGINE := .tools/bin/durabletask-go
DAPRD  := .tools/daprd/bin/daprd

WITNESS := .tools/bin/.litewitness-v0.9.0
JAEGER := .tools/bin/.jaeger-v1.75.0
VAULT := .tools/bin/.vault-v1.21.1-minimal

.PHONY: test test-long demo demo-daprd demo-87 demo-87-daprd demo-agent demo-frameworks bench engine daprd witness jaeger vault postgres chromium softhsm venv lint clean

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint]'
	touch $@

$(VENV118)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV118)
	$(VENV118)/bin/python -m pip install -q --upgrade pip
	$(VENV118)/bin/python -m pip install -q -e '.[test,openai-agents,langgraph]' 'dapr==1.18.3' \
	    'dapr-ext-workflow==1.18.3' 'dapr-agents==1.0.9'
	touch $@

$(VENVFW2)/.installed: pyproject.toml constraints/frameworks2.txt
	$(PYTHON) -m venv $(VENVFW2)
	$(VENVFW2)/bin/python -m pip install -q --upgrade pip
	$(VENVFW2)/bin/python -m pip install -q -e '.[test,strands,crewai]' 'dapr==1.18.3' \
	    'dapr-ext-workflow==1.18.3' 'dapr-agents==1.0.9' 'diagrid[strands,crewai]==0.5.3' \
	    -c constraints/frameworks2.txt
	touch $@

engine: $(ENGINE)
$(ENGINE): scripts/install-engine.sh engine/main.go engine/go.mod engine/sqlite-poll.patch
	scripts/install-engine.sh

# Real daprd + placement + scheduler + sentry (dapr v1.18.3) from ../shared/vendor and the
# Go module proxy (docs/adr/0008-daprd.md). Always run: the script checks the tarballs'
# pinned hashes and skips the build when the installed binaries' recorded inputs match.
daprd:
	scripts/install-daprd.sh

# The C2SP witness the witness tests cosign with (litewitness, witnessctl; ADR 0007).
witness: $(WITNESS)
$(WITNESS): scripts/install-witness.sh
	scripts/install-witness.sh

# The trace backend the span-to-proof tests send spans to and query back (Jaeger v2).
jaeger: $(JAEGER)
$(JAEGER): scripts/install-jaeger.sh
	scripts/install-jaeger.sh

# The key service the transit signer's tests sign with (Vault's dev server, transit engine).
vault: $(VAULT)
$(VAULT): scripts/install-vault.sh
	scripts/install-vault.sh

postgres:
	scripts/ensure-postgres.sh

# The HTML report's tests open report.html in headless Chromium (Debian's package).
chromium:
	scripts/ensure-chromium.sh

# The PKCS#11 signer's tests sign inside a real SoftHSM2 token (Debian's package).
softhsm:
	scripts/ensure-softhsm.sh

# Four xdist workers on two cores: many tests wait (engine round trips, app restarts,
# fsync) while others compute; each worker starts its own PostgreSQL server and engines on
# free ports. Tests are dealt out one by one, longest kinds first (tests/conftest.py), and
# a file whose module fixtures are costly stays on one worker (pytest.mark.xdist_group).
# The run prints its slowest tests and files and names a file over its budget (scaled by a
# CPU calibration taken in the same run; `PYTEST_ARGS=--file-budget 120` to fail on it;
# tests/support/timings.py).
PYTEST_WORKERS ?= 4
PYTEST_ENV = HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) \
    HISTAUDIT_DAPRD_BIN_DIR=$(abspath $(dir $(DAPRD)))
PYTEST_XDIST = -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder
# What the SDK layout changes: the unit tests (tests/unit/test_sdk.py above all), and the
# interceptor, live replay check, replay, cross-check, crash cases and the demo's triage
# app on both engines; Dapr's signatures and completion attestations on daprd (~10 s);
# and dapr-agents' DurableAgent on daprd (~2 min on two cores).
SDK_TESTS = tests/agents tests/unit tests/integration/test_interceptor.py tests/integration/test_replay.py \
    tests/integration/test_engine_smoke.py tests/integration/test_runtime_start.py \
    tests/integration/test_decision_resigned.py tests/integration/test_triage.py \
    tests/integration/test_dapr_crosscheck.py tests/integration/test_durability.py \
    tests/integration/test_stateful_history.py tests/integration/test_received_events.py \
    tests/integration/test_all_features.py tests/integration/test_dapr_signing.py
test: venv $(VENV118)/.installed $(VENVFW2)/.installed engine daprd witness jaeger vault postgres chromium softhsm
	$(PYTEST_ENV) $(PY) -m pytest -q $(PYTEST_XDIST) --ignore=tests/agents \
	    --ignore=tests/frameworks2 $(PYTEST_ARGS)
	@echo "the SDK-dependent tests again, and the agent tests, on dapr 1.18 + dapr-ext-workflow 1.18:"
	$(PYTEST_ENV) $(VENV118)/bin/python -m pytest -q $(PYTEST_XDIST) $(SDK_TESTS)
	@echo "Strands and CrewAI on Diagrid's runners, beside dapr-agents (~85 s of CPU):"
	$(PYTEST_ENV) $(VENVFW2)/bin/python -m pytest -q $(PYTEST_XDIST) tests/frameworks2

# The exhaustive sizes of the tests a smaller case already proves in `make test` (each says
# what in its docstring; tests/support/sizes.py): the tests marked `sized`, in the files
# that import sized(), run with HISTAUDIT_TEST_SIZE=long. .ci/run adds it when its time
# budget allows.
LONG_TESTS = $(shell grep -rl --include='test_*.py' 'from support.sizes import' tests)
test-long: venv engine daprd witness postgres chromium
	HISTAUDIT_TEST_SIZE=long $(PYTEST_ENV) $(PY) -m pytest -q $(PYTEST_XDIST) \
	    --file-budget 0 -m sized $(LONG_TESTS)

demo: venv engine
	HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) $(PY) examples/triage/demo.py

# The seed's case: the 100-step financial agent crashes right after step 87, Dapr resumes
# it, and the counters and `histaudit verify` show only step 87 ran twice (~15 s).
demo-87: venv engine
	HISTAUDIT_ENGINE_BIN=$(abspath $(ENGINE)) $(PY) examples/financial_agent/demo.py

# The same demos on real daprd + placement + scheduler (`make daprd`: ~7 min to build on a
# fresh machine, 0.15 s once built; docs/adr/0008-daprd.md says why `make demo` does not
# default to it).
demo-daprd: venv daprd
	HISTAUDIT_DAPRD_BIN_DIR=$(abspath $(dir $(DAPRD))) $(PY) examples/triage/demo.py --engine daprd

# A dapr-agents DurableAgent (examples/durable_agent) crashed around its tool and its LLM
# calls on real daprd, resumed and verified; in the dapr-agents venv (dapr 1.18 layout).
demo-agent: $(VENV118)/.installed daprd
	HISTAUDIT_DAPRD_BIN_DIR=$(abspath $(dir $(DAPRD))) $(VENV118)/bin/python \
	    examples/durable_agent/demo.py

# Four agent frameworks (OpenAI Agents SDK, LangGraph, Strands, CrewAI) on Diagrid's
# runners, each audited with one line, crashed after its side-effecting tool, inside it and
# after an LLM call on real daprd: per row the LLM calls, tokens and bookings against the
# stub LLM's own bill, and the findings (examples/frameworks/demo.py; ~3 min).
demo-frameworks: $(VENV118)/.installed $(VENVFW2)/.installed daprd
	HISTAUDIT_DAPRD_BIN_DIR=$(abspath $(dir $(DAPRD))) $(VENV118)/bin/python \
	    examples/frameworks/demo.py

demo-87-daprd: venv daprd
	HISTAUDIT_DAPRD_BIN_DIR=$(abspath $(dir $(DAPRD))) $(PY) examples/financial_agent/demo.py \
	    --engine daprd

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
bench: venv $(VENV118)/.installed engine daprd postgres softhsm vault
	$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PYTEST_ENV) $(PY) benchmarks/run.py --ledger-cache $(BENCH_CACHE) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(VENV118) $(VENVFW2) .tools demo-out
