"""bench --track repair on the CPU fixture suite: the anchors (builtin/reference = ceiling, builtin/unchanged =
floor) through run_bench with a fake GPU, the repair scores, and the CLI with --no-gpu."""
from __future__ import annotations

from typer.testing import CliRunner

from repair_fixture import FIXTURE, WL, fake_gpu
from ptxbench.agent.bench.runner import run_bench
from ptxbench.agent.bench.matrix import BenchConfig, expand
from ptxbench.agent.cli.main import app
from ptxbench.agent.records.rundir import load_run
from ptxbench.agent.scoring import repair_track
from ptxbench.agent.scoring.repair_track import RepairScore, repair_markdown, score_repair_runs


def config(**kw) -> BenchConfig:
    base = dict(models=["builtin/reference", "builtin/unchanged"], workloads=[], trajectories=1, turns=2,
                track="repair", suite=str(FIXTURE))
    return BenchConfig(**{**base, **kw})


def reference_repairs(monkeypatch):
    """The fixture's only model that passes is builtin/reference, whose kernel is a swap (no repair): tests of what a
    repair's score says (its speed, its flush) count it as a repair by forgetting the kernels a swap hands back:
    today's reference and the unbroken kernel the suite records (missing_header was made from the reference)."""
    monkeypatch.setattr(repair_track, "swap_hashes", lambda task, workload: frozenset())


def test_expand_starts_every_trajectory_from_its_broken_kernel():
    configs = expand(config())
    assert len(configs) == 8 and len({c.trajectory_id() for c in configs}) == 8
    assert all(c.start_from.endswith("solution.cu") and c.repair_task in c.start_from for c in configs)
    assert all(c.target_speedup is None for c in configs)


def test_anchors_give_the_ceiling_and_the_floor(tmp_path):
    run = tmp_path / "run"
    run_bench(config(), run, evaluator=fake_gpu())
    score = score_repair_runs([run])
    ref, floor = score.by_model["builtin/reference"], score.by_model["builtin/unchanged"]
    assert ref.n == floor.n == 4
    # the reference handed in passes every task and repairs none: fixed by swap, never in fixed@k
    assert ref.fixed_by_swap.value == 1.0 and ref.swaps == 4
    assert ref.fixed_at_1.value == ref.fixed_at_k.value == 0.0 and ref.turns_to_fix.value is None
    assert floor.fixed_at_k.value == floor.fixed_by_swap.value == 0.0 and floor.turns_to_fix.value is None
    assert ref.regression_rate.value == 0.0
    assert set(score.by_model_bug_class["builtin/reference"]) == {"misaligned", "missing_header", "nan_output", "trap"}
    assert set(score.by_model_failure_class["builtin/unchanged"]) == {"RUNTIME_ERROR", "INCORRECT_NAN", "COMPILE_ERROR"}
    # turn 0 of every trajectory is the broken kernel, with the verdict the suite recorded
    for record in load_run(run):
        zero = [e for e in record.events if e.type == "eval_result" and e.turn == 0]
        assert len(zero) == 1 and zero[0].result.status != "PASSED"
    page = repair_markdown(score)
    # 4 of 4 swapped is no proof of a 100% rate: the Wilson interval over the 4 tasks, not the bootstrap's [100, 100]
    assert "| builtin/reference | 4 | 0.0% [0.0, 49.0] | 0.0% [0.0, 49.0] | 0.0% [0.0, 49.0] | 100.0% [51.0, 100.0] |" \
        in page and "by bug class" in page
    scored = CliRunner().invoke(app, ["score", str(run)])
    assert scored.exit_code == 0 and "| builtin/unchanged | 4 | 0.0%" in scored.output
    as_json = CliRunner().invoke(app, ["score", str(run), "--json"])
    import json

    data = json.loads(as_json.output)
    assert data["repair_track"]["by_model"]["builtin/reference"]["fixed_by_swap"]["value"] == 1.0 and "cells" in data
    reported = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert reported.exit_code == 0 and "## Repair track" in (tmp_path / "rep" / "repair.md").read_text()


def test_slow_fix_is_not_a_repair(tmp_path, monkeypatch):
    reference_repairs(monkeypatch)
    gpu = fake_gpu()
    gpu.speedup = 0.5  # the reference now runs at half the speed the suite recorded for the unbroken kernel
    cfg = BenchConfig(models=["builtin/reference"], workloads=[WL], trajectories=1, turns=1, track="repair", suite=str(FIXTURE))
    run_bench(cfg, tmp_path / "run", evaluator=gpu)
    ref = score_repair_runs([tmp_path / "run"]).by_model["builtin/reference"]
    assert ref.fixed_at_1.value == 1.0 and ref.speed_kept.value == 0.0


