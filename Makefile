# engram-bench: `make bench` (main job), `make test` (test suite). Each target installs into
# .venv what it uses: the core (the harness) for `make bench URL=...`, + the explorer for
# `make explore`, + the server (torch) for the bundled server, everything for `make test`.
# `make bench ENGINE=vllm` and `make test-vllm` also set up .venv-vllm (vLLM's CPU build).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORE     := $(VENV)/.stamp-core
EXPLORER := $(VENV)/.stamp-explorer
SERVER   := $(VENV)/.stamp-server
REPORT   := $(VENV)/.stamp-report
ALL      := $(VENV)/.stamp-all
DISTRIBUTED := $(VENV)/.stamp-distributed

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
  $(if $(URL),--url $(URL)) $(if $(ENGINE),--bundled $(ENGINE)) $(if $(MODEL),--model $(MODEL)) \
  $(if $(PLACEMENT),--placement $(PLACEMENT)) $(if $(TABLE_GB),--table-size-gb $(TABLE_GB)) \
  $(if $(CACHE_RATIO),--cache-ratio $(CACHE_RATIO)) \
  $(if $(PAGE_CACHE_GB),--page-cache-gb $(PAGE_CACHE_GB)) \
  $(if $(CACHE_STATE),--cache-state $(CACHE_STATE)) $(if $(PROMPTS),--prompts "$(PROMPTS)") \
  $(if $(PROFILE),--profile $(PROFILE)) $(if $(TURNS),--turns $(TURNS)) \
  $(if $(filter 1,$(SEARCH)),--search)

.PHONY: venv test test-faults test-vllm test-distributed lint docs bench bench-harness bench-level-stats bench-offload bench-kv-tradeoff bench-streams bench-users bench-users-study bench-trace bench-peers bench-explorer bench-agent bench-report cuda-check serve explore summary export clean

$(CORE): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(EXPLORER): $(CORE)
	$(BIN)/python -m pip install -q -e '.[explorer]'
	touch $@

$(REPORT): $(CORE)
	$(BIN)/python -m pip install -q -e '.[report]'
	touch $@

$(SERVER): $(CORE)
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[server]'
	touch $@

$(ALL): $(SERVER) $(EXPLORER)
	$(BIN)/python -m pip install -q -e '.[all]'
	touch $@

$(DISTRIBUTED): $(ALL)
	$(BIN)/python -m pip install -q -e '.[distributed]'
	touch $@

venv: $(ALL)

# ruff, the import contracts (pyproject's [tool.importlinter]) and mypy over the packages.
lint: $(ALL)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The CLI reference is generated from the parser; a test fails when the committed page differs.
docs/reference/cli.md: $(CORE) engram_bench/cli.py engram_bench/cli_reference.py runners/commands.py
	$(BIN)/python -m engram_bench.cli_reference > $@

docs: $(ALL)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

# As root with apt-get, Debian's chromium for the browser tests is installed when missing. The
# suites marked faults and vllm are left out (pyproject's addopts); the test marked alone, which
# loads the machine itself, runs after the rest with nothing beside it.
test: $(ALL) lint docs
	@.ci/chromium
	$(BIN)/python -m pytest -n 2
	$(BIN)/python -m pytest -m alone

# Stops at random moments of a run, 20 each of SIGTERM, Ctrl-C and a closed terminal's SIGHUP,
# and 20 during calibration (~4 min; .ci/run calls it too).
test-faults: $(ALL)
	$(BIN)/python -m pytest -m faults tests/faults

# The harness against a real engine: vLLM's CPU build in .venv-vllm (installed when missing);
# all of tests/vllm, the module marked vllm and the fast runner tests beside it.
test-vllm: $(ALL)
	$(BIN)/python -m runners.vllm.setup
	$(BIN)/python -m pytest -m "vllm or not faults" tests/vllm

# `run --ray` on a local Ray cluster of two nodes (installs Ray, the distributed extra; ~1 min).
test-distributed: $(DISTRIBUTED)
	$(BIN)/python -m pytest -m distributed tests/distributed

