"""`replay/<log>`: a recorded trajectory's replies are replayed only where they answer the same task in the same
protocol, and every replayed reply names the model that wrote it."""
from __future__ import annotations

from agent_helpers import WORKLOAD, StubEvaluator, events, of_type
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig


def _recorded(tmp_path):
    optimize(OptimizeConfig(workload=WORKLOAD, turns=2), run_dir=tmp_path / "rec", evaluator=StubEvaluator([0.8, 0.9]))
    return tmp_path / "rec"


def _replay(tmp_path, name, source, **config):
    evaluator = StubEvaluator([1.0, 1.0])
    cfg = OptimizeConfig(**{"workload": WORKLOAD, "model": f"replay/{source}", "turns": 2, **config})
    return optimize(cfg, run_dir=tmp_path / name, evaluator=evaluator), evaluator


def test_a_log_of_another_workload_is_refused_not_scored(tmp_path):
    rec = _recorded(tmp_path)
    log = next((rec / "trajectories").iterdir()) / "trajectory.jsonl"
    outcome, evaluator = _replay(tmp_path, "other", log, workload="gemm_bf16_m8192_n7168_k5120")
    assert outcome.stop_reason == "infra_error" and outcome.turns == 0 and not evaluator.sources
    assert f"recorded workload {WORKLOAD}" in outcome.stop_detail


def test_a_run_folder_without_the_workload_is_refused(tmp_path):
    rec = _recorded(tmp_path)
    outcome, evaluator = _replay(tmp_path, "other", rec, workload="gemm_bf16_m8192_n7168_k5120")
    assert outcome.stop_reason == "infra_error" and not evaluator.sources


def test_a_pipeline_log_is_refused_in_tools_mode(tmp_path):
    rec = _recorded(tmp_path)
    outcome, evaluator = _replay(tmp_path, "tools", rec, mode="tools")
    assert outcome.stop_reason == "infra_error" and not evaluator.sources
    assert "--mode pipeline" in outcome.stop_detail


