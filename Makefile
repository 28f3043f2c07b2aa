# sealbench: the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv on first use and install exactly what they need into it.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
EXTRAS   ?= server,enclave,gcp,mock,client,docker,datasets,dev
comma    := ,
STAMP    := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
PACKAGES := crypto cloud mocktee server enclave benchmarks client
PYTEST_ARGS ?=
# setuptools' build-backend notices (editable install, data folders) are not ours to act on.
PIP      := PYTHONWARNINGS=ignore $(PY) -m pip
# Every file of the packages: the strict editable install links each one, so a new or removed
# file needs a fresh link, an edited one does not.
MODULES  := $(shell find $(PACKAGES) -type f -not -path '*/__pycache__/*' | sort)

.PHONY: test demo install lint typecheck pytest perf clean link FORCE

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip setuptools wheel

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet -e ".[$(EXTRAS)]" --config-settings editable_mode=strict
	touch $@

# The list of package files, rewritten only when it changes (so its date says when it did).
$(VENV)/.modules: FORCE | $(VENV)/bin/python
	@echo "$(MODULES)" | cmp -s - $@ || echo "$(MODULES)" > $@

# The strict editable install links every file into build/; relink only when the list changed.
$(VENV)/.linked: $(STAMP) $(VENV)/.modules
	$(PIP) install --quiet --no-deps --no-build-isolation -e . --config-settings editable_mode=strict
	touch $@

link: $(VENV)/.linked

install: link

lint: link
	$(VENV)/bin/ruff check .

typecheck: link
	$(VENV)/bin/mypy -p sealbench.crypto -p sealbench.cloud -p sealbench.mocktee -p sealbench.server -p sealbench.enclave -p sealbench.benchmarks -p sealbench.client

pytest: link
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

demo: link
	$(PY) -m sealbench.client.cli demo $(DEMO_ARGS)

perf: link
	$(PY) tests/perf/crypto_bench.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
