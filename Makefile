# Two commands do all set-up on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run serve test lint format install browser-deps migrate messages worker pip-check phoenix litellm bench-smoke mcp-conformance

# The tests' and the benchmarks' requirements in one resolution: a pin of one that disagrees with the other fails here.
$(INSTALLED): requirements.txt requirements-dev.txt requirements-nodeps.txt bench/requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -r bench/requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $(INSTALLED)

install: $(INSTALLED)

# The platform on its embedded default: SQLite, in-memory channel layer, Celery eager, offline demo model.
run: export DJANGO_DEBUG ?= 1
run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@echo ""
	@echo "  Open http://$(HOST):$(PORT)/ and log in with one of the logins above (admin: http://$(HOST):$(PORT)/admin/)."
	@echo "  打开 http://$(HOST):$(PORT)/ ，用上面的任一账号登录。"
	@echo ""
	$(BIN)/python scripts/serve --web 1 --workers 0 --host $(HOST) --port $(PORT)

# Arize Phoenix, the real OTLP receiver of the trace test, in a virtualenv of its own (none of its packages
# touches the project's pins); docs/observability.md.
PHOENIX_VENV := .venv-phoenix
$(PHOENIX_VENV)/.installed: requirements-phoenix.txt
	test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet -r requirements-phoenix.txt
	touch $@

phoenix: $(PHOENIX_VENV)/.installed

# LiteLLM's proxy, the peer gateway bench/load_openai.py measures beside /v1, in a virtualenv of its own (by hand only:
# the benches' smoke runs in CI do without it).
LITELLM_VENV := .venv-litellm
$(LITELLM_VENV)/.installed: requirements-litellm.txt
	test -x $(LITELLM_VENV)/bin/python || $(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install --quiet -r requirements-litellm.txt
	touch $@

litellm: $(LITELLM_VENV)/.installed

# The whole suite. With DATABASE_URL / REDIS_URL set it runs on PostgreSQL and Redis (CI sets both).
test: install browser-deps phoenix mcp-conformance
	$(BIN)/pytest $(PYTEST_ARGS)

# The official MCP conformance suite and mcp-remote (tests/api/test_mcp_conformance.py and test_mcp_remote.py,
# docs/mcp.md), exactly as scripts/mcp-conformance/package-lock.json pins them, from the npm registry. Without npm
# those tests skip (and fail in CI, where REQUIRE_SERVICES=1).
MCP_CONFORMANCE := scripts/mcp-conformance
$(MCP_CONFORMANCE)/node_modules/.package-lock.json: $(MCP_CONFORMANCE)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix $(MCP_CONFORMANCE) --no-audit --no-fund --loglevel=error; \
	else echo "npm is missing (apt-get install nodejs npm): the MCP conformance tests will be skipped"; fi

mcp-conformance: $(MCP_CONFORMANCE)/node_modules/.package-lock.json

# Browser tests drive Debian's Chromium through Playwright (never `playwright install`); a CJK font lets the
# Chinese pages render in screenshots.
BROWSER_PACKAGES := chromium fonts-noto-cjk
browser-deps:
	@missing=""; for p in $(BROWSER_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y -q $$missing >/dev/null || { apt-get update -q && apt-get install -y -q $$missing; }; \
	  elif command -v sudo >/dev/null 2>&1; then sudo apt-get install -y -q $$missing; \
	  else echo "missing:$$missing (apt-get install$$missing): browser tests will be skipped"; fi; fi

# Every benchmark's --smoke run with its wall time (bench/smoke.py; CI runs it after the tests). It needs PostgreSQL,
# Redis and the pgvector server as CI starts them; SMOKE_ARGS="--redis-url ... load_ws" picks others or some.
bench-smoke: install browser-deps
	$(BIN)/python bench/smoke.py $(SMOKE_ARGS)

lint: install pip-check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# `pip check` of .venv: no installed package may miss or conflict with what it requires. The one exception is a
# requirement a package of requirements-nodeps.txt declares and is deliberately installed without.
NODEPS := $(shell sed -n 's/^\([A-Za-z0-9._-]*\)==.*/\1/p' requirements-nodeps.txt | paste -sd'|' -)
pip-check: install
	@problems="$$($(BIN)/python -m pip check 2>&1 | grep -v -i -E '^($(NODEPS)) [^ ]+ requires [^ ,]+, which is not installed\.$$' \
	  | grep -v -E '^(No broken requirements found\.|WARNING: Location .* is ignored)')"; \
	if [ -n "$$problems" ]; then echo "$$problems"; echo "pip check: the packages in $(VENV) disagree (above): fix the pins"; exit 1; fi; \
	echo "pip check: clean (apart from what requirements-nodeps.txt leaves out on purpose)"

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: install
	$(BIN)/python manage.py migrate --noinput

# Regenerate and compile the translations (needs gettext; the compiled .mo files are committed).
messages: install
	DJANGO_DEBUG=1 $(BIN)/python manage.py makemessages -l zh_Hans --ignore=.venv --ignore=tests --ignore=bench --no-location
	DJANGO_DEBUG=1 $(BIN)/python manage.py compilemessages --ignore=.venv

# For real on one machine: WEB Daphne processes sharing PORT and WORKERS Celery workers (needs REDIS_URL;
# docs/operations.md).
WEB ?= 2
WORKERS ?= 1
# Without DJANGO_DEBUG=1 the pages name the static files by their hashed names from collectstatic's manifest.
serve: install
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python scripts/serve --web $(WEB) --workers $(WORKERS) --host $(HOST) --port $(PORT)

# A Celery worker with the beat scheduler inside (the admin's Periodic tasks: memory sleep), for deployments with
# REDIS_URL set. Run one beat per deployment: further workers without -B.
worker: install
	$(BIN)/celery -A config worker -B -l info