def test_a_copied_repair_run_is_refused_not_counted_twice(tmp_path):
    """score_repair_runs reads trajectories as score_runs does: a run and its copy (one trajectory_start each) would
    count every repair twice and narrow the intervals, so DuplicateTrajectory; the same folder named twice is one."""
    import shutil

    import pytest

    from ptxbench.agent.scoring import DuplicateTrajectory

    cfg = BenchConfig(models=["builtin/reference"], workloads=[WL], trajectories=1, turns=1, track="repair", suite=str(FIXTURE))
    run_bench(cfg, tmp_path / "run", evaluator=fake_gpu())
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    assert score_repair_runs([tmp_path / "run", tmp_path / "run"]).by_model["builtin/reference"].n == 4  # its 4 tasks
    with pytest.raises(DuplicateTrajectory):
        score_repair_runs([tmp_path / "run", tmp_path / "copy"])


def test_cli_repair_track_no_gpu(tmp_path):
    run = tmp_path / "bench"
    out = CliRunner().invoke(app, ["bench", "--track", "repair", "--suite", str(FIXTURE), "--models", "builtin/unchanged",
                                   "--trajectories", "1", "--no-gpu", "--run-dir", str(run), "--no-report"])
    assert out.exit_code == 0, out.output
    # --no-gpu runs the one task judged without a GPU (missing_header: COMPILE_ERROR), still failing when unchanged
    assert "## Repair track" in out.output and "| builtin/unchanged | 1 | 0.0%" in out.output
    records = load_run(run)
    assert len(records) == 1 and all(r.start.config["turns"] == 4 for r in records)
    bad = CliRunner().invoke(app, ["bench", "--track", "repair", "--suite", str(tmp_path / "none"), "--models",
                                   "builtin/unchanged", "--no-gpu", "--run-dir", str(tmp_path / "b2")])
    assert bad.exit_code == 2 and "no repair suite" in bad.output


def test_fixit_export_keeps_held_out_bug_classes_out_of_training(tmp_path):
    from ptxbench.agent.export.collect import collect_samples
    from ptxbench.agent.export.recipes import build_rows
    from ptxbench.agent.export.schema import ExportConfig

    run = tmp_path / "run"
    run_bench(config(models=["builtin/reference"]), run, evaluator=fake_gpu())
    samples = collect_samples([run])
    from ptxbench.agent.repairs.suite import held_out_bug

    by_bug = {r.start.config["repair_task"].split("__")[1]: held_out_bug(r.start.config) for r in load_run(run)}
    assert by_bug == {"misaligned": True, "missing_header": True, "nan_output": False, "trap": False}
    # the fixture's smoke workload is held out itself, so every sample is; held-out rows stay out by default
    assert all(s.held_out for s in samples)
    rows, _ = build_rows(samples, ExportConfig(recipe="fixit"))
    assert rows == []
    # asked for, the held-out rows are there: each pairs the broken start kernel (turn 0, with its verdict's
    # feedback) with the first fix, and all of them land in the held-out (test) split
    rows, _ = build_rows(samples, ExportConfig(recipe="fixit", include_held_out=True, require_target_executed=False))
    assert len(rows) == 4 and all(r.provenance.source_turn == 0 and r.provenance.turn == 1 for r in rows)
    assert {r.failure_class for r in rows} == {"RUNTIME_ERROR", "COMPILE_ERROR", "INCORRECT_NAN"}
    assert all(r.split == "test" for r in rows)


