"""Does the main GEMM's time depend on the values it multiplies? The reference kernel (and cuBLAS) timed on the same
shape with inputs that differ only in their values: A and B from randn (what `ptxbench eval` draws), A all zeros, B all
zeros, both zeros, A a constant 1.0, and randn rounded to 2 mantissa bits (fewer toggling bits, the same magnitudes).
At a fixed clock a tensor core's throughput does not depend on its data, but its power does; a kernel near the power
or current limit that runs faster on zeros is held back by its energy, not by its schedule. Also times the diagnosis
variants named with --variants on randn inputs, beside the reference, and with --trace launches the reference with a
timestamp and the SM's cycle count after each tile (trace_clk) on each input: the clock the SMs actually ran at inside
the kernel, by %clock64 over %globaltimer (rounds 26-27 of bench/results/gemm_sweep.md).

    python3 bench/gemm_diagnose.py build --variants no_a_tma,trace_clk     # here (bench/build_gemm_diag, carried)
    source bench/gpu_env.sh && python3 bench/gemm_data_power.py --json $OUT/data.json [--variants no_a_tma] [--trace]

cuBLAS's kernel cannot carry a trace, so `--ncu-launches N` launches the reference and cuBLAS on randn and on zeros, N
rounds alternating, each call alone in an NVTX range `clk` after a cold L2 and an idle gap, for Nsight Compute to read
each kernel's elapsed cycles and duration with the clocks left free (`--clock-control none`); `--ncu-read` turns the
report's raw page into each kernel's clock and cycles (the split of rounds 28-29: schedule against energy):

    ncu --clock-control none --nvtx --nvtx-include clk/ --metrics gpc__cycles_elapsed.max,gpu__time_duration.sum,\
      sm__cycles_active.avg -f -o $OUT/clk python3 bench/gemm_data_power.py --ncu-launches 5 --ncu-plan $OUT/plan.json
    ncu --import $OUT/clk.ncu-rep --csv --page raw > $OUT/clk.csv
    python3 bench/gemm_data_power.py --ncu-read $OUT/clk.csv --ncu-plan $OUT/plan.json --json $OUT/clk.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
BUILD = ROOT / "bench" / "build_gemm_diag"
M, N, K = 8192, 7168, 5120


def inputs(torch) -> dict:
    """name -> (A, B): the same shapes, different values."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)

    def coarse(x):  # randn rounded to 2 mantissa bits: bf16's low 5 mantissa bits zero
        return (x.view(torch.int16) & ~0x1F).view(torch.bfloat16)

    return {"randn": (a, b), "a_zero": (torch.zeros_like(a), b), "b_zero": (a, torch.zeros_like(b)),
            "both_zero": (torch.zeros_like(a), torch.zeros_like(b)), "a_one": (torch.ones_like(a), b),
            "coarse": (coarse(a), coarse(b))}


