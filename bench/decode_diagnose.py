"""Where the decode GEMMs' time goes (M = 64 and 128, N = 7168, K = 5120: 73 MB of B read once): params_for's kernel
timed beside copies of itself with one part taken out, interleaved with cuBLAS (bench/gemm_reference_bench.py's timing:
L2 flushed before each call, CUDA events, medians and IQR, 3 ms idle after each call so the clock stays at its top).

    ref      params_for(workload): the checked-in decode point (checked against torch before it is timed)
    no_a     the producer loads B alone (A's box skipped, the barrier told B's bytes): A's L2 reads taken out
    no_b     the producer loads A alone: B's DRAM reads taken out
    no_mma   the consumers issue no wgmma (they wait for each stage and free it): the data feed alone
    no_load  no TMA loads (the full barrier arrived on): the wgmmas, barriers and epilogue alone
    empty    no loads and no wgmma: launch, set-up, the ring's barriers and the epilogue

Only ref computes C; the others compute garbage on purpose. Beside them, what the GPU reads 73 MB in at all (`--roof`):
torch's own kernels over the same B, timed the same way: B.sum() and a GEMV (torch.mv, the M = 1 decode GEMM) read it
once, a copy reads and writes it, and a one-element add is the timing's floor (launch and events). Round 23 of
bench/results/gemm_sweep.md.

    python3 bench/decode_diagnose.py build                                  # here: -> bench/build_decode_diag/
    source bench/gpu_env.sh && python3 bench/decode_diagnose.py run --json $OUT/decode.json   # GPU (carry the folder)

`--flush read` makes L2 cold by reading a buffer twice its size instead of zeroing it: the same cold L2 with clean
lines, so a timed call does not pay the write-back of the flush's dirty lines (round 30). `--points` also times other
template points (POINTS) and A multicast over clusters of N tiles (A_MC), each checked against torch first, and names
the kernel cuBLAS picks for each shape (rounds 31-32b).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "bench" / "build_decode_diag"
sys.path.insert(0, str(ROOT / "bench"))

from gemm_diag_variants import A_MC_WALK, FEED_ONLY, NO_TMA, edited  # noqa: E402  (the main GEMM's edits fit this render too)

WORKLOADS = {"m64": ("gemm_bf16_m64_n7168_k5120", (64, 7168, 5120)),
             "m128": ("gemm_bf16_m128_n7168_k5120", (128, 7168, 5120))}
_A_LOAD = "            tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);\n"
_B_LOAD = "              tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);\n"
_EXPECT = "          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);\n"
NO_A = [(_A_LOAD, "            // diagnose: no_a\n"),
        (_EXPECT, "          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES - A_STAGE);  // diagnose: no_a\n")]
NO_B = [(_B_LOAD, "              // diagnose: no_b\n"),
        (_EXPECT, "          mbar_arrive_expect_tx(&full[stage], A_STAGE);  // diagnose: no_b\n")]
VARIANTS = {"ref": [], "no_a": NO_A, "no_b": NO_B, "no_mma": FEED_ONLY, "no_load": NO_TMA, "empty": NO_TMA + FEED_ONLY}
# Other template points on the decode shapes (params_for's with these changes), real kernels timed beside ref with
# `run --points`: rounds 21-22 measured deeper rings, deeper k-blocks and more SMs streaming level under the dirty flush
# that ptxbench eval's protocol leaves; round 31 asks them again under a clean cold L2 (`--flush read`).
POINTS = {
    "m64": {"s12": {"stages": 12}, "bk128": {"bk": 128, "stages": 6}, "bn56": {"bn": 56, "epilogue": "direct"},
            "bn56_s12": {"bn": 56, "stages": 12, "epilogue": "direct"}, "sk13": {"stages": 13, "tail": "streamk", "max_ctas": 0},
            "bn128": {"bn": 128}, "s4": {"stages": 4}, "s6": {"stages": 6}, "bn96": {"bn": 96, "epilogue": "direct"},
            "bn80": {"bn": 80, "epilogue": "direct"}, "bn80_s11": {"bn": 80, "stages": 11, "epilogue": "direct"},
            "hints": {"l2_hints": True}},
    "m128": {"s9": {"stages": 9, "epilogue": "direct"}, "bn56": {"bn": 56, "epilogue": "direct"},
             "sk128": {"bn": 128, "stages": 7, "tail": "streamk", "max_ctas": 0, "epilogue": "direct"},
             "hints": {"l2_hints": True}},
}


# A shared by a cluster of CM neighbouring N tiles (round 32): every one of the 112 CTAs of the M = 64 kernel reads
# the same A (655 KB) from L2 while B streams from DRAM, so L2 serves A's 73 MB beside B's 73 MB. These points render
# params_for's kernel with cluster_m = CM and turn the cluster around: each CTA loads 1/CM of A's box and multicasts
# it to the cluster, and loads its own B whole. A's L2 reads fall by CM; every SM still receives all of A.
# name -> (cluster size, other changes of params_for's point); round 32b adds cuBLAS's 11-deep ring (its M = 64 kernel,
# nvjet_sm90_tst_80x64_64x11_4x1, runs 11 stages in clusters of 4).
A_MC = {"m64": {"a_mc2": (2, {}), "a_mc4": (4, {}), "a_mc2_s11": (2, {"stages": 11}), "a_mc4_s11": (4, {"stages": 11})},
        "m128": {"a_mc2": (2, {}), "a_mc4": (4, {})}}


def a_multicast_edits(bm: int, bn: int, cm: int) -> list:
    """Edits of render(params_for(w, cluster_m=2)) (no L2 hints, one tile row) that multicast A along N over clusters
    of `cm` CTAs (the template's space stops at 2; the cluster size is a constant and the launch's cluster shape)."""
    return [
        (f"grid = [\"min(min(num_sms, 128) // 2 * 2, cdiv(cdiv(M, {bm}), 2) * 2 * cdiv(N, {bn}))\"",
         f"grid = [\"min(min(num_sms, 128) // {cm} * {cm}, cdiv(M, {bm}) * cdiv(N, {bn}))\""),
        ("cluster = [2, 1, 1]", f"cluster = [{cm}, 1, 1]"),
        ("constexpr int CLUSTER_M = 2;", f"constexpr int CLUSTER_M = {cm};  // diagnose: a_mc"),
        (f'[tmap.A_map]\ntensor = "A"\nbox = [64, {bm}]', f'[tmap.A_map]\ntensor = "A"\nbox = [64, {bm // cm}]'),
        (f'[tmap.B_map]\ntensor = "B"\nbox = [64, {bn // 2}]', f'[tmap.B_map]\ntensor = "B"\nbox = [64, {bn}]'),
        *A_MC_WALK,
        ("            tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);\n"
         "            if constexpr (CLUSTER_M > 1) {\n"
         "              tma_load_2d_multicast(sB + kc * B_CHUNK + cta_rank * B_SLICE, &tmB, &full[stage], kx,\n"
         "                                    n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);\n"
         "            } else {\n",
         "            // diagnose: a_mc (A's 1/CLUSTER_M multicast to the cluster, B loaded alone)\n"
         "            tma_load_2d_multicast(sA + kc * A_CHUNK + cta_rank * A_SLICE, &tmA, &full[stage], kx,\n"
         "                                  m0 + cta_rank * (BM / CLUSTER_M), (1 << CLUSTER_M) - 1);\n"
         "            {\n")]


def a_multicast_source(key: str, name: str) -> str:
    from ptxbench.workloads.solutions.gemm_template import params_for, render

    cm, changes = A_MC[key][name]
    p = params_for(WORKLOADS[key][0], cluster_m=2, **changes)
    with decode_space():
        return edited(render(p), a_multicast_edits(p.bm, p.bn, cm))


@contextmanager
def decode_space():
    """The template's space as rounds 21-22 widened it (rings to 14, k-blocks to 256), plus 80-column tiles (round
    32b: 90 CTAs over N = 7168, cuBLAS's width at M = 64; the direct epilogue stores the last, 48-column tile)."""
    from gemm_sweep import space_of
    from ptxbench.workloads.solutions import gemm_template as gt

    saved = gt.PARAM_SPACE["bn"]
    with space_of(21):
        gt.PARAM_SPACE["bn"] = sorted(set(saved) | {80})
        try:
            yield
        finally:
            gt.PARAM_SPACE["bn"] = saved


