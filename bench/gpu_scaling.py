"""`ptxbench bench` on 1 GPU and on 2: wall time, speedup, nvidia-smi busy samples per GPU, profiles taken.

Run on a machine with two GPUs (repository root, after `source bench/gpu_env.sh`):

    python3 bench/gpu_scaling.py [--turns 8] [--trajectories 2] [--json F] [--md F] [--no-warmup] [--ncu-lock device|shared]

The matrix: workloads gemm_bf16_m8192_n7168_k5120 and mha_fwd_d128 x models builtin/tuner and
builtin/reference x `--trajectories` (2: four trajectories per workload, eight in all), `--turns` each (8,
`ptxbench bench`'s default: with 3, the ~12 s every run spends starting and closing caps the ratio below 1.8x
even if two GPUs halved all the GPU work), default profile policy (auto: the target verdict on every pass, the
full profile on the first pass and each new best). Each run is a fresh `python3 -m ptxbench.agent bench`
process whose pool sees the GPUs of its CUDA_VISIBLE_DEVICES ("0", then "0,1"); a warm-up run of the same matrix on both GPUs fills the compile
cache first, so neither measured run pays cold compiles the other does not. Reported per run: wall time,
the bench's own elapsed time, statuses, profile levels and runtime verdicts from the trajectories (an
`unknown` verdict would show a profiler that could not run, e.g. two GPUs profiling at once), the share of
half-second nvidia-smi samples in which each GPU ran a kernel, and from the trajectories the GPU time held (the
timing protocols, the ncu replays), the ncu runs taken (the rest reused a profile) and the span from the first trajectory event to
the last; and each GPU worker's start (the run folder's evaluator_start.json: seconds from the pool's start to its
hello, and inside the worker the imports, CUDA context, limits, warm-up and fingerprint).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_sampler import GpuSampler  # noqa: E402

WORKLOADS = ["gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128"]
MODELS = ["builtin/tuner", "builtin/reference"]


def bench_once(devices: str, run_dir: Path, args) -> dict:
    cmd = [sys.executable, "-m", "ptxbench.agent", "bench", "--models", ",".join(MODELS), "--workloads", ",".join(WORKLOADS),
           "--trajectories", str(args.trajectories), "--turns", str(args.turns), "--run-dir", str(run_dir), "--no-report",
           "--parallel", str(args.parallel)]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=devices, PTXBENCH_NCU_LOCK=args.ncu_lock)
    with GpuSampler() as smi:
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        wall = time.perf_counter() - start
    (run_dir.parent / f"{run_dir.name}.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    text = re.sub(r"\s+", " ", proc.stdout + proc.stderr)  # the console may wrap the line
    phases = re.search(r"trajectories in (\d+) s \(evaluator start ([\d.]+) s, close ([\d.]+) s\)", text)
    bench = ({"bench_s": float(phases.group(1)), "evaluator_start_s": float(phases.group(2)),
              "evaluator_close_s": float(phases.group(3))} if phases else {})
    from ptxbench.agent.records.rundir import read_evaluator_start, read_gpu_timeline

    started = read_evaluator_start(run_dir)  # each GPU worker's start, by phase (written by the bench)
    if started:
        bench["worker_start"] = started["workers"]
    timeline = read_gpu_timeline(run_dir)  # the pool's own record of every GPU hold (tools/gpu/timeline.py)
    if timeline:
        bench["gpu_use"] = timeline["summary"]
    return {"devices": devices, "returncode": proc.returncode, "wall_s": round(wall, 1), **bench, **trajectories(run_dir),
            "nvidia_smi": smi.summary(), "log_tail": (proc.stderr or proc.stdout)[-1500:] if proc.returncode else ""}


def trajectories(run_dir: Path) -> dict:
    """Statuses, profile levels, verdicts and evaluation seconds from the run's trajectory files."""
    from ptxbench.agent.records.rundir import load_run

    statuses, levels, verdicts, unknown = {}, {}, {}, []
    evals = profiled = 0
    held = {"timing": 0.0, "profile": 0.0}
    stamps: list[float] = []
    for record in load_run(run_dir):
        for e in record.events:
            if getattr(e, "ts", None):
                stamps.append(e.ts)
            if e.type != "eval_result" or not e.submission:
                continue
            evals += 1
            r = e.result
            held["timing"] += r.seconds.get("gpu.gpu_total", 0.0)
            held["profile"] += r.seconds.get("profile.gpu_held", 0.0)
            profiled += r.seconds.get("profile", 0.0) > 0
            statuses[r.status] = statuses.get(r.status, 0) + 1
            levels[r.profile_level] = levels.get(r.profile_level, 0) + 1
            for fam, v in r.targets_runtime.items():
                verdicts[f"{fam}:{v.verdict}"] = verdicts.get(f"{fam}:{v.verdict}", 0) + 1
                if v.verdict == "unknown":
                    unknown.append(v.reason[:200])
    return {"evaluations": evals, "statuses": statuses, "profile_levels": levels, "verdicts": verdicts,
            "unknown_reasons": sorted(set(unknown))[:5], "ncu_runs": int(profiled),
            "gpu_held_s": {k: round(v, 1) for k, v in held.items()},
            "trajectory_window_s": round(max(stamps) - min(stamps), 1) if stamps else None}


