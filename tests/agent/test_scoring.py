"""Scoring on hand-built trajectories (tests/trajectory_builder.py: build_sample_run). Every expected number
below was worked out by hand from the turn lists; the comments show the arithmetic.

Cell (m/a, gemm), turns as (status, speedup, target verdict T/F/U):
  A1: CE, P0.6F, P0.9T, IN                     stop turn_limit
  A2: P1.1T, RE, CE, P1.3U, P1.25T             stop turn_limit
  A3: CE, [infra at turn 2]                    stop infra_error  -> infra-failed: out of trajectory-level scores
  A4: NO_SUBMISSION, CE, CE, FORMAT_ERROR      stop turn_limit
  A5: P0.8F, [infra at 2], retried: P0.7T      stop turn_limit   -> the retried turn 2 replaces the infra one
"""
from __future__ import annotations

import json
import math
import shutil

import pytest

from ptxbench.agent.scoring import (
    Estimate, geomean_estimate, mean_estimate, ratio_estimate, score_runs, score_trajectory,
)
from ptxbench.agent.records.rundir import load_run
from trajectory_builder import TrajectoryBuilder, build_sample_run

approx = lambda v: pytest.approx(v, rel=1e-12, abs=1e-12)  # noqa: E731


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return build_sample_run(tmp_path_factory.mktemp("run") / "sample")


@pytest.fixture(scope="module")
def score(run_dir):
    return score_runs([run_dir])


@pytest.fixture(scope="module")
def cell_a(score):
    return score.cell("m/a", "gemm")


def values(estimates: dict[str, Estimate]) -> dict[str, float]:
    return {k: e.value for k, e in estimates.items()}


def test_turns_of_a_trajectory(run_dir):
    records = {r.id: r for r in load_run(run_dir)}
    a5 = score_trajectory(records["a-gemm-4"])
    # The infra turn 2 was retried: the retry's PASSED 0.7 replaces it, and the last stop is turn_limit.
    assert [(t.turn, t.status, t.speedup, t.target_executed) for t in a5.turns] == [
        (1, "PASSED", 0.8, False), (2, "PASSED", 0.7, True)]
    assert not a5.infra_failed and a5.stop_reason == "turn_limit"
    a3 = score_trajectory(records["a-gemm-2"])
    assert [(t.turn, t.status) for t in a3.turns] == [(1, "COMPILE_ERROR"), (2, "INFRA_ERROR")]
    assert a3.infra_failed and len(a3.scored_turns) == 1
    a4 = score_trajectory(records["a-gemm-3"])
    # the builder writes turn 1 as an old run did (NO_SUBMISSION): it reads in today's word
    assert [t.status for t in a4.turns] == ["FORMAT_ERROR", "COMPILE_ERROR", "COMPILE_ERROR", "FORMAT_ERROR"]
    a2 = score_trajectory(records["a-gemm-1"])
    assert a2.first_correct_turn == 1 and a2.best_speedup == 1.3 and a2.best_target_speedup == 1.25
    assert a2.turns[3].target_executed is None  # P1.3U: not measured
    assert a2.best_sol_pct == approx(65.0)  # the builder sets %SOL = 50 x speedup


def test_counts(score, cell_a):
    assert score.n_trajectories == 8
    assert score.n_infra_failed == 1          # A3
    assert score.n_infra_turns == 1           # A3 turn 2 (A5's was replaced by its retry)
    assert cell_a.n_trajectories == 4 and cell_a.n_infra_failed == 1
    assert cell_a.n_turns == 16               # 4 + 5 + 1 + 4 + 2 (A3's one scored turn counts over turns)
    assert cell_a.n_target_unknown == 1       # A2 turn 4
    assert score.n_target_unknown == 1


def test_fast_p_over_turns(cell_a):
    # Correct turns: A1 {0.6, 0.9}, A2 {1.1, 1.3, 1.25}, A5 {0.8, 0.7}: 7 of 16.
    # > 0.5: all 7; > 0.8: 0.9, 1.1, 1.3, 1.25 (0.8 is not > 0.8) = 4; > 1.0: 3; > 1.2: 1.3, 1.25 = 2.
    assert values(cell_a.fast_p_turns) == {"0": approx(7 / 16), "0.5": approx(7 / 16), "0.8": approx(4 / 16),
                                            "1": approx(3 / 16), "1.2": approx(2 / 16)}
    # Correct AND target executed: A1 0.9, A2 1.1 and 1.25, A5 0.7 (A2's 1.3 is unknown: not executed).
    assert values(cell_a.target_fast_p_turns) == {"0": approx(4 / 16), "0.5": approx(4 / 16), "0.8": approx(3 / 16),
                                                   "1": approx(2 / 16), "1.2": approx(1 / 16)}


def test_fast_p_over_trajectories(cell_a):
    # Kept: A1 (best 0.9), A2 (1.3), A4 (none), A5 (0.8). >0: 3; >0.5: 3; >0.8: A1, A2; >1: A2; >1.2: A2.
    assert values(cell_a.fast_p_trajectories) == {"0": 0.75, "0.5": 0.75, "0.8": 0.5, "1": 0.25, "1.2": 0.25}
    # Best target-executed: A1 0.9, A2 1.25, A5 0.7 -> same shares.
    assert values(cell_a.target_fast_p_trajectories) == {"0": 0.75, "0.5": 0.75, "0.8": 0.5, "1": 0.25, "1.2": 0.25}


def test_speedups_and_success(cell_a):
    assert cell_a.best_speedup.value == approx((0.9 + 1.3 + 0.0 + 0.8) / 4)        # 0.75
    assert cell_a.best_speedup_max == 1.3
    assert cell_a.best_target_speedup.value == approx((0.9 + 1.25 + 0.0 + 0.7) / 4)  # 0.7125
    assert cell_a.geomean_speedup.value == approx((0.9 * 1.3 * 0.8) ** (1 / 3))   # A4 has no speedup
    assert cell_a.geomean_speedup.denom == 3 and cell_a.geomean_speedup.n == 3  # it rests on 3, as the model's row
    # First correct: A1 2, A2 1, A4 never, A5 1. First target-executed correct: A1 3, A2 1, A5 2.
    assert values(cell_a.success_within) == {"1": 0.5, "4": 0.75, "8": 0.75}
    assert values(cell_a.target_success_within) == {"1": 0.25, "4": 0.75, "8": 0.75}
    assert cell_a.turns_to_first_correct.value == approx(4 / 3)
    assert cell_a.mean_best_sol_pct.value == approx((45 + 65 + 40) / 3)


def test_by_turn(cell_a):
    b = cell_a.by_turn
    # turn 1: A1 CE, A2 P1.1T, A4 NS, A5 P0.8F; turn 3: A1 P0.9T, A2 CE, A4 CE; turn 5: A2 P1.25T only.
    assert b["reached"] == [4, 4, 3, 3, 1]
    assert b["correct"] == [approx(0.5), approx(0.5), approx(1 / 3), approx(1 / 3), approx(1.0)]
    assert b["target_correct"] == [approx(0.25), approx(0.25), approx(1 / 3), approx(0.0), approx(1.0)]
    # Running best over the four kept trajectories (0 before a first correct turn):
    # t1 (0+1.1+0+0.8)/4, t2 (0.6+1.1+0+0.8)/4, t3 (0.9+1.1+0+0.8)/4, t4 and t5 (0.9+1.3+0+0.8)/4.
    assert b["best_so_far"] == [approx(0.475), approx(0.625), approx(0.7), approx(0.75), approx(0.75)]