def test_a_task_is_looked_up_by_its_id_in_this_machines_suite_not_at_the_recorded_path(tmp_path):
    """A repair run scored on another machine: the recorded start_from is a path there. The local suite's record of
    the task decides (not a task.json that happens to sit at that path here), and a task.json outside a repairs
    suite is never read."""
    import json
    import shutil

    from trajectory_builder import TrajectoryBuilder

    from ptxbench.agent.repairs.suite import default_suite_dir

    known = "gemm_bf16_m8192_n7168_k5120__off_by_one_k_tiles"
    local = json.loads((default_suite_dir() / known / "task.json").read_text())
    elsewhere = tmp_path / "their_suite"  # the path recorded on the machine that ran it, with other numbers here
    shutil.copytree(default_suite_dir() / known, elsewhere / known)
    (elsewhere / "suite.json").write_text("{}")
    (elsewhere / known / "task.json").write_text(json.dumps({**local, "unbroken_speedup": 50.0, "bug_class": "x"}))
    loose = tmp_path / "loose" / "x__y"  # a task.json with no suite.json above it
    loose.mkdir(parents=True)
    (loose / "task.json").write_text(json.dumps({**local, "id": "x__y", "unbroken_speedup": 0.01}))
    run = tmp_path / "run"
    for tid, task, start in (("t0", known, elsewhere / known / "solution.cu"), ("t1", "x__y", loose / "solution.cu")):
        TrajectoryBuilder(run, tid, "m/a", local["workload"], config={"repair_task": task, "start_from": str(start)}) \
            .turn(1, "PASSED", 1.0, True).stop()
    rows = {r.id: r for r in score_repair_runs([run]).trajectories}
    assert rows["t0"].unbroken_speedup == local["unbroken_speedup"] and rows["t0"].bug_class == "off_by_one_k_tiles"
    assert rows["t0"].speed_kept
    assert rows["t1"].unbroken_speedup is None and rows["t1"].bug_class == "" and not rows["t1"].speed_kept


def test_a_suites_own_held_out_marks_reach_the_trajectory_and_export(tmp_path):
    """A suite built elsewhere may hold out a task this machine's HELD_OUT_CLASSES do not name (its task.held_out,
    its held_out_classes): export decided by the local classes only and trained on it."""
    import json
    import shutil

    from ptxbench.agent.repairs.suite import HELD_OUT_CLASSES, held_out_bug, load_suite

    suite = tmp_path / "suite"
    shutil.copytree(FIXTURE, suite)
    index = json.loads((suite / "suite.json").read_text())
    tasks = load_suite(suite).tasks
    by_mark, by_class = [t for t in tasks if t.bug_class not in HELD_OUT_CLASSES][:2]
    index["held_out_classes"].append(by_class.bug_class)
    (suite / "suite.json").write_text(json.dumps(index))
    task = json.loads((suite / by_mark.id / "task.json").read_text())
    (suite / by_mark.id / "task.json").write_text(json.dumps({**task, "held_out": True}))
    configs = {c.repair_task: c for c in expand(config(suite=str(suite), models=["builtin/reference"]))}
    held = {tid for tid, c in configs.items() if held_out_bug(c.model_dump(mode="json"))}
    local = {t.id for t in tasks if t.bug_class in HELD_OUT_CLASSES}
    assert held == local | {by_mark.id, by_class.id}, held


def test_the_broken_kernel_handed_back_unchanged_is_no_fix_even_when_it_passes(tmp_path):
    """A race the suite caught failing once may pass the next run: builtin/unchanged, which repairs nothing, was
    scored fixed@1 100% on such tasks."""
    gpu = fake_gpu()
    seen: set[str] = set()
    judge = gpu.evaluate

    def flaky(workload_id, source, options):  # every broken kernel fails its first run (turn 0), then passes
        result = judge(workload_id, source, options)
        if source in seen and result.status != "PASSED":
            result = result.model_copy(update={"status": "PASSED"})
        seen.add(source)
        return result

    gpu.evaluate = flaky
    run_bench(config(models=["builtin/unchanged"], turns=1), tmp_path / "run", evaluator=gpu)
    rows = score_repair_runs([tmp_path / "run"]).trajectories
    assert rows and all(r.failure_class != "PASSED" for r in rows)
    assert not any(r.fixed or r.fixed_at_1 for r in rows)


def test_cli_repair_track_no_gpu_judges_only_compile_class_tasks(tmp_path):
    """--no-gpu: a runtime failure's repair cannot be judged (its fix compiles as the broken kernel did), so those
    tasks are left out, with one line saying how many and why; the failure-class table shows the recorded verdict,
    never COMPILED, and a fix compiled without a GPU is not judged rather than scored 0% fixed."""
    run = tmp_path / "bench"
    out = CliRunner().invoke(app, ["bench", "--track", "repair", "--suite", str(FIXTURE), "--models", "builtin/reference",
                                   "--turns", "1", "--no-gpu", "--run-dir", str(run), "--no-report"])
    assert out.exit_code == 0, out.output
    assert ("--no-gpu: 3 of 4 repair tasks left out: their broken kernels fail only when run (RUNTIME_ERROR 2, "
            "INCORRECT_NAN 1)") in out.output
    records = load_run(run)
    assert [r.start.config["repair_task"] for r in records] == [f"{WL}__missing_header"]
    assert "| COMPILED |" not in out.output and "| COMPILE_ERROR | 1 | – | – | – | – | – | – | – | 1 | 1 |" in out.output
    assert "| builtin/reference | 1 | – | – |" in out.output and "not judged: 1 of 1 trajectories" in out.output


