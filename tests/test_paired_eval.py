"""bench/paired_eval.py on the CPU: the alternation, and its verdict on the recorded evaluations of round 14 (the L2
priorities against the reference before them; bench/results/gemm_sweep/r14c_eval_*)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from paired_eval import order, readings, summary  # noqa: E402

RECORDED = ROOT / "bench" / "results" / "gemm_sweep"


def test_the_order_alternates_a_b_b_a():
    assert order(5) == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1]
    assert order(1) == [0, 1] and sum(order(4)) == 4


def _copy_round_14(folder: Path, first: int = 1, last: int = 10) -> None:
    for f in RECORDED.glob("r14c_eval_*_2026-12-03.json"):
        _, _, n, label, _ = f.stem.split("_")
        if first <= int(n) <= last:
            shutil.copy(f, folder / f"{int(n):02d}_{label}.json")


def test_the_verdict_on_round_14_is_the_recorded_one(tmp_path):
    _copy_round_14(tmp_path)
    rows = readings(tmp_path)
    assert [label for _, label, _ in rows] == ["ref", "hints", "hints", "ref", "ref", "hints", "hints", "ref", "ref",
                                               "hints"]
    text = summary(rows)
    assert "| 2 | hints | PASSED | 0.7328 | 0.7548 | 1.0301x [1.0291, 1.0312] |" in text
    assert text.endswith("verdict: hints -0.63% median kernel time against ref (5 and 5 readings); every hints reading "
                         "below every ref reading")


def test_a_failed_evaluation_is_listed_and_left_out_and_overlap_is_said(tmp_path):
    _copy_round_14(tmp_path, 1, 4)
    (tmp_path / "05_hints.json").write_text(json.dumps({"status": "TIMEOUT", "message": "hung"}))
    slow = json.loads((tmp_path / "04_ref.json").read_text())
    slow["timing"]["candidate"]["median_ms"] = 0.7300  # a reference reading below a hinted one
    (tmp_path / "04_ref.json").write_text(json.dumps(slow))
    text = summary(readings(tmp_path))
    assert "| 5 | hints | TIMEOUT | - | - | - |" in text
    assert "(2 and 2 readings); the readings overlap" in text
    assert summary(readings(tmp_path)[:1]).endswith("verdict: needs two points with passing evaluations")
