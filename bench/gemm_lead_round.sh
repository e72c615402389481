#!/usr/bin/env bash
# Round 16 of bench/results/gemm_sweep.md on a GPU machine (repository root, .whl carried): tail="lead" (the split
# k-blocks first, then the full waves, on all 132 SMs) checked against torch on ragged shapes, then evaluated in
# alternation with the checked-in reference by `ptxbench eval` (bench/paired_eval.py).
#   bash bench/gemm_lead_round.sh [PAIRS]          -> $OUT/lead_tests.log, $OUT/pairs.tar.gz, $OUT/pairs.log
set -u
source bench/gpu_env.sh || exit 1
W=gemm_bf16_m8192_n7168_k5120
mkdir -p /tmp/r16
cp workloads/solutions/$W.cu /tmp/r16/reference.cu
python3 -c "
from ptxbench.workloads.solutions import gemm_template as gt
open('/tmp/r16/lead.cu', 'w').write(gt.render(gt.default_params().model_copy(update={'tail': 'lead', 'max_ctas': 0})))"
PYTHONPATH=$PYTHONPATH:$PWD/tests timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/workloads/test_gemm_lead.py > $OUT/lead_tests.log 2>&1
tail -3 $OUT/lead_tests.log
timeout 420 python3 bench/paired_eval.py $W /tmp/r16/reference.cu /tmp/r16/lead.cu --pairs ${1:-5} --out $OUT/pairs \
  > $OUT/pairs.log 2>&1
tar -czf $OUT/pairs.tar.gz -C $OUT pairs && rm -rf $OUT/pairs
tail -25 $OUT/pairs.log
