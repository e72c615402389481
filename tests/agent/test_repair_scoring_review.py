"""The repair track's score as a reader takes it: intervals over tasks (not over trajectories that repeat a task), held
out against in distribution, a headline with each bug class alike beside the task-weighted one, a swapped-in correct
kernel told from a repair, and broken kernels whose comments do not name their fix."""
from __future__ import annotations

import json
import re
import shutil

from repair_fixture import FIXTURE, WL, fake_gpu
from trajectory_builder import TrajectoryBuilder, eval_result

from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.bench.runner import run_bench
from ptxbench.agent.records.events import EvalEvent, TurnEnd
from ptxbench.agent.records.rundir import sha256_text
from ptxbench.agent.scoring import repair_track
from ptxbench.agent.scoring.repair_track import RepairTrajectory, cell, repair_markdown, score_repair_runs


def _rows(tasks: int, fixed: int, per_task: int) -> list[RepairTrajectory]:
    """`tasks` tasks, the first `fixed` fixed in every trajectory, the rest never; `per_task` trajectories each."""
    return [RepairTrajectory(id=f"t{t}-{i}", model="m", task=f"t{t:02d}", bug_class=f"c{t}", fixed=t < fixed,
                             fixed_at_1=t < fixed, turns_to_fix=1 + t % 3 if t < fixed else None)
            for t in range(tasks) for i in range(per_task)]


def test_repeating_a_tasks_trajectories_does_not_narrow_its_interval():
    """57 tasks, each fixed always or never: 12 trajectories a task read 49.1% [45.4, 52.9], 1 a task [36.6, 61.7]. The
    repeats add no information on another task; the interval is drawn over tasks, alike from 1 or 12 a task."""
    once, twelve = cell(_rows(57, 28, 1)), cell(_rows(57, 28, 12))
    for attr in ("fixed_at_1", "fixed_at_k", "fixed_at_k_by_class", "turns_to_fix", "regression_rate"):
        a, b = getattr(once, attr), getattr(twelve, attr)
        assert (a.value, a.ci_low, a.ci_high, a.n) == (b.value, b.ci_low, b.ci_high, b.n), attr
    est = twelve.fixed_at_k
    assert round(est.value, 3) == 0.491 and est.n == 57 and est.ci_method == "bootstrap over tasks"
    assert est.ci_low < 0.40 and est.ci_high > 0.58  # as wide as 57 units give, not 684
    assert twelve.n == 684 and twelve.tasks == 57


def test_too_few_tasks_give_no_bootstrap_interval_however_many_trajectories():
    """MIN_BOOTSTRAP counts tasks: 3 tasks of 12 trajectories each are 3 units (turns to fix: no interval), and a
    share of them takes Wilson's interval over the 3 tasks."""
    from ptxbench.agent.scoring import wilson_interval

    c = cell(_rows(3, 2, 12))
    assert c.turns_to_fix.value is not None and c.turns_to_fix.ci_low is None
    assert (c.fixed_at_k.ci_low, c.fixed_at_k.ci_high) == wilson_interval(2 / 3, 3)
    assert c.fixed_at_k.ci_method == "wilson over tasks"


def test_the_headline_is_given_with_each_bug_class_alike_too():
    """Four tasks of one class (one workload each, as the attention classes are) fixed, one task of another not: each
    task alike reads 80%, each class alike 50%. Both are given, and the page says which is which."""
    rows = [RepairTrajectory(id=f"a{i}", model="m", task=f"w{i}__attn", bug_class="attn", fixed=True, fixed_at_1=True,
                             turns_to_fix=1) for i in range(4)]
    rows.append(RepairTrajectory(id="b", model="m", task="g__gemm", bug_class="gemm"))
    c = cell(rows)
    assert c.fixed_at_k.value == 0.8 and c.fixed_at_k_by_class.value == 0.5 and c.fixed_at_1_by_class.value == 0.5
    page = repair_markdown(repair_track.RepairScore(trajectories=rows, by_model={"m": c}, by_model_bug_class={"m": {}},
                                                    by_model_failure_class={"m": {}}))
    assert "fixed@k, bug classes alike" in page and "each task weighing alike" in page
    assert "| m | 5 | 80.0% [" in page and "| 50.0% [" in page


def test_held_out_and_in_distribution_tasks_are_scored_apart(tmp_path):
    """RepairTrajectory.held_out was recorded but split no score: a model fine-tuned on synth-repairs data is clean only
    on the held-out classes, so its score is given for each side (JSON and page)."""
    run = tmp_path / "run"
    cfg = BenchConfig(models=["builtin/unchanged"], workloads=[], trajectories=1, turns=1, track="repair",
                      suite=str(FIXTURE))
    run_bench(cfg, run, evaluator=fake_gpu())
    score = score_repair_runs([run])
    split = score.by_model_held_out["builtin/unchanged"]
    assert {k: c.n for k, c in split.items()} == {"held_out": 2, "in_distribution": 2}  # misaligned, missing_header
    data = json.loads(score.model_dump_json())
    assert data["by_model_held_out"]["builtin/unchanged"]["held_out"]["tasks"] == 2
    page = repair_markdown(score)
    assert "### builtin/unchanged held out / in distribution" in page
    assert "| held out | 2 |" in page and "| in distribution | 2 |" in page


