#!/usr/bin/env bash
# Several GPU measurements in one device call, each under its own time budget. Each step writes into
# $OUT/<step>/, which is then packed into $OUT/<step>.tar.gz (run folders nest deeper than a device copy keeps),
# with the step's log at $OUT/<step>.log and one line per step in $OUT/steps.txt.
#
#   bash bench/gpu_round.sh STEP[:SECONDS][@GPU] ...        (repository root; a device call carries .whl)
#   bash bench/gpu_round.sh "STEP[:SECONDS]@0 STEP[:SECONDS]@1" ...
#
# Arguments run one after the other; the steps of one quoted argument run side by side, each on the GPU named after
# its @ (CUDA_VISIBLE_DEVICES), e.g. a backward variant check on GPU 0 beside the attention sweep on GPU 1 of an
# nvidia-h200-x2 machine: one machine start and one call for two single-GPU measurements.
#
# Steps (default budget in seconds):
#   gpu-tests (560)     the GPU tests of what changed most recently: what outlives a call (the scrub, unowned memory,
#                       the sketch's memory, the flush buffer, the library's buffers), the L2 flush, evaluator (watchdog), fault corpus,
#                       cheat attacks (module padding), references, profile (the token and decoy verdicts); GPU_TESTS_K: a pytest -k filter
#   pool-hang (90)      a kernel whose setmaxnreg moves outrun the CTA's register pool hangs (TIMEOUT), and within it
#                       runs (tests/tools/test_regpool.py)
#   bwd (200)           the attention backward on every backward workload, and a full profile of mha_bwd_d128
#   bwd-variants (400)  variants of workloads/solutions/attention_bwd_variants/ (BWD_VARIANTS, e.g.
#                       dq_tiles+head_groups,own_keys+head_groups; default: the reference), timed runs interleaved
#                       in one process, on every main backward workload (D = 128 / 96 with causal and GQA, then
#                       D = 64); BWD_PROFILE=mha_bwd_d128 adds a full profile of each variant, BWD_PROFILE64=mha_bwd_d64
#                       one on D = 64, BWD_NO_D64=1 skips D = 64, BWD_ONLY_D64=1 runs only it, BWD_UNTIMED /
#                       BWD_TIMED narrow the 128-wide workloads checked / timed (comma lists) (tagged: BWD_NO_D64_b, ...). A tagged step, bwd-variants.b, reads BWD_VARIANTS_b (BWD_PROFILE_b, ...) and
#                       writes its own folder: two variant sets side by side on two GPUs
#   bwd-tuner (300)     builtin/tuner on mha_bwd_d128, 4 turns: the reference and its three built versions
#                       (workloads/solutions/attention_bwd_template.py), each timed against cuDNN with the profile policy's
#                       verdicts and profiles
#   attn-sweep (420)    the attention forward template's points (bench/attention_sweep.py; ATTN_SWEEP_ARGS, e.g.
#                       "--round 2 --trials 3")
#   gemm-tests (240)    the GEMM template's GPU tests against torch, ping-pong, the stream-K tail, the deferred epilogue and bk = 32 included
#   gemm-sweep (420)    the GEMM template's points on the four GEMM workloads (bench/gemm_sweep.py; GEMM_SWEEP_ARGS,
#                       e.g. "--round 2")
#   tuner-climb (560)   three builtin/tuner:weak runs on the GEMM (bench/tuner_climb.sh)
#   tuner-climb-attn (560) the same on mha_fwd_d128 (bench/tuner_climb.sh mha_fwd_d128)
#   tuner-climb-bwd (570) the same on mha_bwd_d128, 6 turns (from the checked-in file's point)
#   anchors (540)       the repair track's anchors over the suite (bench/repair_anchors.py)
#   throughput (200)    evaluations per GPU-hour on the GEMM (bench/eval_throughput.py, THROUGHPUT_ARGS added; the old full-profile path,
#                       341 / h twice, is not re-run: --old-n 6 to add it)
#   mutations (150)     bug classes checked on the GPU (bench/check_mutations.py: the cluster classes; MUTATIONS_ARGS,
#                       e.g. "--classes setmaxnreg_over_pool --workloads mha_fwd_d128", replaces --cluster)
#   mutations-bwd (360) the attention backward's bug classes (check_mutations.py --backward, 48 mutants)
#   suite-build (560)   the repair suite rebuilt (bench/build_repair_suite.py) into the step's folder: copy its
#                       repairs/ over workloads/repairs/ when it is right
#   scaling (590)       1 vs 2 GPUs on a bench matrix, 8 turns (bench/gpu_scaling.py; needs nvidia-h200-x2)
#   library-drift (300) the same reference evaluated 8 times in one evaluator, then 5 times each in a fresh one, with
#                       SM clock, power and temperature per evaluation (bench/library_drift.py: why cuDNN's time moves;
#                       DRIFT_WORKLOAD=gemm_bf16_m8192_n7168_k5120: the GEMM's clock and power beside cuBLAS)
#   fwd-tests (150)     the attention forward's TUNED point of every forward workload against cuDNN (the GPU tests of
#                       tests/workloads/test_attention_wgmma.py: one timing trial each, no profile)
#   fwd-profile (120)   the attention forward's reference at D = 128 and causal (FWD_PROFILE: other workloads) under
#                       Nsight Compute: `ptxbench profile --json` per workload (feedback, per-line stalls, verdicts);
#                       FWD_PROFILE_WITH (JSON changes) profiles that point beside each reference
#   ref-eval (200)      `ptxbench eval` of what builtin/reference submits for each workload of REF_EVAL (default:
#                       mha_bwd_d128 mha_bwd_d128_causal), interleaved with the library: speedup, interval, targets
#                       executed; the text and JSON per workload in the step's folder (so they come back in its archive)
#   compile-cpu (120)   CPU seconds of nvcc and ptxas on the main workloads' reference texts, alone and with every
#                       core compiling, against the compiler jail's per-process limit (bench/compile_cpu.py)
#   cta-cost (150)      the attention forward's per-CTA fixed cost: its TUNED D = 128 kernels at four sequence lengths with
#                       the CTA count fixed, a line through kernel time against key tiles per CTA (bench/attention_cta_cost.py)
#   restore-ablation (300) which part of the per-call preparation slows a short library call (bench/restore_ablation.py:
#                       ABLATE_WORKLOAD, default the M = 64 decode GEMM; each part of CandidateCalls.restore off in turn;
#                       ABLATE_VARIANTS picks and orders them, e.g. "full,plain_heads,full.2,plain_heads.2"
#                       with ABLATE_WORKLOAD=mha_fwd_d128)
#   ncu-metrics (90)    whether ncu knows the FFMA / HFMA / HMMA / HGMMA counters, and what they count on known kernels
#                       (bench/ncu_metric_probe.py)
#   stash-probes (90)   where the driver puts module data and local frames: bench/module_memory_probe.py,
#                       bench/module_pool_layout.py, bench/local_slot_probe.py (the stash probes of runs 32-33)
#   stash-twins (150)   the stash attacks that still compile, each against its own no-hit twin on a pool of its own:
#                       below and above a small local frame, past a parameter's generic address (the figures in -rP);
#                       first, where parameters lie in the generic space (bench/param_address_probe.py)
#   ncu-range (120)     whether ncu's range replay (a plan's launches back to back) gives the target families' counters,
#                       beside kernel replay's per-launch ones (bench/ncu_range_probe.py)
#   decoy-shares (150) the decoy rule's shares on the honest references (bench/decoy_shares.py): wgmma's and
#                       TMA's own work share and the share counted another way, one verdict-level profile each
#   audit-cost (120)    seconds the audit of cached library instances takes as one worker's cache fills with workloads
#                       (bench/audit_cost.py; AUDIT_COST_ARGS, e.g. "--all --instances 2")
#   context-isolation (120) whether a kernel in a CUDA context of its own reaches the primary context's memory, shared
#                       and local memory across contexts, and what a context per candidate would cost
#                       (bench/context_isolation.py)
#   pytest-gpu (300)    the GPU tests PYTEST_GPU named (files and -k, as pytest takes them), e.g.
#                       PYTEST_GPU="tests/workloads/test_attention_solutions.py -k spiky"
#   lazy-threshold (240) the attention forward's reference with its lazy-rescale threshold at other values, in
#                       alternating rounds of one evaluator (bench/lazy_threshold.py: LAZY_WORKLOADS, default
#                       mha_fwd_d128 mha_fwd_d128_causal; LAZY_THRESHOLDS, default 8,32,64; LAZY_ROUNDS, default 4)
#   input-draw (60)     milliseconds per fresh input set with the forward's offset heads and without, and whether one
#                       seed draws the same bits twice (bench/input_draw_cost.py; INPUT_DRAW_ARGS, e.g. "mha_fwd_d64")
#   wgmma-rates (90)    MACs per cycle per SM for each wgmma shape and operand layout (bench/wgmma_rates.py: m64n64 / n80 /
#                       n128 / n256, K-major or MN-major A and B, A from registers)
# A step's budget is a hard limit (SIGKILL); what it wrote by then is still packed. ROUND_ONE_TAR=1 packs all of $OUT
# into one round.tar.gz at the end (a device call brings back only a few files).
set -uo pipefail
OUT=${OUT:-$PWD/gpu_round_out}
mkdir -p "$OUT"
source bench/gpu_env.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD/tests
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
# The device checkout's git HEAD can lag the working tree a call copies, so also the tree's own hash (what
# `git log --format='%h %T'` shows for the commit holding exactly this tree; files git ignores are not in it).
{ git log --oneline -1; echo "tree $(GIT_INDEX_FILE=/tmp/gpu_round.index bash -c 'git add -A && git write-tree')"; } \
  > "$OUT/commit.txt" 2>/dev/null || true
