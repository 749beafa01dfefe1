# The README's commands. `make test` is what CI runs.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup controlplane demo test unit lint bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

controlplane:
	bash controlplane/build.sh

demo: setup controlplane
	$(VENV)/bin/dispatcher demo

test: setup controlplane
	$(PY) -m ruff check dispatcher tests
	$(PY) -m mypy
	$(PY) -m pytest -q -p no:cacheprovider

unit: setup
	$(PY) -m pytest -q tests/unit

lint: setup
	$(PY) -m ruff check dispatcher tests
	$(PY) -m mypy
