"""The repair track's anchors on a GPU machine: `ptxbench bench --track repair` with builtin/reference (hands in
the unbroken kernel: every task fixed with the speed kept) and builtin/unchanged (resubmits the broken one:
nothing fixed), then, for every task, whether its turn 0 (the broken kernel evaluated again, fresh inputs)
reproduced the verdict recorded when the suite was built.

  source bench/gpu_env.sh && python3 bench/repair_anchors.py --run-dir OUT/repair-anchors [--turns 1]

Writes OUT/repair-anchors/anchors.json and prints the scores and a table of the verdicts that did not repeat.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def turn0_statuses(run_dir: Path) -> dict[tuple[str, str], str]:
    """(repair task, model) -> the status of turn 0 (the broken kernel) in each trajectory of the run."""
    from ptxbench.agent.records.events import EvalEvent, TrajectoryStart, parse_event

    starts: dict[str, tuple[str, str]] = {}
    out: dict[tuple[str, str], str] = {}
    for path in sorted(run_dir.rglob("trajectory.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                ev = parse_event(line)
            except Exception:  # a torn line: not this script's business
                continue
            if isinstance(ev, TrajectoryStart):
                starts[ev.trajectory_id] = (str(ev.config.get("repair_task", "")), ev.model)
            elif isinstance(ev, EvalEvent) and ev.turn == 0 and ev.trajectory_id in starts:
                out[starts[ev.trajectory_id]] = ev.result.status
    return out


def main() -> None:
    from ptxbench.agent.repairs.suite import load_suite

    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--turns", type=int, default=1)
    ap.add_argument("--models", default="builtin/reference,builtin/unchanged")
    ap.add_argument("--profile", default="verdict")
    ap.add_argument("--workloads", default="", help="only the tasks of these workloads (a quick look)")
    ap.add_argument("--no-gpu", action="store_true", help="compile-only: a check of this script on a CPU machine")
    args = ap.parse_args()
    run_dir = Path(args.run_dir)
    cmd = [sys.executable, "-m", "ptxbench.agent", "bench", "--track", "repair", "--models", args.models, "--trajectories", "1",
           "--turns", str(args.turns), "--profile", args.profile, "--run-dir", str(run_dir), "--no-report"]
    cmd += (["--workloads", args.workloads] if args.workloads else []) + (["--no-gpu"] if args.no_gpu else [])
    t0 = time.perf_counter()
    bench = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    (run_dir / "bench.log").write_text(bench.stdout + bench.stderr, encoding="utf-8")
    print(bench.stdout[-4000:], bench.stderr[-2000:], sep="\n")
    score = subprocess.run([sys.executable, "-m", "ptxbench.agent", "score", str(run_dir), "--json"], capture_output=True, text=True)
    try:
        scores = json.loads(score.stdout)
    except json.JSONDecodeError:
        scores = {"error": (score.stdout + score.stderr)[-2000:]}
    suite = load_suite()
    seen = turn0_statuses(run_dir)
    rows = []
    for task in [t for t in suite.tasks if not args.workloads or t.workload in args.workloads.split(",")]:
        for model in args.models.split(","):
            got = seen.get((task.id, model))
            rows.append({"task": task.id, "model": model, "bug_class": task.bug_class, "recorded": task.verdict.status,
                         "turn0": got, "same": got == task.verdict.status})
    same = sum(r["same"] for r in rows)
    summary = {"command": " ".join(cmd), "bench_seconds": round(seconds, 1), "bench_rc": bench.returncode,
               "tasks": len(suite.tasks), "turn0_evaluations": len(rows), "turn0_same_as_recorded": same,
               "scores": (scores.get("repair_track") or {}).get("by_model") if isinstance(scores, dict) else None, "rows": rows}
    (run_dir / "anchors.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(f"\nbench {seconds:.0f} s, rc {bench.returncode}; turn 0 reproduced the recorded verdict in {same} of "
          f"{len(rows)} evaluations")
    print("| task | model | recorded | turn 0 |\n|---|---|---|---|")
    for r in rows:
        if not r["same"]:
            print(f"| {r['task']} | {r['model']} | {r['recorded']} | {r['turn0']} |")
    print(json.dumps(summary["scores"], indent=1)[:3000] if summary["scores"] else json.dumps(scores)[:2000])
    sys.exit(0 if bench.returncode == 0 else 1)


if __name__ == "__main__":
    main()
