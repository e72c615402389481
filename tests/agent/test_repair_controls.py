"""The repair track under control: a suite folder damaged or edited by hand is refused in one line (never a
traceback, never a task silently skipped or run twice), and 'repaired' is credited only for a changed kernel of the
task's own workload, within the turn budget, from the broken kernel the suite records."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from repair_fixture import FIXTURE
from trajectory_builder import TrajectoryBuilder, eval_result
from ptxbench.agent.cli.main import app
from ptxbench.agent.records.events import EvalEvent, TurnEnd
from ptxbench.agent.records.rundir import sha256_text
from ptxbench.agent.repairs.suite import default_suite_dir, load_suite, write_suite
from ptxbench.agent.scoring.repair_track import repair_markdown, score_repair_runs

TASK = "gemm_bf16_m8192_n7168_k5120__off_by_one_k_tiles"  # a task of the committed suite (the local one)


def _damage(suite, how: str) -> None:
    index = json.loads((suite / "suite.json").read_text())
    tid = index["tasks"][0]
    task = json.loads((suite / tid / "task.json").read_text())
    if how == "task_json_missing":
        (suite / tid / "task.json").unlink()
    elif how == "task_json_not_utf8":
        (suite / tid / "task.json").write_bytes(b"\xff\xfe{")
    elif how == "index_not_object":
        (suite / "suite.json").write_text("[1]")
    elif how == "index_without_tasks":
        (suite / "suite.json").write_text(json.dumps({k: v for k, v in index.items() if k != "tasks"}))
    elif how == "task_listed_twice":
        (suite / "suite.json").write_text(json.dumps({**index, "tasks": index["tasks"] + [tid]}))
    elif how == "task_unlisted":
        (suite / "suite.json").write_text(json.dumps({**index, "tasks": index["tasks"][1:]}))
    elif how == "solution_edited":
        path = suite / tid / task["solution_file"]
        path.write_text(path.read_text() + "// edited by hand\n")
    elif how == "index_field_wrong_type":
        (suite / "suite.json").write_text(json.dumps({**index, "unbroken": 5}))


DAMAGES = ("task_json_missing", "task_json_not_utf8", "index_not_object", "index_without_tasks", "task_listed_twice",
           "task_unlisted", "solution_edited", "index_field_wrong_type")


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_or_hand_edited_suite_is_refused_in_one_line(tmp_path, how):
    suite = tmp_path / "suite"
    shutil.copytree(FIXTURE, suite)
    load_suite(suite)  # whole, it loads
    _damage(suite, how)
    with pytest.raises(ValueError) as caught:
        load_suite(suite)
    assert "\n" not in str(caught.value) and str(suite) in str(caught.value)
    out = CliRunner().invoke(app, ["repairs", "list", "--suite", str(suite)])
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output


def test_every_task_records_the_sha256_of_its_broken_kernel(tmp_path):
    """write_suite records each solution file's sha256, so a hand edit of the broken kernel is caught; the committed
    suite and the fixture carry it."""
    for folder in (FIXTURE, default_suite_dir()):
        suite = load_suite(folder)
        for task in suite.tasks:
            assert task.solution_sha256 == sha256_text(suite.solution_path(task).read_text(encoding="utf-8")), task.id
    suite = load_suite(FIXTURE)
    sources = {t.id: suite.solution_path(t).read_text(encoding="utf-8") for t in suite.tasks}
    stripped = suite.model_copy(update={"tasks": [t.model_copy(update={"solution_sha256": ""}) for t in suite.tasks]})
    again = load_suite(write_suite(tmp_path / "s", stripped, sources))
    assert [t.solution_sha256 for t in again.tasks] == [t.solution_sha256 for t in suite.tasks]


def _local_task() -> tuple[dict, str]:
    task = json.loads((default_suite_dir() / TASK / "task.json").read_text())
    return task, (default_suite_dir() / TASK / task["solution_file"]).read_text(encoding="utf-8")


def _submit(b: TrajectoryBuilder, turn: int, source: str, status: str, speedup: float | None = None) -> None:
    """A turn whose kernel is `source` (turn 0: the handed-in kernel)."""
    if turn:
        b._model_call(turn, source)
    rel = b.writer.save_kernel(turn, "cuda", source)
    b.writer.append(EvalEvent(trajectory_id=b.tid, turn=turn, kernel_file=rel, kernel_sha256=sha256_text(source),
                              language="cuda", result=eval_result(b.workload, status, speedup),
                              feedback=f"Turn {turn}"))
    b.writer.append(TurnEnd(trajectory_id=b.tid, turn=turn, status=status, speedup=speedup))


def _builder(run, tid, workload=None, turns=2, model="m/a"):
    task, _ = _local_task()
    return TrajectoryBuilder(run, tid, model, workload or task["workload"],
                             config={"repair_task": TASK, "start_from": "/elsewhere/x/solution.cu", "turns": turns})


def test_a_record_of_another_workload_earns_no_repair(tmp_path):
    """The task names its workload: a record of the task on another workload (its kernel passed there) is no repair
    of the task; it is left out and said, not scored fixed."""
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0", workload="mha_fwd_d128")
    _submit(b, 0, broken, "RUNTIME_ERROR")
    _submit(b, 1, broken + "// other\n", "PASSED", 2.0)
    b.stop()
    score = score_repair_runs([run])
    assert not any(r.fixed for r in score.trajectories)
    assert score.left_out == {"another workload than its task's": 1}
    assert "1 trajectory: another workload than its task's" in repair_markdown(score)


def test_a_pass_after_the_turn_budget_is_no_repair(tmp_path):
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0", turns=1)
    _submit(b, 0, broken, "RUNTIME_ERROR")
    _submit(b, 1, broken + "// try 1\n", "INCORRECT_NUMERICAL")
    _submit(b, 2, broken + "// try 2\n", "PASSED", task["unbroken_speedup"])
    b.stop()
    (row,) = score_repair_runs([run]).trajectories
    assert not row.fixed and row.turns_to_fix is None


def test_the_broken_kernel_handed_back_is_no_fix_when_turn_0_is_missing(tmp_path):
    """A partial run folder without its turn 0: the suite's sha256 of the broken kernel still tells the broken
    kernel handed back (passing once, by a race) from a repair."""
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0")
    _submit(b, 1, broken, "PASSED", task["unbroken_speedup"])
    b.stop()
    (row,) = score_repair_runs([run]).trajectories
    assert not row.fixed and not row.fixed_at_1 and not row.speed_kept


def test_a_trajectory_started_from_another_kernel_than_the_suites_is_left_out(tmp_path):
    """Turn 0 is not the broken kernel the suite records (the file was edited before the run): the model repaired
    some other kernel; left out and said, neither for nor against it."""
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0")
    _submit(b, 0, broken.replace("\n", "\n\n", 1), "RUNTIME_ERROR")
    _submit(b, 1, broken + "// fixed?\n", "PASSED", task["unbroken_speedup"])
    b.stop()
    score = score_repair_runs([run])
    assert score.trajectories == [] and score.left_out == {"started from another kernel than the suite's": 1}


def test_infra_failed_trajectories_and_the_suite_coverage_are_said(tmp_path):
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0")
    _submit(b, 0, broken, "RUNTIME_ERROR")
    b.infra(1)
    ok = _builder(run, "t1")
    _submit(ok, 0, broken, "RUNTIME_ERROR")
    _submit(ok, 1, broken + "\n__device__ int repaired_here;  // fix\n", "PASSED", task["unbroken_speedup"])
    ok.stop()
    score = score_repair_runs([run])
    assert [r.id for r in score.trajectories] == ["t1"] and score.trajectories[0].fixed
    assert score.left_out == {"an infra failure no retry repaired": 1}
    assert score.suite_tasks == len(load_suite().tasks) and score.tasks_by_model == {"m/a": 1}
    page = repair_markdown(score)
    assert "1 trajectory: an infra failure no retry repaired" in page
    assert f"tasks run, of the {score.suite_tasks} in this machine's suite: m/a 1" in page


def test_an_unfinished_trajectory_is_left_out_not_scored_unrepaired(tmp_path):
    """A run killed mid-way (a partial run folder, resumable): a trajectory with turn 0 and no stop is not a model
    that failed to repair; it is left out and said."""
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0")
    _submit(b, 0, broken, "RUNTIME_ERROR")
    score = score_repair_runs([run])
    assert score.trajectories == [] and score.left_out == {"unfinished (no stop recorded; resume the run)": 1}


def test_the_broken_kernel_with_only_comments_or_spacing_changed_is_no_fix(tmp_path):
    """A comment added or the spacing changed leaves the broken kernel as it was; passing once (a race the suite caught
    failing) is no repair. A kernel changed in its code is one."""
    task, broken = _local_task()
    run = tmp_path / "run"
    b = _builder(run, "t0", turns=3)
    _submit(b, 0, broken, "RUNTIME_ERROR")
    _submit(b, 1, "// fixed the race, honestly\n" + broken.replace("\n", "  \n"), "PASSED", task["unbroken_speedup"])
    b.stop()
    (row,) = score_repair_runs([run]).trajectories
    assert not row.fixed and not row.fixed_at_1 and not row.speed_kept
    run2 = tmp_path / "run2"
    b = _builder(run2, "t1", turns=3)
    _submit(b, 0, broken, "RUNTIME_ERROR")
    _submit(b, 1, broken + "\n__device__ int changed_code;\n", "PASSED", task["unbroken_speedup"])
    b.stop()
    (row,) = score_repair_runs([run2]).trajectories
    assert row.fixed and row.fixed_at_1
