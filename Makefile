# Quick start: `make demo` runs the built-in demo (`make demo-full`: every method and protocol, seeds 1-3), `make test` the fast test tier; `make test-all` runs every test
# (SLURM, demo, preemption and script runs too, and the bench tier), as CI does; `make test-bench` the tests of bench/ alone.
# Both create .venv from requirements*.txt when needed, or use the virtual environment that is already active.

ifdef VIRTUAL_ENV
ENV_DIR := $(VIRTUAL_ENV)
PYTHON := $(VIRTUAL_ENV)/bin/python
else
ENV_DIR := .venv
PYTHON := .venv/bin/python
endif
SYSTEM_PYTHON ?= python3
# pytest-xdist workers (auto: one per CPU core); each test file runs whole on one worker.
TEST_WORKERS ?= auto

.PHONY: demo demo-full demo-pretrain scripts test test-bench test-all lint install install-dev clean-venv

$(PYTHON):
	$(SYSTEM_PYTHON) -m venv $(ENV_DIR)

$(ENV_DIR)/.petr-runtime: requirements.txt | $(PYTHON)
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(ENV_DIR)/.petr-dev: requirements-dev.txt $(ENV_DIR)/.petr-runtime
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

install: $(ENV_DIR)/.petr-runtime

install-dev: $(ENV_DIR)/.petr-dev

demo: install
	PYTHON=$(PYTHON) bash scripts/demo.sh

demo-full: install
	PYTHON=$(PYTHON) bash scripts/demo.sh --full

# Regenerates the demo's shipped tiny CLIPs (demo/weights: the two files, then manifest.json) with 2 torch threads;
# it prints the time each took (the manifest records it). The demo then says that it runs on regenerated weights
# unless they are the shipped ones bit for bit. `python -m demo.shipped pretrain --ship` makes them the shipped ones.
demo-pretrain: install
	$(PYTHON) -m demo.shipped pretrain

# Renders the unit commands' wrappers, scripts/<method>/<command>.sh, from the method rows of trainers/catalog.py
# (standard library only); the fast tests fail while a checked-in wrapper differs from its rendering.
scripts: | $(PYTHON)
	$(PYTHON) -m units.wrappers

# The fast tier does not even collect tests/bench (importing the benches costs every worker seconds).
test: install-dev
	$(PYTHON) -m pytest -q -m "not slow" --ignore=tests/bench -n $(TEST_WORKERS) --dist loadfile

# The bench tier: the tests of bench/ (benchmarks, upstream parity harnesses, cost measurement, demo studies), marked
# bench by tests/bench/conftest.py; the fast tier leaves them out, test-all runs them too.
test-bench: install-dev
	$(PYTHON) -m pytest -q tests/bench -n $(TEST_WORKERS) --dist loadfile

test-all: install-dev
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: install-dev
	$(PYTHON) -m ruff check .

clean-venv:
	rm -rf .venv
