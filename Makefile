# The two commands of the README:
#   make demo   set up and start the gateway on SQLite with the built-in mock provider
#   make test   set up and run every check: lint, format, types, the whole test suite
# and one for the agent tests (tests/agents): `make agents` installs the real coding agents.
# Both create .venv on first use (Python >= 3.11 with venv and pip is all they need).

VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint setup bench clean lock runtime-lock agents

# The data plane's hot path is compiled with mypyc (setup.py), which type-checks it against
# the dependencies: they are installed first (a plain build), then the package is built again
# in place, compiled. `make setup` rebuilds when a compiled module's source has changed;
# until then llmrelay runs the sources (llmrelay/_compiled.py).
COMPILED_SOURCES := $(shell $(or $(wildcard $(BIN)/python),python3) -c "import runpy; \
	m = runpy.run_path('src/llmrelay/compiled_modules.py'); \
	print(' '.join('src/' + n.replace('.', '/') + '.py' for n in m['COMPILED']))")
BUILT := $(VENV)/.compiled

# requirements/dev.lock pins every package (constraints: what is not asked for is not installed),
# so that a fresh clone runs with what CI last passed with, not whatever was released since.
LOCK := requirements/dev.lock
# requirements/runtime.lock pins what the image installs (deploy/Dockerfile): the main
# dependencies and the otel extra, with everything they need, at dev.lock's versions
# (tests/support/dependencies.py reads them from an environment installed with dev.lock;
# tests/test_lock.py checks that the file is current).
RUNTIME_LOCK := requirements/runtime.lock

$(STAMP): pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 'setuptools>=77' wheel
	LLMRELAY_PURE_PYTHON=1 $(BIN)/python -m pip install --quiet -c $(LOCK) -e '.[dev]'
	touch $(STAMP)

# After a dependency change in pyproject.toml: resolve afresh in a scratch venv, pin the result.
lock:
	rm -rf .venv-lock && python3 -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip 'setuptools>=77' wheel
	LLMRELAY_PURE_PYTHON=1 .venv-lock/bin/python -m pip install --quiet -e '.[dev]'
	{ sed -n '/^#/p' $(LOCK); .venv-lock/bin/python -m pip freeze --exclude-editable; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	.venv-lock/bin/python -m tests.support.dependencies > $(RUNTIME_LOCK).new
	mv $(RUNTIME_LOCK).new $(RUNTIME_LOCK) && rm -rf .venv-lock

# After editing the main dependencies or the otel extra only (dev.lock already pins them).
runtime-lock: $(STAMP)
	$(BIN)/python -m tests.support.dependencies > $(RUNTIME_LOCK).new
	mv $(RUNTIME_LOCK).new $(RUNTIME_LOCK)

$(BUILT): $(STAMP) setup.py src/llmrelay/compiled_modules.py $(COMPILED_SOURCES)
	$(BIN)/python -m pip install --quiet --no-build-isolation --no-deps -e . || { \
	    rm -f src/llmrelay/compiled.json; \
	    echo "!!! the compiled build failed (a C compiler and Python's headers are needed):"; \
	    echo "!!! llmrelay runs as plain Python (slower; see README, 'Compiled build')"; }
	touch $(BUILT)

setup: $(BUILT)

demo: $(BUILT)
	$(BIN)/llmrelay serve --demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench setup.py
	$(BIN)/ruff format --check src tests bench setup.py
	$(BIN)/mypy

# Two workers, each taking whole modules (their module-scoped gateways and upstreams stay in
# one process): most end-to-end tests wait on sockets and timers, so two halve the wall time
# on two cores. `PYTEST_WORKERS=0` runs in one process.
PYTEST_WORKERS ?= 2
# More pytest options, e.g. PYTEST_ARGS='--random-order-bucket=global --random-order-seed=7'.
PYTEST_ARGS ?=

test: lint $(BUILT)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The real coding agents that tests/agents runs (Claude Code, Codex, Gemini CLI, opencode,
# Qwen Code), at the versions pinned in tests/agents/package-lock.json, installed again only
# when the lock changes (the stamp). `npm install` rather than `npm ci`: the lock holds only the
# platform binaries the registry had for this machine, and `npm ci` refuses a lock without the
# other platforms' optional packages; with a lock that satisfies package.json, `npm install`
# installs exactly the locked versions and leaves the lock as it is. npm 11 runs no install
# scripts; the clients run without them. The Python agent SDKs are in the dev extra.
AGENTS_DIR := tests/agents
AGENTS_STAMP := $(AGENTS_DIR)/node_modules/.installed

$(AGENTS_STAMP): $(AGENTS_DIR)/package.json $(AGENTS_DIR)/package-lock.json
	cd $(AGENTS_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error
	touch $(AGENTS_STAMP)

agents: $(AGENTS_STAMP)

bench: $(BUILT)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build
	find src -name '*.so' -delete
	rm -f src/llmrelay/compiled.json
	rm -rf $(AGENTS_DIR)/node_modules
