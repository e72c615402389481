# One machine's readings of the references: `ptxbench eval` of what builtin/reference submits for each WORKLOAD, in
# the order given (repeat a name to read it again), with `nvidia-smi -q` before and after; JSON in $OUT/evals.tgz.
# Usage (device, repository root): bash bench/ref_eval_machine.sh [WORKLOAD...]
#   (default: the thin-margin references: the main GEMM three times, the D = 128 forward twice and its causal once)
source bench/gpu_env.sh || exit 1
set -- ${@:-gemm_bf16_m8192_n7168_k5120 mha_fwd_d128 mha_fwd_d128_causal gemm_bf16_m8192_n7168_k5120 mha_fwd_d128
        gemm_bf16_m8192_n7168_k5120}
nvidia-smi -q -d POWER,CLOCK,TEMPERATURE,PERFORMANCE > $OUT/smi_before.txt 2>&1
nvidia-smi --query-gpu=name,serial,vbios_version,driver_version,power.limit,power.max_limit,clocks.max.sm,temperature.gpu \
  --format=csv > $OUT/gpu.txt
i=0
for w in "$@"; do
  i=$((i+1))
  python3 -c "import sys; from ptxbench.agent.models.builtin import reference_source; sys.stdout.write(reference_source('$w'))" > /tmp/$w.cu
  timeout 150 python3 -m ptxbench.agent eval $w /tmp/$w.cu --json > $OUT/e${i}_$w.json 2> $OUT/e${i}_$w.err
  python3 bench/eval_line.py $OUT/e${i}_$w.json "$i $w" 2>/dev/null || tail -3 $OUT/e${i}_$w.err
done
nvidia-smi -q -d POWER,CLOCK,TEMPERATURE,PERFORMANCE > $OUT/smi_after.txt 2>&1
cd $OUT && tar czf evals.tgz e*.json e*.err && rm -f e*.json e*.err; cat gpu.txt
