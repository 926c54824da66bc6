# Quick start: `make serve` (set up + serve the bundled models on CPU), `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: shell serve test test-slow install-serve install-dev models bench reproduce mutations lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Serving only: onnxruntime, tokenizers, fastapi, ... and no torch.
# pip's own lines (one per package, a bar per download) are the progress: no -q.
$(VENV)/.serve: pyproject.toml | $(BIN)/python
	@echo "== serving dependencies into $(VENV): onnxruntime, tokenizers, fastapi, pydantic, prometheus-client (275 MB installed; about a minute)"
	$(BIN)/pip install -e .
	touch $@

# Training, export and tests. torch==2.13.0 first, from PyTorch's CPU wheel index (~200 MB; PyPI's
# Linux build pulls several GB of CUDA wheels), and pyproject's range accepts it. Where that index
# cannot be reached (machines that only see a PyPI mirror, with a CPU build on disk), plain pip.
# One probe of the index (5 s at most; the environment's https_proxy applies) decides, so such a
# machine goes straight to plain pip instead of through pip's connection retries first.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX_PROBE = $(BIN)/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' $(TORCH_INDEX)/torch/
$(VENV)/.dev: pyproject.toml | $(BIN)/python
	@echo "== step 1 of 2: torch==2.13.0, CPU build (a 192 MB download, 754 MB installed; about a minute)"
	@if $(TORCH_INDEX_PROBE) >/dev/null 2>&1; then \
		echo "torch==2.13.0 from $(TORCH_INDEX)"; \
		$(BIN)/pip install --index-url $(TORCH_INDEX) torch==2.13.0 || $(BIN)/pip install torch==2.13.0; \
	else \
		echo "$(TORCH_INDEX) cannot be reached: torch==2.13.0 from pip's configured index"; \
		$(BIN)/pip install torch==2.13.0; \
	fi
	@echo "== step 2 of 2: attserve with the training and test extras (onnx, onnxruntime, scikit-learn, pytest, ...; 1.8 GB in the venv with torch; one to two minutes)"
	$(BIN)/pip install -e '.[train,dev]'
	@echo "== $(VENV) ready: run its commands as $(BIN)/attserve, $(BIN)/python -m pytest (or make shell)"
	touch $@

install-serve: $(VENV)/.serve
install-dev: $(VENV)/.dev

serve: $(VENV)/.serve
	$(BIN)/python -m service

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q

# ruff: pyflakes, import/statement errors and complexity ([tool.ruff] in pyproject.toml)
lint: $(VENV)/.dev
	$(BIN)/ruff check .

# the slow set also runs `attserve score --ray` on a local Ray cluster: the ray extra (~300 MB)
$(VENV)/.ray: $(VENV)/.dev
	@echo "== the ray extra (about 300 MB; 15 s from a package mirror)"
	$(BIN)/pip install -e '.[ray]'
	touch $@

test-slow: $(VENV)/.dev $(VENV)/.ray
	$(BIN)/python -m pytest -q -m slow

# Does the default suite catch the bugs that matter most? (tests/mutation_check.py, ~10 min)
mutations: $(VENV)/.dev
	$(BIN)/python tests/mutation_check.py

# Rebuild every default bundle from data (hours on a 2-core CPU).
models: $(VENV)/.dev
	PATH=$(BIN):$$PATH bash tools/make_models.sh

# The ABCNN paper's benchmark rows and the AttConv paper's SciTail rows beside the papers' figures
# (docs/paper-reproduction.md); reads SICK/MSRP/WikiQA/SciTail from $ATTSERVE_BENCHMARK_DIR (default
# ../shared/data). ~31 min on 1 CPU thread for the ABCNN rows, 47 min more for SciTail's four
# (measured on a 2-core machine shared with other training).
reproduce: $(VENV)/.dev
	$(BIN)/attserve reproduce --model all --out runs/reproduce --markdown runs/reproduce/table.md

# Full benchmark against the default models (needs their checkpoints for the PyTorch figures).
bench: $(VENV)/.dev
	$(BIN)/pip install -e '.[bench]'
	$(BIN)/attserve bench --mode full --checkpoints checkpoints

# A shell with the venv's commands (attserve, python, pytest) on PATH.
shell: $(VENV)/.dev
	PATH=$(abspath $(BIN)):$$PATH VIRTUAL_ENV=$(abspath $(VENV)) $${SHELL:-bash} -i

clean:
	rm -rf $(VENV) .pytest_cache
