# Sourced by the scripts that run on a GPU machine (repository root): makes the carried wheels importable
# (.whl: pydantic, langgraph, tenacity, nvtx...; with `ray`, also .whl-ray) and ptxbench importable in place
# (ptxbench.<folder> -> ./<folder>), without an install. Sourcing it again installs nothing twice.
# Usage:  source bench/gpu_env.sh [ray]
case ":${PYTHONPATH:-}:" in *:/tmp/pkg:*) ;; *) export PYTHONPATH=/tmp/site:/tmp/pkg${PYTHONPATH:+:$PYTHONPATH} ;; esac
export PYTHONUNBUFFERED=1 PTXBENCH_CACHE=${PTXBENCH_CACHE:-/tmp/ptxbench-cache}
_ptxbench_wheels() {  # _ptxbench_wheels FOLDER MODULES: install FOLDER's wheels unless MODULES already import
  python3 -c "import $2" 2>/dev/null && return 0
  ls "$1"/*.whl >/dev/null 2>&1 || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$1"/*.whl 2>&1 \
    | grep -v "already exists" >&2
}
# What every GPU-side step imports (pyproject's dependencies that the GPU image lacks). Checked before any step runs,
# so a wheel missing from .whl stops the call in a second with its name instead of turning every evaluation into an
# INFRA_ERROR (bench/README.md says how to fetch the wheels).
_ptxbench_needs="pydantic, langgraph, langgraph.checkpoint.sqlite, tenacity, elftools, nvtx"
_ptxbench_wheels .whl "$_ptxbench_needs"
python3 -c "import $_ptxbench_needs" || { echo "gpu_env.sh: a module above is missing from .whl (needed: $_ptxbench_needs)" >&2; return 1; }
if [ "${1:-}" = ray ]; then _ptxbench_wheels .whl-ray ray || return 1; fi
mkdir -p /tmp/pkg/ptxbench && for d in agent tools workloads prompts; do ln -sfn "$PWD/$d" "/tmp/pkg/ptxbench/$d"; done
