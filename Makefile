# nbtune developer entry points. A newcomer needs two: `make demo` and `make test`.
#
# Everything lives in ./.venv. Stamp files inside it record what was installed,
# so re-runs are fast and a change to pyproject.toml reinstalls.

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
# Browser (Playwright + Debian chromium + the built lab extension) tests: on
# when tests/browser/ exists, off otherwise. Force with BROWSER_TESTS=0 or 1.
BROWSER_TESTS ?= $(if $(wildcard tests/browser),1,0)

BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip
PIP_FLAGS ?= $(if $(CI),--progress-bar off,)
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# `pip install -e` must not run npm (pyproject's jupyter-builder hook): under make
# the `labext` target builds the lab extension, once, cached by its stamps.
export HATCH_JUPYTER_BUILDER_SKIP_NPM := 1

STAMP_VENV := $(VENV)/.stamp-venv
STAMP_TORCH := $(VENV)/.stamp-torch
STAMP_INSTALL := $(VENV)/.stamp-install
STAMP_DEV := $(VENV)/.stamp-install-dev
STAMP_DOCS := $(VENV)/.stamp-docs

LABEXT_DIR := labextension
LABEXT_OUT := nbtune/labextension/package.json
LABEXT_NODE := $(LABEXT_DIR)/node_modules/.stamp-npm-ci
LABEXT_SRC := $(shell find $(LABEXT_DIR)/src $(LABEXT_DIR)/style -type f 2>/dev/null) \
	$(wildcard $(LABEXT_DIR)/package.json $(LABEXT_DIR)/tsconfig.json)

ifneq ($(BROWSER_TESTS),0)
# without npm the extension cannot be built: the browser tests then skip, saying why
TEST_SYSDEPS := sysdeps $(if $(shell command -v npm 2>/dev/null),labext,)
endif

.DEFAULT_GOAL := help
.PHONY: help venv torch install install-dev demo test lint bench docs labext sysdeps clean distclean \
	stress stress-suite

help:
	@echo "make demo     create .venv, install nbtune, run a real tuning job on a local Dask cluster"
	@echo "make test     create .venv, install nbtune[dev], run ruff, build the docs (-W), run the test suite"
	@echo "make lint     ruff check"
	@echo "make bench    run every benchmarks/*.py (results: benchmarks/RESULTS.md)"
	@echo "make stress   run the timing-sensitive tests STRESS_ROUNDS (20) times each under one busy"
	@echo "              loop per core; stress-suite: \`make test\` twice in a fresh clone (not CI)"
	@echo "make docs     build the Sphinx docs into docs/_build/html (warnings are errors)"
	@echo "make labext   build the JupyterLab extension into nbtune/labextension (needs npm)"
	@echo "make sysdeps  install Debian's chromium (browser tests) and PostgreSQL (root only)"
	@echo "make clean    remove build outputs and caches; distclean also removes .venv"

# --- environment --------------------------------------------------------------

venv: $(STAMP_VENV)
$(STAMP_VENV):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@touch $@

# Torch first: without an NVIDIA GPU, pin the CPU build so pip takes the wheel on
# disk instead of resolving `torch>=2.4` to a multi-GB CUDA build. With a GPU,
# the project's own dependency pulls the CUDA build.
torch: $(STAMP_TORCH)
$(STAMP_TORCH): $(STAMP_VENV)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: torch comes with the project's dependencies (CUDA build)"; \
	else \
		echo "no NVIDIA GPU: installing torch==$(TORCH_VERSION) (CPU build)"; \
		$(PIP) install $(PIP_FLAGS) 'torch==$(TORCH_VERSION)'; \
	fi
	@touch $@

install: $(STAMP_INSTALL)
$(STAMP_INSTALL): pyproject.toml $(STAMP_TORCH)
	$(PIP) install $(PIP_FLAGS) -e .
	@touch $@

install-dev: $(STAMP_DEV)
$(STAMP_DEV): pyproject.toml $(STAMP_TORCH)
	$(PIP) install $(PIP_FLAGS) -e '.[dev]'
	@touch $@ $(STAMP_INSTALL)

# --- the two commands ---------------------------------------------------------

demo: install
	$(BIN)/nbtune demo

# Set-up in parallel (pip, apt, npm do not wait on each other), then the docs; the
# suite runs on two pytest-xdist workers, then the `serial` tests (they measure time
# or CPU share: see tests/conftest.py) alone. PYTEST_ADDOPTS reaches both phases.
PYTEST_WORKERS ?= 2
test:
	$(MAKE) -j3 install-dev $(TEST_SYSDEPS)
	$(MAKE) docs
	$(BIN)/ruff check nbtune tests benchmarks
	.ci/with-postgres sh -c 'rc=0; $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile \
		-m "not serial" || rc=$$?; $(BIN)/pytest -q -m serial || rc=$$?; exit $$rc'

# --- stress (not part of CI) --------------------------------------------------

