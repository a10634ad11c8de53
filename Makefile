# Two set-up-and-run commands (see README):
#   make demo   -> virtualenv + install + demo sweep on the embedded synthetic log + analysis
#   make test   -> virtualenv + install + default test suite (.ci/run runs the same pytest command, after lint)
#   make lint   -> ruff and mypy, configured in pyproject.toml (.ci/run runs both before the tests)
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch is installed first and only when none is importable, so that pip never resolves a
# multi-GB CUDA build on a CPU machine. On a GPU machine, install the torch build you want first.
TORCH_SPEC ?= torch==2.13.0
# Every other package at the version the test suite last passed with (pip constraints: only what recscale
# needs is installed). pyproject.toml keeps lower bounds for people who install recscale as a library.
# torch is left out: it is chosen above, or by whoever installed a GPU build first. `make lock` refreshes it.
LOCK    ?= requirements.lock

.PHONY: setup lock demo demo-check references lint test test-slow test-all bench bench-throughput gpu-check clean

$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "$(TORCH_SPEC)"
	$(BIN)/pip install -c $(LOCK) -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# Refresh requirements.lock: a new virtualenv with the newest versions pyproject.toml allows, the default
# test suite run in it, and the lock written from it only when the suite passed.
LOCK_VENV ?= .venv-lock
lock:
	rm -rf $(LOCK_VENV) && $(PY) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install "$(TORCH_SPEC)"
	$(LOCK_VENV)/bin/pip install -e ".[dev]"
	$(LOCK_VENV)/bin/python -m pytest -q
	( echo "# pip constraints: the versions the test suite passed with (make lock; torch excluded, see Makefile)"; \
	  $(LOCK_VENV)/bin/pip freeze --exclude-editable | grep -v -i '^torch==' ) > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK) && rm -rf $(LOCK_VENV)

# Writes results/demo/ (git-ignored); the committed reference copy is results/reference/demo/.
demo: setup
	$(BIN)/recscale sweep sweeps/demo.yaml
	$(BIN)/recscale analyze results/demo

# After `make demo`: do its test AUC and LogLoss equal the committed reference's, trial by trial?
demo-check: setup
	$(BIN)/recscale reference check results/demo results/reference/demo

# Rerun and republish every committed reference study, results/reference/<name>/ from sweeps/<name>.yaml (hours
# on a 2-core machine). The MovieLens-100k ones need the data set: they run when RECSCALE_ML100K names a folder
# holding u.data, u.user and u.item, and are skipped with a one-line message saying so otherwise.
REFERENCE_SWEEPS ?= demo scaling_cpu scaling_ladder helix_retained_tokens helix_asymmetric helix_ablations matched_compute delay_protocol \
	data_scaling layer_norm_eps sequential two_tasks
REFERENCE_SWEEPS_ML100K ?= ml100k layer_norm_eps_ml100k
references: setup
	for s in $(REFERENCE_SWEEPS); do \
	  $(BIN)/recscale sweep sweeps/$$s.yaml && $(BIN)/recscale reference publish results/$$s --force || exit $$?; \
	done
	@ml=$${RECSCALE_ML100K:-}; why=; \
	if [ -z "$$ml" ]; then why="RECSCALE_ML100K is not set"; \
	elif [ ! -f "$$ml/u.data" ] || [ ! -f "$$ml/u.user" ] || [ ! -f "$$ml/u.item" ]; then \
	  why="RECSCALE_ML100K=$$ml lacks u.data, u.user or u.item"; fi; \
	if [ -n "$$why" ]; then \
	  echo "make references: skipped $(REFERENCE_SWEEPS_ML100K) (MovieLens-100k data): $$why" >&2; \
	else for s in $(REFERENCE_SWEEPS_ML100K); do \
	  echo "$(BIN)/recscale sweep sweeps/$$s.yaml && $(BIN)/recscale reference publish results/$$s --force"; \
	  $(BIN)/recscale sweep sweeps/$$s.yaml && $(BIN)/recscale reference publish results/$$s --force || exit $$?; \
	done; fi

# Both must report zero errors; their configuration (rules, checked packages) is in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# pytest exits 5 when it collected no test, and `make test` then fails ("Error 5"). .ci/run instead prints a
# warning to stderr and exits 0, as the CI environment requires (its CI system reports a run with no tests).
test: setup
	$(BIN)/python -m pytest $(ARGS)

test-slow: setup
	$(BIN)/python -m pytest -m slow $(ARGS)

test-all: setup
	$(BIN)/python -m pytest -m "" $(ARGS)

# Benchmarks under tests/bench; their results are written as markdown tables to docs/benchmarks/<module>.md
# (tests/bench/write_tables.py; only the modules that ran are rewritten), the one place measurements live.
BENCH_JSON ?= .benchmarks/bench.json
bench: setup
	rm -f $(BENCH_JSON) && mkdir -p $(dir $(BENCH_JSON))
	$(BIN)/python -m pytest tests/bench -m bench --benchmark-enable --benchmark-json=$(BENCH_JSON) $(ARGS)
	$(BIN)/python tests/bench/write_tables.py $(BENCH_JSON) docs/benchmarks

# Throughput where sweeps run, on a quiet machine (about 45 minutes on 2 cores): the HSTU step beside
# generative-recommenders' at 1 and 2 threads, quiet and with one core busy (needs RECSCALE_GR_CHECKOUT and
# the `peer` extra; skipped otherwise), and the demo's training targets/s with 2 trials at once, at BASE (a git
# revision, e.g. the commit a change branched from) against this tree, plus the thread policies
# (docs/benchmarks/peer_hstu.md, concurrent_trials.md).
#   RECSCALE_GR_CHECKOUT=/path/to/generative-recommenders make bench-throughput BASE=<revision>
PEER_ARGS ?= --rounds 7 --warmup 1
bench-throughput: setup
	test -n "$(BASE)" || (echo "BASE=<git revision> is required (the code to compare with)" >&2; exit 2)
	RECSCALE_BENCH_BASE="$(BASE)" RECSCALE_PEER_BENCH_ARGS="$(PEER_ARGS)" \
		$(MAKE) bench ARGS="-k 'peer_hstu or concurrent_trials' $(ARGS)"

# CUDA tests (they skip without CUDA) and a timed WHALE epoch at the seed configuration on the medium
# synthetic log, printing targets/s and utilisation (tests/bench/gpu_check.py; says so and exits 0 without CUDA).
gpu-check: setup
	$(BIN)/python -m pytest tests/test_gpu.py tests/test_loader_paths.py -q -rs $(ARGS)
	$(BIN)/python tests/bench/gpu_check.py

clean:
	rm -rf $(VENV) .benchmarks
