"""The attention forward's time as cycles over clock, point by point: the D = 128 reference (TUNED) and its neighbours,
each with one of builtin/tuner's moves taken back, and cuDNN's kernel beside them, launched on randn inputs (what
`ptxbench eval` draws) and on zeros (where the power limit is not reached), each call alone in an NVTX range `clk`
after a cold L2 and 3 ms idle, for Nsight Compute to read each kernel's elapsed cycles and duration with the clocks
left free. The GEMM's rounds 27-29 (bench/results/gemm_sweep.md) split its moves the same way; a move that changes the
clock at the same cycles changes the energy a cycle, which builtin/tuner reads as the template's TUNER_ENERGY.

    python3 bench/attention_energy.py build        # here: render, check and compile -> bench/build_attn_energy/ (carry it)
    source bench/gpu_env.sh
    ncu --clock-control none --nvtx --nvtx-include clk/ \\
        --metrics gpc__cycles_elapsed.max,gpu__time_duration.sum,sm__cycles_active.avg \\
        -f -o $OUT/attn python3 bench/attention_energy.py launch --rounds 5 --plan $OUT/plan.json
    ncu --import $OUT/attn.ncu-rep --csv --page raw > $OUT/attn.csv
    python3 bench/attention_energy.py read $OUT/attn.csv --plan $OUT/plan.json --json $OUT/attn.json

Every build is checked against cuDNN's output on the randn inputs before its launches (`launch` refuses to time a
wrong one); the plan file records each check.
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
BUILD = ROOT / "bench" / "build_attn_energy"
WORKLOAD = "mha_fwd_d128"
# tuner role -> the changes from the reference point that take that move back (validate() refuses the others at this
# point: the walk needs q_regs, the TMA epilogue, the cooperative schedule and 40 producer registers; 3 stages and
# 176-key tiles do not fit)
NEIGHBOURS: dict[str, dict] = {
    "persistent": {"persistent": False, "producer_regs": 24, "q_ahead": False, "producer_fn": False},
    "rescale": {"rescale": "always", "early_pack": False},
    "early_pack": {"early_pack": False},
    "split_rows": {"split_rows": False},
    "uniform": {"uniform": False},
    "stagger": {"stagger": False},
    "key_tile": {"bn": 96},
}
INPUTS = ("randn", "zeros")
LIBRARY = "cudnn"
NCU_METRICS = ("gpc__cycles_elapsed.max", "gpu__time_duration.sum", "sm__cycles_active.avg")


def points() -> dict:
    """name -> AttnParams: 'ref' (TUNED) and one neighbour per NEIGHBOURS role, each validated for the workload."""
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions import attention_template as at

    wl = get_workload(WORKLOAD)
    ref = at.default_params(wl)
    out = {"ref": ref}
    for role, changes in NEIGHBOURS.items():
        p = ref.model_copy(update=changes)
        bad = at.validate(p, wl)
        if bad:
            raise ValueError(f"{role}: {bad}")
        out[f"no_{role}"] = p
    return out


def build() -> None:
    """Each point rendered and compiled through the harness's own path (parse_solution, compile_source)."""
    from attention_cta_cost import build_solution
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions import attention_template as at

    wl = get_workload(WORKLOAD)
    BUILD.mkdir(parents=True, exist_ok=True)
    for name, p in points().items():
        source = at.render(p)
        comp, cubin, _ = build_solution(wl, source)
        (BUILD / f"{name}.cu").write_text(source)
        (BUILD / f"{name}.cubin").write_bytes(cubin)
        regs = {k: (kr.registers, kr.spill_stores) for k, kr in comp.kernels.items()}
        print(f"{name}: {regs}", flush=True)


def plan_of(rounds: int, names: list[str]) -> list[str]:
    """The launches' order under Nsight Compute: every point and the library on each input, `rounds` times."""
    return [f"{name}/{data}" for _ in range(rounds) for data in INPUTS for name in names]