# the key goes in the environment, not on the command line make echoes
ifneq ($(API_KEY),)
bench: export OPENAI_API_KEY := $(API_KEY)
endif
# Your own server (URL=...) needs only the core; the bundled Engram server needs the server
# extra; plotly (the report extra) for the report a run that started (exit 0, or 1: failed)
# ends with, results/report-<run>.html, its path printed after the summary.
bench: $(if $(or $(URL),$(filter vllm,$(ENGINE))),$(CORE),$(SERVER)) $(REPORT)
	status=0; $(BIN)/engram-bench run $(BENCH_FLAGS) || status=$$?; \
	if [ $$status -le 1 ]; then $(BIN)/engram-bench report latest --db $(DB) -o $(dir $(DB)); fi; \
	exit $$status

# ... then past one event loop; the exit status is the accuracy table's (2: a target missed)
bench-harness: $(DISTRIBUTED)
	$(BIN)/python benchmarks/harness_accuracy.py; status=$$?; \
	$(BIN)/python -m benchmarks.high_concurrency && exit $$status

# Per-level statistics of a 1M-request run: pure Python, DuckDB's view and polars, interleaved.
REQUESTS ?= 1000000
bench-level-stats: $(ALL)
	$(BIN)/python benchmarks/level_stats.py --requests $(REQUESTS)

bench-kv-tradeoff: $(ALL)
	$(BIN)/python benchmarks/kv_tradeoff.py

bench-offload: $(ALL)
	$(BIN)/python -m benchmarks.offload

bench-streams: $(ALL)
	$(BIN)/python -m benchmarks.token_streams

# The users search beside the closed search on one mock server, and where its time goes.
bench-users: $(ALL)
	$(BIN)/python -m benchmarks.users_search

# Measured users beside Max C x 4 with intervals, interleaved (BUNDLED=1: the spark server too).
bench-users-study: $(ALL)
	$(BIN)/python -m benchmarks.users_vs_closed $(if $(BUNDLED),--bundled)

# A trace read and scheduled (100,000 lines) and its send lag, then what a trace does to the
# bundled server's offloaded table beside 128/128-like prompts (TRACE=FILE: your own trace).
TRACE ?=
bench-trace: $(ALL)
	$(BIN)/python -m benchmarks.trace_speed
	$(BIN)/python -m benchmarks.trace_table $(if $(TRACE),--trace $(TRACE))

# engram-bench beside vllm bench serve, AIPerf and GuideLLM on one fake server, graded on its log.
bench-peers: $(ALL)
	$(BIN)/python -m benchmarks.peers

# On a CUDA machine (TORCH=<a CUDA build>): placement equivalence and a short offload run.
cuda-check: $(ALL)
	$(BIN)/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else \
	  'cuda-check needs a CUDA device and a CUDA build of torch (make TORCH=torch ...)')"
	ENGRAM_TEST_DEVICE=cuda $(BIN)/python -m pytest tests/runners/test_engine.py
	$(BIN)/python -m benchmarks.offload --levels 1,8 --rounds 1 --tokens 32 --arms device,host,spark \
	  --deepseek ""

serve: $(SERVER)
	$(BIN)/engram-bench serve --device $(DEVICE) $(if $(PLACEMENT),--placement $(PLACEMENT)) \
	  $(if $(TABLE_GB),--table-size-gb $(TABLE_GB))

PORT ?= 8501
explore: $(EXPLORER)
	$(BIN)/engram-bench explore --db $(DB) --port $(PORT)

bench-explorer: $(ALL)
	$(BIN)/python benchmarks/explorer_pages.py

# engram-bench report over one stored run of 10 levels and over 10 of them: seconds and size.
bench-report: $(ALL)
	$(BIN)/python benchmarks/report_speed.py

# What `engram-bench agent` costs the serving host: CPU and RSS at 1 Hz on a 2 GiB table, and
# one residency sample of sparse 64 GiB and 200 GiB files (made with truncate under /var/tmp).
bench-agent: $(CORE)
	$(BIN)/python -m benchmarks.host_agent

summary: $(CORE)
	$(BIN)/engram-bench summary $(if $(RUN),$(RUN),latest) --db $(DB)

export: $(CORE)
	$(BIN)/engram-bench export $(if $(RUN),--run $(RUN)) --format $(FORMAT) --db $(DB)

clean:
	rm -rf $(VENV) .venv-vllm .venv-peers results/exports results/logs
