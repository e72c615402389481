"""Where the reference GEMM's time goes: the reference timed beside copies of itself with one part taken out, and
beside candidate changes (the variants and what each measures: bench/gemm_diag_variants.py).

The taken-out variants compute garbage on purpose; the reference and the real variants (CHECKED) are checked against
torch before and after their timed launches. Timing as bench/gemm_reference_bench.py: interleaved with cuBLAS, L2
flushed before each call, CUDA events, medians and IQR. The traced reference (`trace`) is launched 5 more times and its
per-CTA timestamps kept.

    python3 bench/gemm_diagnose.py build               # here: render, edit, nvcc + ptxas -> bench/build_gemm_diag/
    source bench/gpu_env.sh && python3 bench/gemm_diagnose.py run --json $OUT/diag.json   # GPU (carry the folder)
    python3 bench/gemm_diagnose.py best $OUT/diag*.json   # the fastest real kernel correct in every run, or ""
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "bench" / "build_gemm_diag"
sys.path.insert(0, str(ROOT / "bench"))

from gemm_diag_variants import CHECKED, VARIANTS, edited  # noqa: E402  (the catalogue)


def build(names: list[str]) -> None:
    from gemm_reference_bench import compile_cu
    from ptxbench.workloads.solutions.gemm_template import default_params, render

    BUILD.mkdir(parents=True, exist_ok=True)
    for name in names:
        edits, changes = VARIANTS[name]
        compile_cu(BUILD / f"{name}.cu", edited(render(default_params().model_copy(update=changes)), edits))


def sustained_clocks(fns: dict, seconds: float) -> dict:
    """name -> the SM clock (MHz), power (W) and temperature nvidia-smi read while that launcher ran back to back
    for `seconds` (after the timed rounds, one name after the other), so that two machines' or two variants'
    readings can be told apart by their clocks. Empty readings (no nvidia-smi) say so."""
    import torch
    from gpu_sampler import GpuSampler

    out: dict = {}
    with GpuSampler(period_ms=50, extra=("clocks.sm", "power.draw", "temperature.gpu")) as sampler:
        for name, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            t0 = time.time()
            while time.time() - t0 < seconds:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            out[name] = sampler.window(t0 + 0.1, time.time())  # the first 100 ms: the clock settling
    return out or {"error": sampler.error}


def loop_clock(sampler, t0: float, t1: float) -> dict:
    """The SM clock and power nvidia-smi read while the kernels ran in [t0, t1] (samples above 150 W: the idle gaps
    left out), as 10th / 50th / 90th percentiles."""
    return sampler.spread(t0, t1, ("clocks.sm", "power.draw"), min_power=150)


def run(iters: int, out: str | None, names: list[str], clock_s: float = 1.0, gap_ms: float = 3.0) -> None:
    import torch
    from gemm_reference_bench import POISON_WORD, Runner, check, interleaved_times
    from gpu_sampler import GpuSampler

    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    M, N, K = 8192, 7168, 5120
    A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    ref = A.float() @ B.float().T
    C = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    fns = {"cublas": lambda: torch.matmul(A, B.T, out=C)}
    result: dict = {"device": dev.name, "iters": iters, "correct": {}, "timing": {}}
    def checked(name: str) -> dict:  # one launch into a NaN-filled C, against torch
        C.fill_(float("nan"))
        fns[name]()
        torch.cuda.synchronize()
        return check(C, ref)

    runners = {}
    for name in names:
        r = runners[name] = Runner(name, (BUILD / f"{name}.cu").read_text(), (BUILD / f"{name}.cubin").read_bytes(),
                                   dev.multi_processor_count)
        fns[name] = r.prepare({"A": A, "B": B, "C": C}, {"M": M, "N": N, "K": K})
        if name in CHECKED:
            result["correct"][name] = checked(name)
            print(name, result["correct"][name], flush=True)
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    with GpuSampler(period_ms=50, extra=("clocks.sm", "power.draw")) as sampler:
        t0 = time.time()
        times = interleaved_times(fns, iters, flush, gap_s=gap_ms / 1000)
        result["timed_loop"] = {"gap_ms": gap_ms, **loop_clock(sampler, t0, time.time())}
    print("timed loop:", result["timed_loop"], flush=True)
    for name in names:  # checked again after hundreds of launches: state a kernel keeps between launches shows here
        if name in CHECKED:
            after = checked(name)
            result["correct"][name] = {**result["correct"][name], "ok": result["correct"][name]["ok"] and after["ok"],
                                       "after_timing": after}
            print(name, "after timing", after, flush=True)
    if "trace" in runners:  # a few more launches of the traced kernel, each one's timestamps read back
        result["trace"] = []
        for _ in range(5):
            flush.zero_()  # a cold L2, as before every timed call (interleaved_times)
            fns["trace"]()
            torch.cuda.synchronize()
            result["trace"].append([[x for x in r if x != POISON_WORD] for r in runners["trace"].scratch["trace"].cpu().tolist()])
        print("trace:", trace_summary(result["trace"]), flush=True)
    if clock_s > 0:
        result["clock"] = sustained_clocks(fns, clock_s)
    ref_ms = statistics.median(times["ref"])
    for n, ts in times.items():
        q = statistics.quantiles(ts, n=4)
        med = statistics.median(ts)
        result["timing"][n] = {"median_ms": med, "q1_ms": q[0], "q3_ms": q[2], "vs_ref_pct": 100 * (med / ref_ms - 1),
                               "tflops": 2 * M * N * K / med / 1e9}
    if out:
        Path(out).write_text(json.dumps(result, indent=1))
    clock = result.get("clock", {})
    print("\n| variant | median ms | IQR ms | vs ref | TFLOP/s (as if computed) | SM MHz, W (sustained) |\n"
          "|---|---|---|---|---|---|")
    for n, t in result["timing"].items():
        c = clock.get(n, {})
        held = f"{c['clocks.sm']:.0f}, {c['power.draw']:.0f}" if "clocks.sm" in c else "-"
        print(f"| {n} | {t['median_ms']:.4f} | {t['q1_ms']:.4f}-{t['q3_ms']:.4f} | {t['vs_ref_pct']:+.1f}% "
              f"| {t['tflops']:.0f} | {held} |")


def trace_summary(runs: list) -> dict:
    """The traced launches (per CTA: SM, start ns, then each tile's end ns; slots never written hold the scratch
    poison) summarised by the median launch: when the CTAs finish (from the first CTA's start), their first tile,
    and every later tile (the time between two of a CTA's tile ends), as 0 / 10 / 50 / 90 / 100th percentiles in us."""
    def pct(xs: list) -> list:
        xs = sorted(xs)
        return [round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) for q in (0, .1, .5, .9, 1)]

    out = []
    for run in runs:
        t0 = min(r[1] for r in run)
        ends = [[x for x in r[2:] if 0 < x - r[1] < 10**9] for r in run]
        out.append({"ctas": len(run), "tiles": sum(map(len, ends)),
                    "finish_us": pct([(e[-1] - t0) / 1e3 for e in ends if e]),
                    "first_tile_us": pct([(e[0] - r[1]) / 1e3 for e, r in zip(ends, run) if e]),
                    "tile_us": pct([(b - a) / 1e3 for e in ends for a, b in zip(e[:-1], e[1:])])})
    return sorted(out, key=lambda o: o["finish_us"][-1])[len(out) // 2]


def best(paths: list[str], min_gain: float | None = None) -> str:
    """The real kernel (CHECKED, not the reference) fastest on average over these `run --json` results, among those
    correct in every one; "" when none is faster than the reference. With `min_gain` (percent), "" too unless that
    kernel is at least that much faster in every result: the rule for a paired evaluation (gemm_diag_round.sh)."""
    results = [json.loads(Path(f).read_text()) for f in paths]
    names = [n for n in results[0]["timing"] if n in CHECKED and not n.startswith(("ref", "trace"))  # trace: a probe
             and all(r["correct"].get(n, {}).get("ok") and n in r["timing"] for r in results)]
    mean = {n: statistics.mean(r["timing"][n]["vs_ref_pct"] for r in results) for n in names}
    faster = sorted((v, n) for n, v in mean.items() if v < 0)
    if not faster:
        return ""
    name = faster[0][1]
    if min_gain is not None and any(r["timing"][name]["vs_ref_pct"] > -min_gain for r in results):
        return ""
    return name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["build", "run", "best"])
    ap.add_argument("results", nargs="*", help="best: `run --json` files")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--gap-ms", type=float, default=3.0,
                    help="the GPU idle this long after each timed call, so the loop stays under the power limit at "
                         "the full clock (0: back to back, as rounds 1-9 ran: power-bound near 1,490 MHz)")
    ap.add_argument("--clock-s", type=float, default=1.0,
                    help="seconds each variant then runs back to back while nvidia-smi reads the SM clock (0: skip)")
    ap.add_argument("--json")
    ap.add_argument("--min-gain", type=float, help="best: only a kernel at least this many percent faster in every run")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="which to build or time (ref always)")
    a = ap.parse_intermixed_args()  # options after the step, before or among its result files
    names = ["ref"] + [n for n in a.variants.split(",") if n != "ref"]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if a.step == "best":
        print(best(a.results, a.min_gain))
    elif a.step == "build":
        build(names)
    else:
        run(a.iters, a.json, names, a.clock_s, a.gap_ms)


if __name__ == "__main__":
    main()
