# sealbench: the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv on first use and install exactly what they need into it.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
EXTRAS   ?= server,enclave,gcp,mock,client,docker,dev
comma    := ,
STAMP    := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
PACKAGES := crypto cloud mocktee server enclave benchmarks client
PYTEST_ARGS ?=

.PHONY: test demo install lint typecheck pytest perf clean link

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" --config-settings editable_mode=strict
	touch $@

# The strict editable install links every module into build/; new modules need a fresh link.
link: $(STAMP)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e . --config-settings editable_mode=strict

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
