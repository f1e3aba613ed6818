# phasescope — every target creates and uses a local .venv. The only system-wide step is
# `make test` installing Debian's chromium for the browser test, where it runs as root with apt-get.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PS     := $(BIN)/phasescope
STAMP  := $(VENV)/.phasescope-installed
TEST_STAMP := $(VENV)/.phasescope-test-extras

.PHONY: demo test check lint venv engine browser unit clean help

# Python compiles each module it imports; with PYTHONDONTWRITEBYTECODE set (container images often set it)
# it compiles the project's src/ and tests/ again in every process: `make test` starts several hundred (the
# CLI as a subprocess, the fake servers, four pytest workers), so a fresh clone spent about a fifth of its
# fake-server tests' CPU recompiling the same files. Here the first process writes the bytecode (to the
# ignored __pycache__/ folders; `make clean` removes them) and the others load it. An empty value is unset.
export PYTHONDONTWRITEBYTECODE :=

help:
	@echo "make demo   - set up, build the embedded engine (cached), measure this machine once, run 'phasescope probe'"
	@echo "make test   - set up, build the embedded engine (cached), lint, type-check, run the whole test suite"
	@echo "make check  - lint (ruff), type-check (mypy) and the pure unit tier: no engine, no sockets, under 2 minutes"
	@echo "make unit   - unit tests only (no engine needed)"

# The user's install: core + the embedded engine's build tools and bundled model. `make test` asks for the
# tests' extras too (Ray scale-out, PNG export; EXTRAS below), so a fresh clone installs once, not twice.
EXTRAS      ?= engine,test
TEST_EXTRAS := engine,test,ray,png
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	@touch $@
	@if [ "$(EXTRAS)" = "$(TEST_EXTRAS)" ]; then touch $(TEST_STAMP); fi

# The tests also exercise the optional extras (a venv made by `make demo` gets them here).
$(TEST_STAMP): $(STAMP)
	@if [ ! -e $@ ] || [ $(STAMP) -nt $@ ]; then $(BIN)/python -m pip install -q -e '.[$(TEST_EXTRAS)]'; fi
	@touch $@

venv: $(STAMP)

# Builds llama-server from the pinned llama.cpp source and assembles the bundled model;
# a no-op (seconds) when the cache already holds both.
engine: $(STAMP)
	$(PS) engine install

# Debian's chromium for the report browser test; the test skips with a reason where it cannot be had.
browser:
	@command -v chromium >/dev/null 2>&1 || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium not installed: the browser test will skip"; \
	  else echo "chromium not installed (needs root and apt-get): the browser test will skip"; fi; }

# The main job: measure this machine once (so the card shows ceilings), then probe the embedded engine.
demo: engine
	$(PS) hw --if-missing
	$(PS) probe

# The linter and the type checker, configured in pyproject.toml ([tool.ruff], [tool.mypy]); both report nothing.
lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

# The integration tier's tests of the embedded engine and those marked `serial` (they load the cores
# themselves) run one at a time, first, on a quiet machine: llama-server's threads collapse beside other
# work. Then the pure unit tier and the fake-server tests together, four at a time (pytest-xdist): the fake
# tests spend most of their time waiting on their servers (257 CPU-s in 871 s), so the unit tier's CPU
# work fills those waits instead of running on its own first (about 40 s saved); each test is the others'
# busy host, which the fake tests must survive (they also pass `make test` beside two CPU spinners).
# Eight at a time was 40 s faster, but their timing tests failed there once in three clean-clone runs.
test: EXTRAS = $(TEST_EXTRAS)
test: lint engine browser $(TEST_STAMP)
	$(BIN)/python -m pytest -q --durations=15 -m "engine or serial" tests/integration
	$(BIN)/python -m pytest -q --durations=15 -n 4 --dist worksteal -m "not (engine or serial)" tests/unit tests/integration

# The quick gate before a commit: lint, types and tests/unit (pure: no sockets, no processes, no engine).
check: lint
	$(BIN)/python -m pytest -q -n auto tests/unit

unit: $(STAMP)
	$(BIN)/python -m pytest -q -n auto tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
	find src tests benchmarks -name __pycache__ -type d -prune -exec rm -rf {} +