def test_a_file_that_is_no_log_is_refused(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("not a trajectory\n")
    outcome, evaluator = _replay(tmp_path, "notes", other)
    assert outcome.stop_reason == "infra_error" and outcome.turns == 0
    assert "no recorded trajectory" in outcome.stop_detail


def test_replayed_replies_name_their_author_through_a_replay_of_a_replay(tmp_path):
    rec = _recorded(tmp_path)
    first, _ = _replay(tmp_path, "once", rec)
    assert first.turns == 2
    twice, evaluator = _replay(tmp_path, "twice", tmp_path / "once")
    assert twice.turns == 2 and len(evaluator.sources) == 2
    for call in of_type(events(tmp_path / "twice"), "model_call"):
        assert call.response["tags"]["recorded_model"] == "builtin/tuner"
        assert "once" in call.response["tags"]["replayed_from"]


def test_an_export_of_a_replayed_run_names_the_replies_author(tmp_path):
    """Rows of a replay's run were attributed to `replay/<path>`: training data credited to a log file, the model
    that wrote the kernels named only in the model calls' tags. Now `model` is the author and `replayed_from` the
    replay; a run of the model itself names no replay."""
    from ptxbench.agent.export.collect import collect_samples
    from ptxbench.agent.export.recipes import candidate_rows
    from ptxbench.agent.export.schema import ExportConfig

    rec = _recorded(tmp_path)
    _replay(tmp_path, "once", rec)
    _replay(tmp_path, "twice", tmp_path / "once")
    cfg = ExportConfig(recipe="kernelgen", require_target_executed=False)
    for run, source in (("rec", None), ("once", "rec"), ("twice", "once")):
        (sample,) = collect_samples([tmp_path / run])
        rows = candidate_rows(sample, cfg)
        assert rows, run
        for row in rows:
            assert row.provenance.model == "builtin/tuner"
            if source is None:
                assert row.provenance.replayed_from is None
            else:
                # the replay named its source by an absolute path (the host's username and folders, in a published
                # dataset): a row keeps it from the run folder's name on, as provenance.run names a run
                assert row.provenance.replayed_from == f"replay/{source}"


def test_a_replayed_log_is_named_from_its_run_folder_on(tmp_path):
    """replay/<absolute path of a trajectory's log>: the rows keep <run>/trajectories/<id>/trajectory.jsonl, not the
    path before the run (export_manifest.json's runs, likewise, are the folders' names)."""
    from ptxbench.agent.export.collect import collect_samples

    rec = _recorded(tmp_path)
    (folder,) = (rec / "trajectories").iterdir()
    _replay(tmp_path, "once", folder / "trajectory.jsonl")
    (sample,) = collect_samples([tmp_path / "once"])
    assert sample.replayed_from == f"replay/rec/trajectories/{folder.name}/trajectory.jsonl"
    assert str(tmp_path) not in sample.replayed_from


def test_a_run_of_several_trajectories_of_the_workload_says_which_one_is_replayed(tmp_path):
    """replay/<run folder> takes the run's first trajectory of the workload: a bench's cell holds many alike, and the
    choice was made without a word."""
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from ptxbench.agent.models.replay import replay_choice

    climb = Path(__file__).resolve().parents[2] / "docs/examples/tuner-climb"
    run = tmp_path / "run"
    for i in (1, 2):
        (src,) = (climb / f"run{i}" / "trajectories").iterdir()
        shutil.copytree(src, run / "trajectories" / f"{src.name}-{i}")
    first = run / "trajectories" / f"{src.name}-1"
    gemm = "gemm_bf16_m8192_n7168_k5120"
    note = replay_choice(run, gemm)
    assert note == (f"note: {run} holds 2 trajectories of {gemm}; replaying the first, {first.name} (give its folder, "
                    f"replay/{first}, or another's to choose)")
    assert replay_choice(first, gemm) is None and replay_choice(run, "mha_fwd_d128") is None
    result = CliRunner().invoke(app, ["optimize", gemm, "--no-gpu", "--turns", "1", "--quiet", "--model", f"replay/{run}",
                                      "--run-dir", str(tmp_path / "out")])
    assert result.exit_code == 0 and note in result.output, result.output


def test_the_cli_refuses_a_replay_of_another_task_before_a_run_is_made(tmp_path):
    """`optimize W --model replay/<log of another workload or mode>` made a run, stopped it at the first call as an infra
    failure and named a --resume that could only fail the same way: the recorded log says so before anything starts."""
    from pathlib import Path

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    example = Path(__file__).resolve().parents[2] / "docs/examples/optimize-gemm-tuner"
    for argv, words in (([WORKLOAD], "recorded workload gemm_bf16_m8192_n7168_k5120, not"),
                        (["gemm_bf16_m8192_n7168_k5120", "--mode", "tools"], "replay it with --mode pipeline")):
        result = CliRunner().invoke(app, ["optimize", *argv, "--no-gpu", "--turns", "1", "--quiet", "--model",
                                          f"replay/{example}", "--run-dir", str(tmp_path / "out")])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: --model replay/{example}: ") and words in lines[0], lines[0]
        assert not (tmp_path / "out").exists()


def test_a_bench_refuses_a_replay_cell_of_another_task_before_a_run_is_made(tmp_path):
    """bench --models replay/<run of the GEMM> --workloads <another>: each such cell infra-failed at its first call,
    left out of the scores, with a --resume that could only fail the same way."""
    from pathlib import Path

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    example = Path(__file__).resolve().parents[2] / "docs/examples/optimize-gemm-tuner"
    result = CliRunner().invoke(app, ["bench", "--models", f"builtin/tuner,replay/{example}", "--workloads", WORKLOAD,
                                      "--trajectories", "1", "--turns", "1", "--no-gpu", "--run-dir", str(tmp_path / "b")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --models replay/{example} on {WORKLOAD}: ") and "recorded workload" in lines[0]
    assert not (tmp_path / "b").exists()
