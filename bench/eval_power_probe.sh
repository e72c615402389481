# Does `ptxbench eval` reach the H200's power cap? The software power-cap counter (nvidia-smi -q -d PERFORMANCE) read
# before and after each evaluation, and the SM clock, power and clock-event reasons sampled every 20 ms throughout.
# Usage (device, repository root): bash bench/eval_power_probe.sh WORKLOAD...   (writes under $OUT)
source bench/gpu_env.sh || exit 1
cap_us() { nvidia-smi -q -d PERFORMANCE | awk -F: '/SW Power Capping/ {gsub(/[^0-9]/, "", $2); print $2; exit}'; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,nounits -lms 20 > $OUT/smi.csv 2>&1 &
smi=$!
i=0
for w in "$@"; do
  i=$((i+1))
  python3 -c "import sys; from ptxbench.agent.models.builtin import reference_source; sys.stdout.write(reference_source('$w'))" > /tmp/$w.cu
  c0=$(cap_us); t0=$(date +%s.%N)
  timeout 150 python3 -m ptxbench.agent eval $w /tmp/$w.cu --json > $OUT/p${i}_$w.json 2> $OUT/p${i}_$w.err
  c1=$(cap_us); t1=$(date +%s.%N)
  echo "$i $w start $t0 end $t1 sw_power_cap_us $((c1 - c0))" | tee -a $OUT/marks.txt
  python3 bench/eval_line.py $OUT/p${i}_$w.json 2>/dev/null || tail -3 $OUT/p${i}_$w.err
done
kill $smi
cd $OUT && tar czf probe.tgz p*.json p*.err smi.csv marks.txt && rm -f p*.json p*.err
