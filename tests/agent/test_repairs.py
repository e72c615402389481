"""The repair suite: building it (fake GPU), reading it, and `ptxbench repairs list / show` on the CPU fixture."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from repair_fixture import FIXTURE, GPU, WL, candidates, fake_gpu
from ptxbench.agent.cli.main import app
from ptxbench.agent.repairs.build import build_suite, round_robin, summary_table
from ptxbench.agent.repairs.candidates import all_candidates
from ptxbench.agent.repairs.suite import SUITE_VERSION, load_suite, write_suite


def test_build_keeps_only_what_the_gpu_rejects(tmp_path):
    cands, _ = candidates()
    gpu = fake_gpu()
    report = build_suite(cands, gpu)
    assert sorted(t.bug_class for t in report.suite.tasks) == ["misaligned", "missing_header", "nan_output", "trap"]
    assert report.dropped == {f"{WL}__control_correct": "PASSED"}
    # the unbroken kernel once per workload, timed; candidates untimed
    assert gpu.calls[0] == (WL, True) and all(not timed for _, timed in gpu.calls[1:]) and len(gpu.calls) == 6
    task = next(t for t in report.suite.tasks if t.bug_class == "misaligned")
    assert task.held_out and task.unbroken_speedup == 1.1 and task.verdict.gpu == GPU
    assert "RUNTIME_ERROR" in task.verdict.feedback
    write_suite(tmp_path / "s", report.suite, report.sources)
    again = load_suite(tmp_path / "s")
    assert [t.id for t in again.tasks] == sorted(t.id for t in report.suite.tasks)
    assert again.solution_path(task).read_text() == report.sources[task.id]
    assert "4 tasks, 1 workloads" in summary_table(report)
    # the flush its unbroken speedups were timed from (the fake's timing: written), kept through the suite.json
    assert report.suite.l2_flush == again.l2_flush == "write"


def test_build_stops_evaluating_at_its_time_limit():
    cands, _ = candidates()
    ticks = iter(range(0, 1000, 10))
    report = build_suite(cands, fake_gpu(), max_seconds=25, clock=lambda: next(ticks))
    assert report.skipped and len(report.suite.tasks) + len(report.dropped) + len(report.skipped) == len(cands)


def test_candidates_cover_the_issue_minimum():
    cands = all_candidates()
    real = [c for c in cands if not c.workload.startswith("smoke_")]
    assert len(real) >= 40 and len({c.workload for c in real}) >= 4 and len({c.bug_class for c in cands}) >= 10
    assert not any(c.bug_class.startswith("cheat_") or c.bug_class == "control_correct" for c in cands)
    assert any(c.held_out for c in real) and not all(c.held_out for c in real)
    order = [c.bug_class for c in round_robin(cands)]
    assert len(set(order[:10])) == 10  # a time limit cuts repeats of a class first


def test_fixture_loads_and_is_marked_as_one():
    suite = load_suite(FIXTURE)
    assert suite.version == SUITE_VERSION and suite.gpu == GPU and len(suite.tasks) == 4
    assert all(t.verdict.gpu == GPU for t in suite.tasks)


def test_the_committed_fixture_is_what_its_generator_writes(tmp_path):
    """tests/data/repair_suite is generated (python3 tests/repair_fixture.py): a field added to the suite's tasks and
    not regenerated left the fixture testing an older shape (it lacked unbroken_kernel_hash and evaluations). Nothing
    in it depends on the run (dates are pinned, the fake GPU's verdicts fixed); only its README is written by hand."""
    from repair_fixture import make

    make(tmp_path)
    written = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    committed = {p.relative_to(FIXTURE): p.read_bytes() for p in sorted(FIXTURE.rglob("*"))
                 if p.is_file() and p.name != "README.md"}
    assert sorted(map(str, committed)) == sorted(map(str, written))
    assert [str(p) for p in written if committed[p] != written[p]] == [], "regenerate: python3 tests/repair_fixture.py"


def test_repairs_list_json_and_show():
    out = CliRunner().invoke(app, ["repairs", "list", "--json", "--suite", str(FIXTURE)])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert len(rows) == 4 and {"id", "workload", "bug_class", "status", "gpu", "held_out"} <= set(rows[0])
    assert {r["status"] for r in rows} == {"RUNTIME_ERROR", "INCORRECT_NAN", "COMPILE_ERROR"}
    shown = CliRunner().invoke(app, ["repairs", "show", f"{WL}__trap", "--suite", str(FIXTURE)])
    assert shown.exit_code == 0 and "fake verdict RUNTIME_ERROR" in shown.output and "solution.cu" in shown.output
    missing = CliRunner().invoke(app, ["repairs", "show", "nope", "--suite", str(FIXTURE)])
    assert missing.exit_code == 2 and "no repair task 'nope'" in missing.output
    assert f"the ids are listed by `ptxbench repairs list --suite {FIXTURE}`" in missing.output


def test_a_misspelt_repair_task_id_is_answered_with_the_nearest_one():
    """The id of `repairs show` was the one name the CLI took without a 'did you mean'."""
    typo = f"{WL}__trapp"
    missing = CliRunner().invoke(app, ["repairs", "show", typo, "--suite", str(FIXTURE)])
    lines = [line for line in missing.output.splitlines() if line.strip()]
    assert missing.exit_code == 2 and len(lines) == 1, missing.output
    assert lines[0].startswith(f"error: no repair task '{typo}'") and f"did you mean {WL}__trap? " in lines[0], lines[0]


def test_repairs_list_without_a_suite_says_how_to_build_one(tmp_path):
    out = CliRunner().invoke(app, ["repairs", "list", "--suite", str(tmp_path)])
    assert out.exit_code == 2 and "build_repair_suite.py" in out.output


def test_the_committed_suite_meets_the_bar_and_every_verdict_came_from_a_gpu():
    from ptxbench.agent.repairs.suite import HELD_OUT_CLASSES, load_suite
    from ptxbench.tools.results import MODEL_FAILURES

    suite = load_suite()
    tasks = suite.tasks
    assert len(tasks) >= 40 and len({t.workload for t in tasks}) >= 4 and len({t.bug_class for t in tasks}) >= 10
    assert "H200" in suite.gpu and all(t.verdict.status in MODEL_FAILURES and t.verdict.date for t in tasks)
    # refused before a launch (the compiler, the plan checks): no GPU was involved; everything else ran on the H200
    ran = [t for t in tasks if t.verdict.status not in ("COMPILE_ERROR", "PLAN_ERROR") or t.verdict.gpu]
    assert len(ran) >= 30 and all("H200" in t.verdict.gpu for t in ran)
    assert all(t.held_out == (t.bug_class in HELD_OUT_CLASSES) for t in tasks)
    assert {t.held_out for t in tasks} == {True, False}
    for t in tasks:
        assert suite.solution_path(t).is_file()
        assert suite.unbroken[t.workload].status == "PASSED"


def test_verdicts_decided_before_the_gpu_are_what_the_cpu_checks_give_today():
    """A task refused before a launch (the plan checks, the source policy, the compiler) has no GPU in its
    verdict: re-checking its solution here (parse, then compile, no GPU) must give the recorded status."""
    from ptxbench.agent.repairs.suite import load_suite
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions

    suite = load_suite()
    before_gpu = [t for t in suite.tasks if not t.verdict.gpu]
    assert {t.verdict.status for t in before_gpu} == {"PLAN_ERROR", "COMPILE_ERROR"}
    assert {t.bug_class for t in before_gpu if t.verdict.status == "PLAN_ERROR"} >= {"smem_over_limit", "wrong_swizzle"}
    evaluator = LocalEvaluator()
    for task in before_gpu:
        result = evaluator.evaluate(task.workload, suite.solution_path(task).read_text(), EvalOptions(no_gpu=True))
        assert (task.id, result.status) == (task.id, task.verdict.status), result.message


def _hostile_suite(tmp_path, how: str):
    import os
    import shutil

    suite, secret = tmp_path / "suite", tmp_path / "host" / "secret.txt"
    shutil.copytree(FIXTURE, suite)
    secret.parent.mkdir()
    secret.write_text("a host file")
    tid = json.loads((suite / "suite.json").read_text())["tasks"][0]
    task = json.loads((suite / tid / "task.json").read_text())
    if how == "link":
        (suite / tid / task["solution_file"]).unlink()
        os.symlink(secret, suite / tid / task["solution_file"])
    elif how == "solution_file":
        task["solution_file"] = "../../host/secret.txt"
    elif how == "task_id":
        task.update(id="../host", solution_file="secret.txt")
    elif how == "index":
        index = json.loads((suite / "suite.json").read_text())
        index["tasks"][0] = "../host"
        (suite / "suite.json").write_text(json.dumps(index))
        (tmp_path / "host" / "task.json").write_text(json.dumps({**task, "id": "../host"}))
    (suite / tid / "task.json").write_text(json.dumps(task))
    return suite


def test_a_suite_from_elsewhere_never_points_the_repair_track_at_a_host_file(tmp_path):
    """The repair track reads a task's solution file and shows it to the model: a task.json, an index or a link
    naming a file outside the task's folder is refused when the suite is read."""
    import pytest

    for how in ("solution_file", "task_id", "index", "link"):
        case = tmp_path / how
        case.mkdir()
        with pytest.raises(ValueError):
            load_suite(_hostile_suite(case, how))


def test_a_recorded_bug_class_never_names_a_folder_outside_the_suite(tmp_path):
    """A recorded run's synthetic_bug is anyone's text: "aaa/../../x" as a task id wrote the task outside the
    suite folder; such a class is left out (the failure's status names the task), and a workload unknown here is
    no candidate (the build would fail on its reference)."""
    from export_runs import kernel, result
    from ptxbench.agent.records.events import EvalEvent, TrajectoryStart
    from ptxbench.agent.records.rundir import TrajectoryWriter, sha256_text
    from ptxbench.agent.repairs.candidates import from_trajectories, merge

    run = tmp_path / "run"
    for tid, workload, bug in (("t1", WL, "aaa"), ("t2", WL, "aaa/../../escaped"), ("t3", "no_such_workload", "bbb")):
        w = TrajectoryWriter(run / "trajectories" / tid)
        w.append(TrajectoryStart(trajectory_id=tid, workload=workload, model="m", prompt="p", mode="pipeline",
                                 config={"synthetic_bug": bug}))
        src = kernel(tid)
        w.append(EvalEvent(trajectory_id=tid, turn=1, kernel_file=w.save_kernel(1, "cuda", src),
                           kernel_sha256=sha256_text(src), language="cuda", result=result("COMPILE_ERROR"), feedback="x"))
    cands = merge(from_trajectories([run]))
    assert sorted(c.id for c in cands) == [f"{WL}__aaa", f"{WL}__recorded_compile_error"]
    from repair_fixture import FakeGpu
    from ptxbench.agent.models.builtin import reference_source

    report = build_suite(cands, FakeGpu({c.source: "COMPILE_ERROR" for c in cands}, reference_source(WL)))
    write_suite(tmp_path / "suites" / "s", report.suite, report.sources)
    assert sorted(p.name for p in (tmp_path / "suites").iterdir()) == ["s"]
    assert len(load_suite(tmp_path / "suites" / "s").tasks) == 2


def test_every_distinct_recorded_failure_of_a_workload_is_a_candidate(tmp_path):
    """Two failing kernels of one workload and status both named recorded_<status>: merge() kept the first and
    dropped the second uncounted. Each distinct text gets its own number; the same text again is one candidate."""
    from export_runs import kernel, result
    from ptxbench.agent.records.events import EvalEvent, TrajectoryStart
    from ptxbench.agent.records.rundir import TrajectoryWriter, sha256_text
    from ptxbench.agent.repairs.candidates import from_trajectories, merge

    run = tmp_path / "run"
    for tid, text in (("t1", "a"), ("t2", "b"), ("t3", "a")):
        w = TrajectoryWriter(run / "trajectories" / tid)
        w.append(TrajectoryStart(trajectory_id=tid, workload=WL, model="m", prompt="p", mode="pipeline", config={}))
        src = kernel(text)
        w.append(EvalEvent(trajectory_id=tid, turn=1, kernel_file=w.save_kernel(1, "cuda", src),
                           kernel_sha256=sha256_text(src), language="cuda", result=result("COMPILE_ERROR"), feedback="x"))
    cands = merge(from_trajectories([run]))
    assert sorted(c.id for c in cands) == [f"{WL}__recorded_compile_error", f"{WL}__recorded_compile_error_2"]
    assert len({c.source for c in cands}) == 2
    first = next(c for c in cands if c.id.endswith("error"))
    assert len(first.provenance) == 2  # t1 and t3, the same text


def test_show_says_a_plan_or_compile_verdict_needed_no_gpu():
    """A PLAN_ERROR / COMPILE_ERROR is recorded with no GPU (`verdict.gpu` ""): shown as such, not as `on ?`."""
    task = next(t for t in load_suite().tasks if not t.verdict.gpu)
    assert task.verdict.status in {"PLAN_ERROR", "COMPILE_ERROR"}
    shown = CliRunner().invoke(app, ["repairs", "show", task.id])
    assert shown.exit_code == 0, shown.output
    assert f"verdict with no GPU needed ({task.verdict.date}): {task.verdict.status}" in shown.output
    assert "on ?" not in shown.output


def test_show_and_list_print_a_recorded_verdicts_control_characters_escaped(tmp_path):
    """A task built from a recorded trajectory carries the model's text (its feedback quotes the plan and the
    compiler); a suite folder may be anyone's. Printed raw, an OSC retitled the terminal and an erase cleared it."""
    import shutil

    suite = tmp_path / "suite"
    shutil.copytree(FIXTURE, suite)
    hostile = "\x1b]0;owned\x07\x1b[2J"
    tid = json.loads((suite / "suite.json").read_text())["tasks"][0]
    task = json.loads((suite / tid / "task.json").read_text())
    task["description"] = f"desc {hostile}"
    task["provenance"] = [f"run/t/{hostile}"]
    task["verdict"].update(message=f"msg {hostile}", feedback=f"feedback {hostile}", gpu=f"gpu {hostile}",
                           date=f"d {hostile}")
    (suite / tid / "task.json").write_text(json.dumps(task))
    index = json.loads((suite / "suite.json").read_text())
    (suite / "suite.json").write_text(json.dumps({**index, "gpu": f"G {hostile}", "built": f"b {hostile}"}))
    for argv in (["repairs", "show", tid], ["repairs", "list"]):
        out = CliRunner().invoke(app, [*argv, "--suite", str(suite)])
        assert out.exit_code == 0, out.output
        assert "\x1b" not in out.output and "\x07" not in out.output
    assert "feedback \\x1b]0;owned\\x07\\x1b[2J" in CliRunner().invoke(app, ["repairs", "show", tid, "--suite", str(suite)]).output
