# Parkway developer commands. `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# What is installed: Parkway with its runtime dependencies (`make run`), or with the
# dev tools too (pytest, ruff, mypy, playwright; every other target).
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# setuptools warns on every editable install whose packages it maps through an import hook
# (ours: runner/ installs as parkway.runner) that a folder named like the package could
# shadow it; no folder is named `parkway`, so that one warning is silenced, no other.
PIP := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet --disable-pip-version-check
NODE_DIR := tests/helpers/aisdk
NODE_STAMP := $(NODE_DIR)/node_modules/.installed-stamp
OIDC_DIR := tests/helpers/oidc
OIDC_STAMP := $(OIDC_DIR)/node_modules/.installed-stamp
PORT ?= 8000
# `make run MODEL=anthropic:claude-sonnet-4-6` serves the demo on a real model (the key
# comes from the environment, e.g. ANTHROPIC_API_KEY); empty: the scripted demo.
MODEL ?=

.PHONY: run test lint fmt bench load venv node-deps clean

$(BIN)/pip:
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/pip
	$(PIP) -e .
	touch $(RUN_STAMP)

# The dev install includes the runtime one, so it counts for `make run` too.
$(DEV_STAMP): pyproject.toml | $(BIN)/pip
	$(PIP) -e '.[dev,otel]'
	touch $(DEV_STAMP) $(RUN_STAMP)

venv: $(DEV_STAMP)

# The real `ai` npm packages (pinned majors) that the compatibility tests drive.
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# A real, independent OAuth/OIDC server (oidc-provider) for the connect-flow tests.
$(OIDC_STAMP): $(OIDC_DIR)/package.json $(OIDC_DIR)/package-lock.json
	cd $(OIDC_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(OIDC_STAMP)

node-deps: $(NODE_STAMP) $(OIDC_STAMP)

run: $(RUN_STAMP)
	$(BIN)/parkway serve --port $(PORT) $(if $(MODEL),--model $(MODEL))

# The suite on TEST_WORKERS pytest-xdist workers (much of it waits on real processes,
# browsers and servers; TEST_WORKERS=0 runs it in this one process), then the tests
# marked `serial`, which must not share the machine (tests/README.md). The tests marked
# `load`, full-size variants of tests run here at a smaller size, are `make load`'s.
# The first pass writes which files hold `serial` tests (tests/conftest.py), so that the
# second collects those files only (empty: it collects everything, as before).
TEST_WORKERS ?= 2
SERIAL_FILES := build/serial-test-files

test: venv node-deps
	rm -f $(SERIAL_FILES)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal -m 'not serial and not load' --serial-files $(SERIAL_FILES)
	$(BIN)/pytest -m 'serial and not load' $$(cat $(SERIAL_FILES))

# mypy cannot follow the editable install's import hook: it checks the folders through
# links named as they install (build/mypy-path/parkway/runner -> runner/, ...).
MYPY_PATH := build/mypy-path/parkway

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	mkdir -p $(MYPY_PATH)
	for package in runner transport widgets_api; do ln -sfn ../../../$$package $(MYPY_PATH)/$$package; done
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The main tables (docs/benchmarks.md), then one run or one parked call seen many times.
bench: venv
	$(BIN)/python -m bench
	$(BIN)/python -m bench.fanout

# 10,000 SSE followers and 300 concurrent turns on one worker (docs/benchmarks.md, Load),
# then the tests marked `load`: the full sizes of tests `make test` runs smaller.
load: venv
	$(BIN)/python -m bench.load
	$(BIN)/pytest -m load

clean:
	rm -rf $(VENV) build $(NODE_DIR)/node_modules $(OIDC_DIR)/node_modules .pytest_cache .mypy_cache .ruff_cache
