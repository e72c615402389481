"""Evaluations per GPU-hour on the GEMM task, through the real LocalEvaluator, with evaluations in flight at once.

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/eval_throughput.py [--n 60] [--old-n 12] [--full-n 0] [--concurrency 6] [--json F] [--md F]

One GPU (PoolConfig(devices=[0])). Caches are warmed first: the worker's inputs, references and cuBLAS
baseline, and the compile cache of VARIANTS (renders of workloads/solutions/gemm_template.py that pass:
the default and three tile orders / grid caps). Then, per mode, N evaluations of those variants in turn
from `--concurrency` threads, as `ptxbench bench` keeps trajectories in flight:

- verdict: EvalOptions() as the loop's verdict-only turns: correctness, timing, and on a pass the runtime
  target verdict (one ncu run, the verdict's counters only), the GPU held from the replay's ready to done;
- old: the path before: the full Nsight Compute profile on every pass, the GPU held for the whole ncu run;
- full: the full profile on every pass, the GPU held only for the replay (what the first pass and each new
  best cost now).

The per-cubin profile cache is DISABLED here (each evaluation replays under ncu), since only four cubins
rotate: a model's resubmitted kernel would be cheaper still. So is the sharing of one ncu run between identical
cubins in flight (--share-identical keeps it: with the cache off, each waiter then replays after its wait, a
serialisation distinct kernels never meet). Reported per mode: wall time, evaluations per
GPU-hour (N / wall on one GPU), per-phase medians and sums (compile, gpu = the worker's job incl. queueing,
gpu.gpu_total = its own GPU work, gpu.audit = its audits of every cached library instance, profile = the ncu run,
profile.gpu_held = the GPU held for the replay, profile.gpu_wait = waiting for it), verdicts, and nvidia-smi busy samples.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_sampler import GpuSampler  # noqa: E402

GEMM = "gemm_bf16_m8192_n7168_k5120"
VARIANTS = [{}, {"group_m": 16}, {"group_m": 4}, {"max_ctas": 128}]
PHASES = ["compile", "gpu", "gpu.gpu_total", "gpu.audit", "profile", "profile.gpu_held", "profile.gpu_wait",
          "profile.identical_wait"]


class NoInFlight:
    """The evaluator's sharing of one ncu run between identical cubins in flight (profile/inflight.py), switched off:
    with the per-cubin cache off, a waiter would find nothing cached after the wait and replay anyway, so four
    variants in turn with six in flight would serialise identical replays that distinct kernels never meet."""

    def running(self, key, level) -> bool:
        return False

    def acquire(self, key, level, cached, wait_s=0.0):
        return True, False

    def release(self, key) -> None:
        pass


class NoCache(dict):
    """LocalEvaluator's per-cubin profile cache, switched off: every evaluation replays under ncu."""

    def get(self, key, default=None):
        return default

    def __setitem__(self, key, value):
        pass


def sources() -> list[str]:
    from ptxbench.workloads.solutions.gemm_template import default_params, render, validate

    out = []
    for change in VARIANTS:
        params = default_params().model_copy(update=change)
        assert not validate(params), (change, validate(params))
        out.append(render(params))
    return out


def whole_run_lock(evaluate_module, pool):
    """The old lock scope: the GPU held for the whole ncu run (start-up, replay, report), not just the replay."""
    real = evaluate_module.attach

    def attach(*args, **kwargs):
        device = kwargs.get("device")
        with pool.exclusive(device) if kwargs.get("level", "none") != "none" else nullcontext():
            return real(*args, **{**kwargs, "hold": None})

    return attach


def run_mode(ev, srcs: list[str], n: int, concurrency: int, options) -> dict:
    def one(i: int):
        t0 = time.perf_counter()
        r = ev.evaluate(GEMM, srcs[i % len(srcs)], options)
        return r, time.perf_counter() - t0, t0 - start

    held0 = dict(ev.pool.held_s)
    with GpuSampler() as smi:
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(one, range(n)))
        wall = time.perf_counter() - start
    rows = []
    for r, latency, began in results:  # every phase the result names is kept (seconds), for the timeline
        rows.append({"status": r.status, "began_s": round(began, 3), "latency_s": round(latency, 3),
                     "speedup": r.speedup, "level": r.profile_level,
                     "seconds": {k: round(v, 3) for k, v in r.seconds.items()},
                     "verdicts": {k: v.verdict for k, v in r.targets_runtime.items()},
                     "unknown_reasons": [v.reason for v in r.targets_runtime.values() if v.verdict == "unknown"],
                     **{k: round(r.seconds[k], 3) for k in PHASES if k in r.seconds}})
    phases = {}
    for k in PHASES + ["latency_s"]:
        vals = [row[k] for row in rows if k in row]
        if vals:
            phases[k] = {"median": round(statistics.median(vals), 3), "sum": round(sum(vals), 2)}
    held = sum(ev.pool.held_s.values()) - sum(held0.values())
    verdicts: dict[str, int] = {}
    for row in rows:
        for fam, v in row["verdicts"].items():
            verdicts[f"{fam}:{v}"] = verdicts.get(f"{fam}:{v}", 0) + 1
    speedups = [row["speedup"] for row in rows if row["speedup"]]  # replays beside timing must not move these
    spread = {"median": round(statistics.median(speedups), 4), "min": round(min(speedups), 4),
              "max": round(max(speedups), 4)} if speedups else {}
    return {"n": n, "concurrency": concurrency, "wall_s": round(wall, 2), "speedup": spread, "evals_per_gpu_hour": round(n / wall * 3600),
            "passed": sum(row["status"] == "PASSED" for row in rows), "levels": sorted({row["level"] for row in rows}),
            "verdicts": verdicts, "lock_held_s_total": round(held, 2), "phases": phases, "nvidia_smi": smi.summary(),
            "rows": rows}


