# Two set-up-and-run commands (see README):
#   make demo   -> virtualenv + install + demo sweep on the embedded synthetic log + analysis
#   make test   -> virtualenv + install + default test suite (what .ci/run calls)
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch is installed first and only when none is importable, so that pip never resolves a
# multi-GB CUDA build on a CPU machine. On a GPU machine, install the torch build you want first.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo demo-check references test test-slow test-all bench gpu-check clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "$(TORCH_SPEC)"
	$(BIN)/pip install -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# Writes results/demo/ (git-ignored); the committed reference copy is results/reference/demo/.
demo: setup
	$(BIN)/recscale sweep sweeps/demo.yaml
	$(BIN)/recscale analyze results/demo

# After `make demo`: do its test AUC and LogLoss equal the committed reference's, trial by trial?
demo-check: setup
	$(BIN)/recscale reference check results/demo results/reference/demo

# Regenerate every committed CPU reference study (about an hour on a 2-core machine; see README).
REFERENCE_SWEEPS ?= demo scaling_cpu helix_retained_tokens delay_protocol
references: setup
	for s in $(REFERENCE_SWEEPS); do \
	  $(BIN)/recscale sweep sweeps/$$s.yaml && $(BIN)/recscale reference publish results/$$s || exit $$?; \
	done

# pytest exits 5 when it collected no test; that is reported, not silently passed.
test: setup
	$(BIN)/python -m pytest $(ARGS)

test-slow: setup
	$(BIN)/python -m pytest -m slow $(ARGS)

test-all: setup
	$(BIN)/python -m pytest -m "" $(ARGS)

bench: setup
	$(BIN)/python -m pytest tests/bench -m bench --benchmark-enable $(ARGS)

# CUDA tests (they skip without CUDA) and a timed WHALE epoch at the seed configuration on the medium
# synthetic log, printing targets/s and utilisation (harness/gpu_check.py; says so and exits 0 without CUDA).
gpu-check: setup
	$(BIN)/python -m pytest tests/test_gpu.py tests/test_loader_paths.py -q -rs $(ARGS)
	$(BIN)/python -m harness.gpu_check

clean:
	rm -rf $(VENV) .benchmarks
