#!/usr/bin/env bash
# The H200 benchmark run in one command (repository root, device tool with carry=[".whl"], plus ".whl-ray" for ray):
#
#   bash bench/h200_bench.sh local     # models x workloads x trajectories on the local GPU worker pool
#   bash bench/h200_bench.sh ray       # the same matrix with --backend ray: a local Ray cluster of the GPU, the
#                                      # evaluator as an actor with num_gpus=1 (the image has no ray: first run
#                                      # `bash bench/make_ray_wheel.sh` here, which puts a slim one in .whl-ray/)
#
# Each leaves $OUT/<name>.tar.gz (the run folder: manifest, trajectories, kernels, checkpoints), the bench log
# and the score as Markdown. Then, on any machine (scoring reads the run folder only):
#   bash bench/h200_report.sh <files_at>/h200-local.tar.gz     # -> runs/h200-local, docs/bench-h200/h200-local/
#   (unpacks, writes the report with Chromium screenshots, checks that re-scoring gives the same numbers)
# A call that runs out of time leaves a partial run: carry it back as .bench_runs/<name> (extract the tar into
# .bench_runs/, add .bench_runs to carry) and the next call resumes it (`bench --resume`) without repeating
# finished trajectories or model calls.
# Knobs (environment): MODELS, WORKLOADS, TRAJECTORIES (2), TURNS (3), PARALLEL (4), BENCH_TIMEOUT (480 s), NO_GPU=1.
set -uo pipefail
BACKEND=${1:-local}
NAME=${NAME:-h200-$BACKEND}
OUT=${OUT:-$PWD/bench_out}; mkdir -p "$OUT"
MODELS=${MODELS:-builtin/tuner,builtin/reference}
WORKLOADS=${WORKLOADS:-gemm_bf16_m8192_n7168_k5120,mha_fwd_d128}
TRAJECTORIES=${TRAJECTORIES:-2}; TURNS=${TURNS:-3}; PARALLEL=${PARALLEL:-4}
source bench/gpu_env.sh "$BACKEND" || exit 1
ptxbench() { python3 -c "from ptxbench.agent.cli.main import app; app()" "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"

RUNS=/tmp/bench_runs; mkdir -p "$RUNS"; RUN="$RUNS/$NAME"
ARGS=(--run-dir "$RUN" --backend "$BACKEND" --parallel "$PARALLEL" --no-report)
if [ -d ".bench_runs/$NAME" ] && [ ! -d "$RUN" ]; then cp -r ".bench_runs/$NAME" "$RUN"; fi
if [ -f "$RUN/manifest.json" ]; then
  echo "== resuming $RUN"; ARGS+=(--resume)
else
  ARGS+=(--models "$MODELS" --workloads "$WORKLOADS" --trajectories "$TRAJECTORIES" --turns "$TURNS")
  [ -n "${NO_GPU:-}" ] && ARGS+=(--no-gpu)
fi
[ "$BACKEND" = ray ] && ! python3 -c "import ray" 2>/dev/null && { echo "ray is not importable here: see bench/make_ray_wheel.sh"; exit 3; }
t0=$(date +%s)
timeout --signal=KILL "${BENCH_TIMEOUT:-480}" python3 -c "from ptxbench.agent.cli.main import app; app()" bench "${ARGS[@]}" \
  > >(tee "$OUT/$NAME.bench.log") 2>&1
rc=$?; t1=$(date +%s)
echo "== bench exit $rc after $((t1 - t0)) s (137: stopped by the time limit; carry the run back and call again to resume)"
ptxbench score "$RUN" > "$OUT/$NAME.score.md" 2>&1
tar czf "$OUT/$NAME.tar.gz" -C "$RUNS" "$NAME"
du -h "$OUT/$NAME.tar.gz"
echo "== leaderboard"; sed -n '/^### Leaderboard: best speedup over the library$/,/^### Leaderboard: best speedup over the library, target/p' "$OUT/$NAME.score.md" | head -n -1
tail -n 1 "$OUT/$NAME.score.md"
