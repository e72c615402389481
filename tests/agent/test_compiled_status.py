"""COMPILED: a kernel that compiled and assembled but never ran on a GPU (--no-gpu, the compile / sass tools).
Its correctness is unknown, so scoring, repair statistics, feedback, the loop's stop rule, export and synth
never treat it as PASSED; runs recorded before the status existed (PASSED, gpu_evaluated false) read as it."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agent_helpers import GOOD_PTX, WORKLOAD
from ptxbench.agent.cli.main import app
from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.synth import synthesize
from ptxbench.agent.loop.feedback import render_eval
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.records.rundir import load_run
from ptxbench.agent.scoring import score_runs
from ptxbench.agent.scoring.repair import repair_stats
from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.loop.toolset import Toolbox
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import CompileResult, EvalResult, Timing, TimingStat
from trajectory_builder import TrajectoryBuilder

COMPILED_HEADING = "## Turn 1: COMPILED (not run on a GPU: correctness and speed unknown)"


def test_compiled_turns_are_not_correct_and_are_counted_as_compile_only(tmp_path):
    TrajectoryBuilder(tmp_path, "t0", "m/c", "gemm").turn(1, "COMPILE_ERROR").turn(2, "COMPILED") \
        .turn(3, "COMPILED").stop()
    TrajectoryBuilder(tmp_path, "t1", "m/c", "gemm", index=1).turn(1, "COMPILED").stop()
    score = score_runs([tmp_path])
    cell = score.cell("m/c", "gemm")
    assert cell.n_turns == 4 and cell.n_compile_only == 3 and score.n_compile_only == 3
    assert cell.fast_p_turns["0"].value == 0.0 and cell.fast_p_trajectories["0"].value == 0.0
    assert cell.target_fast_p_turns["0"].value == 0.0
    assert [cell.success_within[k].value for k in ("1", "4", "8")] == [0.0, 0.0, 0.0]
    assert cell.best_speedup.value == 0.0 and cell.best_speedup_max is None and cell.turns_to_first_correct.value is None
    assert cell.by_turn["correct"] == [0.0, 0.0, 0.0]
    assert [tr.first_correct_turn for tr in score.trajectories] == [None, None]
    assert [t.compile_only for t in score.trajectories[0].turns] == [False, True, True]


def test_an_old_no_gpu_pass_reads_as_compiled(tmp_path):
    """The record a --no-gpu run wrote before COMPILED existed: PASSED with gpu_evaluated false."""
    TrajectoryBuilder(tmp_path, "old", "m/c", "gemm").turn(1, "PASSED", gpu_evaluated=False) \
        .turn(2, "PASSED", gpu_evaluated=False).turn(3, "PASSED", 1.1, True).stop()
    (record,) = load_run(tmp_path)
    evals = [e for e in record.events if e.type == "eval_result"]
    assert [e.result.status for e in evals] == ["COMPILED", "COMPILED", "PASSED"]
    assert [e.result.gpu_evaluated for e in evals] == [False, False, True]
    assert [e.status for e in record.events if e.type == "turn_end"] == ["COMPILED", "COMPILED", "PASSED"]
    score = score_runs([tmp_path])
    (traj,) = score.trajectories
    assert [t.status for t in traj.turns] == ["COMPILED", "COMPILED", "PASSED"]
    assert traj.first_correct_turn == 3 and traj.best_speedup == 1.1 and score.n_compile_only == 2
    assert score.cell("m/c", "gemm").fast_p_turns["0"].value == pytest.approx(1 / 3)


def _traj(*statuses: str) -> TrajectoryScore:
    return TrajectoryScore(id="t", turns=[TurnScore(turn=i + 1, status=s, correct=s == "PASSED")
                                          for i, s in enumerate(statuses)])


def test_repair_statistics_keep_compiled_apart_from_passed():
    stats = repair_stats([_traj("COMPILE_ERROR", "COMPILED", "COMPILED"),
                          _traj("PASSED", "COMPILED", "INCORRECT_NUMERICAL", "PASSED")])
    assert stats.classes == ["PASSED", "COMPILED", "COMPILE_ERROR", "INCORRECT_NUMERICAL"]
    assert stats.transitions == {"PASSED": {"COMPILED": 1}, "COMPILED": {"COMPILED": 1, "INCORRECT_NUMERICAL": 1},
                                 "COMPILE_ERROR": {"COMPILED": 1}, "INCORRECT_NUMERICAL": {"PASSED": 1}}
    # COMPILE_ERROR -> COMPILED is no evidence of a fix; INCORRECT_NUMERICAL -> PASSED is one.
    assert list(stats.fix_probability) == ["INCORRECT_NUMERICAL"] and stats.fix_probability["INCORRECT_NUMERICAL"].value == 1.0
    assert (stats.episodes_repaired, stats.episodes_unrepaired, stats.episodes_unverified) == (1, 0, 1)
    # PASSED -> COMPILED is neither a regression nor a safe transition: left out of the rate.
    assert stats.regressions == 0 and stats.regression_rate.value is None


def test_feedback_for_compiled_says_it_was_not_run_and_never_passed():
    result = EvalResult(workload=WORKLOAD, status="COMPILED", gpu_evaluated=False,
                        message="compiled cleanly; not run on a GPU (no-GPU mode): correctness and speed unknown",
                        compile=CompileResult(status="ok", arch="sm_90a"))
    for no_gpu in (True, False):  # --no-gpu, and the compile tool of a GPU run
        text = render_eval(result, 1, no_gpu)
        assert text.startswith(COMPILED_HEADING + "\n") and "PASSED" not in text
    toolbox = Toolbox(LocalEvaluator(), WORKLOAD, EvalOptions())
    compiled = toolbox.compile(GOOD_PTX)  # a real compile, on the CPU
    text = toolbox.result_text("compile", compiled, 1)
    assert compiled.status == "COMPILED" and text.startswith(COMPILED_HEADING + "\n") and "PASSED" not in text


class CompiledEvaluator:
    """Says COMPILED, with a speedup that a real one never carries: the loop must judge by the status alone."""

    def evaluate(self, workload_id, source, options):
        stat = TimingStat(median_ms=0.5, ci_low_ms=0.5, ci_high_ms=0.5, n=1)
        return EvalResult(workload=workload_id, status="COMPILED", timing=Timing(candidate=stat, speedup=2.0))

    def close(self):
        """Nothing to release: a stand-in holds no process or GPU."""


def test_the_loop_does_not_stop_on_a_compiled_kernel(tmp_path):
    config = OptimizeConfig(workload=WORKLOAD, turns=3, target_speedup=1.2, no_gpu=True)
    outcome = optimize(config, run_dir=tmp_path / "run", evaluator=CompiledEvaluator())
    assert outcome.stop_reason == "turn_limit" and outcome.statuses == ["COMPILED"] * 3
    assert outcome.best_speedup is None and outcome.best_turn == 0


def test_export_never_takes_a_compiled_kernel(tmp_path):
    TrajectoryBuilder(tmp_path, "t", "m/c", "gemm").turn(1, "COMPILE_ERROR").turn(2, "COMPILED") \
        .turn(3, "INCORRECT_NUMERICAL").turn(4, "PASSED", 1.1, True).stop()
    TrajectoryBuilder(tmp_path, "old", "m/c", "gemm", index=1).turn(1, "PASSED", gpu_evaluated=False).stop()
    samples = collect_samples([tmp_path])
    turns = lambda rows: sorted((r.provenance.trajectory, r.provenance.turn) for r in rows)  # noqa: E731
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen", require_target_executed=False))
    assert turns(rows) == [("t", 4)]
    # Even with the PASSED filter off, a kernel that never ran is no completion (failing kernels now are).
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen", require_passed=False, require_target_executed=False))
    assert turns(rows) == [("t", 1), ("t", 3), ("t", 4)]
    rows, _ = build_rows(samples, ExportConfig(recipe="fixit", require_target_executed=False))
    assert [(r.provenance.source_turn, r.provenance.turn, r.failure_class) for r in rows] == [(3, 4, "INCORRECT_NUMERICAL")]


def test_synth_does_not_keep_a_variant_that_only_compiled(tmp_path):
    class NoGpu:
        def evaluate(self, workload_id, source, options):
            return EvalResult(workload=workload_id, status="COMPILED", compile=CompileResult(status="ok", arch="sm_90a"))

    from ptxbench.workloads.solutions.gemm_template import default_params, render

    source = render(default_params())
    report = synthesize(["gemm_bf16_m8192_n7168_k5120"], NoGpu(), tmp_path / "run", sources=lambda w: source,
                        prompts=lambda w: ("SYS", "TASK"), feedback=lambda r, t: r.status,
                        mutations=["missing_wgmma_fence", "off_by_one_k_tiles"], options=EvalOptions(no_gpu=True))
    assert report.reference_status == {"gemm_bf16_m8192_n7168_k5120": "COMPILED"}
    assert [(o.mutation, o.status, o.kept) for o in report.outcomes] == [
        ("missing_wgmma_fence", "COMPILED", False), ("off_by_one_k_tiles", "COMPILED", False)]
    assert not (tmp_path / "run" / "trajectories").exists()


def test_eval_cli_exits_0_on_compiled(tmp_path):
    solution = tmp_path / "good.ptx"
    solution.write_text(GOOD_PTX)
    result = CliRunner().invoke(app, ["eval", WORKLOAD, str(solution), "--no-gpu", "--json"])
    assert result.exit_code == 0, result.output
    assert '"status": "COMPILED"' in result.output and '"gpu_evaluated": false' in result.output
