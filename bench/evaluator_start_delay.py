"""How long `ptxbench bench` runs before its GPU workers start: seconds from the command's process launch to the
call of make_evaluator (which starts the local pool on its own thread), in a fresh interpreter each time, with the
call replaced by a probe that stops the command there. Beside it, what importing the bench runner (the agent loop,
LangGraph) costs in a fresh interpreter: the CLI used to pay that before the workers started.

    python3 bench/evaluator_start_delay.py [--reps 7] [--json F]

CPU only (nothing is started on a GPU). The first GPU job of a bench waits for its workers, so every second here
is a second of the bench's wall time (bench/results/eval_throughput.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = """
import sys, time
import ptxbench.agent.bench.evaluators as ev
def probe(config):
    print("AT=%.4f LOOP=%s" % (time.time(), any(m in sys.modules for m in ("langgraph", "ptxbench.agent.loop.optimize"))))
    raise ev.BenchError("stopped by the probe")
ev.make_evaluator = probe
from ptxbench.agent.cli.main import app
sys.argv = ["ptxbench", "bench", "--models", "builtin/tuner,builtin/reference", "--workloads",
            "gemm_bf16_m8192_n7168_k5120,mha_fwd_d128", "--run-dir", sys.argv[1], "--no-report"]
app()
"""
RUNNER_IMPORT = "import time; t = time.perf_counter(); import ptxbench.agent.bench.runner; print('S=%.4f' % (time.perf_counter() - t))"


def once_probe(folder: Path) -> tuple[float, bool]:
    launched = time.time()
    out = subprocess.run([sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("AT=")), None)
    if line is None:
        raise RuntimeError(f"the probe did not reach make_evaluator: {out.stdout[-500:]} {out.stderr[-1500:]}")
    at, loop = line.split()
    return float(at[3:]) - launched, loop == "LOOP=True"


def once_runner_import() -> float:
    out = subprocess.run([sys.executable, "-c", RUNNER_IMPORT], capture_output=True, text=True, timeout=300)
    return float(out.stdout.strip().removeprefix("S="))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    delays, loops, imports = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        once_probe(Path(tmp) / "warm")  # the first run fills the OS page cache and the bytecode caches
        for i in range(args.reps):
            d, loop = once_probe(Path(tmp) / f"run{i}")
            delays.append(d)
            loops.append(loop)
            imports.append(once_runner_import())
    out = {"reps": args.reps, "to_make_evaluator_s": delays, "loop_imported_before": any(loops),
           "runner_import_s": imports, "median_to_make_evaluator_s": round(statistics.median(delays), 3),
           "median_runner_import_s": round(statistics.median(imports), 3)}
    print(f"process launch -> make_evaluator: median {out['median_to_make_evaluator_s']} s "
          f"(min {min(delays):.3f}, max {max(delays):.3f}; agent loop imported before it: {out['loop_imported_before']})")
    print(f"importing the bench runner (agent loop, LangGraph) in a fresh interpreter: median "
          f"{out['median_runner_import_s']} s (min {min(imports):.3f}, max {max(imports):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
