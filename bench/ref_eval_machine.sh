# One machine's readings of the references: `ptxbench eval` of what builtin/reference submits for each WORKLOAD, in
# the order given (repeat a name to read it again), with `nvidia-smi -q` before and after; JSON in $OUT/evals.tgz.
# Usage (device, repository root): bash bench/ref_eval_machine.sh [WORKLOAD...]
#   (default: the thin-margin references: the main GEMM three times, the D = 128 forward twice and its causal once)
# PROBE=1 (bench/eval_power_probe.sh) also reads the software power-cap counter before and after each evaluation
# (marks.txt) and samples clock, power and clock-event reasons every 20 ms (smi.csv); JSON in $OUT/probe.tgz.
source bench/gpu_env.sh || exit 1
OUT=${OUT:-$PWD/bench_out}; mkdir -p "$OUT"
set -- ${@:-gemm_bf16_m8192_n7168_k5120 mha_fwd_d128 mha_fwd_d128_causal gemm_bf16_m8192_n7168_k5120 mha_fwd_d128
        gemm_bf16_m8192_n7168_k5120}
tag=e; keep=evals.tgz; extra=()
cap_us() { nvidia-smi -q -d PERFORMANCE | awk -F: '/SW Power Capping/ {gsub(/[^0-9]/, "", $2); print $2; exit}'; }
if [ -n "${PROBE:-}" ]; then
  tag=p; keep=probe.tgz; extra=(smi.csv marks.txt)
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,nounits -lms 20 > $OUT/smi.csv 2>&1 &
  sampler=$!
fi
nvidia-smi -q -d POWER,CLOCK,TEMPERATURE,PERFORMANCE > $OUT/smi_before.txt 2>&1
nvidia-smi --query-gpu=name,serial,vbios_version,driver_version,power.limit,power.max_limit,clocks.max.sm,temperature.gpu \
  --format=csv > $OUT/gpu.txt
i=0
for w in "$@"; do
  i=$((i+1))
  python3 -c "import sys; from ptxbench.agent.models.builtin import reference_source; sys.stdout.write(reference_source('$w'))" > /tmp/$w.cu
  [ -n "${PROBE:-}" ] && { c0=$(cap_us); t0=$(date +%s.%N); }
  timeout 150 python3 -m ptxbench.agent eval $w /tmp/$w.cu --json > $OUT/$tag${i}_$w.json 2> $OUT/$tag${i}_$w.err
  [ -n "${PROBE:-}" ] && echo "$i $w start $t0 end $(date +%s.%N) sw_power_cap_us $(( $(cap_us) - c0 ))" | tee -a $OUT/marks.txt
  python3 bench/eval_line.py $OUT/$tag${i}_$w.json "$i $w" 2>/dev/null || tail -3 $OUT/$tag${i}_$w.err
done
[ -n "${PROBE:-}" ] && kill $sampler
nvidia-smi -q -d POWER,CLOCK,TEMPERATURE,PERFORMANCE > $OUT/smi_after.txt 2>&1
cd $OUT && tar czf $keep $tag*.json $tag*.err "${extra[@]}" && rm -f $tag*.json $tag*.err "${extra[@]}"; cat gpu.txt