rm -f /tmp/gpu_round.index

declare -A BUDGET=([gpu-tests]=560 [bwd]=200 [bwd-variants]=400 [bwd-tuner]=300 [attn-sweep]=420 [gemm-tests]=240 [gemm-sweep]=420 [tuner-climb]=560 [tuner-climb-attn]=560 [tuner-climb-bwd]=570
                   [anchors]=540 [throughput]=200 [mutations]=150 [mutations-bwd]=360 [suite-build]=560 [scaling]=590
                   [library-drift]=300 [wgmma-rates]=90 [fwd-profile]=120 [cta-cost]=150 [fwd-tests]=150 [ref-eval]=200 [pool-hang]=90
                   [compile-cpu]=120 [restore-ablation]=300 [ncu-metrics]=90 [ncu-range]=120 [decoy-shares]=150 [audit-cost]=120
                   [context-isolation]=120 [lazy-threshold]=240 [pytest-gpu]=300 [input-draw]=60 [stash-probes]=90 [stash-twins]=150)

run_step() {  # run_step NAME[.TAG] SECONDS DIR (a tagged step reads its settings from VAR_TAG, e.g. BWD_VARIANTS_b)
  local name=${1%%.*} s=$2 d=$3 tag=
  [ "$name" != "$1" ] && tag=_${1#*.}
  case $name in
    fwd-tests) python3 -m pytest -m gpu -q -p no:cacheprovider -rP --junitxml="$d/junit.xml" \
                 tests/workloads/test_attention_wgmma.py -k passes_and_is_fast ;;
    gpu-tests) python3 -m pytest -m gpu -q -p no:cacheprovider -rP --junitxml="$d/junit.xml" \
                 tests/tools/test_scrub.py tests/tools/test_unowned.py tests/tools/test_timing_integrity.py tests/tools/test_l2_flush.py \
                 tests/tools/test_gpu_evaluator.py tests/workloads/test_fault_corpus.py tests/workloads/test_cheat_attacks.py tests/workloads/test_references.py \
                 tests/tools/test_profile_gpu.py tests/tools/test_gate.py tests/tools/test_library_state.py \
                 ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} ;;
    pytest-gpu) eval "set -- ${PYTEST_GPU:?PYTEST_GPU names the tests}" && python3 -m pytest -m gpu -q -p no:cacheprovider -rP --junitxml="$d/junit.xml" "$@" ;;
    pool-hang) python3 -m pytest -m gpu -q -p no:cacheprovider -rP --junitxml="$d/junit.xml" tests/tools/test_regpool.py ;;
    bwd) python3 bench/attention_bwd_check.py --json "$d/reference.json" --profile mha_bwd_d128 ;;
    bwd-variants)  # BWD_VARIANTS: the variants to compare, each beside the others (default: the reference);
                   # BWD_PROFILE / BWD_PROFILE64: workloads each variant is also profiled on (D = 96 / 128, D = 64)
      local vn=BWD_VARIANTS$tag pn=BWD_PROFILE$tag p64n=BWD_PROFILE64$tag non=BWD_NO_D64$tag onn=BWD_ONLY_D64$tag
      local un=BWD_UNTIMED$tag tn=BWD_TIMED$tag  # the 128-wide workloads checked and timed (default: all five)
      local variants=${!vn:-dq_tiles+head_groups} prof=${!pn:-} prof64=${!p64n:-} no64=${!non:-} only64=${!onn:-}
      local wide=mha_bwd_d128,mha_bwd_d128_causal,mha_bwd_d96,mha_bwd_d96_causal,mha_bwd_d128_gqa_h32_kv8
      [ -z "$only64" ] && python3 bench/attention_bwd_check.py --variant "$variants" --json "$d/d128.json" \
        --untimed "${!un:-smoke_mha_bwd_d64,$wide}" --timed "${!tn:-$wide}" ${prof:+--profile "$prof"}
      [ -n "$no64" ] && return 0  # the variants differ only in their 128-wide kernels
      python3 bench/attention_bwd_check.py --variant "$variants" --json "$d/d64.json" \
        --untimed smoke_mha_bwd_d64,smoke_mha_bwd_d64_causal,smoke_mha_bwd_d64_gqa_h4_kv2,mha_bwd_d64,mha_bwd_d64_causal \
        --timed mha_bwd_d64,mha_bwd_d64_causal ${prof64:+--profile "$prof64"} ;;
    bwd-tuner) python3 -m ptxbench.agent optimize mha_bwd_d128 --model builtin/tuner --turns 4 --target-speedup 0 \
                 --run-dir "$d/run" ;;
    attn-sweep) python3 bench/attention_sweep.py "$d/sweep.json" --deadline $((s - 60)) ${ATTN_SWEEP_ARGS:-} ;;
    gemm-tests) python3 -m pytest -m gpu -q -p no:cacheprovider -rP --junitxml="$d/junit.xml" \
                  tests/workloads/test_gemm_pingpong.py tests/workloads/test_gemm_streamk.py tests/workloads/test_gemm_defer.py \
                  tests/workloads/test_gemm_narrow_tile.py tests/workloads/test_gemm_solution.py tests/workloads/test_gemm_chunk32.py ;;
    gemm-sweep) python3 bench/gemm_sweep.py "$d/sweep.json" --deadline $((s - 60)) ${GEMM_SWEEP_ARGS:-} ;;
    tuner-climb) OUT=$d RUN_LIMIT=$((s / 3 - 5)) bash bench/tuner_climb.sh ;;
    tuner-climb-attn) OUT=$d RUN_LIMIT=$((s / 3 - 5)) bash bench/tuner_climb.sh mha_fwd_d128 ;;
    tuner-climb-bwd) OUT=$d TURNS=6 RUN_LIMIT=$((s / 3 - 5)) bash bench/tuner_climb.sh mha_bwd_d128 ;;
    anchors) python3 bench/repair_anchors.py --run-dir "$d/run" --out "$d" --turns 1 --max-seconds $((s - 40)) ;;
    throughput) python3 bench/eval_throughput.py --n 40 --old-n 0 --concurrency 6 ${THROUGHPUT_ARGS:-} --json "$d/throughput.json" \
                  --md "$d/throughput.md" ;;
    mutations) python3 bench/check_mutations.py ${MUTATIONS_ARGS:---cluster} --json "$d/cluster.json" ;;
    mutations-bwd) python3 bench/check_mutations.py --backward --json "$d/backward.json" ;;
    suite-build) python3 bench/build_repair_suite.py --out "$d/repairs" --max-seconds $((s - 120)) ;;
    scaling) python3 bench/gpu_scaling.py --json "$d/scaling.json" --md "$d/scaling.md" --out "$d/runs" ;;
    cta-cost) python3 bench/attention_cta_cost.py "$d/cta_cost.json" ;;
    wgmma-rates) python3 bench/wgmma_rates.py --json "$d/rates.json" ;;
    compile-cpu) python3 bench/compile_cpu.py --json "$d/compile_cpu.json" ;;
    restore-ablation) python3 bench/restore_ablation.py --workload "${ABLATE_WORKLOAD:-gemm_bf16_m64_n7168_k5120}" \
                        ${ABLATE_VARIANTS:+--variants "$ABLATE_VARIANTS"} --json "$d/ablation.json" --md "$d/ablation.md" ;;
    lazy-threshold)
      local w
      for w in ${LAZY_WORKLOADS:-mha_fwd_d128 mha_fwd_d128_causal}; do
        python3 bench/lazy_threshold.py --workload "$w" --thresholds "${LAZY_THRESHOLDS:-8,32,64}" \
          --rounds "${LAZY_ROUNDS:-4}" --json "$d/$w.json" --md "$d/$w.md"
      done ;;
    ncu-metrics) python3 bench/ncu_metric_probe.py --json "$d/metrics.json" ;;
    ncu-range) python3 bench/ncu_range_probe.py --json "$d/range.json" ;;
    stash-probes) python3 bench/module_memory_probe.py --json "$d/module_memory.json" > "$d/module_memory.txt"
                  python3 bench/module_pool_layout.py --json "$d/pool_layout.json"
                  python3 bench/local_slot_probe.py --json "$d/local_slot.json" ;;
    stash-twins) python3 bench/param_address_probe.py --json "$d/param_address.json"
                 python3 -m pytest -m gpu -q -p no:cacheprovider -rP --junitxml="$d/junit.xml" \
                   tests/workloads/test_cheat_attacks.py -k stash ;;
    input-draw) python3 bench/input_draw_cost.py ${INPUT_DRAW_ARGS:-} > "$d/draw.md"; cat "$d/draw.md" ;;
    decoy-shares) python3 bench/decoy_shares.py --json "$d/shares.json" ;;
    context-isolation) python3 bench/context_isolation.py --json "$d/isolation.json" ;;
    audit-cost) python3 bench/audit_cost.py ${AUDIT_COST_ARGS:-} --json "$d/audit.json" ;;
    fwd-profile)  # the forward's reference (TUNED) at D = 128 and causal under Nsight Compute: per-line stalls, verdicts;
      # FWD_PROFILE_WITH='{"persistent": true, ...}' adds TUNED with those changes beside it (<workload>.with.json)
      local w
      for w in ${FWD_PROFILE:-mha_fwd_d128 mha_fwd_d128_causal}; do
        python3 -c "import sys; from ptxbench.workloads.registry import get_workload; from ptxbench.workloads.solutions.attention import fast_solution; sys.stdout.write(fast_solution(get_workload('$w')))" > "$d/$w.cu" &&
          python3 -m ptxbench.agent profile "$w" "$d/$w.cu" --json > "$d/$w.json" 2> "$d/$w.err"
        if [ -n "${FWD_PROFILE_WITH:-}" ]; then
          python3 -c "import json, sys; from ptxbench.workloads.registry import get_workload; from ptxbench.workloads.solutions import attention_template as at; w = get_workload('$w'); sys.stdout.write(at.render(at.default_params(w).model_copy(update=json.loads(sys.argv[1]))))" "$FWD_PROFILE_WITH" > "$d/$w.with.cu" &&
            python3 -m ptxbench.agent profile "$w" "$d/$w.with.cu" --json > "$d/$w.with.json" 2> "$d/$w.with.err"
        fi
      done ;;
    ref-eval)  # what builtin/reference submits, evaluated as a user would
      local w
      for w in ${REF_EVAL:-mha_bwd_d128 mha_bwd_d128_causal}; do
        python3 -c "import sys; from ptxbench.agent.models.builtin import reference_source; sys.stdout.write(reference_source('$w'))" > "$d/$w.cu" &&
          python3 -m ptxbench.agent eval "$w" "$d/$w.cu" --json > "$d/$w.json" 2> "$d/$w.err"
      done ;;
    library-drift) python3 bench/library_drift.py --workload "${DRIFT_WORKLOAD:-mha_fwd_d128}" --n 8 --json "$d/same.json"
                   python3 bench/library_drift.py --workload "${DRIFT_WORKLOAD:-mha_fwd_d128}" --n 5 --fresh \
                     --json "$d/fresh.json" ;;
    *) echo "unknown step $name"; return 2 ;;
  esac
}
export -f run_step