def _turn(builder: TrajectoryBuilder, turn: int, source: str, status: str) -> TrajectoryBuilder:
    """A turn whose kernel is `source` (TrajectoryBuilder.turn appends a line to the last one)."""
    rel = builder.writer.save_kernel(turn, "cuda", source)
    result = eval_result(builder.workload, status, 1.0 if status == "PASSED" else None, True)
    builder.writer.append(EvalEvent(trajectory_id=builder.tid, turn=turn, kernel_file=rel,
                                    kernel_sha256=sha256_text(source), language="cuda", result=result, feedback=""))
    builder.writer.append(TurnEnd(trajectory_id=builder.tid, turn=turn, status=status, speedup=result["timing"] and 1.0))
    return builder


def _respaced(source: str) -> str:
    """The same code with its comments gone and its spacing changed."""
    return re.sub(r"[ \t]+", "  ", re.sub(r"//[^\n]*", "", source))


def test_the_reference_handed_in_is_a_swap_not_a_repair(tmp_path):
    """A model that hands in the kernel builtin/reference gives for the workload (from memory, or from training
    pairs) passes every task of it without reading the bug, and scored 100% fixed. Up to comments and spacing it is
    'fixed by swap', apart from the repairs; a kernel changed otherwise is a repair. The committed suite records no
    unbroken_kernel_hash: today's reference is compared all the same."""
    from ptxbench.agent.models.builtin import reference_source

    task = "gemm_bf16_m8192_n7168_k5120__off_by_one_k_tiles"
    workload = task.split("__")[0]
    reference = reference_source(workload)
    assert not repair_track._local_tasks()[task].unbroken_kernel_hash  # else this proves nothing of the fallback
    run = tmp_path / "run"
    for tid, text in (("swap", _respaced(reference)), ("repair", reference + "\n__device__ int repaired_here;\n")):
        _turn(TrajectoryBuilder(run, tid, "m/a", workload, config={"repair_task": task, "turns": 1}), 1, text,
              "PASSED").stop()
    score = score_repair_runs([run])
    rows = {r.id: r for r in score.trajectories}
    assert rows["swap"].fixed_by_swap and not rows["swap"].fixed and not rows["swap"].fixed_at_1
    assert rows["swap"].turns_to_fix is None and rows["swap"].judged
    assert rows["repair"].fixed and not rows["repair"].fixed_by_swap
    c = score.by_model["m/a"]
    assert c.fixed_at_k.value == 0.5 and c.fixed_by_swap.value == 0.5 and c.swaps == 1
    assert "fixed by swap" in repair_markdown(score)


def test_the_unbroken_kernel_a_suite_records_is_a_swap(tmp_path, monkeypatch):
    """A task made from another correct kernel than today's reference (a base of another build) records its hash
    (unbroken_kernel_hash): that kernel handed back, comments changed, is a swap too."""
    from ptxbench.agent.export.normalize import kernel_hash
    from ptxbench.agent.repairs.suite import load_suite

    suite = tmp_path / "suite"
    shutil.copytree(FIXTURE, suite)
    tid = f"{WL}__trap"
    unbroken = "// the kernel it was made from\n__global__ void k(float* x) { x[0] = 1.f; }\n"
    meta = json.loads((suite / tid / "task.json").read_text())
    (suite / tid / "task.json").write_text(json.dumps({**meta, "unbroken_kernel_hash": kernel_hash(unbroken)}))
    local = load_suite(suite)
    monkeypatch.setattr(repair_track, "_local_suite", lambda: local)
    monkeypatch.setattr(repair_track, "_local_tasks", lambda: {t.id: t for t in local.tasks})
    run = tmp_path / "run"
    _turn(TrajectoryBuilder(run, "t", "m/a", WL, config={"repair_task": tid, "turns": 2}), 1, _respaced(unbroken),
          "PASSED").stop()
    (row,) = score_repair_runs([run]).trajectories
    assert row.fixed_by_swap and not row.fixed