def markdown(out: dict) -> str:
    lines = [f"Matrix: {', '.join(WORKLOADS)} x {', '.join(MODELS)} x {out['trajectories']} trajectories, "
             f"{out['turns']} turns, profile policy auto, ncu lock: {out['ncu_lock']}.", "",
             "| GPUs | wall s | evaluator start / close s | trajectories (first event to last) s | GPU held: timing + ncu replays s "
             "| ncu runs | evaluations | statuses | profiles | verdicts | busy share per GPU (nvidia-smi) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in out["runs"].items():
        busy = ", ".join(f"GPU{g}: {s.get('busy_share', '-')} ({s.get('busy_pct_mean', '-')}% mean)"
                         for g, s in r["nvidia_smi"].items() if isinstance(s, dict))
        held = r.get("gpu_held_s") or {}
        lines.append(f"| {name} ({r['devices']}) | {r['wall_s']} | {r.get('evaluator_start_s', '-')} / "
                     f"{r.get('evaluator_close_s', '-')} | {r.get('trajectory_window_s', '-')} | "
                     f"{held.get('timing', '-')} + {held.get('profile', '-')} | {r.get('ncu_runs', '-')} | "
                     f"{r['evaluations']} | {r['statuses']} | "
                     f"{r['profile_levels']} | {r['verdicts']} | {busy} |")
    for name, r in out["runs"].items():  # the pool's record: held share per GPU, waits, idle behind pinned replays
        use = r.get("gpu_use") or {}
        if use:
            held = ", ".join(f"GPU{d} {u['held_s']} s ({100 * u['share']:.0f}%)" for d, u in use["devices"].items())
            waits = ", ".join(f"{k} {w['n']} x, {w['total']} s" for k, w in use["wait_s"].items() if w["n"])
            lines += ["", f"{name}, the pool's record over {use['window_s']} s: held {held}; waits for a GPU: {waits}; "
                          f"a GPU idle while a replay waited for another: {use['idle_while_pinned_waited_s']} s."]
    if out.get("speedup"):
        lines += ["", f"Speedup 1 -> 2 GPUs: {out['speedup']:.2f}x (goal: at least 1.8x)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=8, help="per trajectory (ptxbench bench's default)")
    ap.add_argument("--trajectories", type=int, default=2, help="per (model, workload) cell: 2 -> 4 per workload")
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--ncu-lock", choices=["device", "shared"], default="device",
                    help="ncu's lock file per GPU (device) or the one machine-wide lock (shared)")
    ap.add_argument("--out", default="", help="folder for the run folders and logs (default: a temp folder)")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ptxbench-scaling-"))
    root.mkdir(parents=True, exist_ok=True)
    out = {"turns": args.turns, "trajectories": args.trajectories, "ncu_lock": args.ncu_lock, "runs": {}}
    if not args.no_warmup:
        warm = bench_once("0,1", root / "warmup", args)
        out["warmup"] = {k: warm[k] for k in ("wall_s", "returncode", "evaluations")}
        print(f"warm-up: {out['warmup']}", flush=True)
    for name, devices in (("1 GPU", "0"), ("2 GPUs", "0,1")):
        out["runs"][name] = bench_once(devices, root / name.replace(" ", ""), args)
        print(json.dumps({name: {k: v for k, v in out["runs"][name].items() if k != "log_tail"}}), flush=True)
    one, two = out["runs"]["1 GPU"]["wall_s"], out["runs"]["2 GPUs"]["wall_s"]
    out["speedup"] = round(one / two, 3) if two else None
    md = markdown(out)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.md:
        Path(args.md).write_text(md + "\n")
    print(f"run folders and logs: {root}")


if __name__ == "__main__":
    main()
