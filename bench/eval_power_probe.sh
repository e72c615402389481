# Does `ptxbench eval` reach the H200's power cap? bench/ref_eval_machine.sh in its probe mode: the software power-cap
# counter read before and after each evaluation, the SM clock, power and clock-event reasons sampled every 20 ms.
# Usage (device, repository root): bash bench/eval_power_probe.sh WORKLOAD...   (writes $OUT/probe.tgz)
PROBE=1 exec bash bench/ref_eval_machine.sh "$@"
