# The two commands of the README's quick start: `make run` and `make test`.
# Both create .venv and install what is needed first (only when pyproject.toml changed).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of PyTorch. With a CUDA build already in $(VENV), nothing is replaced.
TORCH ?= torch==2.13.0

# pytest-xdist's workers for the tests that measure nothing (one test file per worker: a file's shared
# engines and models stay in one process); the `timing` tests then run alone (tests/conftest.py).
TEST_WORKERS ?= 2
PYTEST := QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q
# exit status 5: no test selected (e.g. no slow test measures time)
define run_tests
	$(PYTEST) -m "$(1) and not timing" -n $(TEST_WORKERS) --dist loadfile
	$(PYTEST) -m "$(1) and timing" || test $$? -eq 5
endef

.PHONY: run test test-slow test-vllm test-all bench lint install install-dev bytecode clean aiperf aiperf-check

run: install
	$(PY) main.py

test: install-dev  # the default run: everything but `slow`
	$(call run_tests,not slow)

test-slow: install-dev  # what `make test` leaves out but vLLM: GPT-2-sized work (CI runs it after `make test`)
	$(call run_tests,slow and not vllm)

test-vllm: install-dev  # the real vLLM CPU server (makes its environment on first use)
	$(PYTEST) -m vllm

test-all: test test-slow test-vllm

# ruff's checks, then mypy over the package as it is imported (whistle_stop.backends, whistle_stop.gui):
# the editable install maps those names to the checkout's folders, which mypy cannot follow, so
# .mypy_root/whistle_stop/ links them.
lint: install-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	mkdir -p .mypy_root/whistle_stop
	for folder in backends gui resources; do ln -sfn "$(CURDIR)/$$folder" .mypy_root/whistle_stop/$$folder; done
	MYPYPATH=.mypy_root $(PY) -m mypy -p whistle_stop.backends -p whistle_stop.gui

bench: install
	$(PY) main.py bench --model random:gpt2 --backends hf,hf-int8 --repeats 3

# NVIDIA's aiperf in a venv of its own: it pins psutil, rich and huggingface_hub below the app's
# (pip would downgrade them in .venv), so it is no extra of pyproject.toml.
AIPERF_VENV ?= .venv-aiperf
aiperf: $(AIPERF_VENV)/bin/aiperf
$(AIPERF_VENV)/bin/aiperf:
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q aiperf

# aiperf and `bench --concurrency 1,2,4` against one `serve` (docs/methodology.md#checked-against-other-tools)
aiperf-check: install aiperf
	$(PY) -m scripts.aiperf_check --model random:gpt2 --threads 1 --requests 20 --repeats 5

install: $(VENV)/.installed bytecode
install-dev: $(VENV)/.installed-dev bytecode

# The app's bytecode, as a wheel install ships it: where PYTHONDONTWRITEBYTECODE is set, every
# engine worker would otherwise compile the app's modules from source in its cold start
# (backends/storage/bytecode.py). Quick when nothing changed.
bytecode: $(VENV)/.installed
	$(PY) -m compileall -q backends gui resources scripts main.py

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e .
	touch $@

# The peer engines (llama.cpp builds from source: minutes) are optional: if they cannot be
# installed, their tests are skipped and the app lists them as unavailable.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q -e ".[peers]" || echo "warning: the optional [peers] engines could not be installed; their tests will be skipped"
	for extra in ortgenai openvino-genai tf; do start=$$(date +%s); \
	  $(PY) -m pip install -q -e ".[$$extra]" && echo "[$$extra] installed in $$(( $$(date +%s) - start )) s" \
	  || echo "warning: the optional [$$extra] engines could not be installed; their tests will be skipped"; done
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .mypy_root .mypy_cache .ruff_cache
