# Set-up and entry points. Every target installs what it needs into .venv first (pinned by constraints.txt).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= artifacts/quickstart

.PHONY: install quickstart test lint bench docs

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	touch $@

install: $(BIN)/.installed

# PYTHONHASHSEED is read once, at interpreter start-up: fixed here as in the Docker image and the work pools (guide §2.2).
quickstart: $(BIN)/.installed
	PYTHONHASHSEED=42 $(BIN)/rts run --config configs/quickstart.yaml --run $(RUN)
	$(BIN)/rts package verify $(RUN)/package

test: $(BIN)/.installed
	PYTHONHASHSEED=42 $(BIN)/python -m pytest -n 2 --dist loadfile

# docs/commands.md from the commands' parameter models (tests/flows/cli/test_docs.py fails when it is stale).
docs: $(BIN)/.installed
	$(BIN)/python -m flows.cli.docs

lint: $(BIN)/.installed
	$(BIN)/ruff check rtscore flows tasks tests bench
	$(BIN)/ruff format --check rtscore flows tasks tests bench
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python bench/data_bench.py
	$(BIN)/python bench/train_bench.py
	$(BIN)/python bench/calibration_bench.py
	$(BIN)/python bench/calibration_memory_bench.py
	$(BIN)/python bench/predict_memory_bench.py
	$(BIN)/python bench/require_bench.py
	$(BIN)/python bench/map_bench.py
	$(BIN)/python bench/review_export_bench.py
	$(BIN)/python bench/review_loop.py
	$(BIN)/python bench/load_verify_bench.py
	$(BIN)/python bench/fail_fast_bench.py
