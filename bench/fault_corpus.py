"""The fault corpus back to back: every entry `--reps` times through one pool, then a timed correct
candidate and a health check. Run on a GPU machine:
  python3 bench/fault_corpus.py [--reps 100] [--max-seconds 300] [--timeout 1.0] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.workloads.solutions.faults import load_corpus

# Faults that replace the worker are spread out so the spares have time to start.
ORDER = ["trap", "nan_output", "constant_output", "illegal_address", "zero_output", "noop", "misaligned",
         "cached_result", "oob_write", "cheat_poison_keyed", "infinite_loop", "cheat_count_keyed", "too_much_smem",
         "cheat_reference_reader", "cheat_scratch_flag", "wrong_args", "cheat_input_flag", "cheat_reference_writer",
         "control_correct"]


def timed(name: str) -> bool:
    """The cheat corpus acts when timed, so its entries are timed (the faults are judged on their checked calls)."""
    return name.startswith("cheat_") or name == "cached_result"


def expected(entry: dict) -> str:
    return "/".join(entry.get("status_any") or [entry["status"]])


def verdict_ok(entry: dict, r) -> bool:
    if r.status not in (entry.get("status_any") or [entry["status"]]):
        return False
    if "max_speedup" in entry and (r.speedup is None or r.speedup >= entry["max_speedup"]):
        return False
    if "error" in entry and entry["error"] not in r.runtime_error:
        return False
    if "note" in entry and not any(entry["note"] in s.note for s in r.correctness):
        return False
    if "message" in entry and entry["message"] not in r.message:
        return False
    return "plan" not in entry or any(entry["plan"] in e for e in r.plan_errors)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--timeout", type=float, default=2.0, help="watchdog limit per candidate (the hang costs this)")
    ap.add_argument("--spares", type=int, default=6)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    workload, corpus = load_corpus()
    names = [n for n in ORDER if n in corpus] + [n for n in corpus if n not in ORDER]
    pool = GpuPool(PoolConfig(spares=args.spares)).start()
    ev = LocalEvaluator(pool)
    ok, seen, wrong = collections.Counter(), collections.Counter(), []
    secs = collections.defaultdict(float)
    t_start = time.perf_counter()
    reps_done = 0
    for rep in range(args.reps):
        if time.perf_counter() - t_start > args.max_seconds:
            break
        for name in names:
            t0 = time.perf_counter()
            r = ev.evaluate(workload, corpus[name]["source"], EvalOptions(timeout_s=args.timeout, time=timed(name)))
            secs[name] += time.perf_counter() - t0
            seen[name] += 1
            if verdict_ok(corpus[name], r):
                ok[name] += 1
            else:
                wrong.append({"rep": rep, "name": name, "status": r.status, "message": r.message[:300],
                              "runtime_error": r.runtime_error, "speedup": r.speedup})
        reps_done += 1
    total = time.perf_counter() - t_start
    final = ev.evaluate(workload, corpus["control_correct"]["source"], EvalOptions(timeout_s=30))
    health = pool.ping()
    replacements = sum(s.replacements for s in pool.slots)
    ev.close()
    startup = sorted(pool.startup_s)
    out = {"workload": workload, "reps": reps_done, "seconds": total, "replacements": replacements,
           "workers_started": len(startup), "worker_startup_s_median": startup[len(startup) // 2] if startup else None,
           "final_control": {"status": final.status, "speedup": final.speedup}, "health": health,
           "per_entry": {n: {"ok": ok[n], "runs": seen[n], "mean_s": secs[n] / max(1, seen[n])} for n in names},
           "wrong": wrong[:50]}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    print(f"fault corpus x{reps_done} on {workload}: {total:.1f} s, {replacements} worker replacements; "
          f"then a timed correct candidate: {final.status} (speedup {final.speedup}); pool healthy: "
          f"{all(h['ok'] for h in health)}; {len(startup)} workers started, median start-up "
          f"{out['worker_startup_s_median']:.2f} s")
    print("| entry | expected | right verdicts | mean s |")
    print("|---|---|---|---|")
    for n in names:
        print(f"| {n} | {expected(corpus[n])} | {ok[n]}/{seen[n]} | {secs[n] / max(1, seen[n]):.3f} |")
    for w in wrong[:10]:
        print("WRONG:", w)


if __name__ == "__main__":
    main()
