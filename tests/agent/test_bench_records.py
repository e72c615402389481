"""The bench's records under faults and foreign hands: re-evaluation of a run someone else recorded, and what a
bench leaves for its resume."""
from __future__ import annotations

from pathlib import Path

from bench_fixtures import BAD, GOOD, NOOP, WL, CountingModel
from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.bench.runner import run_bench
from ptxbench.agent.models.base import ModelReply
from ptxbench.agent.records.rundir import load_run, sha256_text
from ptxbench.tools.results import EvalResult


class CompilesNoop:
    """COMPILED for the no-op kernel, COMPILE_ERROR for anything else; counts its evaluations."""

    def __init__(self):
        self.sources: list[str] = []

    def evaluate(self, workload, source, options):
        self.sources.append(source)
        return EvalResult(workload=workload, status="COMPILED" if "bogus" not in source else "COMPILE_ERROR")


def _eval_statuses(run: Path) -> dict[str, list[str]]:
    return {r.id: [e.result.status for e in r.events if e.type == "eval_result"] for r in load_run(run)}


def test_re_evaluation_judges_each_kernel_by_its_own_text_not_the_hash_its_record_names(tmp_path):
    """Identical kernels are evaluated once, found by the recorded kernel_sha256: a record from someone else whose
    failing kernel names the hash of a passing one was given that one's verdict without being evaluated."""
    from ptxbench.agent.bench.reevaluate import reevaluate_run

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=1, no_gpu=True)
    run_bench(cfg, tmp_path / "run", evaluator=CompilesNoop(), model_factory=lambda c: CountingModel([]))
    second = sorted(load_run(tmp_path / "run"), key=lambda r: r.id)[1]
    (kernel,) = (second.folder / "kernels").iterdir()
    kernel.write_text(NOOP.replace("ret;", "bogus;"))  # the record's text no longer hashes to its kernel_sha256
    evaluator = CompilesNoop()
    reevaluate_run(tmp_path / "run", tmp_path / "again", no_gpu=True, evaluator=evaluator)
    statuses = _eval_statuses(tmp_path / "again")
    assert statuses[second.id] == ["COMPILE_ERROR"] and len(evaluator.sources) == 2
    copied = next(r for r in load_run(tmp_path / "again") if r.id == second.id)
    (event,) = [e for e in copied.events if e.type == "eval_result"]
    assert event.kernel_sha256 == sha256_text(kernel.read_text())  # the new record names the kernel it judged


def test_re_evaluation_evaluates_a_kernel_again_for_a_trajectory_of_other_options(tmp_path):
    """An optimize run folder holds trajectories of several configs: the same kernel recorded for sm_90a and for
    sm_100a was evaluated once, for the first, and the second trajectory took that verdict as its own."""
    from ptxbench.agent.bench.reevaluate import reevaluate_run

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=1, no_gpu=True)
    run_bench(cfg, tmp_path / "run", evaluator=CompilesNoop(), model_factory=lambda c: CountingModel([]))
    second = sorted(load_run(tmp_path / "run"), key=lambda r: r.id)[1]
    log = second.folder / "trajectory.jsonl"
    assert '"arch":"sm_90a"' in log.read_text()
    log.write_text(log.read_text().replace('"arch":"sm_90a"', '"arch":"sm_100a"'))
    archs = []

    class Archs(CompilesNoop):
        def evaluate(self, workload, source, options):
            archs.append(options.arch)
            return super().evaluate(workload, source, options)

    reevaluate_run(tmp_path / "run", tmp_path / "again", no_gpu=True, evaluator=Archs())
    assert sorted(archs) == ["sm_100a", "sm_90a"]


def test_a_resumed_repair_run_prints_its_repair_table(tmp_path):
    """--resume takes the track from the run's record, not from --track (which it ignores): a repair run resumed
    printed the leaderboard alone, without the repair track's table."""
    from typer.testing import CliRunner

    from repair_fixture import FIXTURE
    from ptxbench.agent.cli.main import app

    run = tmp_path / "bench"
    first = CliRunner().invoke(app, ["bench", "--track", "repair", "--suite", str(FIXTURE), "--models", "builtin/unchanged",
                                     "--trajectories", "1", "--no-gpu", "--run-dir", str(run), "--no-report"])
    assert first.exit_code == 0 and "## Repair track" in first.output, first.output
    again = CliRunner().invoke(app, ["bench", "--resume", "--run-dir", str(run), "--no-report"])
    assert again.exit_code == 0, again.output
    assert "## Repair track" in again.output