def test_builtin_models_run_one_trajectory_per_repair_task_unless_asked(tmp_path):
    """A builtin model answers the same input the same way: by default the repair track runs it once per task (and
    says so); an LLM keeps its 12; --trajectories N is obeyed for every model."""
    run = tmp_path / "bench"
    out = CliRunner().invoke(app, ["bench", "--track", "repair", "--suite", str(FIXTURE), "--models", "builtin/unchanged",
                                   "--turns", "1", "--no-gpu", "--run-dir", str(run), "--no-report"])
    assert out.exit_code == 0, out.output
    assert "builtin/unchanged: 1 trajectory per task, not 12" in out.output
    assert len(load_run(run)) == 1
    mixed = expand(config(models=["builtin/reference", "openai/gpt-5"], trajectories=12, builtin_trajectories=1))
    counts = {m: sum(c.model == m for c in mixed) for m in ("builtin/reference", "openai/gpt-5")}
    assert counts == {"builtin/reference": 4, "openai/gpt-5": 48}
    asked = CliRunner().invoke(app, ["bench", "--track", "repair", "--suite", str(FIXTURE), "--models", "builtin/unchanged",
                                     "--turns", "1", "--trajectories", "2", "--no-gpu", "--run-dir", str(tmp_path / "b2"),
                                     "--no-report"])
    assert asked.exit_code == 0 and "trajectory per task" not in asked.output and len(load_run(tmp_path / "b2")) == 2


def test_a_no_gpu_run_of_runtime_tasks_scores_them_not_judged_under_their_recorded_class(tmp_path):
    """A repair run recorded before --no-gpu left the runtime tasks out (or a library caller's): its turn 0 and its
    fixes are COMPILED. The table keys them by the suite's recorded verdict and counts them not judged, never
    0% fixed; the broken kernel handed back unchanged is still judged not fixed."""
    from ptxbench.tools.evaluate import LocalEvaluator

    run = tmp_path / "run"
    cfg = config(models=["builtin/reference", "builtin/unchanged"], turns=1, no_gpu=True, no_gpu_judged_only=False)
    run_bench(cfg, run, evaluator=LocalEvaluator())
    score = score_repair_runs([run])
    ref = score.by_model_failure_class["builtin/reference"]
    assert set(ref) == {"RUNTIME_ERROR", "INCORRECT_NAN", "COMPILE_ERROR"}
    assert ref["RUNTIME_ERROR"].n == ref["RUNTIME_ERROR"].not_judged == 2 and ref["RUNTIME_ERROR"].fixed_at_1.value is None
    floor = score.by_model["builtin/unchanged"]
    assert floor.not_judged == 0 and floor.fixed_at_k.value == 0.0
    page = repair_markdown(score)
    assert "| COMPILED |" not in page and "| RUNTIME_ERROR | 2 | – | – | – | – | – | – | – | 2 | 2 |" in page


def test_a_fix_with_no_speed_to_compare_is_not_counted_as_a_slow_fix():
    """A fixed trajectory whose task records no unbroken speedup (its base was not timed when the suite was built), or
    whose fix was not timed, read as a fix that lost the speed: 'fixed, speed kept' said 0% of what it could not
    judge. It is unknown: left out of that share and counted apart; a fix timed and too slow is still not kept."""
    from ptxbench.agent.scoring.repair_track import cell, repair_trajectory
    from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore

    def fixed_at(speedup: float | None, unbroken: float | None, tid: str):
        score = TrajectoryScore(id=tid, model="m", workload=WL, stop_reason="turn_limit", turns=[
            TurnScore(turn=1, status="PASSED", correct=True, target_executed=True, speedup=speedup, kernel_sha256=tid)])
        return repair_trajectory(score, {"repair_task": tid}, {"workload": WL, "unbroken_speedup": unbroken})

    untimed_base, untimed_fix = fixed_at(1.0, None, "a"), fixed_at(None, 1.0, "b")
    kept, slow = fixed_at(1.0, 1.0, "c"), fixed_at(0.5, 1.0, "d")
    assert untimed_base.speed_kept is None and untimed_fix.speed_kept is None
    assert kept.speed_kept is True and slow.speed_kept is False
    scored = cell([untimed_base, untimed_fix, kept, slow])
    assert scored.fixed_at_k.value == 1.0 and scored.speed_kept.value == 0.5 and scored.speed_kept.n == 2
    assert scored.speed_unknown == 2
    assert cell([untimed_base]).speed_kept.value is None  # nothing to judge: no share, not 0%
    page = repair_markdown(RepairScore(trajectories=[untimed_base, kept], by_model={"m": cell([untimed_base, kept])},
                                       by_model_bug_class={"m": {}}, by_model_failure_class={"m": {}}))
    assert "speed unknown: 1 fixed trajectory had no speed to compare" in page


