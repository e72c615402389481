#!/usr/bin/env bash
# builtin/tuner's climb from its weak start, three times, for docs/examples/tuner-climb/. One device call from the
# repository root (carry=[".whl"]):
#
#   bash bench/tuner_climb.sh                 # the GEMM, into $OUT/tuner-climb/
#   bash bench/tuner_climb.sh mha_fwd_d128    # the attention forward, into $OUT/tuner-climb-mha_fwd_d128/
#   TURNS=6 RUN_LIMIT=190 bash bench/tuner_climb.sh mha_bwd_d128   # the backward, from the checked-in file's point
#
# Each run: `ptxbench optimize WORKLOAD --model builtin/tuner:weak --turns 8 --target-speedup 0` (WORKLOAD: the
# first argument, default gemm_bf16_m8192_n7168_k5120; any mha_fwd_* works too) into $D/run{1,2,3} (turn 1 is the
# template's weak_params(): workloads/solutions/gemm_template.py, or attention_template.py's weak_params(workload):
# one 64-row consumer, 64-key tiles, 2 stages; every later turn
# is the move the last evaluations pointed at, with the reason in the reply), then `ptxbench report` into each run's report/, then one line per
# run: best speedup and the turn it was reached. The goal (issue 14): >= 1.0x the library (cuBLAS, cuDNN) within
# 8 turns, every run.
# Cost per turn: the GEMM ~2 s of GPU (correctness + timing), the d128 attention forward ~6 s, plus an Nsight
# Compute profile (~12 s GEMM, ~11 s attention) on the turns the loop's profile policy takes one (the first pass and
# each new best). GEMM: about 2 min a run, under 7 min in all (RUN_LIMIT caps each run, default 200 s). Attention:
# about 2 min a run (8 x 6 s + ~5 profiles + start), about 6-7 min in all (RUN_LIMIT default 170 s).
# The folder comes back packed as $OUT/$SUB.tar.gz (CLIMB_ONE_TAR=0 leaves it unpacked). Afterwards, on the CPU
# machine: unpack it and copy $SUB/run* to docs/examples/tuner-climb/ (the GEMM) or
# docs/examples/tuner-climb-mha_fwd_d128/ (without checkpoints.*; the runs that reached their stop event come sealed).
set -uo pipefail
W=${1:-gemm_bf16_m8192_n7168_k5120}
case "$W" in
  gemm_*) SUB=tuner-climb; LIMIT=200 ;;
  mha_fwd_*) SUB=tuner-climb-$W; LIMIT=170 ;;
  mha_bwd_*) SUB=tuner-climb-$W; LIMIT=190 ;;  # ~12 s a timed evaluation at D = 128, ~20 s a profile
  *) echo "tuner_climb.sh: $W has no template builtin/tuner searches (gemm_*, mha_fwd_*, mha_bwd_*)" >&2; exit 2 ;;
esac
OUT=${OUT:-$PWD/bench_out}; D=$OUT/$SUB; mkdir -p "$D"
source bench/gpu_env.sh || exit 1
PB=(python3 -m ptxbench.agent)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$D/gpu.txt"
for i in 1 2 3; do
  t0=$(date +%s)
  timeout --signal=KILL "${RUN_LIMIT:-$LIMIT}" "${PB[@]}" optimize "$W" --model builtin/tuner:weak --turns "${TURNS:-8}" \
    --target-speedup 0 --quiet --run-dir "$D/run$i" 2>&1 | tee "$D/run$i.log"
  echo "run$i: exit ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s" | tee -a "$D/times.txt"
  "${PB[@]}" report "$D/run$i" >"$D/report$i.log" 2>&1 || echo "run$i: report failed (see report$i.log)"
  rm -f "$D/run$i"/checkpoints.*  # only for resuming; not part of the record
done
echo; echo "| run | best speedup (turn) | per turn |" | tee "$D/summary.md"; echo "|---|---|---|" | tee -a "$D/summary.md"
for i in 1 2 3; do
  best=$(grep -o 'best speedup [^;]*;' "$D/run$i.log" | tail -1 | sed 's/best speedup //; s/;$//')
  turns=$(python3 - "$D/run$i" <<'EOF'
import json, pathlib, sys
rows = []
for f in sorted(pathlib.Path(sys.argv[1]).glob("trajectories/*/trajectory.jsonl")):
    for line in f.read_text().splitlines():
        e = json.loads(line)
        if e.get("type") == "turn_end":
            rows.append(f"{e['speedup']:.3f}" if e.get("speedup") is not None else e.get("status", "?"))
print(" ".join(rows))
EOF
)
  echo "| run$i | ${best:-none} | $turns |" | tee -a "$D/summary.md"
done
# The finished trajectories' logs gzipped for keeping (`ptxbench seal`: every reader takes them as they are).
for i in 1 2 3; do "${PB[@]}" seal "$D/run$i" >>"$D/times.txt" 2>&1; done
# Everything in one file: a device call brings back only a few files, and none below a deep folder (the run folders'
# kernels/ are); `tar xzf $SUB.tar.gz` on the CPU machine gives $SUB/ back.
if [ "${CLIMB_ONE_TAR:-1}" != 0 ]; then
  tar czf "$OUT/$SUB.tar.gz" -C "$OUT" "$SUB" && rm -rf "${D:?}"
fi