def test_repair(cell_a):
    r = cell_a.repair
    # Pairs of consecutive scored turns (A3 has one, so none):
    #   A1 CE>P P>P P>IN; A2 P>RE RE>CE CE>P P>P; A4 NS>CE CE>CE CE>FE; A5 P>P
    assert r.transitions == {
        "PASSED": {"PASSED": 3, "RUNTIME_ERROR": 1, "INCORRECT_NUMERICAL": 1},
        "COMPILE_ERROR": {"PASSED": 2, "COMPILE_ERROR": 1, "FORMAT_ERROR": 1},
        "RUNTIME_ERROR": {"COMPILE_ERROR": 1},
        "FORMAT_ERROR": {"COMPILE_ERROR": 1},
    }
    assert r.classes == ["PASSED", "COMPILE_ERROR", "RUNTIME_ERROR", "INCORRECT_NUMERICAL", "FORMAT_ERROR"]
    assert r.next_class["COMPILE_ERROR"] == {"PASSED": 0.5, "COMPILE_ERROR": 0.25, "FORMAT_ERROR": 0.25}
    assert values(r.fix_probability) == {"COMPILE_ERROR": 0.5, "RUNTIME_ERROR": 0.0, "FORMAT_ERROR": 0.0}
    # Failing runs: A1 [CE] fixed in 1, [IN] open; A2 [RE, CE] fixed in 2; A3 [CE] cut short by its unrepaired infra
    # failure (neither repaired nor the model's open run); A4 [NS..FE] open.
    assert (r.episodes_repaired, r.episodes_unrepaired, r.episodes_cut) == (2, 2, 1)
    assert values(r.turns_to_repair) == {"COMPILE_ERROR": 1.0, "RUNTIME_ERROR": 2.0, "all": 1.5}
    # Regressions: A1 P>IN, A2 P>RE, out of 5 transitions leaving PASSED.
    assert r.regressions == 2 and r.trajectories_with_regression == 2
    assert r.regression_rate.value == approx(2 / 5)
    # Gain per turn after the first correct: A1 (0.9-0.6)/2, A2 (1.3-1.1)/4, A5 (0.8-0.8)/1.
    assert r.speedup_gain_per_turn.value == approx((0.15 + 0.05 + 0.0) / 3)
    # Target executed but slower than a non-target version: A5's 0.7T < its 0.8F; A1 0.9T > 0.6F;
    # A2 has no non-target correct turn (1.3 is unknown). 1 of 4 target-executed correct turns.
    assert r.target_slower_count == 1
    assert r.target_slower.value == approx(1 / 4)


def test_grouping_by_prompt_and_pooling(score):
    keys = [(c.model, c.workload, c.prompt) for c in score.cells]
    assert keys == [("m/a", "gemm", "default"), ("m/b", "attn", "default"), ("m/b", "gemm", "default"), ("m/b", "gemm", "terse")]
    pooled = score.cell("m/b", "gemm")
    assert pooled.n_trajectories == 2
    assert pooled.best_speedup.value == approx((2.0 + 1.5) / 2)
    assert score.cell("m/b", "attn").best_speedup.value == 0.0
    assert score.cell("m/b", "attn").fast_p_trajectories["0"].value == 0.0
    model_b = next(c for c in score.models if c.model == "m/b")
    # a model's row weighs its workloads alike: gemm 2 of 2 within one turn, attn 0 of 1 -> (1 + 0) / 2, not 2 / 3
    assert model_b.n_trajectories == 3 and model_b.success_within["1"].value == approx(0.5)


def test_a_models_row_weighs_each_workload_alike(tmp_path):
    """Model-level figures over trajectories are a mean over workloads (KernelBench's fast_p is a share of tasks):
    pooled, a workload whose trajectories mostly failed infra (left out) counted for less, and 4 fast of 4 on "easy"
    with 0 of 1 scored on "hard" read 0.8 where the workloads read 1.0 and 0.0."""
    for i in range(4):
        TrajectoryBuilder(tmp_path, f"e{i}", "m", "easy").turn(1, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(tmp_path, "h0", "m", "hard").turn(1, "PASSED", 0.5, True).stop()
    for i in range(1, 4):
        TrajectoryBuilder(tmp_path, f"h{i}", "m", "hard").infra(1)
    score = score_runs([tmp_path])
    assert score.cell("m", "easy").fast_p_trajectories["1"].value == 1.0
    assert score.cell("m", "hard").fast_p_trajectories["1"].value == 0.0
    [model] = score.models
    assert model.n_trajectories == 5 and model.n_infra_failed == 3
    fast_1 = model.fast_p_trajectories["1"]
    assert fast_1.value == approx(0.5)
    # Wilson at Kish's effective count: weights 1/4 x 4 and 1 -> (2)^2 / (4/16 + 1) = 3.2 trajectories, not 5
    from ptxbench.agent.scoring import wilson_interval

    assert (fast_1.ci_low, fast_1.ci_high) == (approx(wilson_interval(0.5, 3.2)[0]), approx(wilson_interval(0.5, 3.2)[1]))
    assert model.best_speedup.value == approx((1.5 + 0.5) / 2)
    assert model.geomean_speedup.value == approx(math.sqrt(1.5 * 0.5))
    assert model.success_within["1"].value == approx(1.0) and model.by_turn["best_so_far"] == [approx(1.0)]
    # the bootstrap draws within each workload: "hard" has one scored trajectory, so every draw keeps its 0.5, and the
    # four "easy" ones agree: every resample is 1.0, which is no interval (it read [1.0, 1.0], as if certain)
    assert model.best_speedup.ci_low is None and model.best_speedup.ci_high is None and model.best_speedup.ci_method == ""
    # over turns the figures stay pooled (every scored turn one kernel): 4 fast of 5 scored turns
    assert model.fast_p_turns["1"].value == approx(4 / 5)


def test_confidence_intervals(score, cell_a):
    # One trajectory: no interval (resampling one value says nothing about its spread).
    one = score.cell("m/b", "attn").turns_to_first_correct
    assert one.value is None and one.n == 0
    single = next(c for c in score.cells if c.prompt == "terse").best_speedup
    assert (single.value, single.ci_low, single.ci_high) == (1.5, None, None)
    for est in [cell_a.best_speedup, *cell_a.fast_p_turns.values(), *cell_a.success_within.values()]:
        assert est.ci_low <= est.value <= est.ci_high
    assert cell_a.best_speedup.ci_low < cell_a.best_speedup.ci_high


def test_deterministic_and_merges_runs(run_dir, score, tmp_path):
    again = score_runs([run_dir])
    assert json.dumps(again.model_dump(mode="json")["cells"]) == json.dumps(score.model_dump(mode="json")["cells"])
    other = build_sample_run(tmp_path / "other")  # another run of the same matrix (a copy is refused: below)
    merged = score_runs([run_dir, other])
    assert merged.n_trajectories == 16
    cell = merged.cell("m/a", "gemm")
    assert cell.n_trajectories == 8 and cell.best_speedup.value == approx(0.75)
    assert {t.run for t in merged.trajectories} == {"sample", "other"}


def test_torn_and_unfinished_trajectory(tmp_path):
    b = TrajectoryBuilder(tmp_path, "t", "m/c", "gemm").turn(1, "PASSED", 1.0, True)
    with open(b.writer.path, "a") as f:
        f.write('{"type": "turn_end", "trajectory_id": "t", "tu')  # killed mid-write
    score = score_runs([tmp_path])
    traj = score.trajectories[0]
    assert traj.stop_reason == "" and not traj.infra_failed and [t.status for t in traj.turns] == ["PASSED"]


def test_a_turn_number_no_trajectory_can_reach_is_dropped_when_read(tmp_path):
    """A record's turn numbers are its text: turn 10^9 made every cell's by-turn curve walk a billion turns (20,000
    took a second and 20,000-entry lists). Past MAX_TURNS (or below 0) an event is no event of ours."""
    import time

    from ptxbench.agent.records.events import MAX_TURNS

    b = TrajectoryBuilder(tmp_path, "t", "m/c", "gemm").turn(1, "PASSED", 1.0, True).stop()  # finished: a cell's curve
    with open(b.writer.path, "a") as f:
        for turn in (10**9, MAX_TURNS + 1, -1):
            f.write(json.dumps({"type": "turn_end", "trajectory_id": "t", "turn": turn, "status": "PASSED"}) + "\n")
    started = time.perf_counter()
    score = score_runs([tmp_path])
    assert time.perf_counter() - started < 5
    assert [t.turn for t in score.trajectories[0].turns] == [1] and len(score.cell("m/c", "gemm").by_turn["reached"]) == 1


def test_harness_failure_before_any_turn(tmp_path):
    from ptxbench.agent.records.events import ErrorEvent

    b = TrajectoryBuilder(tmp_path, "t", "m/c", "gemm")
    b.writer.append(ErrorEvent(trajectory_id="t", turn=0, where="graph", message="RuntimeError: pool down", infra=True))
    score = score_runs([tmp_path])
    assert score.trajectories[0].infra_failed and score.trajectories[0].turns == []
    assert score.n_infra_failed == 1 and score.models[0].n_trajectories == 0


def test_estimators():
    assert ratio_estimate([], []).value is None
    e = mean_estimate([1.0, 1.0, 1.0])
    assert (e.value, e.ci_low, e.ci_high, e.n) == (1.0, None, None, 3)  # all agree: no interval, not [1, 1]
    g = geomean_estimate([2.0, 8.0, None, 0.0])
    assert g.value == approx(4.0) and g.denom == 2
    a, b = mean_estimate([0.0, 1.0, 2.0, 5.0]), mean_estimate([0.0, 1.0, 2.0, 5.0])
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)  # seeded
    assert math.isclose(a.value, 2.0) and 0.0 <= a.ci_low < 2.0 < a.ci_high <= 5.0