def test_the_broken_kernel_handed_back_and_passing_then_failing_is_no_regression():
    """The broken kernel handed back unchanged is no fix even when a race lets it pass once; its next turn failing
    was scored a regression (a fix that broke again), though nothing was ever fixed. A real fix that breaks again
    still is one."""
    from ptxbench.agent.scoring.repair_track import repair_trajectory
    from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore

    def run(first_sha: str):
        score = TrajectoryScore(id="t", model="m", workload=WL, stop_reason="turn_limit",
                                start=TurnScore(turn=0, status="RUNTIME_ERROR", kernel_sha256="broken"), turns=[
                                    TurnScore(turn=1, status="PASSED", correct=True, speedup=1.0, kernel_sha256=first_sha),
                                    TurnScore(turn=2, status="RUNTIME_ERROR", kernel_sha256="other")])
        return repair_trajectory(score, {"repair_task": "t"}, {"workload": WL, "unbroken_speedup": 1.0})

    handed_back = run("broken")
    assert not handed_back.fixed and not handed_back.regression
    fixed = run("changed")
    assert fixed.fixed and fixed.regression


def test_an_unbroken_speedup_recorded_as_nan_infinity_or_zero_is_no_speed_to_compare():
    """A task.json from another machine may record the unbroken speedup as NaN, Infinity or 0: NaN and Infinity made
    every fix slow, 0 made every fix keep the speed. Each reads as unmeasured, as a turn's speedup does: unknown."""
    from ptxbench.agent.scoring.repair_track import repair_trajectory
    from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore

    score = TrajectoryScore(id="t", model="m", workload=WL, stop_reason="turn_limit", turns=[
        TurnScore(turn=1, status="PASSED", correct=True, target_executed=True, speedup=1.0, kernel_sha256="fix")])
    for recorded in (float("nan"), float("inf"), 0.0, -1.0):
        row = repair_trajectory(score, {"repair_task": "t"}, {"workload": WL, "unbroken_speedup": recorded})
        assert row.fixed and row.speed_kept is None and row.unbroken_speedup is None, recorded


def test_repairs_of_two_turn_budgets_are_rows_apart(tmp_path):
    """fixed@k pooled trajectories given 1 turn with trajectories given 4 into one model's row: the k of fixed@k is the
    turn budget, so each budget is a row of its own, named with it."""
    for turns in (1, 2):
        cfg = BenchConfig(models=["builtin/reference"], workloads=[WL], trajectories=1, turns=turns, track="repair",
                          suite=str(FIXTURE))
        run_bench(cfg, tmp_path / f"run{turns}", evaluator=fake_gpu())
    score = score_repair_runs([tmp_path / "run1", tmp_path / "run2"])
    assert list(score.by_model) == ["builtin/reference (1 turn)", "builtin/reference (2 turns)"]
    assert [c.n for c in score.by_model.values()] == [4, 4]
    assert {r.turn_budget for r in score.trajectories} == {1, 2}
    assert "rows are split by turn budget" in repair_markdown(score)
    assert list(score_repair_runs([tmp_path / "run2"]).by_model) == ["builtin/reference"]  # one budget: as before


