"""A resume under other code than its run began with (a git pull between start and --resume) went on under the new
code's defaults without a word. It now warns in one line naming both revisions, and records the resume in the
manifest (resumed_under) for score and report; a resume under the recorded code says nothing."""
from __future__ import annotations

import json

import pytest

from agent_helpers import WORKLOAD, StubEvaluator
from bench_fixtures import WL, CountingModel
from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.bench.runner import run_bench
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.records import manifest as run_manifest
from ptxbench.agent.records.revision import code_changed

BEGAN = {"revision": "a" * 40, "dirty": False}
PULLED = {"revision": "b" * 40, "dirty": False}


class Passing:
    def evaluate(self, workload, source, options):
        return StubEvaluator([1.0]).evaluate(workload, source, options)

    def close(self):
        """Nothing to release."""


def _code(monkeypatch, git: dict) -> None:
    monkeypatch.setattr(run_manifest, "git_info", lambda: dict(git))


def _manifest(run) -> dict:
    return json.loads((run / "manifest.json").read_text())


def test_a_bench_resumed_under_another_revision_warns_and_records_it(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=1, no_gpu=True, parallel=1)
    _code(monkeypatch, BEGAN)
    run_bench(cfg, run, evaluator=Passing(), model_factory=lambda c: CountingModel([]))
    capsys.readouterr()
    run_bench(None, run, resume=True, evaluator=Passing(), model_factory=lambda c: CountingModel([]))
    assert "warning" not in capsys.readouterr().err  # the code it began under: nothing said, nothing recorded
    assert "resumed_under" not in _manifest(run)

    _code(monkeypatch, PULLED)
    run_bench(None, run, resume=True, evaluator=Passing(), model_factory=lambda c: CountingModel([]))
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "a" * 12 in warnings[0] and "b" * 12 in warnings[0], warnings
    recorded = _manifest(run)
    assert recorded["git"] == BEGAN  # the revision it began under stays
    assert [(r["revision"], r["dirty"], r["command"]) for r in recorded["resumed_under"]] == \
        [("b" * 40, False, "bench --resume")]
    from ptxbench.agent.report import write_report

    summary = write_report(run).html.with_name("summary.md").read_text()
    assert f"**resumed under other code**: {'b' * 12}" in summary


def test_an_optimize_resumed_with_uncommitted_changes_warns_and_records_it(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/reference", no_gpu=True, turns=1, target_speedup=0)
    _code(monkeypatch, BEGAN)
    optimize(config, run_dir=run, evaluator=StubEvaluator([1.0]))
    capsys.readouterr()
    _code(monkeypatch, {**BEGAN, "dirty": True})
    optimize(resume=run, evaluator=StubEvaluator([1.0]))
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "a" * 12 + " with uncommitted changes" in warnings[0], warnings
    assert _manifest(run)["resumed_under"][0]["dirty"] is True

    # a trajectory added to the folder keeps what the run began under, and what it was resumed under
    _code(monkeypatch, PULLED)
    optimize(config, run_dir=run, evaluator=StubEvaluator([1.0]))
    recorded = _manifest(run)
    assert recorded["git"] == BEGAN
    assert [r["command"] for r in recorded["resumed_under"]] == ["optimize --resume", "optimize --run-dir"]


@pytest.mark.parametrize("recorded, now, changed", [
    (BEGAN, BEGAN, False),
    (BEGAN, PULLED, True),
    (BEGAN, {**BEGAN, "dirty": True}, True),
    ({}, {}, False),  # no checkout either time: nothing to tell
    (BEGAN, {}, True),  # began in a checkout, resumed from an install
])
def test_what_counts_as_other_code(recorded, now, changed):
    assert code_changed(recorded, now) is changed


def test_the_warning_of_a_resume_under_other_code_stands_whole_above_the_live_view(tmp_path, monkeypatch):
    """The warning was printed once the live view was on screen: through rich's redirect it came between the view's
    erase sequences, wrapped to the terminal's width (a log of a forced terminal, FORCE_COLOR, held it in two pieces
    behind cursor moves). It is now printed before the view starts, as one line of its own."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = tmp_path / "run"
    _code(monkeypatch, BEGAN)
    first = CliRunner().invoke(app, ["optimize", WORKLOAD, "--model", "builtin/reference", "--no-gpu", "--turns", "1",
                                     "--target-speedup", "0", "--quiet", "--run-dir", str(run)])
    assert first.exit_code == 0, first.output
    _code(monkeypatch, PULLED)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "60")
    resumed = CliRunner().invoke(app, ["optimize", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    line = (f"warning: this run began under revision {'a' * 12} and goes on under {'b' * 12}: with this code's "
            "defaults, not those it began with (recorded in its manifest, resumed_under)")
    assert resumed.output.count("warning:") == 1 and line in resumed.output.splitlines(), repr(resumed.output)
