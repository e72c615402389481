"""The work shares the decoy rule reads, on the honest reference kernels: each family's own share of the workload's
work (`work_share`) and the share of it counted another way (`elsewhere_share`), from one verdict-level profile each.

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/decoy_shares.py [--workloads W1,W2] [--json F]

An honest kernel must sit far below its op's decoy threshold elsewhere (TOKEN_SHARE plus the family's allowance for
the op: the backward's plain loads of O and dO and of its fp32 accumulators beside TMA, in its tensors' bytes; the
table gives TMA's threshold per workload) and at about 1 or more on its family.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

WORKLOADS = ["gemm_bf16_m8192_n7168_k5120", "gemm_bf16_m64_n7168_k5120", "mha_fwd_d128", "mha_fwd_d128_causal",
             "mha_fwd_d64", "mha_bwd_d128", "mha_bwd_d128_causal", "mha_bwd_d64", "mha_bwd_d128_gqa_h32_kv8"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.profile import profile_candidate
    from ptxbench.tools.profile.verdict import TOKEN_SHARE, design_allowance, expected_work
    from ptxbench.tools.solution.language import detect_language
    from ptxbench.workloads.arch import SM90A
    from ptxbench.workloads.registry import get_workload
    rows = []
    for w in args.workloads.split(","):
        text = reference_source(w)
        comp = compile_source(text, detect_language(text, None), "sm_90a", w)
        if comp.status != "ok":
            rows.append({"workload": w, "error": f"compile: {comp.errors[:1]}"})
            continue
        out = profile_candidate(w, text, comp.cubin_path, compile_result=comp, full=False)
        wl = get_workload(w)
        row = {"workload": w, "ok": out.ok, "error": out.error if not out.ok else "",
               "tma_limit": TOKEN_SHARE + design_allowance(SM90A.family("tma"), wl, expected_work(wl)["input_bytes"])}
        for fam, v in (out.targets_runtime or {}).items():
            row[fam] = {"verdict": v.verdict, "work_share": v.work_share, "elsewhere_share": v.elsewhere_share,
                        "counters": v.counter_values}
        rows.append(row)
        print(json.dumps({k: (v if not isinstance(v, dict) else {kk: vv for kk, vv in v.items() if kk != "counters"})
                          for k, v in row.items()}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("| workload | wgmma | work share | elsewhere | tma | work share | elsewhere | tma's decoy threshold |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda x: "-" if x is None else f"{x:.4g}"  # noqa: E731
    for r in rows:
        g, t = r.get("wgmma", {}), r.get("tma", {})
        print(f"| {r['workload']} | {g.get('verdict', r.get('error', ''))} | {fmt(g.get('work_share'))} | "
              f"{fmt(g.get('elsewhere_share'))} | {t.get('verdict', '')} | {fmt(t.get('work_share'))} | "
              f"{fmt(t.get('elsewhere_share'))} | {fmt(r.get('tma_limit'))} |")


if __name__ == "__main__":
    main()