run_timed() {  # run_timed NAME SECONDS [GPU]: one step under its budget, packed, its line in steps.txt
  local name=$1 s=$2 gpu=${3:-} d=$OUT/$1 t0 rc
  mkdir -p "$d"; t0=$(date +%s)
  env ${gpu:+CUDA_VISIBLE_DEVICES=$gpu} timeout --signal=KILL "$s" bash -c "run_step $name $s $d" > "$OUT/$name.log" 2>&1
  rc=$?
  find "$d" -name 'checkpoints.*' -delete 2>/dev/null
  tar czf "$OUT/$name.tar.gz" -C "$OUT" "$name" && rm -rf "$d"
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s (budget $s${gpu:+, GPU $gpu})" | tee -a "$OUT/steps.txt"
}

names=()
for group in "$@"; do
  for arg in $group; do  # the steps of one argument side by side
    step=${arg%%@*}; gpu=; [ "$step" != "$arg" ] && gpu=${arg#*@}
    name=${step%%:*}; s=${step#*:}; [ "$s" = "$step" ] && s=${BUDGET[${name%%.*}]:-300}
    names+=("$name")
    run_timed "$name" "$s" "$gpu" &
  done
  wait
done
echo; cat "$OUT/steps.txt"
for name in "${names[@]}"; do echo "== $name (last lines)"; tail -n 25 "$OUT/$name.log"; done
if [ -n "${ROUND_ONE_TAR:-}" ]; then  # everything in one file, for a call that brings back only a few
  packed=$(mktemp -d) && tar czf "$packed/round.tar.gz" -C "$OUT" . && rm -rf "${OUT:?}"/* && mv "$packed/round.tar.gz" "$OUT/"
  rmdir "$packed"
fi