def markdown(out: dict) -> str:
    lines = [f"GEMM {GEMM}, one GPU, {len(VARIANTS)} template variants in turn, compile cache warm, per-cubin profile "
             f"cache off.", "",
             "| mode | evals | in flight | wall s | evals / GPU-hour | passed | verdicts | lock held s (sum) | "
             "GPU busy share | " + " | ".join(f"{p} median" for p in PHASES) + " |",
             "|---" * (9 + len(PHASES)) + "|"]
    for name, m in out["modes"].items():
        smi = m["nvidia_smi"].get("0", {})
        lines.append(f"| {name} | {m['n']} | {m['concurrency']} | {m['wall_s']} | {m['evals_per_gpu_hour']} | {m['passed']} | "
                     f"{', '.join(f'{k} {v}' for k, v in m['verdicts'].items())} | {m['lock_held_s_total']} | "
                     f"{smi.get('busy_share', '-')} | "
                     + " | ".join(str(m["phases"].get(p, {}).get("median", "-")) for p in PHASES) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60, help="evaluations with the verdict-only path")
    ap.add_argument("--old-n", type=int, default=12, help="evaluations with the old path (full profile, whole-run lock)")
    ap.add_argument("--full-n", type=int, default=0, help="evaluations with the full profile, gated")
    ap.add_argument("--concurrency", type=int, default=6, help="evaluations in flight")
    ap.add_argument("--share-identical", action="store_true",
                    help="keep the sharing of identical cubins' profiles in flight (then, with the cache off, a waiter "
                         "replays after its wait: the rows' profile.identical_wait)")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args()

    import ptxbench.tools.evaluate as evaluate_module
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    srcs = sources()
    t0 = time.perf_counter()
    pool = GpuPool(PoolConfig(devices=[0])).start()
    ev = LocalEvaluator(pool)
    ev._profiles = NoCache()
    if not args.share_identical:  # distinct kernels: no identical cubin's profile or early run to share
        ev._profiling, ev._early_keys = NoInFlight(), NoCache()
    warm = [ev.evaluate(GEMM, s, EvalOptions(profile_on_pass="none")) for s in srcs]  # compile cache + worker caches
    warm_s = time.perf_counter() - t0
    print(f"warm-up {warm_s:.1f} s: {[w.status for w in warm]} speedups {[round(w.speedup or 0, 3) for w in warm]}",
          flush=True)
    out = {"workload": GEMM, "variants": VARIANTS, "warmup_s": round(warm_s, 1),
           "warmup_status": [w.status for w in warm], "profile_cache": "disabled",
           "identical_sharing": bool(args.share_identical), "modes": {}}
    if args.n:
        out["modes"]["verdict"] = run_mode(ev, srcs, args.n, args.concurrency, EvalOptions())
        print(json.dumps({k: v for k, v in out["modes"]["verdict"].items() if k != "rows"}), flush=True)
    if args.full_n:
        out["modes"]["full (gated)"] = run_mode(ev, srcs, args.full_n, args.concurrency, EvalOptions(profile_on_pass="full"))
        print(json.dumps({k: v for k, v in out["modes"]["full (gated)"].items() if k != "rows"}), flush=True)
    if args.old_n:
        real = evaluate_module.attach
        evaluate_module.attach = whole_run_lock(evaluate_module, pool)
        try:
            out["modes"]["old (full, whole-run lock)"] = run_mode(ev, srcs, args.old_n, args.concurrency,
                                                                  EvalOptions(profile_on_pass="full"))
        finally:
            evaluate_module.attach = real
        print(json.dumps({k: v for k, v in out["modes"]["old (full, whole-run lock)"].items() if k != "rows"}), flush=True)
    ev.close()
    md = markdown(out)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.md:
        Path(args.md).write_text(md + "\n")


if __name__ == "__main__":
    main()
