"""Golden runs recorded on the H200 (docs/examples, bench/results/h200-examples.md) still read, score and export."""
from __future__ import annotations

from pathlib import Path

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.scoring import score_runs

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_the_optimize_example_scores_four_correct_target_executing_turns():
    score = score_runs([EXAMPLES / "optimize-gemm-tuner"])
    (traj,) = score.trajectories
    assert traj.model == "builtin/tuner" and traj.stop_reason == "turn_limit" and traj.gpu == "NVIDIA H200"
    assert [t.status for t in traj.turns] == ["PASSED"] * 4
    assert all(t.correct and t.target_executed and t.gpu_evaluated for t in traj.turns)
    assert max(t.speedup for t in traj.turns) > 1.0


def test_the_synth_repairs_run_exports_eight_fixit_rows_in_five_failure_classes():
    rows, _ = build_rows(collect_samples([EXAMPLES / "synth-repairs" / "run"]),
                         ExportConfig(recipe="fixit", require_target_executed=False, include_held_out=True))
    assert len(rows) == 8
    assert {r.failure_class for r in rows} == {"INCORRECT_NUMERICAL", "INCORRECT_NAN", "TIMEOUT", "RUNTIME_ERROR",
                                               "PLAN_ERROR"}
    assert len({r.provenance.synthetic for r in rows}) == 8  # eight bug classes
    assert {r.provenance.gpu for r in rows} == {"NVIDIA H200"}  # from the evaluations' fingerprints
    timeout = next(r for r in rows if r.provenance.synthetic == "expect_tx_mismatch")
    assert timeout.failure_class == "TIMEOUT" and "watchdog" in timeout.prompt[3].content
