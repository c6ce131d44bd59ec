# `make run` and `make test` do all setup on a fresh machine: a virtualenv in .venv, PyTorch
# (the CPU build 2.13.0 when the venv has no torch; an existing CUDA torch is kept), the package.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
# e.g. TORCH_PIP_FLAGS="--index-url https://download.pytorch.org/whl/cpu" for a CPU-only wheel
TORCH_PIP_FLAGS ?=
# e.g. VENV_FLAGS=--system-site-packages to reuse a CUDA torch installed system-wide
VENV_FLAGS ?=
MAIN_EXPERIMENT ?= experiments/demo_fsdp.jsonnet
STAMP := $(VENV)/.catwalk-installed

.PHONY: setup run test test-fast lint typecheck format docs docs-build keys cli bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install $(TORCH_PIP_FLAGS) "$(TORCH)"
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev]'
	$(BIN)/python -m catwalk_startup
	@# Bytecode for this checkout once (where PYTHONDONTWRITEBYTECODE is set, every fresh
	@# interpreter would compile the package again: the tests start many). pip compiles every
	@# file it installs: compiling only what the tests import instead (catwalk_startup's
	@# imports) left torch's and transformers' lazily imported modules to every process, and a
	@# fresh clone's `make test` took 69 s longer.
	@$(BIN)/python -m compileall -q catwalk_steps catwalk_startup tests > /dev/null
	@touch $@

# The main job on the embedded default (no download); prints the metrics table.
run: setup
	$(BIN)/tango run $(MAIN_EXPERIMENT)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over the package (settings: pyproject.toml, [tool.mypy]); about 30 s of CPU without a cache.
typecheck: setup
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The documentation site (docs/, mkdocs.yml): served with live reload at http://127.0.0.1:8000.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Built as CI builds it: --strict, so a broken link, a page missing from the nav or an API
# reference that does not resolve fails (not --quiet: it hides the warnings --strict counts);
# the site goes to site/ (git-ignored).
docs-build: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The configuration-keys page (docs/reference/keys.md), generated from the code; a test fails
# when the committed page differs from what this writes.
keys: setup
	$(BIN)/python docs/gen_keys.py

# The command-line page (docs/reference/cli.md), generated from the commands' argparse
# definitions; a test fails when the committed page, or a command's --help, differs from it.
cli: setup
	$(BIN)/python docs/gen_cli.py

# Everything CI runs: lint, the documentation site, then the whole suite (unit, tango-run integration, 2-process gloo),
# in TEST_WORKERS pytest-xdist workers, a file's tests in one worker (their module fixtures are
# made once; session fixtures once per session: conftest.py).
# 3 on 2 cores: some tests wait (a timeout, a lost host, a held step) and a third worker runs
# meanwhile; fresh clones' pytest took 8:24 and 8:41 with 3, 8:37 and 8:53 with 2 (before
# two cuts of the commands' CPU: 6:00 and 6:03 with 3 after them); at 1119 tests 10:19-10:27
# with 3 and 10:57 with 4; at 1286 tests 10:59 with 3; at 1365 tests 11:22 with 3 and 11:27 with 4,
# then 9:10 with 3 once each tango run's per-step look-ups were made once; at 1404 tests, mypy
# beside the suite, 9:59 with the venv set up (docs/reference/tests.md).
# The type check runs beside the suite (its ~25 s of CPU in the suite's waits, not before it);
# its output is printed after the suite's, and either failing fails `make test`.
TEST_WORKERS ?= 3
test: lint docs-build
	@typed=$$(mktemp); ($(BIN)/mypy > $$typed 2>&1; echo $$? >> $$typed) & checker=$$!; \
	$(BIN)/pytest -ra -n $(TEST_WORKERS) --dist loadfile; suite=$$?; \
	wait $$checker; echo "mypy:"; head -n -1 $$typed; status=$$(tail -n 1 $$typed); \
	rm -f $$typed; test $$suite -eq 0 && test $$status -eq 0

# Unit tests only: no multi-process or training runs.
test-fast: lint typecheck
	$(BIN)/pytest -ra -m "not slow and not distributed"

bench: setup
	$(BIN)/python bench/scoring.py

clean:
	rm -rf workspace site .pytest_cache .ruff_cache .mypy_cache
