"""bench/profiled_ratio_census.py: the profiled / timed ratio read back from stored evaluations, computed as the
profile policy computes it, and every honest evaluation the repository holds credited under the bounds in use."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ptxbench.tools.profile.candidate import (FASTER_CHECKED_FROM_MS, FASTER_UNDER_PROFILER, SLOWER_UNDER_PROFILER,
                                              profiled_slowdown)
from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary
from ptxbench.tools.results import EvalResult, Timing, TimingStat
from sweeps import ROOT, bench_script

census = bench_script("profiled_ratio_census")


def evaluation(workload: str, median_ms: float, *kernel_us: float, status: str = "PASSED") -> EvalResult:
    summary = ProfileSummary(ok=True, kernels=[KernelProfile(name=f"k{i}", duration_us=us)
                                               for i, us in enumerate(kernel_us)])
    timing = Timing(candidate=TimingStat(median_ms=median_ms, ci_low_ms=median_ms, ci_high_ms=median_ms, n=30))
    return EvalResult(workload=workload, status=status, timing=timing, profile=summary.model_dump())


def test_the_ratio_of_a_stored_record_is_the_policys(tmp_path):
    r = evaluation("gemm", 0.5, 300.0, 210.0)
    summary = ProfileSummary.model_validate(r.profile)
    assert census.ratio_of(r.model_dump(mode="json")) == pytest.approx(profiled_slowdown(summary, r.timing)) \
        == pytest.approx(1.02)
    assert census.ratio_of(evaluation("gemm", 0.5).model_dump(mode="json")) is None  # no kernel timed
    assert census.ratio_of({"workload": "w", "profile": {"ok": False}, "timing": {}}) is None


def test_rows_are_counted_once_and_older_schemas_kept_apart(tmp_path):
    good, slow = evaluation("gemm", 1.0, 990.0), evaluation("attn", 2.0, 2040.0)
    old = evaluation("gemm", 1.0, 880.0).model_dump(mode="json") | {"schema_version": 1}
    failed = evaluation("gemm", 1.0, 500.0, status="INCORRECT_NUMERICAL")
    (tmp_path / "a.json").write_text(good.model_dump_json())
    with gzip.open(tmp_path / "b.json.gz", "wt") as f:
        f.write(slow.model_dump_json())
    # a trajectory nests the same evaluation again, beside an old-schema one and a failure
    lines = [{"turn": 1, "eval": json.loads(good.model_dump_json())}, {"turn": 2, "eval": old},
             {"turn": 3, "eval": json.loads(failed.model_dump_json())}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (tmp_path / "broken.json").write_text("{not json")
    rows = census.census([tmp_path])
    assert [(r["workload"], round(r["ratio"], 3)) for r in rows] == [("gemm", 0.88), ("gemm", 0.99), ("attn", 1.02)]
    table = census.markdown(rows, 3)
    assert "| gemm |" in table and "| attn |" in table and "All 2 of schema 3 or later: 0.990-1.020" in table
    assert "Older schemas, left out: 1 evaluations, 0.880-0.880." in table


def test_every_honest_evaluation_on_record_is_credited_under_the_bounds_in_use():
    """The bounds are set from these readings (SLOWER_UNDER_PROFILER's note): one moved past any of them would refuse
    an honest kernel's target verdicts."""
    rows = [r for r in census.census([ROOT / "bench" / "results", ROOT / "docs" / "examples"]) if r["schema"] >= 3]
    assert len(rows) >= 400
    assert max(r["ratio"] for r in rows) <= SLOWER_UNDER_PROFILER
    long_calls = [r["ratio"] for r in rows if r["median_ms"] >= FASTER_CHECKED_FROM_MS]
    assert min(long_calls) >= FASTER_UNDER_PROFILER
