"""Whether Nsight Compute's range replay gives the target families' counters on this GPU, and what they read
beside kernel replay: the question before the target verdict can be taken over a plan's launches run back to back.

Run on a GPU machine (repository root, after `source bench/gpu_env.sh`):

    python3 bench/ncu_range_probe.py --json F

Two bf16 cuBLAS GEMMs and an fp32 elementwise kernel inside one NVTX range `ptxbench` (as tools/profile/replay.py
opens it), profiled twice with the verdict's counters (every family of sm_90a, tools/profile/runner.VERDICT_METRICS):
`--replay-mode kernel` (today's: one row per launch) and `--replay-mode range` over the NVTX range (one row for the
range). Prints each row's counters, the kernel rows' sums beside the range row, and ncu's own lines (errors, passes).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

WORK = """
import torch, nvtx
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
x, y, z = (torch.randn(1 << 24, device="cuda") for _ in range(3))
torch.matmul(a, b); torch.addcmul(z, x, y); torch.cuda.synchronize()   # warm: cuBLAS picked, modules loaded
nvtx.push_range("ptxbench")
c = torch.matmul(a, b)            # 2 * 2048^3 = 17.18 GFLOP on the tensor cores
d = torch.matmul(c, b)
torch.addcmul(z, x, y)            # 16.78 M FFMA
nvtx.pop_range()
torch.cuda.synchronize()
"""


def rows_of(text: str, metrics: list[str]) -> list[dict]:
    text = text[text.find('"ID"'):] if '"ID"' in text else ""
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows and rows[0].get("ID", "").strip() == "":  # the units row
        rows = rows[1:]
    keep = ("Kernel Name", "Range Name", "Range Result", "Block Size", "Grid Size")
    return [{**{k: r[k] for k in keep if k in r}, **{m: r.get(m) for m in metrics}} for r in rows]


def profile(ncu: str, mode: str, metrics: list[str]) -> dict:
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "ptxbench/", "--replay-mode", mode,
           "--metrics", ",".join(metrics), "--csv", "--page", "raw", sys.executable, "-c", WORK]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    notes = [line.strip() for line in (p.stdout + p.stderr).splitlines() if "==PROF==" in line or "==ERROR==" in line
             or "==WARNING==" in line]
    return {"mode": mode, "returncode": p.returncode, "rows": rows_of(p.stdout, metrics), "ncu_lines": notes[-40:],
            "tail": "" if p.returncode == 0 else (p.stderr or p.stdout)[-3000:]}


def number(value) -> float | None:
    try:
        return float(str(value).replace(",", ""))
    except (TypeError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    from ptxbench.tools.profile.runner import VERDICT_METRICS
    from ptxbench.workloads.arch import SM90A

    metrics = list(dict.fromkeys(VERDICT_METRICS + [c for f in SM90A.families for c in f.collected]))
    out = {"metrics": metrics, "kernel": profile(ncu, "kernel", metrics), "range": profile(ncu, "range", metrics)}
    # range replay refuses some counters by name ("Metric X is not supported in range replay"): asked again without
    # them, so the others are read; the refused ones are listed
    refused = [m for m in metrics if any(f"Metric {m} is not supported" in line for line in out["range"]["ncu_lines"])]
    for _ in range(len(metrics)):  # ncu names one refused counter a run
        if not refused or out["range"]["rows"]:
            break
        out["range"] = profile(ncu, "range", [m for m in metrics if m not in refused])
        refused += [m for m in metrics if m not in refused
                    and any(f"Metric {m} is not supported" in line for line in out["range"]["ncu_lines"])]
    out["range_refused"] = refused
    sums = {m: sum(number(r.get(m)) or 0.0 for r in out["kernel"]["rows"]) for m in metrics}
    ranged = out["range"]["rows"][0] if out["range"]["rows"] else {}
    out["compare"] = [{"metric": m, "kernel_sum": sums[m], "range": number(ranged.get(m)),
                       "range_raw": ranged.get(m)} for m in metrics]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"kernel replay: rc {out['kernel']['returncode']}, {len(out['kernel']['rows'])} rows; "
          f"range replay: rc {out['range']['returncode']}, {len(out['range']['rows'])} rows")
    print(f"  refused in range replay: {', '.join(refused) or 'none'}")
    for line in out["range"]["ncu_lines"][-8:]:
        print("  range:", line[:200])
    print(f"{'metric':60s} {'kernel sum':>16s} {'range':>16s}")
    for c in out["compare"]:
        print(f"{c['metric']:60s} {c['kernel_sum']:16.4g} {str(c['range_raw']):>16s}")


if __name__ == "__main__":
    main()