def test_a_run_a_bench_is_running_is_not_sealed_under_it(tmp_path):
    """`ptxbench seal` while a bench runs: a trajectory whose log ends in an infra stop is one the bench is about to
    retry, and sealing it under the bench made every retry fail (the log is sealed: nothing may be appended), left the
    trajectory infra-failed and the run unresumable until unsealed; an event appended as the seal copied the log was
    lost. The seal waits for the bench to end (its folder lock), and a trajectory optimize runs (its lock) stays live."""
    import pytest

    from ptxbench.agent.records.folder_lock import hold_folder, release
    from ptxbench.agent.records.rundir import LOG_NAME
    from ptxbench.agent.records.sealing import seal_run

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=2, turns=1, no_gpu=True)
    run_bench(cfg, tmp_path / "run", evaluator=CompilesNoop(), model_factory=lambda c: CountingModel([]))
    first, second = sorted(r.folder for r in load_run(tmp_path / "run"))
    lock = hold_folder(tmp_path / "run")  # the bench's hold on its run folder
    try:
        with pytest.raises(OSError, match="in use"):
            seal_run(tmp_path / "run")
    finally:
        release(lock)
    assert (first / LOG_NAME).exists() and (second / LOG_NAME).exists()
    lock = hold_folder(first)  # optimize's hold on the trajectory it runs
    try:
        sealed, live = seal_run(tmp_path / "run")
    finally:
        release(lock)
    assert sealed == [second] and live == [first] and (first / LOG_NAME).exists()


def test_a_stopping_bench_starts_no_retry_of_an_infra_failed_step(tmp_path):
    """Ctrl-C or SIGTERM (a scheduler's stop, which reaches the GPU workers too: their evaluations come back
    INFRA_ERROR): a trajectory whose step failed then was retried at once, another GPU evaluation (a new worker started
    for it) while the bench was stopping. It stops there; --resume retries the step."""
    import pytest

    from ptxbench.agent.bench.runner import _Runner
    from ptxbench.agent.bench.scheduler import BenchInterrupted
    from ptxbench.agent.bench.matrix import expand
    from ptxbench.agent.loop.optimize import open_checkpointer

    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=2, no_gpu=True)
    calls = []

    class DownAsTheBenchStops:
        def evaluate(self, workload, source, options):
            calls.append(source)
            runner.stop()  # the stop arrives as the workers are killed
            return EvalResult(workload=workload, status="INFRA_ERROR", message="the GPU worker was killed by SIGTERM")

    checkpointer = open_checkpointer(tmp_path / "checkpoints.sqlite")
    runner = _Runner(cfg, tmp_path, DownAsTheBenchStops(), checkpointer, lambda c: CountingModel([]))
    try:
        with pytest.raises(BenchInterrupted):
            runner(expand(cfg)[0])
        assert len(calls) == 1
        resumed = _Runner(cfg, tmp_path, CompilesNoop(), checkpointer, lambda c: CountingModel([]))(expand(cfg)[0])
    finally:
        checkpointer.conn.close()
    assert resumed.statuses == ["COMPILED", "COMPILED"] and not resumed.infra_failed  # the resume retried the step


def test_two_models_whose_names_share_their_first_48_characters_are_two_models(tmp_path):
    """A trajectory id cuts the model string to 48 characters: fireworks_ai/accounts/fireworks/models/deepseek-v3 and
    .../deepseek-r1 made the same ids, and the matrix was refused as repeating a model. Each gets its own ids (the cut
    name with a hash of the whole one); a model no other one clashes with keeps the ids it always had, so runs recorded
    before resume as they were."""
    from ptxbench.agent.bench.matrix import expand

    v3, r1 = "fireworks_ai/accounts/fireworks/models/deepseek-v3", "fireworks_ai/accounts/fireworks/models/deepseek-r1"
    configs = expand(BenchConfig(models=[v3, r1], workloads=[WL], trajectories=2))
    ids = [c.trajectory_id() for c in configs]
    assert len(set(ids)) == 4 and all(len(i.split("__")[1]) <= 48 for i in ids)
    assert {c.model for c in configs if c.trajectory_id() == ids[0]} == {configs[0].model}
    assert ids == [c.trajectory_id() for c in expand(BenchConfig(models=[v3, r1], workloads=[WL], trajectories=2))]
    (alone,) = expand(BenchConfig(models=[v3], workloads=[WL], trajectories=1))
    assert alone.trajectory_id() == f"{WL}__{v3.replace('/', '-')[:48]}__knowledge__00"
    assert "slug" not in str(configs[0].model_dump())  # the recorded config is what it was

    class Named(CountingModel):
        def __init__(self, name):
            super().__init__([])
            self.name = name

    out = run_bench(BenchConfig(models=[v3, r1], workloads=[WL], trajectories=1, turns=1, no_gpu=True),
                    tmp_path / "run", evaluator=CompilesNoop(), model_factory=lambda c: Named(c.model))
    assert sorted(r.start.model for r in load_run(tmp_path / "run")) == sorted([v3, r1])
    assert len(out.trajectories) == 2


