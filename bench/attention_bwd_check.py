"""The wgmma + TMA attention backward (the reference, attention_backward.reference_backward, by default) on every
backward workload it covers, through the real evaluator: first untimed (correctness on every workload, seconds each), then
timed against the library (interleaved, 95% interval) where it passed. Run on a GPU machine:

  source bench/gpu_env.sh && python3 bench/attention_bwd_check.py [--json OUT.json] [--timed ID,ID]
      [--variant NAME|FILE[,NAME...]] [--profile ID,ID] [--label v1]

--variant evaluates other versions of the kernel (names of workloads/solutions/attention_bwd_variants/,
`checked-in` for attention_bwd_wgmma.cu itself, or files with its plan lines), several in one evaluator with the
timed runs interleaved workload by workload, so they are compared under the same conditions; --profile takes a full
Nsight Compute profile of those workloads after their timed run and prints its feedback (the hot lines).
Prints one line per evaluation as it lands and a Markdown table last.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SMOKE_FIRST = ["smoke_mha_bwd_d64", "smoke_mha_bwd_d64_causal", "smoke_mha_bwd_d64_gqa_h4_kv2"]
FEEDBACK_CHARS = 6000
MAIN = ["mha_bwd_d128", "mha_bwd_d128_causal", "mha_bwd_d64", "mha_bwd_d64_causal", "mha_bwd_d96",
        "mha_bwd_d96_causal", "mha_bwd_d128_gqa_h32_kv8"]


def _row(wid: str, res, seconds: float) -> dict:
    t = res.timing
    errs = [c.model_dump() if hasattr(c, "model_dump") else c for c in (res.correctness or [])][:1]
    return {"workload": wid, "status": res.status, "message": (res.message or "")[:400], "seconds": round(seconds, 1),
            "speedup": t.speedup if t else None, "speedup_ci": t.speedup_ci if t else None,
            "ms": t.candidate.median_ms if t else None,
            "library_ms": (t.baselines.get(t.primary_baseline).median_ms if t and t.primary_baseline in t.baselines
                           else None),
            "tflops": t.tflops if t else None, "correctness": errs,
            # what a refused plan or a fault said beyond its one-line message (v24's PLAN_ERROR came back without it)
            "plan_errors": list(res.plan_errors or [])[:8], "runtime_error": (res.runtime_error or "")[:400]}


def _variant(name: str) -> str | None:
    """A variant's text: a name of workloads/solutions/attention_bwd_variants/, else a file's contents; None for
    `checked-in` (attention_bwd_wgmma.cu itself, the variants' base)."""
    if name == "checked-in":
        return None
    if Path(name).is_file():
        return Path(name).read_text(encoding="utf-8")
    from ptxbench.workloads.solutions.attention_bwd_variants import variant_text

    return variant_text(name)


def main() -> None:
    from compile_first import compile_first
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.workloads.registry import WORKLOADS, get_workload
    from ptxbench.workloads.solutions.attention_backward import REFERENCE_VARIANT, fast_backward

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--timed", default=",".join(MAIN))
    ap.add_argument("--untimed", default=",".join(SMOKE_FIRST + MAIN))
    ap.add_argument("--variant", default="", help="variant names (workloads/solutions/attention_bwd_variants/), "
                    "'checked-in' or files, comma-separated: one evaluator, the timed runs interleaved workload by "
                    "workload; default: the reference (attention_backward.REFERENCE_VARIANT)")
    ap.add_argument("--profile", default="", help="workloads to profile in full after their timed run")
    ap.add_argument("--label", default="", help="the label of a single variant's rows")
    args = ap.parse_args()
    names = [v.strip() for v in args.variant.split(",") if v.strip()] or [""]
    versions = [(args.label if args.label and len(names) == 1 else Path(n).stem if n else "reference",
                 _variant(n or REFERENCE_VARIANT)) for n in names]
    ev = LocalEvaluator()
    ev.start_in_background()  # the GPU workers start while the sources compile
    rows = []

    def save() -> None:  # after every row: a step killed at its budget keeps what it measured
        if args.json:
            Path(args.json).write_text(json.dumps({"files": [n or REFERENCE_VARIANT for n in names], "rows": rows},
                                                  indent=1))

    def run(wid: str, label: str, source: str, options, suffix: str = "") -> dict:
        t0 = time.perf_counter()
        res = ev.evaluate(wid, source, options)
        row = {**_row(wid, res, time.perf_counter() - t0), "timed": options.time, "label": label + suffix}
        if suffix:
            row.update(feedback=(res.feedback or "")[:FEEDBACK_CHARS],
                       targets_runtime={k: v.verdict for k, v in (res.targets_runtime or {}).items()},
                       # per launch: its hot lines (line, share, reason) or why there are none
                       lines={k.get("name", ""): [[h.get("line"), h.get("share_pct"), h.get("text", "")[:60]]
                                                   for h in k.get("hot_lines", [])[:8]] or k.get("lines_note", "")
                              for k in (res.profile or {}).get("kernels", [])},
                       # per launch: Nsight Compute's duration (us) and DRAM bytes: what preprocess and postprocess cost
                       launches={k.get("name", ""): {"us": k.get("duration_us"), "dram_bytes": k.get("dram_bytes")}
                                 for k in (res.profile or {}).get("kernels", [])},
                       # per launch: its hottest SASS instructions (position, line or None, share, reason, text)
                       sass={k.get("name", ""): [[h.get("index"), h.get("line"), h.get("share_pct"), h.get("dominant"),
                                                  h.get("sass")] for h in k.get("hot_sass", [])]
                             for k in (res.profile or {}).get("kernels", [])})
            main = next((v for k, v in row["sass"].items() if k.startswith("attn_bwd_wgmma")), [])
            hot = "\n".join(f"  {i:5d} line {ln}  {pct:5.2f}%  {why:18s} {text}" for i, ln, pct, why, text in main)
            print(f"== profile {wid} ({label}): {row['targets_runtime']}\n{row['feedback']}\nlaunches: {row['launches']}\n"
                  f"lines: {row['lines']}\n"
                  f"hottest instructions of the main kernel:\n{hot}", flush=True)
        else:
            print(json.dumps(row)[:900], flush=True)
        rows.append(row)
        save()
        return row

    try:
        untimed = [w for w in args.untimed.split(",") if w in WORKLOADS]
        # every (variant, workload) text compiled in parallel first: one by one they left the GPU idle (~10 s each)
        compile_first(ev, sorted({(w, src) for _, base in versions for w in untimed
                                  if (src := fast_backward(get_workload(w), base)) is not None}))
        passed: dict[tuple[str, str], str] = {}  # (label, workload) -> the source that passed untimed
        for label, base in versions:
            for wid in untimed:
                src = fast_backward(get_workload(wid), base)
                if src is None:
                    print(f"{wid}: not covered", flush=True)
                    continue
                if run(wid, label, src, EvalOptions(time=False, profile_on_pass=False, timeout_s=60))["status"] == "PASSED":
                    passed[(label, wid)] = src
        later = [(w, EvalOptions(profile_on_pass=False, timeout_s=120), "") for w in args.timed.split(",")]
        later += [(w, EvalOptions(profile=True, timeout_s=120), "+profile") for w in args.profile.split(",")]
        for wid, options, suffix in later:  # each workload: every version in turn
            for label, _ in versions:
                if (label, wid) in passed:
                    run(wid, label, passed[(label, wid)], options, suffix)
    finally:
        ev.close()
        save()
    for label, _ in versions:
        _table(label, [r for r in rows if r["label"] == label])


def _table(label: str, rows: list[dict]) -> None:
    print(f"\n{label}\n| workload | timed | status | speedup [95% CI] | ms | library ms | TFLOP/s | s |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        ci = r["speedup_ci"]
        sp = f"{r['speedup']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if r["speedup"] and ci else "-"
        f = lambda v: f"{v:.3f}" if isinstance(v, float) else "-"  # noqa: E731
        print(f"| {r['workload']} | {r['timed']} | {r['status']} | {sp} | {f(r['ms'])} | {f(r['library_ms'])} | "
              f"{f(r['tflops'])} | {r['seconds']} |")
    for r in rows:  # why a row failed, below the table (a log's tail is often all that comes back)
        why = "; ".join(r.get("plan_errors") or []) or r.get("runtime_error") or ""
        if r["status"] != "PASSED" and why:
            print(f"- {r['workload']} ({r['status']}): {why[:300]}")


if __name__ == "__main__":
    main()
