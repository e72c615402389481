"""The repair track's anchors on a GPU machine: `ptxbench bench --track repair` with builtin/reference (hands in
the unbroken kernel: every task passed with the speed kept, which the score counts as fixed by swap, not repaired) and builtin/unchanged (resubmits the broken one:
nothing fixed), then, for every task, whether its turn 0 (the broken kernel evaluated again, fresh inputs)
reproduced the verdict recorded when the suite was built.

  source bench/gpu_env.sh && python3 bench/repair_anchors.py --run-dir runs/repair-anchors --out OUT --max-seconds 480
  python3 bench/repair_anchors.py --run-dir runs/repair-anchors --out OUT --max-seconds 480 --resume   # the rest

Made to survive a time limit: the bench gets `--max-seconds` (then it is stopped: SIGTERM, then SIGKILL to its
process group) and what finished is scored; every `--every` seconds, and at the end, anchors.json is rewritten
from the trajectories on disk and the run folder (without its checkpoint file) is packed into one
<run name>.tar.gz, both in --out (default: the run folder's parent), beside the bench's console log, <run
name>.bench.log: nothing goes into the run folder before the bench has made its run there, since a new bench refuses
a folder holding other files. A command killed outright therefore still leaves the last ones, and a copy that drops
deep folders still gets every trajectory. `--resume` continues a stopped run (its checkpoints stay in the run
folder). Prints the scores and a table of the verdicts that did not repeat.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

STOP_GRACE_S = 10.0  # after SIGTERM, before SIGKILL
SKIP_IN_PACK = {"checkpoints.sqlite", "checkpoints.sqlite-wal", "checkpoints.sqlite-shm"}  # large; resume reads them


def turn0_statuses(run_dir: Path) -> dict[tuple[str, str], str]:
    """(repair task, model) -> the status of turn 0 (the broken kernel) in each trajectory of the run."""
    from ptxbench.agent.records.events import EvalEvent, TrajectoryStart
    from ptxbench.agent.records.rundir import read_events, trajectory_folders, trajectory_log

    starts: dict[str, tuple[str, str]] = {}
    out: dict[tuple[str, str], str] = {}
    for folder in trajectory_folders(run_dir):
        for ev in read_events(trajectory_log(folder)):  # a torn line (a bench stopped mid-write) is dropped there
            if isinstance(ev, TrajectoryStart):
                starts[ev.trajectory_id] = (str(ev.config.get("repair_task", "")), ev.model)
            elif isinstance(ev, EvalEvent) and ev.turn == 0 and ev.trajectory_id in starts:
                out[starts[ev.trajectory_id]] = ev.result.status
    return out


def compare(run_dir: Path, models: list[str], workloads: list[str]) -> list[dict]:
    """One row per (task, model): the recorded verdict, turn 0's (None: not reached), and whether they agree."""
    from ptxbench.agent.repairs.suite import load_suite

    seen = turn0_statuses(run_dir)
    rows = []
    for task in [t for t in load_suite().tasks if not workloads or t.workload in workloads]:
        for model in models:
            got = seen.get((task.id, model))
            rows.append({"task": task.id, "model": model, "bug_class": task.bug_class, "recorded": task.verdict.status,
                         "turn0": got, "same": got == task.verdict.status})
    return rows


def score(run_dir: Path) -> dict | None:
    """`ptxbench score --json`'s repair-track scores by model (None when it failed: the reason is printed)."""
    res = subprocess.run([sys.executable, "-m", "ptxbench.agent", "score", str(run_dir), "--json"], capture_output=True,
                         text=True, timeout=300)
    try:
        return (json.loads(res.stdout).get("repair_track") or {}).get("by_model")
    except (json.JSONDecodeError, AttributeError):
        print("score failed:", (res.stdout + res.stderr)[-2000:], file=sys.stderr)
        return None


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".part")
    write(tmp)
    os.replace(tmp, path)


