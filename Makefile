# sealbench: the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv on first use and install exactly what they need into it.

SHELL       := /bin/bash
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
EXTRAS   ?= server,enclave,gcp,mock,client,docker,datasets,dev
# The demo needs these only (no test toolchain: torch, playwright, SimpleITK come with `dev`).
DEMO_EXTRAS ?= server,enclave,gcp,mock,client,datasets
comma    := ,
STAMP    := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO_STAMP := $(VENV)/.installed-$(subst $(comma),-,$(DEMO_EXTRAS))
# A venv that has every extra already has the demo's: `make demo` after `make test` installs
# nothing more.
DEMO_INSTALL = $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
PACKAGES := crypto contract platforms gcp mocktee server enclave benchmarks client
PYTEST_ARGS ?=
# PYTEST_WORKERS=2 runs the suite on two pytest-xdist workers, each test module whole on one
# worker and the tests of one session-wide world (Docker engine, wheel, mock enclave) together
# (tests/conftest.py's groups). One process by default: side by side on a loaded 2-core machine,
# two workers spent ~60% more CPU on an integration subset and finished later, and 44-59% more
# on the crypto and mock TEE unit tiers for 9-24% less wall; on 1,948 unit tests 11% more CPU
# for 27% less wall (tests/perf/suite_bench.py; issue 42). Not yet measured on a whole run.
PYTEST_WORKERS ?= 0
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup)
# setuptools' build-backend notices (editable install, data folders) are not ours to act on.
PIP      := PYTHONWARNINGS=ignore $(PY) -m pip
# Every file of the packages: the strict editable install links each one, so a new or removed
# file needs a fresh link, an edited one does not.
MODULES  := $(shell find $(PACKAGES) -type f -not -path '*/__pycache__/*' | sort)

.PHONY: test demo install lint typecheck pytest perf clean link demo-link FORCE

# pip's whole log goes to $(VENV)/install.log; the terminal gets a line per package fetched and
# per stage, and the log's end when pip fails.
define pip_install
	@echo "installing sealbench[$(1)] into $(VENV) (pip's log: $(VENV)/install.log)"
	@$(PIP) install --progress-bar off -e ".[$(1)]" --config-settings editable_mode=strict \
	    > >(tee $(VENV)/install.log | sed -un -E \
	        -e 's/^Collecting ([A-Za-z0-9_.-]+).*/  fetching \1/p' \
	        -e 's/^Installing collected packages: (.*)/  installing the packages fetched (a minute or two)/p' \
	        -e 's/^Successfully installed .*/  installed/p') 2>&1 \
	    || { status=$$?; sleep 1; echo "pip failed; the end of $(VENV)/install.log:"; \
	         tail -n 30 $(VENV)/install.log; exit $$status; }
	@sleep 0.2
	touch $@
endef

$(VENV)/bin/python:
	@echo "creating the virtual environment $(VENV) ($(PYTHON))"
	$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip setuptools wheel

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(call pip_install,$(EXTRAS))

ifneq ($(DEMO_STAMP),$(STAMP))
$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(call pip_install,$(DEMO_EXTRAS))
endif

# The list of package files, rewritten only when it changes (so its date says when it did).
$(VENV)/.modules: FORCE | $(VENV)/bin/python
	@echo "$(MODULES)" | cmp -s - $@ || echo "$(MODULES)" > $@

# The strict editable install links every file into build/; relink only when the list changed
# (an install links too, so it runs after one: see link and demo-link).
$(VENV)/.linked: $(VENV)/.modules | $(VENV)/bin/python
	$(PIP) install --quiet --no-deps --no-build-isolation -e . --config-settings editable_mode=strict
	touch $@

link: $(STAMP)
	@$(MAKE) --no-print-directory $(VENV)/.linked

demo-link: $(DEMO_INSTALL)
	@$(MAKE) --no-print-directory $(VENV)/.linked

install: link

lint: link
	$(VENV)/bin/ruff check .

typecheck: link
	$(VENV)/bin/mypy -p sealbench.crypto -p sealbench.contract -p sealbench.platforms -p sealbench.gcp -p sealbench.mocktee -p sealbench.server -p sealbench.enclave -p sealbench.benchmarks -p sealbench.client

pytest: link
	$(VENV)/bin/pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test: lint typecheck pytest

demo: demo-link
	$(PY) -m sealbench.client.cli demo $(DEMO_ARGS)

perf: link
	$(PY) tests/perf/crypto_bench.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
