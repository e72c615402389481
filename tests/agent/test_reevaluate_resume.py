"""A re-evaluation stopped part way (Ctrl-C, a lost machine) goes on where it stopped: finished trajectories kept,
the one cut short written again whole, identical kernels still evaluated once, and a resume that would mix two
different re-evaluations in one folder refused."""
from __future__ import annotations

import pytest

from bench_fixtures import WL
from trajectory_builder import TrajectoryBuilder
from ptxbench.agent.bench.reevaluate import PARTIAL, ReevaluationRefused, reevaluate_run, unfinished
from ptxbench.agent.records.rundir import load_run, write_manifest
from ptxbench.tools.results import EvalResult


def _run(root, statuses=("COMPILED", "COMPILE_ERROR", "COMPILED")):
    """Three trajectories of two turns; the first and the last submit the same two kernels."""
    for i, first in enumerate(statuses):
        TrajectoryBuilder(root, f"t{i}", "m/a", WL).turn(1, first).turn(2, "COMPILED").stop()
    write_manifest(root, {"command": "bench", "config": {}, "trajectories": [f"t{i}" for i in range(len(statuses))]})
    return root


class Counting:
    """Evaluates every kernel to COMPILED; raises KeyboardInterrupt (a Ctrl-C) at evaluation number `stop_at`."""

    def __init__(self, stop_at: int = 0):
        self.sources: list[str] = []
        self.stop_at = stop_at

    def evaluate(self, workload, source, options):
        self.sources.append(source)
        if len(self.sources) == self.stop_at:
            raise KeyboardInterrupt
        return EvalResult(workload=workload, status="COMPILED", message=f"judged {len(self.sources)}")


def _shape(run):
    return {r.id: [(e.type, getattr(e, "turn", None), getattr(e, "status", None)) for e in r.events] for r in load_run(run)}


def test_a_stopped_re_evaluation_resumes_where_it_stopped(tmp_path):
    run, out = _run(tmp_path / "run"), tmp_path / "re"
    # t0's two kernels, then t1's first: the Ctrl-C comes during t1's second evaluation
    with pytest.raises(KeyboardInterrupt):
        reevaluate_run(run, out, no_gpu=True, evaluator=Counting(stop_at=4))
    assert [r.id for r in load_run(out)] == ["t0"]  # scores of the folder see only whole trajectories
    assert (out / PARTIAL / "t1").is_dir() and unfinished(out) == ["t1", "t2"]

    with pytest.raises(ReevaluationRefused, match="already holds trajectories.*resume"):
        reevaluate_run(run, out, no_gpu=True, evaluator=Counting())
    with pytest.raises(ReevaluationRefused, match="compile-only"):
        reevaluate_run(run, out, no_gpu=False, evaluator=Counting(), resume=True)

    done = []
    again = Counting()
    reevaluate_run(run, out, no_gpu=True, evaluator=again, resume=True, on_done=lambda i, kept: done.append((i, kept)))
    # t1's two kernels evaluated afresh; t2's are t0's, whose verdicts the finished copy holds
    assert len(again.sources) == 2 and done == [("t0", True), ("t1", False), ("t2", False)]
    assert unfinished(out) == [] and not (out / PARTIAL).exists()
    fresh = tmp_path / "fresh"
    reevaluate_run(run, fresh, no_gpu=True, evaluator=Counting())
    assert _shape(out) == _shape(fresh)  # the resumed folder holds what one uninterrupted re-evaluation writes
    t1 = [e for e in load_run(out)[1].events if e.type == "eval_result"]
    assert [e.result.message for e in t1] == ["judged 1", "judged 2"]  # written by the resume, not the cut-short copy


def test_a_resume_of_another_run_or_of_nothing_is_refused(tmp_path):
    run = _run(tmp_path / "run")
    other = _run(tmp_path / "other", statuses=("COMPILED", "COMPILED"))
    out = tmp_path / "re"
    with pytest.raises(KeyboardInterrupt):
        reevaluate_run(run, out, no_gpu=True, evaluator=Counting(stop_at=1))
    with pytest.raises(ReevaluationRefused, match="not .*other"):
        reevaluate_run(other, out, no_gpu=True, evaluator=Counting(), resume=True)
    with pytest.raises(ReevaluationRefused, match="no re-evaluation to resume"):
        reevaluate_run(run, tmp_path / "empty", no_gpu=True, evaluator=Counting(), resume=True)
    assert not (tmp_path / "empty").exists()  # a refused resume leaves no folder behind
    # the source went on (a bench --resume added a trajectory) since the re-evaluation began: not the same run
    TrajectoryBuilder(run, "t3", "m/a", WL).turn(1, "COMPILED").stop()
    with pytest.raises(ReevaluationRefused, match="not those"):
        reevaluate_run(run, out, no_gpu=True, evaluator=Counting(), resume=True)
    bench = tmp_path / "bench"
    _run(bench)
    with pytest.raises(ReevaluationRefused, match="no re-evaluation to resume"):
        reevaluate_run(run, bench, no_gpu=True, evaluator=Counting(), resume=True)


def test_score_resumes_a_stopped_re_evaluation_and_says_one_is_unfinished(tmp_path, monkeypatch):
    """The command line: `--out-run X` over a stopped re-evaluation points to --resume; scoring X before it is finished
    says what its scores lack; --resume ends it."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    monkeypatch.setattr("ptxbench.agent.cli.preflight.toolchain", lambda arch: None)
    run, out = _run(tmp_path / "run"), tmp_path / "re"
    with pytest.raises(KeyboardInterrupt):
        reevaluate_run(run, out, no_gpu=True, evaluator=Counting(stop_at=3))
    monkeypatch.setattr("ptxbench.tools.evaluate.LocalEvaluator", lambda: _Closing())
    monkeypatch.setattr(_Closing, "closed", 0)
    refused = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu", "--out-run", str(out)])
    assert refused.exit_code == 2 and "--resume" in refused.output, refused.output
    partial = CliRunner().invoke(app, ["score", str(out)])
    assert partial.exit_code == 0 and "unfinished re-evaluation: 2 trajectories" in partial.output, partial.output
    assert f"score {run} --re-evaluate --out-run {out} --resume" in partial.output
    lonely = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu", "--resume"])
    assert lonely.exit_code == 2 and "--out-run" in lonely.output
    resumed = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu", "--out-run", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert _Closing.closed == 1  # the resume's own evaluator (t1 and t2 were evaluated) is closed when it ends
    assert "t0: kept" in resumed.output and "t2: re-evaluated" in resumed.output
    assert "unfinished re-evaluation" not in resumed.output and unfinished(out) == []


class _Closing(Counting):
    """The evaluator the command makes for itself: counted when it is closed."""
    closed = 0

    def close(self):
        _Closing.closed += 1