def launch(rounds: int, plan_path: str) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ptxbench.tools.gpu.inprocess import in_process_worker
    from ptxbench.tools.gpu.runner import Candidate, new_buffers
    from ptxbench.tools.solution.parse import parse_solution, resolve_plan
    from ptxbench.workloads.registry import get_workload

    wl = get_workload(WORKLOAD)
    g = torch.Generator(device="cuda").manual_seed(0)
    randn = {n: torch.randn(wl.shape(n), device="cuda", dtype=torch.bfloat16, generator=g) for n in "QKV"}
    data = {"randn": randn, "zeros": {n: torch.zeros_like(t) for n, t in randn.items()}}

    def library(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, scale=wl.symbols["scale"])

    expected = library(*(randn[n] for n in "QKV")).float()
    with in_process_worker() as state:
        sms = state.limits.sm_count
        calls: dict[str, tuple] = {}  # plan entry -> (prepare, call)
        checks: dict[str, dict] = {}
        keep = []
        names = [p.stem for p in sorted(BUILD.glob("*.cu"))]
        for name in names:
            sol = parse_solution((BUILD / f"{name}.cu").read_text(), wl, "sm_90a")
            plan = resolve_plan(sol.plan, wl, sms, "sm_90a")
            cand = Candidate((BUILD / f"{name}.cubin").read_bytes(), plan, state, wl)
            for tag, inputs in data.items():
                bufs = new_buffers(wl, plan)
                bufs.load_inputs(inputs)
                bufs.reset()
                binding = cand.bind(bufs)
                calls[f"{name}/{tag}"] = (bufs.zero_scratch_, lambda c=cand, b=binding: c.launch(b))
                keep.append((cand, bufs))
                if tag == "randn":  # the build must compute O before its launches count
                    bufs.zero_scratch_()
                    cand.launch(binding)
                    torch.cuda.synchronize()
                    o = bufs.tensors["O"].data.view(wl.shape("O")).float()
                    err = (o - expected).abs()
                    checks[name] = {"max_abs": float(err.nan_to_num(1e9).max()),
                                    "rel_fro": float((o - expected).nan_to_num(1e9).norm() / expected.norm())}
                    checks[name]["ok"] = checks[name]["rel_fro"] < 1e-2 and checks[name]["max_abs"] < 0.1
                    print(f"{name}: {checks[name]}", flush=True)
        if not all(c["ok"] for c in checks.values()):
            raise SystemExit(f"a build did not compute O: {checks}")
        for tag, inputs in data.items():
            q, k, v = (inputs[n] for n in "QKV")
            calls[f"{LIBRARY}/{tag}"] = (lambda: None, lambda q=q, k=k, v=v: library(q, k, v))
        names.append(LIBRARY)
        for prepare, call in calls.values():  # two warm calls of each, outside the ranges
            for _ in range(2):
                prepare()
                call()
        torch.cuda.synchronize()
        flush = torch.empty(2 * state.limits.l2_bytes, dtype=torch.uint8, device="cuda")
        plan = plan_of(rounds, names)
        for entry in plan:
            prepare, call = calls[entry]
            prepare()  # the walk's zeroed tile counter, outside the range (it is a kernel of its own)
            flush.zero_()
            torch.cuda.synchronize()
            time.sleep(0.003)
            torch.cuda.nvtx.range_push("clk")
            call()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
    Path(plan_path).write_text(json.dumps({"plan": plan, "checks": checks, "device": torch.cuda.get_device_name(0)},
                                          indent=1))


def table(clocks: dict[str, list[dict]]) -> tuple[list[str], dict]:
    """Markdown rows (each entry's medians; each point against the reference on each input: time, cycles, clock) and
    the same as a dict."""
    med = {e: {f: statistics.median(r[f] for r in rows) for f in ("ms", "cycles", "mhz", "active")}
           for e, rows in clocks.items()}
    lines = ["| point / inputs | launches | ms | cycles (M) | clock MHz | vs ref: time | cycles | clock |",
             "|---|---|---|---|---|---|---|---|"]
    split = {}
    for e, rows in clocks.items():
        name, data = e.split("/")
        m, r = med[e], med.get(f"ref/{data}")
        ratio = {f: m[f] / r[f] for f in ("ms", "cycles", "mhz")} if r else {}
        split[e] = {**m, "launches": len(rows), "kernel": rows[0]["kernel"], "vs_ref": ratio}
        lines.append(f"| {e} | {len(rows)} | {m['ms']:.4f} | {m['cycles'] / 1e6:.4f} | {m['mhz']:,.0f} | "
                     + " | ".join(f"{100 * (ratio[f] - 1):+.2f}%" for f in ("ms", "cycles", "mhz")) + " |")
    return lines, split


def clocks_of(raw_csv: str, plan: list[str]) -> dict[str, list[dict]]:
    """ncu's raw page of the `clk` launches -> plan entry -> one dict per launch (kernel, ms, elapsed cycles of the
    busiest GPC, clock = cycles over duration, the mean SM's active cycles). A point's call is one kernel; the library's
    may be a few (cuDNN's SDPA can add helpers; torch's profiler cannot count them under ncu, which holds the counters),
    as many in every call: the page's count must split that way, and the longest kernel of each call is read."""
    from gemm_data_power import kernel_clock
    from ptxbench.tools.profile.ncu_csv import parse_raw

    kernels = parse_raw(raw_csv)
    n_lib = sum(e.startswith(f"{LIBRARY}/") for e in plan)
    extra = len(kernels) - (len(plan) - n_lib)
    if n_lib == 0 or extra < n_lib or extra % n_lib:
        raise ValueError(f"{len(kernels)} profiled kernels do not split into the plan's {len(plan) - n_lib} point calls "
                         f"and {n_lib} library calls of the same kernel count")
    per_library_call = extra // n_lib
    out: dict[str, list[dict]] = {}
    it = iter(kernels)
    for entry in plan:
        group = [next(it) for _ in range(per_library_call if entry.startswith(f"{LIBRARY}/") else 1)]
        out.setdefault(entry, []).append(kernel_clock(max(group, key=lambda x: x.number("gpu__time_duration.sum") or 0.0)))
    return out


def read(csv_path: str, plan_path: str, out: str | None) -> None:
    meta = json.loads(Path(plan_path).read_text())
    clocks = clocks_of(Path(csv_path).read_text(), meta["plan"])
    lines, split = table(clocks)
    print("\n".join(lines))
    if out:
        Path(out).write_text(json.dumps({**meta, "split": split, "launches": clocks}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "launch", "read"])
    ap.add_argument("csv", nargs="?", help="read: ncu's raw page (--csv --page raw)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--plan", default="plan.json")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.step == "build":
        build()
    elif a.step == "launch":
        launch(a.rounds, a.plan)
    else:
        read(a.csv, a.plan, a.json)


if __name__ == "__main__":
    main()
