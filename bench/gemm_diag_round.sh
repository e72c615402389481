#!/usr/bin/env bash
# One round of bench/results/gemm_sweep.md on a GPU machine (repository root; carry .whl and bench/build_gemm_diag,
# built here by `python3 bench/gemm_diagnose.py build --variants VARIANTS`):
#   1. the diagnosis (the reference timed beside VARIANTS in one process, interleaved) in PROCESSES processes;
#   2. EVALS `ptxbench eval` runs of the checked-in reference (this machine's ratio to cuBLAS);
#   3. when the fastest real variant is at least 0.2% faster in every process, PAIRS paired evaluations of it against
#      the reference (bench/paired_eval.py), the rule by which a change is promoted.
#   bash bench/gemm_diag_round.sh VARIANTS [PROCESSES=2] [EVALS=3] [PAIRS=3]   -> $OUT/round.tar.gz, $OUT/round.log
set -u
source bench/gpu_env.sh || exit 1
OUT=${OUT:-$PWD/bench_out}; mkdir -p "$OUT"
W=gemm_bf16_m8192_n7168_k5120
V=$1 P=${2:-2} E=${3:-3} PAIRS=${4:-3}
for v in ref ${V//,/ }; do  # built here and carried: a missing one would fail every process of the round
  [ -f bench/build_gemm_diag/$v.cubin ] || { echo "bench/build_gemm_diag/$v.cubin is missing: python3 bench/gemm_diagnose.py build --variants $V"; exit 1; }
done
R=$OUT/round && mkdir -p $R
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  for i in $(seq 1 $P); do
    timeout 200 python3 bench/gemm_diagnose.py run --clock-s 0 --iters 60 --variants $V --json $R/diag_$i.json \
      > $R/diag_$i.log 2>&1
    echo "diagnosis $i (rc $?):"; grep -v "^timed loop" $R/diag_$i.log | tail -30
  done
  for i in $(seq 1 $E); do
    timeout 120 python3 -m ptxbench.agent eval $W workloads/solutions/$W.cu --json > $R/eval_${i}_ref.json 2> $R/eval_${i}_ref.err
    python3 bench/eval_line.py $R/eval_${i}_ref.json "eval $i, reference"
  done
  B=$(python3 bench/gemm_diagnose.py best $R/diag_*.json)
  if [ -n "$(python3 bench/gemm_diagnose.py best --min-gain 0.2 $R/diag_*.json)" ]; then
    echo "paired: $B against the reference"
    timeout 420 python3 bench/paired_eval.py $W workloads/solutions/$W.cu bench/build_gemm_diag/$B.cu --pairs $PAIRS \
      --out $R/pairs > $R/pairs.log 2>&1
    tail -20 $R/pairs.log
  else
    echo "no variant met the rule for a paired evaluation (best: '${B}')"
  fi
} 2>&1 | tee $OUT/round.log
tar -czf $OUT/round.tar.gz -C $OUT round && rm -rf $R
