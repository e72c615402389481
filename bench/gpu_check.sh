#!/usr/bin/env bash
# The GPU evaluator's checks on a GPU machine, logs under $OUT (default ./gpu_check_out):
# GPU tests, harness cost on the GEMM task, the A/A test, the fault corpus back to back.
# Usage (repository root):  bash bench/gpu_check.sh [corpus reps] [corpus max seconds]
set -uo pipefail
OUT=${OUT:-$PWD/gpu_check_out}; mkdir -p "$OUT"
REPS=${1:-100}; MAXS=${2:-200}
source bench/gpu_env.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD/tests
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
TESTS=${TESTS:-tests/tools/test_gpu_evaluator.py tests/workloads/test_fault_corpus.py tests/workloads/test_attention_solutions.py}
timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m gpu -q -p no:cacheprovider --durations=15 $TESTS \
  2>&1 | tee "$OUT/pytest_gpu.log"; t1=$(date +%s)
[ -z "${SKIP_COST:-}" ] && timeout 120 python3 bench/harness_cost.py --reps 5 --json "$OUT/cost.json" 2>&1 | tee "$OUT/cost.log"
t2=$(date +%s)
[ -z "${SKIP_AA:-}" ] && timeout 120 python3 bench/aa_test.py --rounds 5 --json "$OUT/aa.json" 2>&1 | tee "$OUT/aa.log"
t3=$(date +%s)
timeout $((MAXS + 90)) python3 bench/fault_corpus.py --reps "$REPS" --max-seconds "$MAXS" --json "$OUT/corpus.json" 2>&1 \
  | tee "$OUT/corpus.log"; t4=$(date +%s)
echo "== seconds: pytest $((t1 - t0)), cost $((t2 - t1)), aa $((t3 - t2)), corpus $((t4 - t3))"
echo "== pytest"; tail -n 25 "$OUT/pytest_gpu.log"
echo "== cost"; cat "$OUT/cost.log" 2>/dev/null
echo "== A/A"; cat "$OUT/aa.log" 2>/dev/null
echo "== corpus"; tail -n 30 "$OUT/corpus.log"
