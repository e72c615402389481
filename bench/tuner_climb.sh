#!/usr/bin/env bash
# builtin/tuner's climb from its weak start, three times, for docs/examples/tuner-climb/. One device call from the
# repository root (carry=[".whl"]):
#
#   bash bench/tuner_climb.sh
#
# Each run: `ptxbench optimize gemm_bf16_m8192_n7168_k5120 --model builtin/tuner:weak --turns 8 --target-speedup 0`
# into $OUT/tuner-climb/run{1,2,3} (turn 1 is workloads/solutions/gemm_template.py weak_params(); every later turn
# is the move the last evaluations pointed at, with the reason in the reply), then `ptxbench report` into each run's report/, then one line per
# run: best speedup and the turn it was reached. The goal (issue 14): >= 1.0x cuBLAS within 8 turns, every run.
# Cost per turn: ~2 s of GPU (correctness + timing) plus an Nsight Compute profile (~12 s) on the turns the
# loop's profile policy takes one; about 2 min a run, under 7 min in all (RUN_LIMIT caps each run, default 200 s).
# Afterwards, on the CPU machine: copy $OUT/tuner-climb/run* to docs/examples/tuner-climb/ (without checkpoints.*).
set -uo pipefail
OUT=${OUT:-$PWD/bench_out}; D=$OUT/tuner-climb; mkdir -p "$D"
source bench/gpu_env.sh || exit 1
PB=(python3 -m ptxbench.agent)
W=gemm_bf16_m8192_n7168_k5120
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$D/gpu.txt"
for i in 1 2 3; do
  t0=$(date +%s)
  timeout --signal=KILL "${RUN_LIMIT:-200}" "${PB[@]}" optimize "$W" --model builtin/tuner:weak --turns 8 \
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