def clock_summary(slots: list[list[int]], poison: int) -> dict:
    """One traced launch (per CTA: SM, start ns, start cycles, then (ns, cycles) after each tile) -> the SMs' clock:
    per tile interval and per CTA over its whole run (MHz = cycles / ns x 1000), and the launch's span."""
    per_tile, per_cta, cycles, starts, ends = [], [], [], [], []
    for row in slots:
        row = [x for x in row if x != poison]
        if len(row) < 5:
            continue
        pts = [(row[1], row[2])] + [(row[i], row[i + 1]) for i in range(3, len(row) - 1, 2)]
        per_tile += [1000.0 * (c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(pts, pts[1:]) if t1 > t0]
        per_cta.append(1000.0 * (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))
        cycles.append(pts[-1][1] - pts[0][1])
        starts.append(pts[0][0])
        ends.append(pts[-1][0])
    q = statistics.quantiles(per_tile, n=10)
    return {"tile_mhz_median": statistics.median(per_tile), "tile_mhz_p10": q[0], "tile_mhz_p90": q[-1],
            "cta_mhz_median": statistics.median(per_cta), "cta_mhz_min": min(per_cta), "cta_mhz_max": max(per_cta),
            "cta_cycles_median": statistics.median(cycles), "span_ms": (max(ends) - min(starts)) / 1e6,
            "ctas": len(per_cta)}


NCU_METRICS = ("gpc__cycles_elapsed.max", "gpu__time_duration.sum", "sm__cycles_active.avg")
NCU_INPUTS = ("randn", "both_zero")


def ncu_plan(rounds: int) -> list[str]:
    """The launches' order under Nsight Compute: cuBLAS and the reference alternating on each input, `rounds` times."""
    return [f"{kernel}/{data}" for _ in range(rounds) for data in NCU_INPUTS for kernel in ("cublas", "ref")]


def ncu_clocks(raw_csv: str, plan: list[str]) -> dict[str, list[dict]]:
    """ncu's raw page of the `clk` launches -> plan entry -> one dict per launch: its kernel's name, duration (ms),
    elapsed cycles (the busiest GPC's), the SMs' clock over it (cycles over duration, MHz) and the mean SM's active
    cycles. The kernels must be one per planned launch, in order (each side launches one kernel at this shape)."""
    from ptxbench.tools.profile.ncu_csv import parse_raw

    kernels = parse_raw(raw_csv)
    if len(kernels) != len(plan):
        raise ValueError(f"{len(kernels)} profiled kernels for {len(plan)} planned launches: "
                         f"{[k.name[:40] for k in kernels[:8]]}")
    out: dict[str, list[dict]] = {}
    for entry, k in zip(plan, kernels):
        out.setdefault(entry, []).append(kernel_clock(k))
    return out


def kernel_clock(k) -> dict:
    """One profiled kernel (ncu_csv.RawKernel) -> its name, duration (ms), elapsed cycles of the busiest GPC, the SMs'
    clock over it (cycles over duration, MHz) and the mean SM's active cycles."""
    seconds, cycles = k.number("gpu__time_duration.sum"), k.number("gpc__cycles_elapsed.max")
    if not seconds or not cycles:
        raise ValueError(f"kernel {k.id} ({k.name[:40]}) has no duration or cycles")
    return {"kernel": k.name, "ms": seconds * 1e3, "cycles": cycles, "mhz": cycles / seconds / 1e6,
            "active": k.number("sm__cycles_active.avg")}


def ncu_table(clocks: dict[str, list[dict]]) -> list[str]:
    """Markdown rows: each launch kind's medians, and cuBLAS against the reference on each input (cycles, clock)."""
    med = {e: {f: statistics.median(r[f] for r in rows) for f in ("ms", "cycles", "mhz")} for e, rows in clocks.items()}
    lines = ["| kernel / inputs | launches | ms | cycles (M) | clock MHz | kernel name |", "|---|---|---|---|---|---|"]
    for e, rows in clocks.items():
        m = med[e]
        lines.append(f"| {e} | {len(rows)} | {m['ms']:.4f} | {m['cycles'] / 1e6:.4f} | {m['mhz']:,.0f} | "
                     f"{rows[0]['kernel'][:48]} |")
    for data in NCU_INPUTS:
        c, r = med.get(f"cublas/{data}"), med.get(f"ref/{data}")
        if c and r:
            lines.append(f"| cuBLAS / reference, {data} | | {c['ms'] / r['ms']:.4f} | {c['cycles'] / r['cycles']:.4f} | "
                         f"{c['mhz'] / r['mhz']:.4f} | time = cycles / clock |")
    return lines


SYMS = {"M": M, "N": N, "K": K}


def pair_launchers(torch, ref, data_sets: dict, C) -> dict:
    """'cublas/INPUT' and 'ref/INPUT' -> a launcher of cuBLAS and of the reference (a Runner) on each input."""
    fns = {}
    for data, (A, B) in data_sets.items():
        fns[f"cublas/{data}"] = (lambda A=A, B=B: torch.matmul(A, B.T, out=C))
        fns[f"ref/{data}"] = ref.prepare({"A": A, "B": B, "C": C}, SYMS)
    return fns


def ncu_launch(rounds: int, plan_path: str) -> None:
    """The launches Nsight Compute reads (see the module's docstring): each alone in an NVTX range after a cold L2
    and 3 ms idle, as the timed loops of rounds 26-28 run them; two warm calls of each first, outside the range."""
    import torch
    from gemm_reference_bench import Runner

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ref = Runner("ref", (BUILD / "ref.cu").read_text(), (BUILD / "ref.cubin").read_bytes(), num_sms)
    data_sets = inputs(torch)
    fns = pair_launchers(torch, ref, {d: data_sets[d] for d in NCU_INPUTS}, C)
    for fn in list(fns.values()) * 2:
        fn()
    torch.cuda.synchronize()
    plan = ncu_plan(rounds)
    for entry in plan:
        flush.zero_()
        torch.cuda.synchronize()
        time.sleep(0.003)
        torch.cuda.nvtx.range_push("clk")
        fns[entry]()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    Path(plan_path).write_text(json.dumps(plan))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--gap-ms", type=float, default=3.0)
    ap.add_argument("--variants", default="", help="diagnosis variants (bench/build_gemm_diag) timed on randn too")
    ap.add_argument("--trace", action="store_true", help="also launch trace_clk on every input: the SMs' clock inside")
    ap.add_argument("--trace-variants", default="", help="traced neighbours (trace_clk_132, trace_clk_c2, ...) launched "
                                                         "on randn and on both_zero beside trace_clk")
    ap.add_argument("--json")
    ap.add_argument("--flush", choices=["write", "read"], default="write",
                    help="how L2 is made cold before each timed call: zeroed (dirty lines, as `ptxbench eval`) or read")
    ap.add_argument("--ncu-launches", type=int, default=0, help="only launch each side this many rounds for ncu")
    ap.add_argument("--ncu-read", help="ncu's raw page (CSV) of an --ncu-launches run: print clocks and cycles")
    ap.add_argument("--ncu-plan", default="ncu_plan.json", help="the launches' order, written by --ncu-launches")
    a = ap.parse_args()
    if a.ncu_read:
        clocks = ncu_clocks(Path(a.ncu_read).read_text(), json.loads(Path(a.ncu_plan).read_text()))
        print("\n".join(ncu_table(clocks)))
        if a.json:
            Path(a.json).write_text(json.dumps({"metrics": NCU_METRICS, "clocks": clocks}, indent=1))
        return
    if a.ncu_launches:
        return ncu_launch(a.ncu_launches, a.ncu_plan)
    import torch
    from gemm_reference_bench import POISON_WORD, Runner, interleaved_times

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    syms = SYMS
    names = ["ref"] + [v for v in a.variants.split(",") if v and v != "ref"]
    runners = {n: Runner(n, (BUILD / f"{n}.cu").read_text(), (BUILD / f"{n}.cubin").read_bytes(), num_sms) for n in names}
    data_sets = inputs(torch)
    fns = pair_launchers(torch, runners["ref"], {"randn": data_sets["randn"]}, C)
    A, B = data_sets["randn"]
    for n in names[1:]:  # the variants beside the reference on randn, then the other inputs
        fns[f"{n}/randn"] = runners[n].prepare({"A": A, "B": B, "C": C}, syms)
    fns.update(pair_launchers(torch, runners["ref"], {d: v for d, v in data_sets.items() if d != "randn"}, C))
    times = interleaved_times(fns, a.iters, flush, gap_s=a.gap_ms / 1000, flush_mode=a.flush)
    quartiles = {k: statistics.quantiles(v, n=4) for k, v in times.items()}
    rows = {k: {"median_ms": statistics.median(times[k]), "q1_ms": q[0], "q3_ms": q[2]} for k, q in quartiles.items()}
    print("| kernel / inputs | median ms | IQR ms | vs the same kernel on randn |\n|---|---|---|---|")
    for k, r in rows.items():
        kernel = k.split("/")[0]
        base = rows[f"{kernel}/randn" if kernel in ("ref", "cublas") else "ref/randn"]["median_ms"]
        print(f"| {k} | {r['median_ms']:.4f} | {r['q1_ms']:.4f}-{r['q3_ms']:.4f} | {100 * (r['median_ms'] / base - 1):+.1f}% |")
    clocks = {}
    if a.trace:
        print("\n| kernel | inputs | launch | span ms | clock per tile, median [p10, p90] MHz | per CTA, median [min, max] "
              "MHz | CTA cycles, median (M) |\n|---|---|---|---|---|---|---|")
        plan = [("trace_clk", d) for d in data_sets]
        plan += [(v, d) for v in a.trace_variants.split(",") if v for d in ("randn", "both_zero")]
        tracers = {}
        for name, data in plan:
            if name not in tracers:
                tracers[name] = Runner(name, (BUILD / f"{name}.cu").read_text(), (BUILD / f"{name}.cubin").read_bytes(),
                                       num_sms)
            tracer = tracers[name]
            A, B = data_sets[data]
            launch = tracer.prepare({"A": A, "B": B, "C": C}, syms)
            clocks[f"{name}/{data}"] = []
            for i in range(5):
                flush.zero_()
                torch.cuda._sleep(200_000)
                launch()
                torch.cuda.synchronize()
                c = clock_summary(tracer.scratch["trace"].cpu().tolist(), POISON_WORD)
                clocks[f"{name}/{data}"].append(c)
                print(f"| {name} | {data} | {i} | {c['span_ms']:.4f} | {c['tile_mhz_median']:.0f} [{c['tile_mhz_p10']:.0f}, "
                      f"{c['tile_mhz_p90']:.0f}] | {c['cta_mhz_median']:.0f} [{c['cta_mhz_min']:.0f}, "
                      f"{c['cta_mhz_max']:.0f}] | {c['cta_cycles_median'] / 1e6:.4f} |", flush=True)
                time.sleep(a.gap_ms / 1000)
    if a.json:
        Path(a.json).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "gap_ms": a.gap_ms,
                                            "iters": a.iters, "timing": rows, "clocks": clocks}, indent=1))


if __name__ == "__main__":
    main()
