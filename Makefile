# Two set-up-and-run commands (see README):
#   make demo   -> virtualenv + install + demo sweep on the embedded synthetic log + analysis
#   make test   -> virtualenv + install + default test suite (what .ci/run calls)
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch is installed first and only when none is importable, so that pip never resolves a
# multi-GB CUDA build on a CPU machine. On a GPU machine, install the torch build you want first.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test test-slow test-all bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "$(TORCH_SPEC)"
	$(BIN)/pip install -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/recscale sweep sweeps/demo.yaml
	$(BIN)/recscale analyze results/demo

# pytest exits 5 when it collected no test; that is reported, not silently passed.
test: setup
	$(BIN)/python -m pytest $(ARGS)

test-slow: setup
	$(BIN)/python -m pytest -m slow $(ARGS)

test-all: setup
	$(BIN)/python -m pytest -m "" $(ARGS)

bench: setup
	$(BIN)/python -m pytest tests/bench -m bench --benchmark-enable $(ARGS)

clean:
	rm -rf $(VENV) .benchmarks
