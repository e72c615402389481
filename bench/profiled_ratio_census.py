"""The profiled call's kernel time over the timed calls' median, for every passing evaluation stored in the repository.

tools/profile/candidate.py credits a kernel's target verdicts only when that ratio lies between FASTER_UNDER_PROFILER
and SLOWER_UNDER_PROFILER: a kernel that runs its target instructions only under the profiler and another path when
timed shows as a ratio far from 1. The bounds are set by what honest kernels read, and this script reads it back from
the records the GPU runs left (evaluation JSON, gzipped or not, and trajectory JSONL under the folders given): per
workload and GPU the count, the range and the median call, then the extremes. Records that share workload, ratio and
median are counted once (an evaluation is often stored both as a file and inside a trajectory). Records of an older
result schema than --schema (default 3: the one call protocol, read flush and launch gate of 2026-11-30 onwards) are
left out of the table and their range given apart: their timed calls carried costs the protocol has since removed.

    python3 bench/profiled_ratio_census.py bench/results docs/examples [--schema 3] [--json F]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path


def _documents(path: Path):
    name = path.name
    opener = gzip.open if name.endswith(".gz") else open
    stem = name[:-3] if name.endswith(".gz") else name
    try:
        with opener(path, "rt") as f:
            if stem.endswith(".json"):
                yield json.load(f)
            elif stem.endswith(".jsonl"):
                for line in f:
                    if line.strip():
                        yield json.loads(line)
    except (OSError, ValueError, EOFError):
        return  # not a record (a truncated or foreign file): nothing to count


def ratio_of(record: dict) -> float | None:
    """tools/profile/candidate.profiled_slowdown of a stored EvalResult's profile and timing: the profiled kernels'
    summed duration over the timed median; None where either is missing or is no longer readable as one."""
    from pydantic import ValidationError

    from ptxbench.tools.profile.candidate import profiled_slowdown
    from ptxbench.tools.profile.summary import ProfileSummary
    from ptxbench.tools.results import Timing

    profile, timing = record.get("profile"), record.get("timing")
    if not isinstance(profile, dict) or not isinstance(timing, dict) or not profile.get("ok"):
        return None
    try:
        return profiled_slowdown(ProfileSummary.model_validate(profile), Timing.model_validate(timing))
    except ValidationError:
        return None


def _records(node):
    """Every EvalResult-shaped dict inside a document (trajectory records nest them)."""
    if isinstance(node, dict):
        if "profile" in node and "timing" in node and "workload" in node:
            yield node
        for value in node.values():
            yield from _records(value)
    elif isinstance(node, list):
        for value in node:
            yield from _records(value)


def census(roots: list[Path]) -> list[dict]:
    rows, seen = [], set()
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                path = Path(folder) / name
                for doc in _documents(path):
                    for rec in _records(doc):
                        ratio = ratio_of(rec)
                        if ratio is None or rec.get("status") != "PASSED":
                            continue
                        median = rec["timing"]["candidate"]["median_ms"]
                        key = (rec["workload"], round(ratio, 6), round(median, 6))
                        if key in seen:
                            continue
                        seen.add(key)
                        rows.append({"workload": rec["workload"], "gpu": rec["profile"].get("gpu") or "?",
                                     "ratio": ratio, "median_ms": median, "kernels": len(rec["profile"]["kernels"]),
                                     "schema": rec.get("schema_version") or 0, "source": str(path)})
    return sorted(rows, key=lambda r: r["ratio"])


def markdown(all_rows: list[dict], schema: int) -> str:
    rows = [r for r in all_rows if r["schema"] >= schema]
    older = [r["ratio"] for r in all_rows if r["schema"] < schema]
    groups = defaultdict(list)
    for r in rows:
        groups[(r["workload"], r["gpu"])].append(r)
    out = ["| workload | GPU | evaluations | profiled / timed | timed median, ms |", "| --- | --- | --- | --- | --- |"]
    for (workload, gpu), group in sorted(groups.items()):
        ratios = [r["ratio"] for r in group]
        medians = [r["median_ms"] for r in group]
        out.append(f"| {workload} | {gpu} | {len(group)} | {min(ratios):.3f}-{max(ratios):.3f} | "
                   f"{min(medians):.4f}-{max(medians):.4f} |")
    if rows:
        ratios = [r["ratio"] for r in rows]
        long_calls = [r["ratio"] for r in rows if r["median_ms"] >= 0.05]
        out += ["", f"All {len(rows)} of schema {schema} or later: {min(ratios):.3f}-{max(ratios):.3f}, median "
                    f"{statistics.median(ratios):.3f}; calls of 50 us or more ({len(long_calls)}): "
                    f"{min(long_calls):.3f}-{max(long_calls):.3f}."]
        if older:
            out += ["", f"Older schemas, left out: {len(older)} evaluations, {min(older):.3f}-{max(older):.3f}."]
        out += ["", "Extremes:"] + [f"- {r['ratio']:.3f}: {r['workload']} on {r['gpu']}, {r['median_ms']:.4f} ms, "
                                    f"{r['source']}" for r in rows[:3] + rows[-3:]]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--schema", type=int, default=3, help="the oldest result schema in the table")
    parser.add_argument("--json", type=Path, help="write every row here, older schemas included")
    args = parser.parse_args()
    rows = census(args.roots)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(markdown(rows, args.schema))


if __name__ == "__main__":
    main()