# `make stress`: the test files whose outcome could depend on timing or load (the
# serial ones of tests/conftest.py, those that used to wait by sleeping or to bound
# wall time, the dashboard's) STRESS_ROUNDS times each, under STRESS_LOAD busy-loop
# processes (one per core); prints a pass/fail tally and fails on any failure
# (.ci/stress). Narrow it with STRESS_TESTS="tests/a.py tests/b.py".
# `make stress-suite`: clones the committed tree into a temp dir and runs `make test`
# there twice in a row (a fresh .venv: the better part of an hour).
STRESS_ROUNDS ?= 20
STRESS_LOAD ?= $(shell nproc 2>/dev/null || echo 2)
STRESS_LOGS ?= $(or $(TMPDIR),/tmp)/nbtune-stress
SERIAL_TESTS = $(shell sed -n '/^SERIAL = (/,/^)/p' tests/conftest.py | grep -o '"tests/[^"]*"' | tr -d '"')
STRESS_TESTS ?= $(sort $(SERIAL_TESTS) \
	tests/bubbles/test_gate.py tests/bubbles/test_stalls.py tests/bubbles/test_host.py \
	tests/runtimes/test_cpu_meter.py tests/runtimes/test_sampling_threads.py \
	tests/runtimes/test_dask_threads.py tests/runtimes/test_forkserver.py \
	tests/runtimes/test_interrupt.py tests/runtimes/test_dask_runtime.py \
	tests/runtimes/test_dask_faults.py tests/runtimes/test_dask_links.py \
	tests/reliability/test_bad_trials.py tests/reliability/test_store_integrity.py \
	tests/reliability/test_startup_worker_loss.py \
	tests/planner/test_executor_dask.py tests/fusion/test_resume_fusion.py \
	tests/store/test_resume_dask.py tests/store/test_recorder.py \
	tests/test_cli_resume_dask.py tests/test_waiting.py tests/test_demo.py \
	tests/ui/test_utilization_cpu.py \
	tests/browser/test_sidebar.py tests/browser/test_tune_notebook.py \
	tests/ui/test_snapshot.py tests/browser/test_dashboard_truth.py)

stress: install-dev
	.ci/stress $(PY) $(STRESS_ROUNDS) $(STRESS_LOAD) $(STRESS_LOGS) $(STRESS_TESTS)

stress-suite:
	@dir=$$(mktemp -d /tmp/nbtune-stress-suite.XXXXXX) && trap 'rm -rf "$$dir"' EXIT && \
	git clone -q "$(CURDIR)" "$$dir/nbtune" && cd "$$dir/nbtune" && \
	for i in 1 2; do \
		echo "stress-suite: make test, run $$i of 2, in a fresh clone ($$dir/nbtune)"; \
		$(MAKE) test || { echo "stress-suite: run $$i of 2 failed"; exit 1; }; \
	done && echo "stress-suite: make test passed twice in a row"

# --- everything else ----------------------------------------------------------

lint: install-dev
	$(BIN)/ruff check nbtune tests benchmarks

bench: install-dev
	@set -e; for f in benchmarks/*.py; do \
		[ -e "$$f" ] || continue; \
		case "$$(basename $$f)" in _*|conftest.py|summary.py|two_core_bound.py) continue;; esac; \
		echo "== $$f"; $(PY) $$f; \
	done
	$(PY) benchmarks/summary.py

docs: $(STAMP_DOCS)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

$(STAMP_DOCS): pyproject.toml $(STAMP_INSTALL)
	$(PIP) install $(PIP_FLAGS) -e '.[docs]'
	@touch $@

# The JupyterLab extension: TypeScript in labextension/, built into
# nbtune/labextension (what the wheel ships and the browser tests load).
# `labext` also copies it to .venv/share/jupyter/labextensions, where `jupyter lab`
# from .venv finds it (an editable install copied whatever was built back then).
LABEXT_VENV := $(VENV)/share/jupyter/labextensions/nbtune
labext: $(LABEXT_OUT) $(STAMP_VENV)
	@rm -rf $(LABEXT_VENV) && mkdir -p $(dir $(LABEXT_VENV))
	@cp -R nbtune/labextension $(LABEXT_VENV) && cp $(LABEXT_DIR)/install.json $(LABEXT_VENV)/
$(LABEXT_OUT): $(LABEXT_NODE) $(LABEXT_SRC)
	cd $(LABEXT_DIR) && npm run build:prod
	@test -f $@ && touch $@

# `npm install` (it keeps package-lock.json's versions), not `npm ci`: npm 11's ci
# rejects this lock file for lacking rspack's other-platform optional binaries.
$(LABEXT_NODE): $(LABEXT_DIR)/package-lock.json $(LABEXT_DIR)/package.json
	cd $(LABEXT_DIR) && npm install --no-audit --no-fund
	@touch $@

# Debian's chromium for browser tests; Playwright is pointed at /usr/bin/chromium
# (its own browser download cannot be used here). PostgreSQL comes in the same apt
# call when missing, for the store contract suite (.ci/with-postgres starts it).
sysdeps:
	@if [ -x /usr/bin/chromium ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
			chromium $$(ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || echo postgresql); \
	else \
		echo "sysdeps: /usr/bin/chromium is missing and we are not root;" \
		     "run: sudo apt-get install chromium" >&2; \
	fi

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .hypothesis docs/_build
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