def test_two_models_whose_names_differ_only_in_case_get_ids_that_differ_in_more():
    """Org/M and org/m made trajectory ids that differed only in case: one folder and one checkpoint thread on a
    case-insensitive disk (macOS's default), the second trajectory writing into the first's log."""
    from ptxbench.agent.bench.matrix import expand

    upper, lower = "openai/Org/Model-X", "openai/org/model-x"
    configs = expand(BenchConfig(models=[upper, lower], workloads=[WL], trajectories=1))
    ids = [c.trajectory_id() for c in configs]
    assert len({i.casefold() for i in ids}) == 2, ids
    (alone,) = expand(BenchConfig(models=[upper], workloads=[WL], trajectories=1))
    assert alone.trajectory_id() == f"{WL}__{upper.replace('/', '-')}__knowledge__00"  # no clash: the id it always had


# A child that runs a bench of one trajectory and dies as a SIGKILL leaves it as its second model call is made
DIES_AT_SECOND_CALL = """
import os, sys
from bench_fixtures import WL, CountingModel
from test_bench_records import CompilesNoop
from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.bench.runner import run_bench

class Dies(CountingModel):
    def query(self, request):
        if request.turn == 2:
            os._exit(9)
        return super().query(request)

cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=1, turns=2, no_gpu=True)
run_bench(cfg, sys.argv[1], evaluator=CompilesNoop(), model_factory=lambda c: Dies([]))
"""


def test_a_resume_under_a_clock_set_back_does_not_leave_an_old_checkpoint_as_the_threads_newest(tmp_path, monkeypatch):
    """LangGraph names checkpoints by the wall clock and takes a thread's newest by that name. A bench resumed where the
    clock reads earlier than where it was killed (another host, a clock stepped back) wrote its checkpoints under lower
    names: the next --resume took the killed run's last checkpoint as the newest and ran the finished trajectory again
    (its turn, its evaluation, a second stop). Checkpoints written on a resume are named after every stored one."""
    import os
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, str(Path(__file__).parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", DIES_AT_SECOND_CALL, str(run)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 9, done.stderr
    real = time.time_ns
    with monkeypatch.context() as clock:
        clock.setattr(time, "time_ns", lambda: real() - 3600 * 10**9)  # an hour behind the killed run's
        first = run_bench(None, run, resume=True, evaluator=CompilesNoop(), model_factory=lambda c: CountingModel([]))
    assert [t.statuses for t in first.trajectories] == [["COMPILED", "COMPILED"]]
    calls, evaluator = [], CompilesNoop()
    again = run_bench(None, run, resume=True, evaluator=evaluator, model_factory=lambda c: CountingModel(calls))
    assert calls == [] and evaluator.sources == []  # finished: nothing runs again
    assert [t.statuses for t in again.trajectories] == [["COMPILED", "COMPILED"]]
    (record,) = load_run(run)
    assert [e.type for e in record.events].count("stop") == 1
    assert [e.turn for e in record.events if e.type == "model_call"] == [1, 2]


def test_a_resume_runs_the_trajectories_its_run_recorded_when_the_repair_suite_changed(tmp_path, capsys):
    """The repair track's matrix is its suite's tasks, read again on --resume: a suite pulled with tasks added made the
    resume begin trajectories the run never had (scored as this run's), and one with a task taken out passed over that
    task's trajectory, started or not. The resume goes on with the recorded trajectories: those added are left out
    with a note, and a recorded one the suite no longer makes is refused."""
    import json
    import shutil

    import pytest

    from repair_fixture import FIXTURE
    from ptxbench.agent.bench.evaluators import BenchError

    suite = tmp_path / "suite"
    shutil.copytree(FIXTURE, suite)
    listed = json.loads((suite / "suite.json").read_text())
    later = listed["tasks"][2:]
    for task in later:  # the suite the run begins with: the first two tasks
        shutil.move(suite / task, tmp_path / task)
    (suite / "suite.json").write_text(json.dumps({**listed, "tasks": listed["tasks"][:2]}))
    cfg = BenchConfig(models=["builtin/unchanged"], workloads=[], trajectories=1, turns=1, track="repair",
                      suite=str(suite))
    first = run_bench(cfg, tmp_path / "run", evaluator=CompilesNoop())
    recorded = [t.trajectory_id for t in first.trajectories]
    assert len(recorded) == 2
    for task in later:  # the suite gains two tasks
        shutil.move(tmp_path / task, suite / task)
    (suite / "suite.json").write_text(json.dumps(listed))
    again = run_bench(None, tmp_path / "run", resume=True, evaluator=CompilesNoop())
    assert [t.trajectory_id for t in again.trajectories] == recorded
    assert sorted(p.name for p in (tmp_path / "run" / "trajectories").iterdir()) == sorted(recorded)
    assert "2 trajectories the matrix makes now" in capsys.readouterr().err
    gone = listed["tasks"][0]  # a recorded task taken out of the suite
    shutil.rmtree(suite / gone)
    (suite / "suite.json").write_text(json.dumps({**listed, "tasks": listed["tasks"][1:]}))
    with pytest.raises(BenchError, match="no longer makes"):
        run_bench(None, tmp_path / "run", resume=True, evaluator=CompilesNoop())