def point_params(key: str, name: str):
    """The GemmParams of POINTS[key][name], validated against its workload (deep rings allowed, as rounds 21-22)."""
    from gemm_sweep import space_of
    from ptxbench.workloads.solutions.gemm_template import params_for, validate

    wid, shape = WORKLOADS[key]
    p = params_for(wid, **POINTS[key][name])
    with decode_space():
        bad = validate(p, shape)
    if bad:
        raise ValueError(f"{key}_{name}: {bad}")
    return p


def build() -> None:
    from gemm_reference_bench import compile_cu
    from gemm_sweep import space_of
    from ptxbench.workloads.solutions.gemm_template import params_for, render

    BUILD.mkdir(parents=True, exist_ok=True)
    for key, (wid, _) in WORKLOADS.items():
        for name, edits in VARIANTS.items():
            compile_cu(BUILD / f"{key}_{name}.cu", edited(render(params_for(wid)), edits))
        for name in POINTS[key]:
            with decode_space():  # render() validates too
                compile_cu(BUILD / f"{key}_pt_{name}.cu", render(point_params(key, name)))
        for name in A_MC[key]:
            compile_cu(BUILD / f"{key}_pt_{name}.cu", a_multicast_source(key, name))


def roof_launchers(B, torch) -> dict:
    """Launchers of torch's own memory-bound kernels over B (N x K bf16), for the read rate a single kernel of this
    size reaches, and the timing's floor."""
    x = torch.randn(B.shape[1], device="cuda", dtype=torch.bfloat16)
    y = torch.empty(B.shape[0], device="cuda", dtype=torch.bfloat16)
    copy = torch.empty_like(B)
    one = torch.zeros(1, device="cuda")
    return {"torch_sum": lambda: torch.sum(B), "torch_gemv": lambda: torch.mv(B, x, out=y),
            "torch_copy": lambda: copy.copy_(B), "floor_add1": lambda: one.add_(1.0)}