def test_the_repair_tables_draw_a_repair_tasks_trajectories_together():
    """The score's repair statistics (the report's 'Repair behaviour' and fix-probability tables) bootstrapped
    trajectories one by one: 12 trajectories of each repair task narrowed their intervals as 12 tasks would. A
    repair-track task's trajectories are one unit; outside the track each trajectory still is."""
    from ptxbench.agent.scoring.repair import repair_stats
    from ptxbench.agent.scoring.turns import TrajectoryScore, TurnScore

    def traj(task: int, copy: int) -> TrajectoryScore:
        fixed = task % 2 == 0
        return TrajectoryScore(id=f"{task}-{copy}", model="m", workload="w", repair_task=f"t{task}",
                               stop_reason="turn_limit", turns=[
                                   TurnScore(turn=1, status="COMPILE_ERROR"),
                                   TurnScore(turn=2, status="PASSED" if fixed else "COMPILE_ERROR", correct=fixed)])

    once = repair_stats([traj(t, 0) for t in range(10)])
    twelve = repair_stats([traj(t, c) for t in range(10) for c in range(12)])
    a, b = once.fix_probability["COMPILE_ERROR"], twelve.fix_probability["COMPILE_ERROR"]
    assert (a.value, a.ci_low, a.ci_high, a.n) == (b.value, b.ci_low, b.ci_high, b.n) and b.n == 10
    outside = repair_stats([traj(t, c).model_copy(update={"repair_task": ""}) for t in range(10) for c in range(12)])
    assert outside.fix_probability["COMPILE_ERROR"].n == 120


# --- broken kernels whose comments name their fix -------------------------------------------------------------------

# Comments near an edit that the checks below flag, read and judged not to name the fix (the reason beside each).
NOT_A_HINT = {
    ("bwd_empty_count_mismatch", "one arrival per consumer thread"):
        "the mutation's own comment, as wrong as the count it sits beside (the original named the right count)",
}
# The fix-naming comments found in review, none of which may survive its mutation anywhere in the file.
HINTS = {
    "row_sum_not_reduced": ("reduce over the quad now", "row sums reduced over the quad here"),
    "softmax_max_not_reduced": ("shfl.xor 1, 2",),
    "producer_start_parity": ("passes parity 1 at once",),
    "cluster_empty_count_local": ("every CTA in the cluster",),
    "missing_fence_proxy_async": ("this fence also covers",),
}
_STOP = set("that this with from their them they then than when where which while every each into over only once "
            "have been were what does instead first last same".split())


def _words(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


def _comments_by_line(source: str) -> dict[int, str]:
    """Line number -> the comment text on it (C and C++ comments, not the plan block: its `//` is a division)."""
    from ptxbench.agent.export.normalize import _PLAN, _TOKEN

    out: dict[int, str] = {}
    for m in _TOKEN.finditer(source):
        text = m.group(0)
        if not text.startswith(("//", "/*")) or _PLAN.fullmatch(text):
            continue
        first = source.count("\n", 0, m.start())
        for i, line in enumerate(text.splitlines()):
            out[first + i] = out.get(first + i, "") + " " + line.lstrip("/* ")
    return out


def _identifiers(lines: list[str]) -> set[str]:
    code = " ".join(line.split("//")[0] for line in lines)
    return set(re.findall(r"[A-Za-z_]\w{3,}", code))


def _near_edit_hints(before: str, after: str, description: str) -> list[str]:
    """Comments within 3 lines above an edit, or on its lines, that share 3 or more words with the bug's description or
    speak of code the edit removed (a deleted call's name): the fix written beside the place it goes."""
    import difflib

    old, new = before.splitlines(), after.splitlines()
    comments = _comments_by_line(after)
    flagged = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        gone = _identifiers(old[i1:i2]) - _identifiers(new[j1:j2])
        parts = {p.lower() for g in gone for p in [g, *g.split("_")] if len(p) >= 4}
        for line in range(max(0, j1 - 3), j2 + 1):
            text = comments.get(line, "")
            named = [p for p in parts if re.search(rf"\b{re.escape(p)}", text.lower())]
            if text and (len(_words(text) & _words(description)) >= 3 or named):
                flagged.append(text.strip())
    return flagged


def test_no_broken_kernel_keeps_a_comment_that_names_its_fix():
    """row_sum_not_reduced deleted the quad reduction and kept the comment above it, 'the row sums were kept per
    thread: reduce over the quad now': the task handed the model its fix. Every mutation, on every base the suite
    builder uses, is checked for comments beside its edit that describe the bug or name the code it removed, and
    for the hints found in review anywhere in the file."""
    from ptxbench.agent.export.bases import REFERENCE, base_source
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.agent.repairs.candidates import from_mutations

    found = []
    for c in from_mutations():
        good = reference_source(c.workload) if c.base == REFERENCE else base_source(c.workload, c.base)
        for text in _near_edit_hints(good, c.source, c.description):
            if not any(cls == c.bug_class and phrase in text for cls, phrase in NOT_A_HINT):
                found.append(f"{c.id} ({c.base}): {text}")
        found += [f"{c.id} ({c.base}): {p}" for p in HINTS.get(c.bug_class, ()) if p in c.source]
    assert not found, "\n".join(sorted(set(found)))