def test_each_task_weighs_alike_in_a_models_repair_rates():
    """The rates pooled trajectories: a task that ran three (two runs merged) against one that ran one (or lost two to
    infra) read 3 fixed of 4 = 75%, where the tasks read 100% and 0%. A mean over tasks, as a model's row of the score
    weighs its workloads; its interval is over the 2 tasks (Wilson's: fewer than MIN_BOOTSTRAP to resample)."""
    from ptxbench.agent.scoring.repair_track import RepairTrajectory, cell
    from ptxbench.agent.scoring import wilson_interval

    rows = [RepairTrajectory(id=f"a{i}", model="m", task="a", fixed=True, fixed_at_1=True, turns_to_fix=1 + i)
            for i in range(3)] + [RepairTrajectory(id="b0", model="m", task="b")]
    c = cell(rows)
    assert c.fixed_at_k.value == 0.5 and c.fixed_at_1.value == 0.5 and c.n == 4 and c.tasks == 2
    assert (c.fixed_at_k.ci_low, c.fixed_at_k.ci_high) == wilson_interval(0.5, 2) and c.fixed_at_k.n == 2
    assert c.turns_to_fix.value == 2.0  # fixed only in task a: the mean of its 1, 2, 3
    # one trajectory per task (the anchors): every trajectory alike, the bootstrap over its 4 tasks
    even = cell([RepairTrajectory(id=f"t{i}", model="m", task=f"t{i}", fixed=i < 3, turns_to_fix=1 if i < 3 else None)
                 for i in range(4)])
    assert even.fixed_at_k.value == 0.75 and even.fixed_at_k.ci_method == "bootstrap over tasks"


def test_a_fixs_speed_compares_only_with_an_unbroken_speedup_timed_alike():
    """'Fixed, speed kept' compared a fix's speedup with the suite's unbroken one whatever GPU and L2 flush each was
    timed on: the committed suite was timed from the written flush, runs since default to the read one, and a speedup
    of one flush does not compare with the other's (docs/timing-integrity.md). Such a fix's speed is unknown, and
    the page says why; timed alike, it is judged as before."""
    from ptxbench.agent.repairs.suite import RepairSuite
    from ptxbench.agent.scoring.repair_track import cell, repair_trajectory
    from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore

    def fixed(gpu: str, flush: str, speedup: float = 1.0):
        score = TrajectoryScore(id=f"{gpu}-{flush}", model="m", workload=WL, gpu=gpu, stop_reason="turn_limit", turns=[
            TurnScore(turn=1, status="PASSED", correct=True, target_executed=True, speedup=speedup, l2_flush=flush,
                      kernel_sha256="fix")])
        return repair_trajectory(score, {"repair_task": "t"}, {"workload": WL, "unbroken_speedup": 1.0,
                                                               "suite_gpu": "NVIDIA H200", "suite_l2_flush": "write"})

    assert fixed("NVIDIA H200", "write").speed_kept is True and fixed("NVIDIA H200", "write", 0.5).speed_kept is False
    other_flush, other_gpu = fixed("NVIDIA H200", "read"), fixed("NVIDIA H100 80GB HBM3", "write")
    assert other_flush.speed_kept is None and "read L2 flush" in other_flush.speed_unknown_why
    assert other_gpu.speed_kept is None and "another GPU" in other_gpu.speed_unknown_why
    page = repair_markdown(RepairScore(trajectories=[other_flush], by_model={"m": cell([other_flush])},
                                       by_model_bug_class={"m": {}}, by_model_failure_class={"m": {}}))
    assert "1: timed from the read L2 flush" in page
    # a suite.json of before the read flush existed says nothing of its flush: it was the written one
    assert RepairSuite(built="2026-11-30").l2_flush == "write" and RepairSuite(built="2026-12-05").l2_flush == ""
    assert RepairSuite(built="2026-11-30", l2_flush="read").l2_flush == "read"


def test_a_repair_run_timed_from_another_flush_than_its_suite_has_its_speed_unknown(tmp_path, monkeypatch):
    reference_repairs(monkeypatch)
    """The same through a bench: the fixture suite says nothing of its flush and was built before the read flush, so
    its unbroken speedup is the written flush's; fixes timed from the read flush are fixed, their speed unknown."""
    from ptxbench.agent.repairs.suite import load_suite
    from ptxbench.agent.scoring import repair_track

    fixture = load_suite(FIXTURE)  # as this machine's suite (the committed one shares some of its ids)
    monkeypatch.setattr(repair_track, "_local_suite", lambda: fixture)
    monkeypatch.setattr(repair_track, "_local_tasks", lambda: {t.id: t for t in fixture.tasks})
    gpu = fake_gpu()
    evaluate = gpu.evaluate

    def read_flush(workload_id, source, options):
        result = evaluate(workload_id, source, options)
        if result.timing is not None:
            result.timing.l2_flush = "read"
        return result
    gpu.evaluate = read_flush
    cfg = BenchConfig(models=["builtin/reference"], workloads=[WL], trajectories=1, turns=1, track="repair", suite=str(FIXTURE))
    run_bench(cfg, tmp_path / "run", evaluator=gpu)
    score = score_repair_runs([tmp_path / "run"])
    ref = score.by_model["builtin/reference"]
    assert ref.fixed_at_k.value == 1.0 and ref.speed_kept.value is None and ref.speed_unknown == 4
    assert {r.speed_unknown_why for r in score.trajectories} == {
        "timed from the read L2 flush, the suite's unbroken speedups from the write one (rebuild the suite, or run "
        "with that l2_flush)"}