def test_score_says_how_many_trajectories_were_excluded_and_why(tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    run = build_sample_run(tmp_path / "run")  # A3 ended on "GPU worker lost"
    TrajectoryBuilder(run, "b-gemm-0", "m/b", "gemm", index=0).turn(1, "COMPILE_ERROR").infra(2, "evaluator died\ntraceback")
    TrajectoryBuilder(run, "b-gemm-1", "m/b", "gemm", index=1).infra(1, "evaluator died")
    out = CliRunner().invoke(app, ["score", str(run)]).output
    assert "excluded: 3 trajectories ended on an infra failure no retry repaired:" in out
    assert "  2 x evaluator died\n" in out and "  1 x GPU worker lost\n" in out
    clean = build_sample_run(tmp_path / "clean")
    shutil.rmtree(clean / "trajectories" / "a-gemm-2")
    assert "excluded" not in CliRunner().invoke(app, ["score", str(clean)]).output


def test_an_infra_failure_reproduced_on_the_same_submission_is_scored(tmp_path):
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    build_sample_run(run)
    # the retry of the same submission crashes the harness again, the same way: the model's text does it
    TrajectoryBuilder(run, "c-gemm-0", "m/c", "gemm").turn(1, "COMPILE_ERROR").infra(2, "RecursionError: deep", "tb 1") \
        .infra(2, "RecursionError: deep", "tb 2")
    # a different crash on the retry is bad luck twice: still left out
    TrajectoryBuilder(run, "c-gemm-1", "m/c", "gemm", index=1).turn(1, "COMPILE_ERROR").infra(2, "KeyError: a", "tb") \
        .infra(2, "OSError: disk", "tb")
    # the evaluator reporting the same infra status twice (no GPU) is the harness's state, not the model's text
    TrajectoryBuilder(run, "c-gemm-2", "m/c", "gemm", index=2).turn(1, "COMPILE_ERROR").infra(2, "no GPU") \
        .infra(2, "no GPU")
    scores = {t.id: t for t in score_runs([run]).trajectories}
    crashed, unlucky, down = scores["c-gemm-0"], scores["c-gemm-1"], scores["c-gemm-2"]
    assert down.infra_failed
    assert not crashed.infra_failed and [t.status for t in crashed.scored_turns] == ["COMPILE_ERROR", "INFRA_ERROR"]
    assert crashed.scored_turns[-1].failed and crashed.scored_turns[-1].reproduced
    assert unlucky.infra_failed and len(unlucky.scored_turns) == 1


def test_runs_timed_from_the_two_l2_flushes_do_not_pool_into_one_cell(tmp_path):
    """The same model, workload, prompt and GPU, timed from a written flush (a run recorded before the mode existed:
    no l2_flush in its config) and from a read one: two cells, whose speedups differ by the flush's write-back on a
    memory-bound workload (docs/timing-integrity.md); the (model, workload) line still pools them, as it pools GPUs."""
    old, new = tmp_path / "old", tmp_path / "new"
    TrajectoryBuilder(old, "t-old", "m/a", "gemm_m64").turn(1, "PASSED", 0.98, True).stop()
    TrajectoryBuilder(new, "t-new", "m/a", "gemm_m64", config={"l2_flush": "read"}).turn(1, "PASSED", 0.97, True).stop()
    TrajectoryBuilder(new, "t-new2", "m/a", "gemm_m64", index=1, config={"l2_flush": "read"}).turn(
        1, "PASSED", 0.99, True).stop()
    score = score_runs([old, new])
    assert {t.id: t.l2_flush for t in score.trajectories} == {"t-old": "write", "t-new": "read", "t-new2": "read"}
    cells = {c.l2_flush: c for c in score.cells}
    assert set(cells) == {"write", "read"} and len(score.cells) == 2
    assert cells["write"].n_trajectories == 1 and cells["read"].n_trajectories == 2
    assert cells["read"].best_speedup.value == approx((0.97 + 0.99) / 2)
    assert [c.n_trajectories for c in score.model_workload] == [3]


def test_a_run_named_twice_is_scored_once_and_a_copy_is_refused(run_dir, score, tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    twice = score_runs([run_dir, run_dir / ".", str(run_dir) + "/"])
    assert twice.n_trajectories == score.n_trajectories == 8 and twice.runs == [str(run_dir)]
    out = CliRunner().invoke(app, ["score", str(run_dir), str(run_dir) + "/"]).output
    assert out.splitlines()[-1].startswith("8 trajectories")
    copy = tmp_path / "elsewhere" / run_dir.name
    shutil.copytree(run_dir, copy)
    from ptxbench.agent.scoring import DuplicateTrajectory

    with pytest.raises(DuplicateTrajectory, match="a-gemm-0"):
        score_runs([run_dir, copy])
    renamed = tmp_path / "elsewhere" / "sample-reeval"  # a copy (or a re-evaluation) under another name
    shutil.copytree(run_dir, renamed)
    with pytest.raises(DuplicateTrajectory, match="a-gemm-0, started at the same moment"):
        score_runs([run_dir, renamed])
    refused = CliRunner().invoke(app, ["score", str(run_dir), str(copy)])
    assert refused.exit_code == 2 and refused.output.startswith("error: ") and "score one of them" in refused.output


def test_score_prints_no_control_character_from_the_records(tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    osc = "\x1b]0;owned\x07\x9b2J\r"
    TrajectoryBuilder(tmp_path, "t", "m/a" + osc, "gemm" + osc).turn(1, "PASSED", 1.2, True).infra(2, "lost" + osc)
    out = CliRunner().invoke(app, ["score", str(tmp_path)]).output
    assert "m/a" in out and "lost" in out and "owned" in out
    assert not any(c in out for c in "\x1b\x07\x9b\r")


def test_lines_a_reader_cannot_parse_are_dropped_like_a_torn_line(tmp_path):
    import gzip

    from ptxbench.agent.records.rundir import read_events

    b = TrajectoryBuilder(tmp_path, "t", "m/c", "gemm").turn(1, "PASSED", 1.0, True).stop()
    whole = b.writer.path.read_bytes()
    b.writer.path.write_bytes(whole + b'{"type": "\xff\xfe"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert len(read_events(b.writer.path)) == len(whole.splitlines())  # not UTF-8, nested past the parser: dropped
    packed = bytearray(gzip.compress(whole))
    for i in range(40, len(packed) - 20, 7):  # a corrupt deflate stream (zlib.error): read up to where it breaks
        packed[i] ^= 0x55
    sealed = tmp_path / "trajectory.jsonl.gz"
    sealed.write_bytes(bytes(packed))
    assert len(read_events(sealed)) < len(whole.splitlines())


def test_a_speedup_recorded_as_infinity_or_nan_reads_as_unmeasured(tmp_path):
    """json.loads reads the bare tokens Infinity and NaN: an infinite speedup topped the leaderboard, a NaN made the
    cell's mean NaN (and a trajectory's best depended on which turn came first)."""
    TrajectoryBuilder(tmp_path, "t0", "m/a", "gemm").turn(1, "PASSED", 1.1, True).turn(2, "PASSED", 7.0, True).stop()
    TrajectoryBuilder(tmp_path, "t1", "m/a", "gemm", index=1).turn(1, "PASSED", 8.0, True).turn(2, "PASSED", 1.2, True).stop()
    for tid, old, new in (("t0", "7.0", "Infinity"), ("t1", "8.0", "NaN")):
        log = tmp_path / "trajectories" / tid / "trajectory.jsonl"
        log.write_text(log.read_text().replace(f'"speedup":{old}', f'"speedup":{new}'))
    cell = score_runs([tmp_path]).cell("m/a", "gemm")
    assert cell.best_speedup.value == approx((1.1 + 1.2) / 2) and cell.best_speedup_max == 1.2
    assert cell.geomean_speedup.value == approx(math.sqrt(1.1 * 1.2))
    assert cell.fast_p_turns["0"].value == 1.0 and cell.fast_p_trajectories["1.2"].value == 0.0  # correct, untimed
    assert cell.by_turn["best_so_far"] == [approx(0.55), approx(1.15)]


def test_a_gpu_worker_crash_the_same_kernel_hits_on_every_retry_is_scored(tmp_path):
    """A harness bug the kernel triggers inside the GPU worker comes back as INFRA_ERROR with the traceback as its
    message (tools/gpu/worker.py) and is logged with no traceback field: hit again on both retries of the same
    submission, it left the trajectory out of the scores (the model escaped its 0 by crashing the harness)."""
    def crash(exc: str) -> str:
        return f"the GPU worker failed:\nTraceback (most recent call last):\n  File \"runner.py\", line 9, in run\n{exc}\n"

    zero = crash("ZeroDivisionError: integer division or modulo by zero")
    TrajectoryBuilder(tmp_path, "crasher", "m/a", "gemm").turn(1, "COMPILE_ERROR").infra(2, zero).infra(2, zero) \
        .infra(2, zero)
    TrajectoryBuilder(tmp_path, "unlucky", "m/a", "gemm", index=1).turn(1, "COMPILE_ERROR") \
        .infra(2, zero).infra(2, crash("OSError: [Errno 28] No space left on device"))
    TrajectoryBuilder(tmp_path, "honest", "m/a", "gemm", index=2).turn(1, "PASSED", 0.9, True).stop()
    score = score_runs([tmp_path])
    scores = {t.id: t for t in score.trajectories}
    assert not scores["crasher"].infra_failed and scores["crasher"].scored_turns[-1].failed
    assert scores["unlucky"].infra_failed  # two different crashes: bad luck, still left out
    cell = score.cell("m/a", "gemm")
    assert cell.n_trajectories == 2 and cell.fast_p_trajectories["0"].value == 0.5


def test_a_crash_whose_numbers_change_on_each_retry_is_still_reproduced(tmp_path):
    """The same crash was told apart by its numbers: a kernel whose harness crash names an address, a size drawn from
    the evaluation's seed or a temporary path differed on each retry and left its trajectory out of the scores."""
    def crash(exc: str) -> str:
        return f"the GPU worker failed:\nTraceback (most recent call last):\n  File \"runner.py\", line 9, in run\n{exc}\n"

    TrajectoryBuilder(tmp_path, "varying", "m/a", "gemm").turn(1, "COMPILE_ERROR") \
        .infra(2, crash("IndexError: index 70114 is out of bounds for size 65536 at 0x7f3a2c001000 (/tmp/w81x/a.bin)")) \
        .infra(2, crash("IndexError: index 913 is out of bounds for size 4096 at 0x7f11aa000000 (/tmp/q02z/a.bin)"))
    TrajectoryBuilder(tmp_path, "traced", "m/a", "gemm", index=1).turn(1, "COMPILE_ERROR") \
        .infra(2, "MemoryError: 1073741824 bytes for pid 4121", "tb 1") \
        .infra(2, "MemoryError: 2147483648 bytes for pid 4187", "tb 2")
    TrajectoryBuilder(tmp_path, "unlucky", "m/a", "gemm", index=2).turn(1, "COMPILE_ERROR") \
        .infra(2, crash("IndexError: index 70114 is out of bounds for size 65536")) \
        .infra(2, crash("OSError: [Errno 28] No space left on device"))
    scores = {t.id: t for t in score_runs([tmp_path]).trajectories}
    for tid in ("varying", "traced"):
        assert not scores[tid].infra_failed and scores[tid].scored_turns[-1].reproduced, tid
    assert scores["unlucky"].infra_failed  # two crashes of different kinds: still bad luck


def test_runs_named_in_another_order_score_the_same_intervals(tmp_path):
    """The bootstrap draws trajectories by position: runs named in the other order drew other resamples (the
    repair track's fixed@1 interval here: [0, 57%] one way, [0, 71%] the other)."""
    from ptxbench.agent.scoring.repair_track import score_repair_runs

    a, b = tmp_path / "bench-a", tmp_path / "bench-b"
    for run, speedups in ((a, (0.5, 1.4, 0.9)), (b, (2.0, 0.7, 1.1, None))):
        for i, sp in enumerate(speedups):
            t = TrajectoryBuilder(run, f"{run.name}-{i}", "m/a", "gemm", index=i, config={"repair_task": f"gemm__bug{i}"})
            for turn in range(1, 1 + i % 3):  # fixed at turn 1, 2 or 3
                t.turn(turn, "COMPILE_ERROR")
            (t.turn(1 + i % 3, "PASSED", sp, True) if sp else t.turn(4, "COMPILE_ERROR")).stop()
    one, other = score_runs([a, b]), score_runs([b, a])
    assert json.dumps(one.model_dump(mode="json")["cells"]) == json.dumps(other.model_dump(mode="json")["cells"])
    repair = [score_repair_runs(runs).by_model["m/a"].model_dump() for runs in ([a, b], [b, a])]
    assert repair[0] == repair[1]


def _wilson(share: float, n: int) -> tuple[float, float]:
    """The Wilson score 95% interval, written out here independently of stats.py."""
    z = 1.959963984540054
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def test_a_share_every_trajectory_met_is_not_reported_as_certain(tmp_path):
    """Ten of ten trajectories correct printed as '100% [100, 100]': every bootstrap resample of ten ones is one, so
    the percentile interval had no width, as if ten tries proved the rate is exactly 100%. A share of trajectories
    takes the Wilson score interval (10/10: [72%, 100%]; 0/10: [0%, 28%])."""
    for i in range(10):
        TrajectoryBuilder(tmp_path, f"t{i}", "m/a", "gemm", index=i).turn(1, "PASSED", 1.5, True).stop()
        TrajectoryBuilder(tmp_path, f"u{i}", "m/a", "attn", index=i).turn(1, "COMPILE_ERROR").stop()
    score = score_runs([tmp_path])
    good, bad = score.cell("m/a", "gemm"), score.cell("m/a", "attn")
    for est in (good.fast_p_trajectories["1"], good.target_fast_p_trajectories["1"], good.success_within["1"]):
        assert (est.value, est.n) == (1.0, 10)
        assert (est.ci_low, est.ci_high) == (approx(_wilson(1.0, 10)[0]), 1.0) and est.ci_low < 0.73
    for est in (bad.fast_p_trajectories["0"], bad.success_within["8"]):
        assert (est.value, est.ci_low, est.ci_high) == (0.0, 0.0, approx(_wilson(0.0, 10)[1]))
    # over turns (turns of a trajectory move together): all or none is no certainty either; the Wilson interval
    # over the trajectories, the fewer independent units, where every resample gives the same share
    assert good.fast_p_turns["1"].ci_low == approx(_wilson(1.0, 10)[0])
    assert bad.fast_p_turns["0"].ci_high == approx(_wilson(0.0, 10)[1])
    assert "100% [72, 100]" in good.fast_p_trajectories["1"].fmt(0, pct=True)


def test_one_trajectory_gives_no_bootstrap_interval(tmp_path):
    """One trajectory's speedup came back with the interval [1.5, 1.5] in --json: resampling one value gives that
    value, which reads as a measured zero-width interval. No interval from one trajectory; its share still gets
    Wilson's (1/1: [21%, 100%]), which the tables show."""
    TrajectoryBuilder(tmp_path, "t0", "m/a", "gemm").turn(1, "PASSED", 1.5, True).stop()
    cell = score_runs([tmp_path]).cell("m/a", "gemm")
    assert (cell.best_speedup.value, cell.best_speedup.ci_low, cell.best_speedup.ci_high) == (1.5, None, None)
    assert cell.geomean_speedup.ci_low is None and cell.best_speedup.fmt(3) == "1.500"
    share = cell.fast_p_trajectories["1"]
    assert (share.ci_low, share.ci_high) == (approx(_wilson(1.0, 1)[0]), 1.0)
    assert share.fmt(0, pct=True) == "100% [21, 100]"


def test_a_share_equal_in_every_trajectory_keeps_an_interval():
    """Every trajectory half fast over turns: each resample's share is one half, so the bootstrap interval had no
    width; the Wilson interval over the trajectories stands in."""
    est = ratio_estimate([1, 1, 1], [2, 2, 2], share=True)
    assert est.value == 0.5 and (est.ci_low, est.ci_high) == tuple(map(approx, _wilson(0.5, 3)))


def test_two_runs_that_share_a_folder_name_are_two_runs(tmp_path):
    """Two benches saved under one name on two machines (bench/h200_bench.sh names every run h200-bench), with the
    matrix's trajectory ids: refused as 'one trajectory twice', though each trajectory started on its own and got its
    own verdicts. They are told apart by their trajectory_start, which a copy keeps; runs named in either order
    score the same."""
    import time

    runs = [tmp_path / machine / "h200-bench" for machine in ("a", "b")]
    for run, speedups in zip(runs, ((1.5, 0.5, 2.7), (0.9, None, 1.3))):
        for i, sp in enumerate(speedups):
            t = TrajectoryBuilder(run, f"gemm__m-a__default__{i:02d}", "m/a", "gemm", index=i)
            (t.turn(1, "PASSED", sp, True) if sp else t.turn(1, "COMPILE_ERROR")).stop()
        time.sleep(0.01)  # started at other moments
    one, other = score_runs(runs), score_runs(runs[::-1])
    cell = one.cell("m/a", "gemm")
    assert cell.n_trajectories == 6 and cell.best_speedup.value == approx((1.5 + 0.5 + 2.7 + 0.9 + 0.0 + 1.3) / 6)
    assert json.dumps(one.model_dump(mode="json")["cells"]) == json.dumps(other.model_dump(mode="json")["cells"])
    from ptxbench.agent.scoring import DuplicateTrajectory

    copy = tmp_path / "c" / "h200-bench"
    shutil.copytree(runs[0], copy)
    with pytest.raises(DuplicateTrajectory, match="started at the same moment"):
        score_runs([runs[0], copy])


def test_a_model_with_one_trajectory_per_workload_keeps_its_interval(tmp_path):
    """A model's row resamples within each workload; a workload of one trajectory always draws that trajectory, so a
    bench of one trajectory per workload read its best speedup as 1.120 [1.120, 1.120], as if certain (pooled, before
    the workloads were weighed alike, the same trajectories gave [0.30, 2.10]). One-trajectory workloads are drawn
    together, as one stratum."""
    for wl, sp in zip(("a", "b", "c", "d", "e"), (0.2, 1.5, None, 3.0, 0.9)):
        t = TrajectoryBuilder(tmp_path, f"{wl}-0", "m", wl)
        (t.turn(1, "PASSED", sp, True) if sp else t.turn(1, "COMPILE_ERROR")).stop()
    [model] = score_runs([tmp_path]).models
    for est in (model.best_speedup, model.geomean_speedup):
        assert est.ci_method == "bootstrap" and est.ci_low < est.value < est.ci_high
    assert model.best_speedup.value == approx((0.2 + 1.5 + 3.0 + 0.9) / 5)
    # a stratum of several trajectories still resamples on its own: with one of them the figures stay as they were
    strata = ratio_estimate([1.0, 3.0, 5.0, 7.0, 2.0], [1.0] * 5, strata=[0, 0, 1, 2, 3])
    assert strata.ci_low < strata.value < strata.ci_high


def test_a_models_by_turn_curve_weighs_the_workloads_that_reached_the_turn_alike(tmp_path):
    """The model's correct-by-turn curve weighed each trajectory by 1 / (its workload's trajectories over all turns):
    at turn 2, reached by one of four "easy" trajectories (the others stopped at their target) and by the one "hard"
    trajectory, it read 0.2 (1/4 against 1), where each workload alike, as the figures over trajectories, is 0.5."""
    for i in range(3):
        TrajectoryBuilder(tmp_path, f"e{i}", "m", "easy").turn(1, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(tmp_path, "e3", "m", "easy").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(tmp_path, "h0", "m", "hard").turn(1, "COMPILE_ERROR").turn(2, "COMPILE_ERROR").stop()
    [model] = score_runs([tmp_path]).models
    assert model.by_turn["reached"] == [5.0, 2.0]
    assert model.by_turn["correct"] == [approx((3 / 4 + 0) / 2), approx((1 + 0) / 2)]
    assert model.by_turn["target_correct"] == model.by_turn["correct"]
    # the best speedup so far is over every trajectory at every turn: their own workload's weights
    assert model.by_turn["best_so_far"] == [approx((3 * 1.5 / 4 + 0) / 2), approx((1.5 + 0) / 2)]


def test_score_prints_a_run_whose_records_hold_a_lone_surrogate(tmp_path):
    """A record's JSON escape "\\ud800" reads as a lone surrogate, which UTF-8 cannot write: `report` writes it as its
    escape, but `score` stopped on the run ("surrogates not allowed"), as tables and as --json."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = tmp_path / "run"
    TrajectoryBuilder(run, "t0", "m-SURR", "gemm").turn(1, "PASSED", 1.2, True).stop()
    log = run / "trajectories" / "t0" / "trajectory.jsonl"
    log.write_text(log.read_text().replace("-SURR", "\\ud800"))
    tables = CliRunner().invoke(app, ["score", str(run)])
    assert tables.exit_code == 0, tables.output
    assert "| m\\ud800 | 1.200 (n=1) |" in tables.output
    as_json = CliRunner().invoke(app, ["score", str(run), "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["model_workload"][0]["model"] == "m\\ud800"


def test_a_turn_retried_past_an_infra_failure_after_its_evaluation_keeps_that_evaluation(tmp_path):
    """An infra failure in a step after the submission's evaluation (the feedback node, a checkpoint) stops the
    trajectory; the retry goes on from that step with the recorded evaluation (the graph reuses it: no new
    eval_result), and the model goes on from its feedback. Scoring dropped that evaluation: the turn stayed
    INFRA_ERROR, so its PASSED (or failure) never counted. Without a retry the turn stays an infra one."""
    from ptxbench.agent.records.events import ErrorEvent, Stop, TurnEnd

    def cut_off(tid: str, retried: bool):
        b = TrajectoryBuilder(tmp_path, tid, "m", "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True)
        w = b.writer
        events = w.path.read_text().splitlines()
        w.path.write_text("\n".join(events[:-1]) + "\n")  # turn 2's turn_end: not written before the failure
        w._seq -= 1
        w.append(ErrorEvent(trajectory_id=tid, turn=2, where="graph", message="OperationalError: disk I/O error",
                            traceback="Traceback ...", infra=True))
        w.append(TurnEnd(trajectory_id=tid, turn=2, status="PASSED"))  # finish closes the cut turn
        w.append(Stop(trajectory_id=tid, turn=1, reason="infra_error"))
        if retried:  # the retry: the feedback node again (its turn_end), then turn 3
            w.append(TurnEnd(trajectory_id=tid, turn=2, status="PASSED", speedup=1.5))
            b.turn(3, "INCORRECT_NUMERICAL").stop()
        return score_trajectory(load_run(tmp_path)[[r.id for r in load_run(tmp_path)].index(tid)])

    done = cut_off("retried", True)
    assert [t.status for t in done.turns] == ["COMPILE_ERROR", "PASSED", "INCORRECT_NUMERICAL"]
    assert done.best_speedup == 1.5 and not done.infra_failed and done.turns[1].correct
    left = cut_off("not-retried", False)
    assert [t.status for t in left.turns] == ["COMPILE_ERROR", "INFRA_ERROR"] and left.infra_failed


def test_an_interruption_logged_after_a_turns_end_leaves_that_turn_its_verdict(tmp_path):
    """A Ctrl-C (or a kill, or a failed checkpoint write) between a turn's turn_end and the feedback step's checkpoint
    logs its infra error under that turn's number; a resume then goes on with the next turn and, since it no longer
    logs the turn_end again, the finished turn was scored INFRA_ERROR (and dropped) for the interruption."""
    from ptxbench.agent.records.events import ErrorEvent
    from trajectory_builder import TrajectoryBuilder

    b = TrajectoryBuilder(tmp_path, "t", "m", "gemm").turn(1, "PASSED", 1.2, True)
    b.writer.append(ErrorEvent(trajectory_id="t", turn=1, where="graph", message="interrupted by the user (Ctrl-C)",
                               infra=True))
    b.turn(2, "INCORRECT_NUMERICAL").stop()
    scored = score_trajectory(load_run(tmp_path)[0])
    assert [(t.turn, t.status) for t in scored.turns] == [(1, "PASSED"), (2, "INCORRECT_NUMERICAL")]
    assert not scored.infra_failed and scored.stop_reason == "turn_limit"
    # an infra failure inside a turn (before its turn_end) still makes it an INFRA turn
    c = TrajectoryBuilder(tmp_path / "c", "c", "m", "gemm").turn(1, "PASSED", 1.2, True).infra(2).turn(2, "PASSED", 1.1, True).stop()
    assert [(t.turn, t.status) for t in score_trajectory(load_run(tmp_path / "c")[0]).turns] == [(1, "PASSED"), (2, "PASSED")]


def test_unreadable_log_lines_are_left_out_and_said_by_score_report_and_export(tmp_path):
    """A log line that is no event (not UTF-8, not a JSON object, nested past the parser, of an unknown type) was
    dropped without a word: a run whose PASSED turn's eval_result line was damaged scored that turn as no pass, and
    nothing said the score stood on less than the log. Each is counted, and `score` and the report say so."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from ptxbench.agent.report import write_report

    run = tmp_path / "run"
    TrajectoryBuilder(run, "t1", "m/a", "gemm").turn(1, "PASSED", 1.2, True).stop()
    TrajectoryBuilder(run, "t2", "m/a", "gemm").turn(1, "COMPILE_ERROR").stop()
    log = run / "trajectories" / "t1" / "trajectory.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    bad = [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
           b'{"type": "verdict", "trajectory_id": "t1", "status": "PASSED 9.9x"}\n']
    log.write_bytes(b"".join(lines[:2] + bad + lines[2:]))
    score = score_runs([run])
    assert score.n_skipped_lines == 4 and [t.skipped_lines for t in score.trajectories] == [4, 0]
    assert score.trajectories[0].best_speedup == approx(1.2)  # the readable lines still score
    out = CliRunner().invoke(app, ["score", str(run)]).output
    assert "skipped: 4 lines of the trajectory logs are no readable event" in out and "first run/t1" in out
    summary = write_report(run, tmp_path / "report").markdown.read_text()
    assert "**unreadable log lines**: 4 left out of every score" in summary
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "kernelgen", "--out", str(tmp_path / "data"),
                                   "--format", "jsonl"])
    assert res.exit_code == 0 and "4 lines of the trajectory logs skipped: no readable event" in res.output, res.output
    assert json.loads((tmp_path / "data" / "export_manifest.json").read_text())["stats"]["skipped_record_lines"] == 4
    clean = tmp_path / "clean"
    TrajectoryBuilder(clean, "t", "m/a", "gemm").turn(1, "PASSED", 1.2, True).stop()
    assert "skipped" not in CliRunner().invoke(app, ["score", str(clean)]).output


def test_a_log_line_whose_turn_or_status_is_no_scalar_is_skipped_not_a_traceback(tmp_path):
    """An eval_result whose turn is a list, or a turn_end whose status is one, stopped score, report and export with a
    TypeError (unhashable) before validation: such a line is no event, skipped and counted."""
    run = tmp_path / "run"
    TrajectoryBuilder(run, "t", "m/a", "gemm").turn(1, "PASSED", 1.2, True).turn(2, "COMPILE_ERROR").stop()
    log = run / "trajectories" / "t" / "trajectory.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    bad = [dict(events[2], turn=[2]), dict(events[3], status=["PASSED"]), dict(events[3], turn={"n": 1})]
    log.write_text("".join(json.dumps(e) + "\n" for e in events + bad))
    score = score_runs([run])
    assert score.n_skipped_lines == 3 and [t.status for t in score.trajectories[0].turns] == ["PASSED", "COMPILE_ERROR"]


def test_an_unfinished_trajectory_is_left_out_of_the_figures_over_trajectories(tmp_path):
    """A trajectory with no stop after its last step (a bench killed mid-way, or one still running: resumable) was
    scored as a finished one: cut at turn 1 of 8 before its first correct turn, it read as a model that never got a
    correct kernel (fast_p and success over trajectories, best speedup 0). It is left out of the figures over
    trajectories, as an infra-failed one is, and said; its turns still count over turns. So is a retry after an infra
    stop that was killed before its own stop."""
    from ptxbench.agent.records.events import ErrorEvent
    from ptxbench.agent.report.tables import leaderboard

    TrajectoryBuilder(tmp_path, "done", "m", "gemm", index=0).turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    killed = TrajectoryBuilder(tmp_path, "killed", "m", "gemm", index=1).turn(1, "COMPILE_ERROR")  # no stop: killed
    retry = TrajectoryBuilder(tmp_path, "retry-killed", "m", "gemm", index=2).turn(1, "COMPILE_ERROR").infra(2)
    retry.turn(2, "RUNTIME_ERROR")  # the retry's turn 2, then killed: the infra stop is no longer its last word
    score = score_runs([tmp_path])
    by_id = {t.id: t for t in score.trajectories}
    assert by_id["killed"].unfinished and by_id["retry-killed"].unfinished and not by_id["done"].unfinished
    assert not by_id["retry-killed"].infra_failed
    cell = score.cell("m", "gemm")
    assert cell.n_trajectories == 1 and cell.n_unfinished == 2 and cell.n_infra_failed == 0
    assert cell.fast_p_trajectories["1"].value == 1.0 and cell.best_speedup.value == 1.5
    assert cell.success_within["4"].value == 1.0 and cell.by_turn["reached"] == [1.0, 1.0]
    assert cell.n_turns == 5 and cell.fast_p_turns["1"].value == approx(1 / 5)  # over turns: every scored turn
    assert score.n_unfinished == 2 and score.models[0].n_unfinished == 2
    assert "2 trajectories are unfinished" in leaderboard(score).note
    # its stop written (the resumed run finished it): scored again
    killed.stop("turn_limit", 1)
    assert score_runs([tmp_path]).cell("m", "gemm").n_trajectories == 2
    # a harness crash logs no stop, and the bench gives up after its retries: the same crash on every retry is the
    # model's turn (reproduced), a finished trajectory scored as such, not an unfinished one left out
    crash = TrajectoryBuilder(tmp_path, "crash", "m", "gemm", index=3).turn(1, "COMPILE_ERROR")
    crash._model_call(2, crash.source)
    for _ in range(2):
        crash.writer.append(ErrorEvent(trajectory_id="crash", turn=2, where="graph", message="RecursionError: deep",
                                       traceback="Traceback ...", infra=True))
    crashed = next(t for t in score_runs([tmp_path]).trajectories if t.id == "crash")
    assert not crashed.unfinished and not crashed.infra_failed and crashed.scored_turns[-1].reproduced


def test_a_trajectory_a_stop_cut_short_is_unfinished_not_infra_failed(tmp_path):
    """A Ctrl-C, a SIGTERM or the bench stopping (another trajectory's disk full, the GPUs lost, the model's host never
    reached) leaves the loop's error event and no stop: the trajectories it cut were scored infra-failed, as if the
    harness had failed them, until --resume finished them. They are unfinished (waiting for --resume); a crash of the
    harness that logs the same kind of event stays infra-failed. A log written before the event said so is told by the
    Ctrl-C's message."""
    from ptxbench.agent.records.events import INTERRUPTED, ErrorEvent

    def cut(tid: str, index: int, message: str, stop_asked: bool) -> TrajectoryBuilder:
        b = TrajectoryBuilder(tmp_path, tid, "m", "gemm", index=index).turn(1, "COMPILE_ERROR")
        b._model_call(2, b.source)
        b.writer.append(ErrorEvent(trajectory_id=tid, turn=2, where="graph", message=message, infra=True,
                                   stop_asked=stop_asked))
        return b

    cut("ctrl-c", 0, f"{INTERRUPTED} (Ctrl-C): --resume continues this turn", True)
    cut("bench-stopped", 1, "ModelUnreached: cannot reach x.invalid", True)
    cut("old-log-ctrl-c", 2, f"{INTERRUPTED} (SIGTERM): --resume continues this turn", False)
    cut("crashed", 3, "RuntimeError: worker pipe closed", False)
    by_id = {t.id: t for t in score_runs([tmp_path]).trajectories}
    for tid in ("ctrl-c", "bench-stopped", "old-log-ctrl-c"):
        assert by_id[tid].unfinished and not by_id[tid].infra_failed, tid
    assert by_id["crashed"].infra_failed and not by_id["crashed"].unfinished
    cell = score_runs([tmp_path]).cell("m", "gemm")
    assert cell.n_unfinished == 3 and cell.n_infra_failed == 1 and cell.n_trajectories == 0


def test_turns_to_repair_resamples_trajectories_not_the_runs_inside_one():
    """Turns to repair was a bootstrap over repaired runs, as if each were independent: three runs of one trajectory
    gave an interval, and runs of one trajectory did not move together as every other figure's turns do. It is the
    mean over the runs with a bootstrap over trajectories: from one trajectory, no interval."""
    from ptxbench.agent.scoring import repair_stats
    from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore

    def traj(tid: str, statuses: list[str]) -> TrajectoryScore:
        return TrajectoryScore(id=tid, stop_reason="turn_limit", turns=[
            TurnScore(turn=i, status=s, correct=s == "PASSED") for i, s in enumerate(statuses, 1)])

    one = traj("a", ["COMPILE_ERROR", "PASSED", "RUNTIME_ERROR", "RUNTIME_ERROR", "PASSED", "COMPILE_ERROR",
                     "COMPILE_ERROR", "COMPILE_ERROR", "PASSED"])  # runs repaired in 1, 2 and 3 turns
    alone = repair_stats([one]).turns_to_repair["all"]
    assert alone.value == approx(2.0) and alone.ci_low is None and alone.n == 1 and alone.denom == 3
    two = repair_stats([one, traj("b", ["COMPILE_ERROR", "PASSED"])]).turns_to_repair
    assert two["all"].value == approx(7 / 4) and two["all"].n == 2 and two["all"].ci_low is None  # < MIN_BOOTSTRAP
    four = repair_stats([one, traj("b", ["COMPILE_ERROR", "PASSED"]), traj("c", ["COMPILE_ERROR"] * 3 + ["PASSED"]),
                         traj("d", ["RUNTIME_ERROR", "PASSED"])]).turns_to_repair["all"]
    assert four.n == 4 and four.ci_low is not None
    assert two["COMPILE_ERROR"].value == approx(5 / 3) and two["RUNTIME_ERROR"].value == approx(2.0)


def test_an_interruption_logged_after_the_trajectorys_stop_leaves_it_finished(tmp_path):
    """A Ctrl-C (or the bench stopping) between the finish step's stop and its checkpoint logs an infra error after the
    stop, and the resume logs nothing more (the stop is there): the finished trajectory read as infra-failed, left
    out of every figure over trajectories, with an INFRA turn past its last. It ended as its stop says. After an
    infra stop an infra error keeps its meaning (the retry's failure)."""
    from ptxbench.agent.records.events import ErrorEvent

    b = TrajectoryBuilder(tmp_path, "t", "m", "gemm").turn(1, "PASSED", 1.5, True).turn(2, "COMPILE_ERROR").stop("turn_limit", 2)
    b.writer.append(ErrorEvent(trajectory_id="t", turn=3, where="graph", infra=True,
                               message="interrupted by the user (Ctrl-C): --resume continues this turn"))
    scored = score_trajectory(load_run(tmp_path)[0])
    assert not scored.infra_failed and not scored.unfinished and scored.stop_reason == "turn_limit"
    assert [(t.turn, t.status) for t in scored.turns] == [(1, "PASSED"), (2, "COMPILE_ERROR")]
    assert score_runs([tmp_path]).cell("m", "gemm").n_trajectories == 1
    c = TrajectoryBuilder(tmp_path / "c", "c", "m", "gemm").turn(1, "COMPILE_ERROR").infra(2)
    c.writer.append(ErrorEvent(trajectory_id="c", turn=2, where="graph", infra=True, message="interrupted"))
    assert score_trajectory(load_run(tmp_path / "c")[0]).infra_failed


def test_a_log_with_no_readable_trajectory_start_is_counted_and_said_not_dropped_silently(tmp_path):
    """A trajectory log whose first line (its trajectory_start) cannot be read, or that is empty (a kill before the
    first line), has no model or workload to score it under: it vanished from every count, its skipped lines too, and
    neither `score` nor the report said so. It is counted (n_unstarted) and said, alike in score.json and `score`."""
    from ptxbench.agent.report import write_report
    from ptxbench.agent.report.tables import leaderboard

    TrajectoryBuilder(tmp_path, "ok", "m", "gemm").turn(1, "PASSED", 1.5, True).stop()
    torn = TrajectoryBuilder(tmp_path, "torn", "m", "gemm").turn(1, "COMPILE_ERROR").stop()
    lines = torn.writer.path.read_text().splitlines()
    torn.writer.path.write_text("\n".join(['{"type": "trajectory_start", "traj'] + lines[1:]) + "\n")
    empty = tmp_path / "trajectories" / "empty"
    empty.mkdir()
    (empty / torn.writer.path.name).write_text("")
    score = score_runs([tmp_path])
    assert score.n_trajectories == 1 and score.n_unstarted == 2
    assert "2 trajectory logs have no readable trajectory_start" in leaderboard(score).note
    files = write_report(tmp_path, tmp_path / "report")
    assert json.loads(files.score_json.read_text())["n_unstarted"] == 2
    assert "trajectory logs with no readable start**: 2" in files.markdown.read_text()


def test_scores_last_line_names_every_kind_of_trajectory_left_out(tmp_path):
    """`score` closed on '(N infra-failed, left out)' while unfinished trajectories and unreadable logs were left out
    of the same figures: its last line names them too."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    TrajectoryBuilder(tmp_path, "done", "m", "gemm", index=0).turn(1, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(tmp_path, "killed", "m", "gemm", index=1).turn(1, "COMPILE_ERROR")  # no stop: killed
    empty = tmp_path / "trajectories" / "empty"
    empty.mkdir()
    (empty / "trajectory.jsonl").write_text("")
    result = CliRunner().invoke(app, ["score", str(tmp_path)])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("2 trajectories (0 infra-failed, 1 unfinished, left out), 1 trajectory logs with no "
                           "readable start (not scored), "), last


def test_runs_of_two_turn_budgets_never_pool_into_one_cell(tmp_path):
    """Trajectories given --turns 4 and --turns 16 (same model, workload, prompt) pooled into one cell: the best speedup
    and fast_p over trajectories averaged a best of 4 turns with a best of 16, and the by-turn curves mixed them. Every
    group is keyed by the turn budget; a cell asked for without it, where there are several, is refused."""
    from ptxbench.agent.scoring.run_score import SCORE_VERSION, MixedTurnBudgets

    for i in range(2):
        TrajectoryBuilder(tmp_path, f"short{i}", "m", "gemm", index=i, config={"turns": 4}) \
            .turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.0, True).stop()
    TrajectoryBuilder(tmp_path, "long", "m", "gemm", index=2, config={"turns": 16}) \
        .turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.0, True).turn(3, "PASSED", 3.0, True).stop()
    score = score_runs([tmp_path])
    assert SCORE_VERSION >= 8 and score.turn_budgets == [4, 16]
    assert [(c.turn_budget, c.n_trajectories) for c in score.model_workload] == [(4, 2), (16, 1)]
    assert [(c.turn_budget, c.n_trajectories) for c in score.cells] == [(4, 2), (16, 1)]
    assert [(c.turn_budget, c.n_trajectories) for c in score.models] == [(4, 2), (16, 1)]
    short, long = score.cell("m", "gemm", 4), score.cell("m", "gemm", 16)
    assert short.best_speedup.value == 1.0 and long.best_speedup.value == 3.0  # pooled: (1 + 1 + 3) / 3
    assert short.fast_p_trajectories["1.2"].value == 0.0 and long.fast_p_trajectories["1.2"].value == 1.0
    assert short.by_turn["reached"] == [2.0, 2.0] and long.by_turn["reached"] == [1.0, 1.0, 1.0]
    assert {t.id: t.turn_budget for t in score.trajectories} == {"short0": 4, "short1": 4, "long": 16}
    with pytest.raises(MixedTurnBudgets, match="several turn budgets"):
        score.cell("m", "gemm")
    # a record with no budget (an older run, or one written by hand) is a group of its own, sorted last
    TrajectoryBuilder(tmp_path, "old", "m", "gemm", index=3).turn(1, "PASSED", 2.0, True).stop()
    assert [c.turn_budget for c in score_runs([tmp_path]).model_workload] == [4, 16, None]


def test_a_models_interval_says_when_a_workload_of_one_trajectory_is_held_fixed(tmp_path):
    """A model's row resamples within each workload: a workload of one trajectory, the only one, draws itself in every
    resample, so the interval covers none of that workload's trajectory-to-trajectory spread, yet read as one that
    does. It is marked: ci_fixed_strata counts such workloads and fmt() puts a dagger after the interval."""
    from ptxbench.agent.scoring.stats import FIXED_MARK

    for i, sp in enumerate((1.0, 1.5, 2.0, 3.0)):
        TrajectoryBuilder(tmp_path, f"e{i}", "m", "easy", index=i).turn(1, "PASSED", sp, True).stop()
    TrajectoryBuilder(tmp_path, "h0", "m", "hard").turn(1, "PASSED", 0.5, True).stop()
    score = score_runs([tmp_path])
    [model] = score.models
    for est in (model.best_speedup, model.geomean_speedup, model.mean_best_sol_pct):
        assert est.ci_method == "bootstrap" and est.ci_fixed_strata == 1 and est.fmt(3).endswith("]" + FIXED_MARK)
    # Wilson's share at the effective count models every trajectory's spread: nothing held fixed
    assert model.fast_p_trajectories["1"].ci_fixed_strata == 0
    # a cell resamples all its trajectories (no strata): nothing held fixed, no mark
    easy = score.cell("m", "easy")
    assert easy.best_speedup.ci_fixed_strata == 0 and not easy.best_speedup.fmt(3).endswith(FIXED_MARK)
    # two workloads of one trajectory are drawn together: each varies with the other
    TrajectoryBuilder(tmp_path, "x0", "m", "other").turn(1, "PASSED", 1.2, True).stop()
    assert score_runs([tmp_path]).models[0].best_speedup.ci_fixed_strata == 0
    assert ratio_estimate([1.0, 2.0, 3.0, 4.0], [1.0] * 4, strata=[0, 0, 0, 1]).ci_fixed_strata == 1
    assert ratio_estimate([1.0, 2.0, 3.0, 4.0], [1.0] * 4).ci_fixed_strata == 0


def test_an_estimates_n_counts_only_the_trajectories_it_rests_on():
    """A ratio's n counted every trajectory given, those with nothing in its denominator too: a regression rate over
    three trajectories of which one ever passed said n=3, where it rests on one (and Wilson's interval was taken at 1)."""
    from ptxbench.agent.scoring import TrajectoryScore, TurnScore, repair_stats

    def traj(tid, statuses):
        return TrajectoryScore(id=tid, turns=[TurnScore(turn=i, status=s, correct=s == "PASSED")
                                              for i, s in enumerate(statuses, 1)])
    stats = repair_stats([traj("a", ["PASSED", "COMPILE_ERROR"]), traj("b", ["COMPILE_ERROR"] * 2),
                          traj("c", ["RUNTIME_ERROR"] * 2)])
    assert stats.regression_rate.value == 1.0 and stats.regression_rate.n == 1 and stats.regression_rate.denom == 1
    assert ratio_estimate([0.0, 0.0], [0.0, 0.0]).n == 0
    assert ratio_estimate([1.0, 0.0, 2.0], [1.0, 0.0, 4.0]).n == 2


def test_trajectories_that_all_agree_give_no_interval_not_one_of_no_width(tmp_path):
    """Three trajectories that never got a correct turn each have a best speedup of 0; every bootstrap resample is 0,
    and the leaderboard read 0.000 [0.000, 0.000], as certain as a figure can be, from three tries. Like a figure from
    one trajectory, it has no interval; a share keeps Wilson's (0 of 3 is [0, 56%])."""
    for i in range(3):
        TrajectoryBuilder(tmp_path, f"t{i}", "m", "gemm", index=i).turn(1, "COMPILE_ERROR").turn(2, "COMPILE_ERROR").stop()
    cell = score_runs([tmp_path]).cell("m", "gemm")
    assert cell.best_speedup.value == 0.0 and (cell.best_speedup.ci_low, cell.best_speedup.ci_high) == (None, None)
    assert cell.best_speedup.fmt(3) == "0.000"
    assert cell.fast_p_trajectories["0"].ci_method == "wilson" and cell.fast_p_trajectories["0"].ci_high > 0.5
    assert cell.fast_p_turns["0"].ci_method == "wilson" and cell.fast_p_turns["0"].ci_high > 0.5  # over turns too
    two = mean_estimate([2.0, 2.0])
    assert (two.value, two.ci_low, two.ci_method) == (2.0, None, "")
    differ = mean_estimate([1.0, 3.0, 1.0, 3.0])
    assert differ.ci_low < 2.0 < differ.ci_high  # they differ: an interval
