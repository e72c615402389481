#!/usr/bin/env bash
# The end-to-end runs recorded in docs/: one device call (repository root, carry=[".whl", ".whl-ray"]):
#
#   bash bench/h200_examples.sh
#
# 1. `ptxbench optimize` of the GEMM task with the built-in tuner, 4 turns
# 2. `ptxbench synth-repairs` on the reference GEMM, then `export --recipe fixit`
# 3. a 2 models x 2 workloads x 2 trajectories bench (bench/h200_bench.sh local)
# 4. the same bench machinery on a real one-GPU local Ray cluster, small matrix
# Everything (run folders, logs, scores) lands in $OUT/results.tar.gz, re-packed after every step so that a
# call cut short still returns what finished; each step has its own time limit; a table of steps ends the output.
set -uo pipefail
FINAL=${OUT:-$PWD/bench_out}; mkdir -p "$FINAL"
OUT=/tmp/results; mkdir -p "$OUT"
pack() { tar czf "$FINAL/results.tar.gz" -C /tmp results; }
source bench/gpu_env.sh || exit 1
PB=(python3 -m ptxbench.agent)  # an array, not a function: `timeout` runs programs only
R=$OUT/runs; mkdir -p "$R"
declare -A RC T
step() {  # step NAME LIMIT_S command...
  local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  echo "== $name"; timeout --signal=KILL "$limit" "$@" 2>&1 | tee "$OUT/$name.log"; RC[$name]=${PIPESTATUS[0]}
  T[$name]=$(( $(date +%s) - t0 ))
  pack
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"

step optimize "${OPT_LIMIT:-130}" "${PB[@]}" optimize gemm_bf16_m8192_n7168_k5120 --model builtin/tuner --turns 4 \
  --run-dir "$R/optimize"

step synth "${SYNTH_LIMIT:-110}" "${PB[@]}" synth-repairs gemm_bf16_m8192_n7168_k5120 --run-dir "$R/synth" --timeout 5
step export "${EXPORT_LIMIT:-30}" "${PB[@]}" export "$R/synth" --recipe fixit --out "$R/synth-fixit" --format jsonl \
  --no-require-target --include-held-out

[ "${SKIP_BENCH:-0}" = 0 ] && step bench "${BENCH_LIMIT:-190}" env OUT="$OUT" TURNS=${BENCH_TURNS:-2} WORKLOADS=${BENCH_WORKLOADS:-gemm_bf16_m8192_n7168_k5120,mha_fwd_d128} NAME=${BENCH_NAME:-h200-local} BENCH_TIMEOUT=$(( ${BENCH_LIMIT:-190} - 20 )) bash bench/h200_bench.sh local

if [ -d .whl-ray ] && [ "${SKIP_RAY:-0}" = 0 ]; then
  step ray "${RAY_LIMIT:-80}" env OUT="$OUT" MODELS=builtin/reference WORKLOADS=gemm_bf16_m8192_n7168_k5120 \
    TRAJECTORIES=2 TURNS=1 BENCH_TIMEOUT=$(( ${RAY_LIMIT:-80} - 15 )) bash bench/h200_bench.sh ray
fi

echo; echo "| step | exit | seconds |"; echo "|---|---|---|"
for s in optimize synth export bench ray; do [ -n "${RC[$s]:-}" ] && echo "| $s | ${RC[$s]} | ${T[$s]} |"; done
