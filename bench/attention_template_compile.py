"""CPU check of the attention template's space (workloads/solutions/attention_template.py): every valid point
must assemble for sm_90a with wgmma and TMA in the SASS, no spills and no ptxas warnings.

Register pressure is what can break a valid point, and it grows with the key tile, so this compiles, for each
(head dim, causal, consumers, schedule, epilogue, rescale), the largest key tile validate() accepts at the producer
register setting that leaves the consumers least (stages, lpt_group and GQA do not change the registers).

    python3 bench/attention_template_compile.py [--out results.json] [--jobs 2]
"""
from __future__ import annotations

import argparse
import itertools
import json
from concurrent.futures import ProcessPoolExecutor

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.solutions import attention_template as at


def boundary_points() -> list[at.AttnParams]:
    out = []
    for hd, causal, consumers, schedule, epilogue, rescale in itertools.product(
            at.HEAD_DIMS, (False, True), at.PARAM_SPACE["consumers"], at.PARAM_SPACE["schedule"], at.PARAM_SPACE["epilogue"],
            at.PARAM_SPACE["rescale"]):
        tight = max(at.PARAM_SPACE["producer_regs"],
                    key=lambda r: -at.AttnParams(consumers=consumers, producer_regs=r).consumer_regs)
        ok = [p for bn in at.PARAM_SPACE["bn"]
              if not at.validate(p := at.AttnParams(head_dim=hd, causal=causal, consumers=consumers, bn=bn,
                                                    schedule=schedule, epilogue=epilogue, producer_regs=tight,
                                                    rescale=rescale))]
        if ok:
            out.append(max(ok, key=lambda p: p.bn))
    return out


def check(p: at.AttnParams) -> dict:
    r = compile_source(at.render(p), "cuda", "sm_90a", None, use_cache=False)
    row = {"params": p.model_dump(), "status": r.status}
    if r.status != "ok":
        return row | {"ok": False, "log": r.log[-1500:]}
    k = r.kernels[at.kernel_name(p)]
    row |= {"spills": k.spill_stores + k.spill_loads, "stack": k.stack, "HGMMA": k.sass_opcodes.get("HGMMA", 0),
            "UTMALDG": k.sass_opcodes.get("UTMALDG", 0), "warnings": [str(w) for w in r.warnings],
            "targets": r.targets["wgmma"].in_sass and r.targets["tma"].in_sass}
    row["ok"] = row["targets"] and not (row["spills"] or row["stack"] or row["warnings"])
    return row


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    points = boundary_points()
    print(f"{len(points)} boundary points", flush=True)
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(check, points):
            rows.append(row)
            p = row["params"]
            print(("ok  " if row["ok"] else "BAD ") + " ".join(f"{k}={p[k]}" for k in ("head_dim", "causal", "consumers", "bn",
                  "schedule", "epilogue", "producer_regs")), {k: row.get(k) for k in ("spills", "stack", "HGMMA")}, flush=True)
    print(f"{sum(r['ok'] for r in rows)} / {len(rows)} clean")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
