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


def first_past_claims_wrong(readme: str, first_past: dict[str, list[int]]) -> list[str]:
    """The climbs whose `each past the library from turn K` (with an exception `(run N from turn M`) in
    docs/examples/README.md is not the turn each run first beat the library."""
    import re

    wrong = []
    for name, claim in re.findall(r"^- ([\w-]+)/:(.*?)(?=^- |\Z)", readme, re.M | re.S):
        said = re.search(r"each (?:run )?past the library from turn (\d+)(?: \(run (\d) from turn (\d+))?",
                         " ".join(claim.split()))
        if said and name in first_past:
            expected = [int(said[1])] * len(first_past[name])
            if said[2]:
                expected[int(said[2]) - 1] = int(said[3])
            if first_past[name] != expected:
                wrong.append(f"{name}: {first_past[name]}")
    return wrong


def test_the_examples_readme_says_when_each_climb_passed_the_library():
    """The causal climb was said past cuDNN from turn 4 in each run; its run 3 was past at turn 3 (1.002x)."""
    first_past = {}
    for climb in sorted(EXAMPLES.glob("tuner-climb*")):
        first_past[climb.name] = [
            next(t.turn for t in score_runs([climb / f"run{i}"]).trajectories[0].turns if (t.speedup or 0) > 1)
            for i in (1, 2, 3)]
    assert first_past_claims_wrong((EXAMPLES / "README.md").read_text(), first_past) == []


def test_a_wrong_first_past_turn_is_caught():
    readme = ("- a/: each past the library from turn 4 and more\n"
              "- b/: each past the library from turn 4 (run 3 from turn 3, x)\n")
    assert first_past_claims_wrong(readme, {"a": [4, 4, 3], "b": [4, 4, 3]}) == ["a: [4, 4, 3]"]
