# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test check lint typecheck clean chromium

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/slotward serve --demo-key

# --no-cache: ruff's cache is keyed by each file's content, but whether an
# import is first-party (how isort sorts it) depends on which folders exist;
# a cached verdict once passed here and failed on a fresh clone.
lint: $(STAMP)
	$(BIN)/ruff format --check --no-cache .
	$(BIN)/ruff check --no-cache .

typecheck: $(STAMP)
	$(BIN)/mypy -p slotward
	$(BIN)/mypy tests

# The dashboard's browser tests (tests/e2e/browser) drive Debian's chromium with
# Playwright for Python (in the dev extra); Playwright's own browser download is
# never used. Installed here when missing, as root (CI runs as root); otherwise
# the command to run is printed. Quick when it is there already.
CHROMIUM := /usr/bin/chromium

chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser tests (tests/e2e/browser)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends chromium >/dev/null && \
		test -x $(CHROMIUM); \
	else \
		echo "make test needs Debian's chromium at $(CHROMIUM) for the browser tests (tests/e2e/browser):" >&2; \
		echo "    sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium" >&2; \
		exit 1; \
	fi

# Two workers (pytest-xdist), one per core of CI's machine; each starts its own
# PostgreSQL and Radicale (README, Tests). TEST_WORKERS=0 runs in one process.
# PYTHONDONTWRITEBYTECODE is lifted for the run: without .pyc files each worker
# compiles and rewrites the whole suite (10 s) and each `slotward` process a test
# starts compiles the package again (0.4 s, some 200 times).
TEST_WORKERS ?= 2
test: lint typecheck chromium
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

# The fast lane for iteration: lint, types, the engine's unit tests, the
# architecture rules (imports, the service layer, the tool registry), and the
# store contract suite on the fakes and SQLite
# (no server, no PostgreSQL: its contract tests are the ones with the id
# `postgres`). Under 3 minutes (on two workers as `make test`: 55 s of pytest, not
# 95); `make test` runs everything.
check: lint typecheck
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal \
		tests/unit tests/test_architecture.py tests/test_service_layer.py \
		tests/test_tool_registry.py tests/test_docs_architecture.py tests/test_outbound_http.py \
		tests/test_docs_standalone.py tests/test_kit_imports.py tests/test_no_timed_assertions.py tests/test_no_lenient_xfail.py \
		tests/test_parallel_safety.py tests/test_peeks.py tests/test_prebuilt_plans.py \
		tests/contract \
		-k "not (contract and postgres)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