def test_the_page_says_when_its_rows_ran_different_tasks():
    """Two models' fixed@k over different tasks (one ran only the compile failures) sat side by side as if alike."""
    from ptxbench.agent.scoring.repair_track import RepairTrajectory, cell

    rows = [RepairTrajectory(id="a", model="m1", task="t1", fixed=True, turns_to_fix=1),
            RepairTrajectory(id="b", model="m1", task="t2"), RepairTrajectory(id="c", model="m2", task="t1")]
    by = {m: cell([r for r in rows if r.model == m]) for m in ("m1", "m2")}
    page = repair_markdown(RepairScore(trajectories=rows, by_model=by, by_model_bug_class={m: {} for m in by},
                                       by_model_failure_class={m: {} for m in by}))
    assert "the rows ran different tasks (1 in common)" in page
    alike = repair_markdown(RepairScore(trajectories=rows[:1] + rows[2:], by_model={m: by[m] for m in by},
                                        by_model_bug_class={m: {} for m in by}, by_model_failure_class={m: {} for m in by}))
    assert "different tasks" not in alike


def test_a_prompt_ablation_shows_each_prompts_repairs_apart(tmp_path):
    """A repair bench of two prompt variants pooled them into the model's row with no view of either arm: the page
    now has a table by prompt where a model ran several (by_model_prompt)."""
    cfg = BenchConfig(models=["builtin/reference"], workloads=[WL], trajectories=1, turns=1, track="repair",
                      suite=str(FIXTURE), prompts=["basic", "expert"])
    run_bench(cfg, tmp_path / "run", evaluator=fake_gpu())
    score = score_repair_runs([tmp_path / "run"])
    assert score.by_model["builtin/reference"].n == 8
    assert {k: c.n for k, c in score.by_model_prompt["builtin/reference"].items()} == {"basic": 4, "expert": 4}
    assert "### builtin/reference by prompt" in repair_markdown(score)
    one = tmp_path / "one"
    run_bench(config(models=["builtin/reference"], turns=1), one, evaluator=fake_gpu())
    assert "by prompt" not in repair_markdown(score_repair_runs([one]))


def test_a_new_repair_run_is_timed_from_its_suites_flush(tmp_path):
    """A fix's "speed kept" compares only with an unbroken speedup timed from the same L2 flush: a new repair run
    takes its suite's flush (the committed suite's is the written one), not the evaluator's default, unless its
    `optimize` table names one; an optimize-track run keeps the default."""
    import json
    import shutil

    from ptxbench.agent.bench.runner import open_run
    from ptxbench.tools.results import DEFAULT_L2_FLUSH

    assert DEFAULT_L2_FLUSH == "read"  # else the first case below proves nothing
    assert open_run(config(), tmp_path / "a", False).optimize["l2_flush"] == "write"  # the fixture: built 2000-01-01
    assert open_run(config(optimize={"l2_flush": "read"}), tmp_path / "b", False).optimize["l2_flush"] == "read"
    suite = tmp_path / "suite"
    shutil.copytree(FIXTURE, suite)
    meta = json.loads((suite / "suite.json").read_text())
    (suite / "suite.json").write_text(json.dumps({**meta, "built": "2026-12-06", "l2_flush": ""}))
    assert open_run(config(suite=str(suite)), tmp_path / "c", False).optimize["l2_flush"] == DEFAULT_L2_FLUSH
    optimize_track = BenchConfig(models=["builtin/reference"], workloads=[WL])
    assert open_run(optimize_track, tmp_path / "d", False).optimize["l2_flush"] == DEFAULT_L2_FLUSH