def record(run_dir: Path, out: Path, args, info: dict, scores: dict | None) -> dict:
    """anchors.json (in --out, and in the run folder once the bench made its run there) and the packed run folder,
    from what is on disk now."""
    rows = compare(run_dir, args.models.split(","), [w for w in args.workloads.split(",") if w])
    ran = [r for r in rows if r["turn0"] is not None]
    summary = {**info, "turn0_evaluations": len(ran), "turn0_same_as_recorded": sum(r["same"] for r in ran),
               "not_reached": len(rows) - len(ran), "scores": scores, "rows": rows}
    text = json.dumps(summary, indent=1)
    for folder in {run_dir, out} if (run_dir / "manifest.json").exists() else {out}:
        _atomic_write(folder / "anchors.json", lambda p: p.write_text(text, encoding="utf-8"))

    def pack(tmp: Path) -> None:
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(run_dir, arcname=run_dir.name, filter=lambda ti: None if Path(ti.name).name in SKIP_IN_PACK else ti)

    _atomic_write(out / f"{run_dir.name}.tar.gz", pack)
    return summary


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the bench's process group (its GPU workers, referees and fork server included: none of them handles
    it, so they end at once; the checkpoints are SQLite, a torn trajectory line is skipped), SIGKILL if one lingers.
    SIGINT would not do: the trajectories' threads run on until their turns end."""
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bench(cmd: list[str], log: Path, max_seconds: float | None, every: float, tick) -> tuple[int | None, float, str]:
    """Runs the bench in its own process group, calling tick() every `every` seconds; returns (rc, seconds, why it
    stopped: '' when it ended by itself, else 'budget' or the signal this script got)."""
    stopped = {"why": ""}

    def on_signal(signum, _frame):
        stopped["why"] = signal.Signals(signum).name

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    t0 = time.monotonic()
    next_tick = t0 + every
    with open(log, "a", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if max_seconds is not None and now - t0 > max_seconds and not stopped["why"]:
                    stopped["why"] = "budget"
                if stopped["why"]:
                    stop(proc)
                    break
                if now >= next_tick:
                    try:
                        tick()
                    except Exception as exc:  # noqa: BLE001 - a failed interim record must not stop the run
                        print(f"interim record failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                    next_tick = time.monotonic() + every
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                stop(proc)
            for s, handler in old.items():
                signal.signal(s, handler)
    return proc.returncode, time.monotonic() - t0, stopped["why"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--out", default="", help="where anchors.json and <run name>.tar.gz go (default: the run's parent)")
    ap.add_argument("--turns", type=int, default=1)
    ap.add_argument("--models", default="builtin/reference,builtin/unchanged")
    ap.add_argument("--profile", default="verdict")
    ap.add_argument("--workloads", default="", help="only the tasks of these workloads (a quick look)")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop the bench after this long, score what finished")
    ap.add_argument("--every", type=float, default=60.0, help="seconds between rewrites of anchors.json and the pack")
    ap.add_argument("--resume", action="store_true", help="continue a stopped run in --run-dir")
    ap.add_argument("--no-gpu", action="store_true", help="compile-only: a check of this script on a CPU machine")
    args = ap.parse_args()
    run_dir = Path(args.run_dir).resolve()
    out = Path(args.out).resolve() if args.out else run_dir.parent
    run_dir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ptxbench.agent", "bench", "--track", "repair", "--models", args.models, "--trajectories", "1",
           "--turns", str(args.turns), "--run-dir", str(run_dir), "--no-report"]
    cmd += ["--workloads", args.workloads] if args.workloads else []
    cmd += ["--no-gpu"] if args.no_gpu else ["--profile", args.profile]  # the bench refuses a profile policy with --no-gpu
    cmd += ["--resume"] if args.resume else []
    info = {"command": " ".join(cmd), "max_seconds": args.max_seconds, "finished": False}
    log = out / f"{run_dir.name}.bench.log"
    rc, seconds, why = run_bench(cmd, log, args.max_seconds, args.every, lambda: record(run_dir, out, args, info, None))
    info.update(bench_seconds=round(seconds, 1), bench_rc=rc, stopped=why or None, finished=not why and rc == 0)
    summary = record(run_dir, out, args, info, score(run_dir))
    print(log.read_text(encoding="utf-8", errors="replace")[-4000:])
    ran = summary["turn0_evaluations"]
    print(f"\nbench {seconds:.0f} s, rc {rc}{f', stopped ({why})' if why else ''}; turn 0 reproduced the recorded verdict "
          f"in {summary['turn0_same_as_recorded']} of {ran} evaluations ({summary['not_reached']} not reached)")
    print(f"anchors: {out / 'anchors.json'}; trajectories: {out / (run_dir.name + '.tar.gz')}")
    print("| task | model | recorded | turn 0 |\n|---|---|---|---|")
    for r in summary["rows"]:
        if r["turn0"] is not None and not r["same"]:
            print(f"| {r['task']} | {r['model']} | {r['recorded']} | {r['turn0']} |")
    print(json.dumps(summary["scores"], indent=1)[:3000] if summary["scores"] else "no scores (see above)")
    sys.exit(0 if summary["finished"] else 1)


if __name__ == "__main__":
    main()
