#!/usr/bin/env bash
# Evaluations per GPU-hour of this tree against an earlier one on the same GPU, in alternating runs
# (A B A B ...), so that a change's cost is not confused with another machine's or the clock's drift.
#
#   git archive --format=tar.gz -o .bench_runs/old.tgz REV agent tools workloads prompts bench pyproject.toml
#   OUT=... [FIRST=1] ROUNDS=2 THROUGHPUT_ARGS="--n 20" bash bench/throughput_ab.sh .bench_runs/old.tgz
#
# Each run is bench/eval_throughput.py in a fresh process with its own compile cache; the earlier tree is
# unpacked under /tmp and imported in place (bench/gpu_env.sh points ptxbench.<folder> at the tree it is sourced
# in). Writes $OUT/{new,old}_<i>.{json,md,log} and prints one line per run.
set -uo pipefail
OLD_TGZ=${1:?usage: throughput_ab.sh OLD_TREE.tgz}
OUT=${OUT:-$PWD/throughput_ab_out}; FIRST=${FIRST:-1}; ROUNDS=${ROUNDS:-2}  # rounds FIRST..ROUNDS
NEW=$PWD; OLD=/tmp/ptxbench_old_tree
mkdir -p "$OUT" && rm -rf "$OLD" && mkdir -p "$OLD" && tar xzf "$OLD_TGZ" -C "$OLD" && ln -sfn "$NEW/.whl" "$OLD/.whl"
one() {  # one TAG TREE I
  ( cd "$2" && source bench/gpu_env.sh >/dev/null && export PYTHONPATH=$PYTHONPATH:$2/tests \
      PTXBENCH_CACHE=/tmp/ptxbench-cache-$1 \
    && python3 bench/eval_throughput.py --n 40 --old-n 0 --concurrency 6 ${THROUGHPUT_ARGS:-} \
         --json "$OUT/$1_$3.json" --md "$OUT/$1_$3.md" > "$OUT/$1_$3.log" 2>&1 )
  python3 - "$OUT/$1_$3.json" "$1" "$3" <<'PY'
import json, sys
path, tag, i = sys.argv[1:]
try:
    m = json.load(open(path))["modes"]["verdict"]
except Exception as e:
    print(f"{tag} run {i}: no result ({e})"); sys.exit()
ph = m["phases"]
med = lambda k: ph.get(k, {}).get("median")
print(f"{tag} run {i}: {m['evals_per_gpu_hour']} evals/GPU-hour, {m['passed']}/{m['n']} passed, wall {m['wall_s']} s, "
      f"median gpu {med('gpu')} s (kernel work {med('gpu.gpu_total')}), profile {med('profile')} s "
      f"(GPU held {med('profile.gpu_held')}), speedup {m['speedup'].get('median')}")
PY
}
for i in $(seq "$FIRST" "$ROUNDS"); do
  if [ $((i % 2)) = 1 ]; then one new "$NEW" "$i"; one old "$OLD" "$i"; else one old "$OLD" "$i"; one new "$NEW" "$i"; fi
done
