#!/usr/bin/env bash
# One-shot GPU check of logitjudge, to run on a CUDA machine (from any directory):
#   bash benchmarks/gpu_check.sh
# 1. environment report, 2. GPU tests of the kernels (pytest -m gpu), 3. kernel benchmark (full CUDA grid),
# 4. engine benchmark (python -m benchmarks.engine --device cuda --dtype bf16) if benchmarks/engine.py exists,
# 5. per architecture family (tests/test_families.py builders, random weights, hidden 256): the mode `auto`
#    picks, an exactness audit against the plain forward and a throughput table (benchmarks/families.py),
# 6. where the machine has 2+ GPUs: two torchrun ranks, each on its own GPU (benchmarks/torchrun_check.py),
# 7. where vLLM is installed: `logitjudge score --engine vllm` against `--engine native` (bf16 and fp32) on the
#    demo texts, max |dp| between the tables and the timings (benchmarks/vllm_check.py), in the time left.
# Every step has its own timeout; the whole script stays under 8 minutes. A failing step does not stop
# the later ones; the exit status is that of the first failure. Outputs go to ${OUT:-benchmarks/results}.
# Nothing is installed when the packages import; otherwise logitjudge_kernels is made importable through
# a folder of symlinks on PYTHONPATH, and only as a last resort `pip install -e . --no-deps`.
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-benchmarks/results}"
mkdir -p "$OUT_DIR"
START=$(date +%s)
STATUS=0

if [ -z "${PYTHON:-}" ]; then  # the first interpreter that has torch: CUDA-enabled preferred
  PYTHON=python3
  for cand in .venv/bin/python python3 python; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
      PYTHON=$cand; break
    fi
  done
  if [ "$PYTHON" = python3 ] && ! python3 -c 'import torch' 2>/dev/null && [ -x .venv/bin/python ]; then
    PYTHON=.venv/bin/python
  fi
fi

step() {  # step NAME TIMEOUT_S CMD... : run with a timeout, log to $OUT_DIR/NAME.txt, remember failures
  local name=$1 limit=$2
  shift 2
  echo "=== $name (timeout ${limit}s, t=$(( $(date +%s) - START ))s): $*"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.txt"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc" | tee -a "$OUT_DIR/summary.txt"
  if [ "$rc" -ne 0 ] && [ "$STATUS" -eq 0 ]; then STATUS=$rc; fi
}

: > "$OUT_DIR/summary.txt"
if ! "$PYTHON" -c 'import logitjudge_kernels' 2>/dev/null; then
  SHIM="$(mktemp -d)"
  ln -s "$PWD/kernels" "$SHIM/logitjudge_kernels"
  ln -s "$PWD/logitjudge" "$SHIM/logitjudge"
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
  if "$PYTHON" -c 'import torch' 2>/dev/null && ! "$PYTHON" -c 'import logitjudge_kernels' 2>/dev/null; then
    "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . || STATUS=1
  fi
fi

step env 60 bash -c "nvidia-smi; $PYTHON -c 'import torch, logitjudge_kernels as k; \
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available(), \
torch.cuda.get_device_name() if torch.cuda.is_available() else \"-\"); print(\"triton\", k.HAS_TRITON, \
\"usable\", k.triton_usable(torch.device(\"cuda\")))'"

# --noconftest: the kernel tests need no fixtures; tests/conftest.py would also import transformers & co.
step gpu_tests 200 "$PYTHON" -m pytest -q -p no:cacheprovider --noconftest -m gpu -rs tests/test_kernels.py \
  --junitxml="$OUT_DIR/gpu_tests.xml"

step kernels_bench 150 "$PYTHON" -m benchmarks.kernel_speed --device cuda --out "$OUT_DIR/kernels.json"

step families 120 "$PYTHON" -m benchmarks.families --device cuda --width 256 --texts 4 --text-tokens 400 \
  --verify 5 --out "$OUT_DIR/families.json"

if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  step two_ranks 120 "$PYTHON" -m benchmarks.torchrun_check
else
  echo "=== two_ranks: fewer than 2 GPUs, skipped" | tee -a "$OUT_DIR/summary.txt"
fi

if [ -f benchmarks/engine.py ]; then
  LEFT=$(( 460 - ($(date +%s) - START) ))
  if [ "$LEFT" -gt 20 ]; then
    step engine_bench "$LEFT" "$PYTHON" -m benchmarks.engine --device cuda --dtype bf16
  else
    echo "=== engine_bench: skipped, only ${LEFT}s left" | tee -a "$OUT_DIR/summary.txt"
  fi
else
  echo "=== engine_bench: benchmarks/engine.py not present, skipped" | tee -a "$OUT_DIR/summary.txt"
fi

if ! "$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' 2>/dev/null; then
  echo "=== vllm_check: vLLM is not installed (docs/scale.md), skipped" | tee -a "$OUT_DIR/summary.txt"
elif ! "$PYTHON" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "=== vllm_check: no GPU visible to torch, skipped" | tee -a "$OUT_DIR/summary.txt"
else
  LEFT=$(( 465 - ($(date +%s) - START) ))
  if [ "$LEFT" -gt 90 ]; then
    step vllm_check "$LEFT" "$PYTHON" -m benchmarks.vllm_check --device cuda --dtypes bf16,fp32 \
      --out "$OUT_DIR/vllm_check"
  else
    echo "=== vllm_check: skipped, only ${LEFT}s left" | tee -a "$OUT_DIR/summary.txt"
  fi
fi

echo "=== done in $(( $(date +%s) - START ))s, status $STATUS; outputs in $OUT_DIR" | tee -a "$OUT_DIR/summary.txt"
exit "$STATUS"
