"""What one CTA of the attention forward costs besides its key tiles: the reference (TUNED) kernel timed at sequence
lengths that keep the CTA count fixed, so kernel time is linear in the key tiles per CTA and the intercept is the
per-CTA fixed cost (launch, Q / first K latency, the softmax pipeline's fill and drain, the epilogue).

A forward CTA is one (query tile, head); with B x H x S fixed every shape has the same CTAs (6,144 at D = 128, the main
workload's count) and each runs n = S / 128 key tiles (non-causal) or 1..n (causal, in LPT order). With the same CTAs
on the same SMs the busiest SM's time is
    T = waves x (n x u + F)            non-causal, waves = ceil(CTAs / SMs)
    T = CTAs / SMs x ((n + 1) / 2 x u + F)   causal (longest first: the SMs end level)
so a straight line through T against n (or (n + 1) / 2) gives u (one key tile of the CTA) and F (its fixed cost).
Persistent kernels and cross-tile overlap can only win F's share of the time; bench/results/attention_template.md
records the fit.

Each build of VARIANTS (TUNED, and TUNED without its stagger: a change of the CTA's start shows in the intercept, not
the slope) at each shape is built through the harness's own path (parse_solution, compile_source, resolve_plan, Candidate) for a
Workload made with the registry's mha_fwd(), checked against torch's SDPA once, then timed with the evaluator's
own timing loop (tools/gpu/timing.time_sides: an L2 flush and a spin before each call, the sides interleaved ABBA)
after 5 s of warm-up calls (a fresh machine's clocks ramp for its first seconds), every shape in each trial; medians
and quartiles.

    python3 bench/attention_cta_cost.py OUT.json [--trials 3 --calls 30]        (a GPU machine; gpu_round.sh cta-cost)
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

HEADS = 48
D = 128
# (batch, sequence length): B x H x S / 128 = 6,144 CTAs each, as mha_fwd_d128 (B = 4, S = 4096)
SHAPES = [(16, 1024), (8, 2048), (4, 4096), (2, 8192)]
# the builds timed at each shape: TUNED, and TUNED with each change (attention_template options); TUNED has the
# stagger since round 19, so its twin without it shows what the stagger does to the line
VARIANTS = {"kernel": {}, "unstaggered": {"stagger": False}}
WARMUP_S = 5.0  # seconds of calls before the first timed one
CLOCK_FIELDS = ("clocks.sm", "power.draw", "temperature.gpu")
TILE = 128  # query rows and keys of a TUNED D = 128 tile


def tiles_per_cta(s: int, causal: bool) -> float:
    """The x of the fit: key tiles per CTA (the mean over a head's CTAs when causal)."""
    n = s // TILE
    return (n + 1) / 2 if causal else float(n)


def ctas(b: int, s: int) -> int:
    return b * HEADS * math.ceil(s / TILE)


def fit_line(xs: list[float], ys: list[float]) -> dict:
    """Least squares y = slope x + intercept, with the largest residual relative to its y."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    worst = max(abs(y - (slope * x + intercept)) / y for x, y in zip(xs, ys))
    return {"slope": slope, "intercept": intercept, "worst_residual": worst}


def per_cta(fit: dict, rounds: float) -> dict:
    """u and F in microseconds, from a fit of kernel ms against tiles per CTA over `rounds` CTAs per SM."""
    u_us, f_us = fit["slope"] * 1e3 / rounds, fit["intercept"] * 1e3 / rounds
    return {"u_us": u_us, "F_us": f_us, "F_in_tiles": f_us / u_us}


def build_solution(workload, source: str):
    """(compiled, cubin bytes, parsed solution) of a source for this Workload, through the harness's own steps."""
    from pathlib import Path

    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.solution.parse import parse_solution

    sol = parse_solution(source, workload, "sm_90a")
    if isinstance(sol, list):
        raise ValueError("; ".join(str(i) for i in sol))
    comp = compile_source(sol.source, sol.language, "sm_90a", workload)
    if not comp.cubin_path:
        raise RuntimeError(f"did not compile: {comp}")
    return comp, Path(comp.cubin_path).read_bytes(), sol


def run(out: str, trials: int, calls: int) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ptxbench.tools.gpu.inprocess import in_process_worker
    from ptxbench.tools.gpu.runner import Candidate, new_buffers
    from ptxbench.tools.gpu.timing import Side, evaluation_flush, time_sides
    from ptxbench.tools.solution.parse import resolve_plan
    from ptxbench.workloads.registry import mha_fwd
    from ptxbench.workloads.solutions import attention_template as at
    from gpu_sampler import GpuSampler

    t0 = time.time()
    rows, shapes = [], []
    with in_process_worker() as state:
        sms = state.limits.sm_count
        # every build at every shape first (about 5 GB), so the timing can interleave the shapes
        for causal in (False, True):
            for b, s in SHAPES:
                wl = mha_fwd(b, HEADS, s, D, causal=causal, held_out=True)
                g = torch.Generator(device="cuda").manual_seed(s)
                q, k, v = (torch.randn(wl.shape(n), device="cuda", dtype=torch.bfloat16, generator=g) for n in "QKV")
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                fns, cands, errs, regs = {}, [], {}, {}
                for name, change in VARIANTS.items():
                    point = at.default_params(wl).model_copy(update=change)
                    comp, cubin, sol = build_solution(wl, at.render(point))
                    plan = resolve_plan(sol.plan, wl, sms, "sm_90a")
                    cand = Candidate(cubin, plan, state, wl)
                    bufs = new_buffers(wl, plan)
                    bufs.load_inputs({"Q": q, "K": k, "V": v})
                    bufs.reset()
                    binding = cand.bind(bufs)
                    cand.launch(binding)
                    torch.cuda.synchronize()
                    o = bufs.tensors["O"].data.view(wl.shape("O"))
                    errs[name] = float((o.float() - ref.float()).abs().max())
                    regs[name] = {n: (kr.registers, kr.spill_stores) for n, kr in comp.kernels.items()}
                    # each call zeroes the plan's zeroed scratch first, as the evaluator's timed call does: the
                    # persistent walk's tile counter starts every launch at 0 (else later launches skip their tiles)
                    fns[name] = (lambda c=cand, bd=binding, b=bufs: (b.zero_scratch_(), c.launch(bd)))
                    cands.append((cand, bufs))
                library_out = torch.empty_like(ref)

                def library(q=q, k=k, v=v, out=library_out, causal=causal):
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        out.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=causal))

                fns["cudnn"] = library
                shapes.append({"causal": causal, "B": b, "S": s, "fns": fns, "cands": cands, "errs": errs,
                               "regs": regs, "times": {name: [] for name in fns}})
        # warm-up: the clocks ramp under load (the first seconds of a fresh machine run slower)
        t_w = time.time()
        while time.time() - t_w < WARMUP_S:
            for sh in shapes:
                for fn in sh["fns"].values():
                    fn()
            torch.cuda.synchronize()
        flush = evaluation_flush(state.limits.l2_bytes)  # the evaluator's L2 flush
        # SM clock, power and temperature beside each shape's timings (nvidia-smi every 100 ms): the absolute times
        # are comparable with the evaluator's only at the same clock
        with GpuSampler(period_ms=100, extra=CLOCK_FIELDS) as sampler:
            for _ in range(trials):  # each trial: every shape, its builds and the library interleaved (ABBA)
                for sh in shapes:
                    names = list(sh["fns"])
                    t1 = time.time()
                    got = time_sides([Side(call=sh["fns"][n]) for n in names], flush=flush, warmup=2,
                                     iters=calls, trials=1)
                    sh.setdefault("windows", []).append((t1, time.time()))
                    for n, ts in zip(names, got):
                        sh["times"][n] += ts
        for sh in shapes:
            reads = [sampler.window(t1, t2) for t1, t2 in sh["windows"]]
            sh["gpu"] = {f: round(statistics.mean(r[f] for r in reads if f in r), 1)
                         for f in CLOCK_FIELDS if any(f in r for r in reads)}
        for sh in shapes:
            causal, b, s = sh["causal"], sh["B"], sh["S"]
            row = {"causal": causal, "B": b, "H": HEADS, "S": s, "ctas": ctas(b, s), "regs_spills": sh["regs"], "gpu": sh["gpu"],
                   "max_abs_err_vs_sdpa": sh["errs"], "x_tiles_per_cta": tiles_per_cta(s, causal)}
            for name, ts in sh["times"].items():
                q1, _, q3 = statistics.quantiles(ts, n=4)
                row[f"{name}_ms"], row[f"{name}_q1"], row[f"{name}_q3"] = statistics.median(ts), q1, q3
            rows.append(row)
            for cand, _ in sh["cands"]:
                cand.close()
            print(f"[{time.time() - t0:5.0f}s] causal={causal!s:5} B={b:2} S={s:5} " + "  ".join(
                  f"{n} {row[n + '_ms']:.4f} [{row[n + '_q1']:.4f}, {row[n + '_q3']:.4f}]" for n in sh["fns"])
                  + f"  max |O - sdpa| {sh['errs']}  {sh['gpu']}", flush=True)
        fits = {}
        for causal in (False, True):
            rs = [r for r in rows if r["causal"] == causal]
            rounds = math.ceil(rs[0]["ctas"] / sms) if not causal else rs[0]["ctas"] / sms
            for side in (*VARIANTS, "cudnn"):
                fit = fit_line([r["x_tiles_per_cta"] for r in rs], [r[f"{side}_ms"] for r in rs])
                fits[f"{'causal' if causal else 'plain'}_{side}"] = fit | per_cta(fit, rounds) | {"rounds": rounds}
    with open(out, "w") as f:
        json.dump({"rows": rows, "fits": fits, "sms": sms}, f, indent=1)
    print("\n| problem | side | u (us / key tile) | F (us / CTA) | F in key tiles | worst residual |\n|---|---|---|---|---|---|")
    for name, fit in fits.items():
        print(f"| {name.split('_')[0]} | {name.split('_')[1]} | {fit['u_us']:.3f} | {fit['F_us']:.2f} | "
              f"{fit['F_in_tiles']:.2f} | {100 * fit['worst_residual']:.2f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="JSON file to write")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()
    run(args.out, args.trials, args.calls)


if __name__ == "__main__":
    main()