def kernel_names(fn) -> list[str]:
    """The CUDA kernels one call of `fn` launches, by torch's profiler (which kernel cuBLAS picks for a shape)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA})


def run(iters: int, out: str | None, gap_ms: float, roof: bool = False, flush_mode: str = "write",
        points: bool = False) -> None:
    import torch
    from gemm_reference_bench import Runner, check, interleaved_times

    torch.manual_seed(0)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    results: dict = {"device": torch.cuda.get_device_name(0), "gap_ms": gap_ms, "iters": iters, "flush": flush_mode,
                     "workloads": {}}
    for key, (wid, (M, N, K)) in WORKLOADS.items():
        A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        syms = {"M": M, "N": N, "K": K}
        fns = {"cublas": lambda: torch.matmul(A, B.T, out=C)}
        for name in VARIANTS:
            cu = BUILD / f"{key}_{name}.cu"
            r = Runner(f"{key}_{name}", cu.read_text(), cu.with_suffix(".cubin").read_bytes(), num_sms)
            fns[name] = r.prepare({"A": A, "B": B, "C": C}, syms)
        expected = A.float() @ B.float().T
        checks = {}
        if points:  # each point must compute C before it is timed; a wrong one is reported and left out
            for name in [*POINTS[key], *A_MC[key]]:
                cu = BUILD / f"{key}_pt_{name}.cu"
                r = Runner(f"{key}_pt_{name}", cu.read_text(), cu.with_suffix(".cubin").read_bytes(), num_sms)
                fn = r.prepare({"A": A, "B": B, "C": C}, syms)
                C.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                checks[f"pt_{name}"] = check(C, expected)
                if checks[f"pt_{name}"]["ok"]:
                    fns[f"pt_{name}"] = fn
        if roof:
            fns.update(roof_launchers(B, torch))
        C.fill_(float("nan"))
        fns["ref"]()
        torch.cuda.synchronize()
        correct = check(C, expected)
        times = interleaved_times(fns, iters, flush, gap_s=gap_ms / 1000, flush_mode=flush_mode)
        ref_ms = statistics.median(times["ref"])
        rows = {}
        for name, ts in times.items():
            med, q = statistics.median(ts), statistics.quantiles(ts, n=4)
            rows[name] = {"median_ms": med, "q1_ms": q[0], "q3_ms": q[2], "vs_ref_pct": 100 * (med / ref_ms - 1),
                          "b_tb_s": N * K * 2 / med / 1e9}
        library = kernel_names(fns["cublas"])
        results["workloads"][wid] = {"ref_correct": correct, "points_correct": checks, "timing": rows,
                                     "cublas_kernels": library}
        print(f"\n{wid}: cuBLAS runs {library}")
        print(f"\n{wid}: ref correct {correct}; points correct {[n for n, c in checks.items() if c['ok']]}, wrong "
              f"{[n for n, c in checks.items() if not c['ok']]}\n| variant | median ms | IQR ms | vs ref | B's bytes / time |\n|---|---|---|---|---|")
        for name, t in rows.items():
            print(f"| {name} | {t['median_ms']:.4f} | {t['q1_ms']:.4f}-{t['q3_ms']:.4f} | {t['vs_ref_pct']:+.1f}% "
                  f"| {t['b_tb_s']:.2f} TB/s |", flush=True)
    if out:
        Path(out).write_text(json.dumps(results, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--gap-ms", type=float, default=3.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--roof", action="store_true", help="also time torch's sum, GEMV, copy over B and a one-element add")
    ap.add_argument("--flush", choices=["write", "read"], default="write",
                    help="how L2 is made cold before each call: zeroed (dirty lines, as `ptxbench eval`) or read (clean)")
    ap.add_argument("--points", action="store_true", help="also time POINTS (other template points), each checked first")
    a = ap.parse_args()
    t0 = time.time()
    build() if a.step == "build" else run(a.iters, a.json, a.gap_ms, a.roof, a.flush, a.points)
    print(f"{a.step} done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
