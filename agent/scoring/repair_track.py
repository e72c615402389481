"""Scores of the repair track (bench --track repair), read from runs/ only.

A repair trajectory starts from a suite task's broken kernel (turn 0, `TrajectoryScore.start`) and has k
model turns. Per trajectory:
- fixed@1: turn 1 PASSED; fixed@k: some turn PASSED (a PASSED turn that hands back the broken kernel, byte for
  byte or with only comments and spacing changed (export/normalize.py), is no fix: its bug is still there, whatever
  one run said);
- fixed by swap: a PASSED turn whose kernel is, up to comments and spacing (export/normalize.kernel_hash), the correct
  kernel the task was made from (the suite's `unbroken_kernel_hash`) or the kernel builtin/reference hands in for the
  workload today (where the suite records no hash, that comparison alone): the model swapped in a known correct kernel
  (from memory, or from training pairs) and repaired nothing. Counted apart, never as fixed@1 / fixed@k, turns to fix,
  speed kept or regression, which are over repairs only (a trajectory that both swapped and repaired is a repair);
- turns to fix: the first PASSED turn (over fixed trajectories);
- fixed with the speed kept: some turn PASSED, its target instructions executed (or not measured), and its
  speedup >= SPEED_KEPT x the unbroken kernel's speedup recorded in the task (a slow swap is no repair); unknown
  (None) for a fixed trajectory with no speed to compare (the task records no unbroken speedup, or the fix was not
  timed; a recorded unbroken speedup that is NaN, infinite or not positive is none; or the fix was timed on another
  GPU, or from another L2 flush, than the suite's unbroken speedups: a speedup is a ratio to the library on one GPU
  from one flush, and the two flushes' do not compare), left out of that share and counted apart (`speed_unknown`,
  each trajectory's `speed_unknown_why`, said on the page), never read as a slow fix;
- regression: a PASSED turn that is a fix (not the broken kernel handed back) followed by a failing one (the fix
  broke again);
- not judged: no turn PASSED, and a turn compiled a changed kernel without a GPU (COMPILED, --no-gpu): fixed or
  not is unknown, so the trajectory is left out of every rate above (counted apart, never as not fixed). The
  broken kernel handed back (as above) is judged (not fixed) even then.
Only the model's turns within the recorded budget (`turns`) count, and a trajectory whose workload is not its task's,
or whose turn 0 is not the broken kernel the suite records (`solution_sha256`), is left out and counted apart with the
infra-failed ones (`RepairScore.left_out`), neither for nor against its model; the page says how many of the local
suite's tasks each model ran.
Each is a share of (turns to fix: a mean over) the judged trajectories, each task weighing alike (a mean over tasks,
as a model's row of the score is over workloads: a task that lost trajectories to infra, or ran more of them, tilted
it); fixed@1 and fixed@k are also given with each bug class weighing alike (`*_by_class`: the attention forward's
classes, one task on each of four near-identical workloads, are most of the suite's tasks, so the task-weighted
headline is mostly theirs). Every 95% interval is clustered by task (task_clusters.py: a bootstrap that draws tasks,
all of a task's trajectories with it, Wilson's over the tasks where it has no width): the trajectories of one task
share its broken kernel, and 12 of them are no 12 independent tasks. Overall, per model (and turn budget, where the
trajectories ran under several: fixed@k of two k never pool), held out against in distribution (`by_model_held_out`:
a model trained on synth-repairs or Fixit data has seen the other classes' bugs, so only its held-out figures are
clean), by bug class, by failure class (the broken kernel's status at turn 0; where turn 0 was not run on a GPU
(COMPILED), the verdict the suite recorded for it) and by prompt (shown where a model ran several: an ablation's arms
apart, where the model's row pools them as the leaderboard does).

A task's record (bug class, unbroken speedup, held out) comes from this machine's suite, looked up by the recorded
`repair_task` id, so a run scores the same wherever it is scored. Only for an id the local suite lacks is the
task.json read beside the recorded `start_from` (a path on the machine that ran it), and only where that is a task
folder of a repairs suite (a suite.json above it).
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from ..records.rundir import DamagedRecord, path_inside, run_name, validation_line
from ..repairs.suite import RepairSuite, RepairTask, SuiteMissing, load_suite
from ..report.tables import md_cell
from .run_score import SCORE_VERSION, budget_order, unique_records
from .stats import MIN_BOOTSTRAP, Estimate
from .task_clusters import class_weights, task_estimate
from .turns import COMPILED, TrajectoryScore, TurnScore, measured_figure, score_trajectory

SPEED_KEPT = 0.95


class RepairTrajectory(BaseModel):
    id: str
    model: str
    task: str
    bug_class: str = ""
    failure_class: str = Field("", description="the broken kernel's status (turn 0, else the suite's record)")
    held_out: bool = False
    unbroken_speedup: float | None = None
    fixed_at_1: bool = Field(False, description="turn 1 PASSED with a repair (not a swap)")
    fixed: bool = Field(False, description="some turn PASSED with a repair: a changed kernel that is neither the broken "
                        "one again nor a swap")
    fixed_by_swap: bool = Field(False, description="not fixed, but some turn PASSED with a swap: the task's unbroken "
                                "kernel, or builtin/reference's kernel for the workload, up to comments and spacing")
    turns_to_fix: int | None = None
    speed_kept: bool | None = Field(False, description="None: fixed, but no speed to compare (no unbroken speedup "
                                    "recorded, or the fix untimed)")
    regression: bool = False
    judged: bool = Field(True, description="False: compiled without a GPU and never PASSED, fixed or not unknown")
    speed_unknown_why: str = Field("", description="why speed_kept is None: no unbroken speedup recorded, the fix not "
                                   "timed, or timed on another GPU or from another L2 flush than the suite's unbroken one")
    prompt: str = Field("", description="the prompt variant it ran under")
    turn_budget: int | None = Field(None, description="the turns it was given (its config's 'turns'; None: not "
                                    "recorded): the k of fixed@k")


class RepairCell(BaseModel):
    n: int = 0
    not_judged: int = Field(0, description="trajectories of the n whose fix cannot be judged (compiled without a GPU)")
    fixed_at_1: Estimate = Field(Estimate(), description="share fixed at turn 1, each task weighing alike")
    fixed_at_k: Estimate = Field(Estimate(), description="share fixed within the turn budget, each task weighing alike "
                                 "(the headline)")
    fixed_at_1_by_class: Estimate = Field(Estimate(), description="fixed_at_1 with each bug class weighing alike")
    fixed_at_k_by_class: Estimate = Field(Estimate(), description="fixed_at_k with each bug class weighing alike")
    fixed_by_swap: Estimate = Field(Estimate(), description="share passed only by a swapped-in known correct kernel "
                                    "(RepairTrajectory.fixed_by_swap): no repair, in no other figure")
    swaps: int = Field(0, description="judged trajectories fixed by swap")
    tasks: int = Field(0, description="distinct tasks of the n: the unit every interval is drawn over")
    turns_to_fix: Estimate = Estimate()
    speed_kept: Estimate = Field(Estimate(), description="over the judged trajectories whose speed is known")
    speed_unknown: int = Field(0, description="judged trajectories fixed with no speed to compare, left out of speed_kept")
    regression_rate: Estimate = Estimate()


class RepairScore(BaseModel):
    score_version: int = Field(SCORE_VERSION, description="run_score.SCORE_VERSION: what its figures mean")
    trajectories: list[RepairTrajectory] = Field(default_factory=list)
    by_model: dict[str, RepairCell] = Field(default_factory=dict, description="model -> its cell; where the trajectories "
                                            "ran under several turn budgets, one per model and budget, named "
                                            "'<model> (<k> turns)' (row_name): fixed@k of two k never pool")
    by_model_held_out: dict[str, dict[str, RepairCell]] = Field(default_factory=dict, description="model -> "
                                                          "'held_out' / 'in_distribution' -> its cell: a task of a "
                                                          "bug class the exports never train on, or not")
    by_model_bug_class: dict[str, dict[str, RepairCell]] = Field(default_factory=dict)
    by_model_failure_class: dict[str, dict[str, RepairCell]] = Field(default_factory=dict)
    by_model_prompt: dict[str, dict[str, RepairCell]] = Field(default_factory=dict, description="model -> prompt "
                                                        "variant -> its cell: a prompt ablation's arms apart (the "
                                                        "model's row pools them, as the leaderboard does)")
    left_out: dict[str, int] = Field(default_factory=dict, description="why -> trajectories left out of every rate "
                                     "(an infra failure no retry repaired, a record of another task), neither for "
                                     "nor against their model")
    suite_tasks: int = Field(0, description="tasks in this machine's suite (0: none built here)")
    tasks_by_model: dict[str, int] = Field(default_factory=dict, description="model (as by_model names it) -> distinct "
                                           "tasks its scored trajectories ran (of suite_tasks)")


@lru_cache(maxsize=1)
def _local_suite() -> RepairSuite | None:
    """This machine's repair suite (workloads/repairs); None where it is not built."""
    try:
        return load_suite()
    except SuiteMissing:
        return None


@lru_cache(maxsize=1)
def _local_tasks() -> dict[str, RepairTask]:
    """The tasks of this machine's repair suite by id."""
    suite = _local_suite()
    return {task.id: task for task in suite.tasks} if suite is not None else {}


def _recorded_task(task_id: str, start_from: str) -> RepairTask | None:
    """The task.json of a suite folder the recorded start_from points into (<suite>/<task id>/<solution>), read only
    when it is a regular file of that task's folder in a repairs suite; None otherwise."""
    task_dir = Path(start_from).parent
    suite = task_dir.parent
    path = path_inside(suite, f"{task_id}/task.json") if start_from else None
    if path is None or path.parent != task_dir.resolve() or not path.is_file() or not (suite / "suite.json").is_file():
        return None
    try:
        return RepairTask.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise DamagedRecord(path, validation_line(exc)) from None


def _suite_solution(config: dict) -> str | None:
    """The broken kernel's text in this machine's suite (None when it has no such task)."""
    suite = _local_suite()
    task = _local_tasks().get(config["repair_task"])
    if suite is None or task is None:
        return None
    try:
        return suite.solution_path(task).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _recorded_suite_timing(start_from: str) -> dict:
    """The GPU and L2 flush of the suite folder a recorded start_from points into ({} when unreadable): only its
    suite.json's own fields, read as load_suite reads them."""
    index = Path(start_from).parent.parent / "suite.json"
    try:
        meta = json.loads(index.read_text(encoding="utf-8"))
        suite = RepairSuite.model_validate({k: meta[k] for k in ("built", "gpu", "l2_flush") if k in meta})
    except (OSError, ValueError, TypeError, RecursionError, AttributeError):  # not there, not JSON, not an object
        return {}
    return {"suite_gpu": suite.gpu, "suite_l2_flush": suite.l2_flush}


def task_record(config: dict) -> dict:
    """The suite's record of a repair trajectory's task, as a dict ({} when neither the local suite nor the recorded
    path has it), with where its suite timed the unbroken speedups (suite_gpu, suite_l2_flush: '' when unknown)."""
    task_id = config["repair_task"]
    if (task := _local_tasks().get(task_id)) is not None:
        suite = _local_suite()
        return {**task.model_dump(mode="json"), "suite_gpu": suite.gpu, "suite_l2_flush": suite.l2_flush}
    start_from = config.get("start_from") or ""
    task = _recorded_task(task_id, start_from)
    return {**task.model_dump(mode="json"), **_recorded_suite_timing(start_from)} if task else {}


def _speed_unknown_why(fix: TurnScore, unbroken: float | None, gpu: str, task: dict) -> str:
    """Why a fix's speed does not compare with the unbroken kernel's ('' when it does): a speedup is a ratio to the
    library on one GPU from one L2 flush, and the two flushes' speedups do not compare (docs/timing-integrity.md)."""
    if unbroken is None:
        return "no unbroken speedup recorded for the task"
    if fix.speedup is None:
        return "the fix not timed"
    if task.get("suite_gpu") and gpu and gpu != task["suite_gpu"]:
        return f"timed on another GPU than the suite's unbroken speedups ({task['suite_gpu']})"
    if task.get("suite_l2_flush") and fix.l2_flush and fix.l2_flush != task["suite_l2_flush"]:
        return (f"timed from the {fix.l2_flush} L2 flush, the suite's unbroken speedups from the {task['suite_l2_flush']} "
                "one (rebuild the suite, or run with that l2_flush)")
    return ""


def left_out_reason(score: TrajectoryScore, config: dict, task: dict) -> str:
    """Why a repair trajectory is no evidence on its task ("" when it is): left out of every rate and counted apart,
    neither for nor against the model. A record whose workload is not the task's, or whose turn 0 is not the broken
    kernel the suite records (solution_sha256: a suite edited after the run, or before it), ran some other task."""
    if task.get("workload") and score.workload != task["workload"]:
        return "another workload than its task's"
    recorded = task.get("solution_sha256")
    if recorded and score.start and score.start.kernel_sha256 and score.start.kernel_sha256 != recorded:
        return "started from another kernel than the suite's"
    return ""


def turn_kernels(record, score: TrajectoryScore) -> dict[int, str]:
    """turn -> the text of each scored turn's kernel file (those with one to read), read once for every check below."""
    return {t.turn: text for t in score.scored_turns if t.kernel_file and (text := record.kernel(t.kernel_file)) is not None}


def resubmitted_turns(record, score: TrajectoryScore, task_solution: str | None = None,
                      kernels: dict[int, str] | None = None) -> frozenset[int]:
    """The model's turns whose kernel is the broken one again up to comments and white space between tokens (the
    export's normalisation, export/normalize.py): a comment changed is no repair, even when a race lets it pass once.
    The broken kernel is turn 0's file, else the suite's solution text. `kernels`: turn_kernels, if already read."""
    from ..export.normalize import normalized_kernel

    broken = [text for text in ((record.kernel(score.start.kernel_file) if score.start and score.start.kernel_file
                                 else None), task_solution) if text]
    if not broken:
        return frozenset()
    forms = {normalized_kernel(text) for text in broken}
    kernels = turn_kernels(record, score) if kernels is None else kernels
    return frozenset(turn for turn, text in kernels.items() if normalized_kernel(text) in forms)


@lru_cache(maxsize=None)
def reference_kernel_hash(workload: str) -> str:
    """export/normalize.kernel_hash of the kernel builtin/reference hands in for the workload today ('' when it has
    none): a swap even where the suite records no unbroken_kernel_hash (a suite built before the field)."""
    from ..export.normalize import kernel_hash
    from ..models.base import ModelError
    from ..models.builtin import reference_source

    try:
        return kernel_hash(reference_source(workload))
    except (ModelError, KeyError, ValueError, OSError):  # a workload unknown here, or with no reference
        return ""


def swap_hashes(task: dict, workload: str) -> frozenset[str]:
    """The kernel hashes whose PASSED is a swap, not a repair: the task's unbroken kernel and today's reference."""
    return frozenset(h for h in (task.get("unbroken_kernel_hash") or "", reference_kernel_hash(workload)) if h)


def swapped_turns(record, score: TrajectoryScore, hashes: frozenset[str],
                  kernels: dict[int, str] | None = None) -> frozenset[int]:
    """The model's turns whose kernel is one of `hashes` up to comments and spacing (swap_hashes). `kernels`:
    turn_kernels, if already read."""
    from ..export.normalize import kernel_hash

    if not hashes:
        return frozenset()
    kernels = turn_kernels(record, score) if kernels is None else kernels
    return frozenset(turn for turn, text in kernels.items() if kernel_hash(text) in hashes)


def repair_trajectory(score: TrajectoryScore, config: dict, task: dict | None = None,
                      resubmitted: frozenset[int] = frozenset(), swapped: frozenset[int] = frozenset()) -> RepairTrajectory:
    """`resubmitted`: turns whose kernel is the broken one with only comments or spacing changed (resubmitted_turns);
    `swapped`: turns whose kernel is a known correct one (swapped_turns): no repair, counted as fixed_by_swap."""
    task = task_record(config) if task is None else task
    # as a turn's speedup (turns.measured_figure): a NaN, infinite or not positive record is unmeasured, not a bar no fix
    # (or every fix) clears
    recorded_speed = task.get("unbroken_speedup")
    unbroken = measured_figure(float(recorded_speed)) if isinstance(recorded_speed, (int, float)) else None
    # the model's turns within the budget the trajectory was given (turn 0 is not the model's): a turn past it (a
    # resume that raised --turns) is no repair within the track's budget
    budget = config.get("turns")
    turns = [t for t in score.scored_turns if not isinstance(budget, int) or t.turn <= budget]
    # the broken kernel handed back byte for byte is no repair, even when it passes this time (a race the suite
    # caught failing once): fixed only by a kernel the model changed. Known from turn 0, else from the suite's record
    # (a run folder missing its turn 0 credited the broken kernel handed back)
    broken = {sha for sha in ((score.start.kernel_sha256 if score.start else ""), task.get("solution_sha256") or "") if sha}
    changed = [t for t in turns if t.correct and t.kernel_sha256 not in broken and t.turn not in resubmitted]
    # a known correct kernel handed in (the unbroken one, the reference) passes every task of its workload without
    # reading the bug: a swap, apart from the repairs
    passed = [t for t in changed if t.turn not in swapped]
    target_fixes = [t for t in passed if t.target_executed is not False]
    why = {t.turn: _speed_unknown_why(t, unbroken, score.gpu, task) for t in target_fixes}
    kept = [t for t in target_fixes if not why[t.turn] and t.speedup >= SPEED_KEPT * unbroken]
    # a fix with no speed to compare (no unbroken speedup in the task, the fix not timed, or timed on another GPU or
    # from another L2 flush than the unbroken kernel): unknown, not a slow fix
    unknown_why = "" if kept else next((w for w in why.values() if w), "")
    first = passed[0].turn if passed else None
    # a fix that broke again: the broken kernel handed back and passing (no fix, above) cannot regress
    fixed_turns = {t.turn for t in passed}
    regression = any(a.turn in fixed_turns and b.failed for a, b in zip(turns, turns[1:]))
    # a kernel compiled and never run (--no-gpu) may be the fix: unknown, unless it is the broken kernel again
    # (a swap compiled and never run too: whether it passes, a swap or a failure, is unknown)
    unverified = any(t.compile_only and t.kernel_sha256 not in broken and t.turn not in resubmitted for t in turns)
    recorded = (task.get("verdict") or {}).get("status", "")
    failure = score.start.status if score.start else recorded
    if failure in ("", COMPILED):  # turn 0 not run on a GPU: the broken kernel's class is what the suite recorded
        failure = recorded or "unknown"
    return RepairTrajectory(id=score.id, model=score.model, task=config["repair_task"], turn_budget=score.turn_budget,
                            prompt=score.prompt, bug_class=task.get("bug_class", ""),
                            failure_class=failure, held_out=bool(task.get("held_out")), unbroken_speedup=unbroken,
                            fixed_at_1=first == 1, fixed=bool(passed), fixed_by_swap=bool(changed) and not passed,
                            turns_to_fix=first, speed_kept=None if unknown_why else bool(kept), regression=regression,
                            speed_unknown_why=unknown_why,
                            judged=bool(changed) or not unverified)


def cell(rows: list[RepairTrajectory]) -> RepairCell:
    """The rates of a group of trajectories, each task weighing alike (pooled, a task whose trajectories failed infra
    or were left out, or that ran more of them, tilted the rate towards the other tasks), and fixed@1 / fixed@k with
    each bug class weighing alike too; every interval drawn over tasks (task_clusters.py)."""
    judged = [r for r in rows if r.judged]
    fixed = [r for r in judged if r.fixed]
    speed_known = [r for r in judged if r.speed_kept is not None]
    by_class = class_weights(judged)
    return RepairCell(n=len(rows), not_judged=len(rows) - len(judged), speed_unknown=len(judged) - len(speed_known),
                      tasks=len({r.task for r in rows}), swaps=sum(r.fixed_by_swap for r in judged),
                      fixed_at_1=task_estimate(judged, lambda r: r.fixed_at_1),
                      fixed_at_k=task_estimate(judged, lambda r: r.fixed),
                      fixed_at_1_by_class=task_estimate(judged, lambda r: r.fixed_at_1, task_weight=by_class),
                      fixed_at_k_by_class=task_estimate(judged, lambda r: r.fixed, task_weight=by_class),
                      fixed_by_swap=task_estimate(judged, lambda r: r.fixed_by_swap),
                      turns_to_fix=task_estimate(fixed, lambda r: r.turns_to_fix, share=False),
                      speed_kept=task_estimate(speed_known, lambda r: r.speed_kept),
                      regression_rate=task_estimate(judged, lambda r: r.regression))


def _grouped(rows: list[RepairTrajectory], key) -> dict[str, RepairCell]:
    groups: dict[str, list[RepairTrajectory]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return {k: cell(v) for k, v in sorted(groups.items())}


def held_out_split(row: RepairTrajectory) -> str:
    """'held_out' for a task whose bug class no export trains on (suite.HELD_OUT_CLASSES, or its suite's mark), else
    'in_distribution': a model fine-tuned on synth-repairs or Fixit data has seen those classes' bugs."""
    return "held_out" if row.held_out else "in_distribution"


def row_name(row: RepairTrajectory, split: bool) -> str:
    """The name of a row's model on the page and in by_model: with its turn budget where the rows ran under several
    (fixed@k over 1 turn and over 4 are different measures, as a score's cells of two budgets are)."""
    if not split:
        return row.model
    if not row.turn_budget:
        return f"{row.model} (turns unrecorded)"
    return f"{row.model} ({row.turn_budget} turn{'s' * (row.turn_budget != 1)})"


def score_repair_runs(run_dirs: list[Path]) -> RepairScore:
    """Every repair-track trajectory of the runs (others are ignored); infra-failed ones are left out."""
    rows = []
    left_out: dict[str, int] = defaultdict(int)
    for run, record in unique_records(run_dirs):  # a run and its copy: DuplicateTrajectory, as for `score`
        config = record.start.config or {}
        if not config.get("repair_task"):
            continue
        score = score_trajectory(record, run_name(run))
        if score.infra_failed:
            left_out["an infra failure no retry repaired"] += 1
            continue
        if score.unfinished:  # killed or cut mid-run (resumable): its missing turns are no failures of the model
            left_out["unfinished (no stop recorded; resume the run)"] += 1
            continue
        task = task_record(config)
        if why := left_out_reason(score, config, task):
            left_out[why] += 1
            continue
        kernels = turn_kernels(record, score)  # each turn's file read once, for both checks
        again = resubmitted_turns(record, score, _suite_solution(config), kernels)
        swaps = swapped_turns(record, score, swap_hashes(task, score.workload), kernels)
        rows.append((run_name(run), record.id, record.start.ts, repair_trajectory(score, config, task, again, swaps)))
    # in (run, id, start) order (the intervals draw tasks in name order, whatever this order)
    rows = [row for *_, row in sorted(rows, key=lambda r: r[:3])]
    split = len({r.turn_budget for r in rows}) > 1

    def name(r: RepairTrajectory) -> str:
        return row_name(r, split)
    # rows in (model, turn budget) order, the budget as a number (a name sorts "16 turns" before "4 turns")
    order = sorted({(r.model, budget_order(r.turn_budget), name(r)) for r in rows})
    out = RepairScore(trajectories=rows, by_model={n: cell([r for r in rows if name(r) == n]) for *_, n in order},
                      left_out=dict(sorted(left_out.items())), suite_tasks=len(_local_tasks()),
                      tasks_by_model={n: len({r.task for r in rows if name(r) == n}) for *_, n in order})
    for model in out.by_model:
        mine = [r for r in rows if name(r) == model]
        out.by_model_held_out[model] = _grouped(mine, held_out_split)
        out.by_model_bug_class[model] = _grouped(mine, lambda r: r.bug_class)
        out.by_model_failure_class[model] = _grouped(mine, lambda r: r.failure_class)
        out.by_model_prompt[model] = _grouped(mine, lambda r: r.prompt)
    return out


def repair_markdown(score: RepairScore) -> str:
    """The repair page: per model, held out against in distribution, then by bug class and failure class, and by prompt
    where there are several (95% intervals over the judged trajectories, drawn over tasks; those compiled without a
    GPU and never passed are counted apart, as not judged)."""
    head = ("| {} | n | fixed@1 | fixed@k | fixed@k, bug classes alike | fixed by swap | fixed, speed kept | turns to fix "
            "| regressions | not judged | tasks |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def row(name: str, c: RepairCell) -> str:  # names come from the records: md_cell
        return (f"| {md_cell(name)} | {c.n} | {c.fixed_at_1.fmt(1, pct=True)} | {c.fixed_at_k.fmt(1, pct=True)} | "
                f"{c.fixed_at_k_by_class.fmt(1, pct=True)} | {c.fixed_by_swap.fmt(1, pct=True)} | "
                f"{c.speed_kept.fmt(1, pct=True)} | {c.turns_to_fix.fmt(2)} | {c.regression_rate.fmt(1, pct=True)} | "
                f"{c.not_judged} | {c.tasks} |")

    tasks = {r.task for r in score.trajectories}
    classes = {r.bug_class for r in score.trajectories}
    parts = ["## Repair track",
             f"fixed@1, fixed@k (the headline): shares of the judged trajectories fixed by a repair, each task weighing "
             f"alike ({len(tasks)} task{'s' * (len(tasks) != 1)} of {len(classes)} bug class"
             f"{'es' * (len(classes) != 1)} here: a class made on several workloads weighs once per workload); "
             "fixed@k, bug classes alike: the same share with each bug class weighing alike (its tasks alike within it)",
             "95% intervals are drawn over tasks: a bootstrap that resamples tasks, all of a task's trajectories with "
             "it (they share its broken kernel, so repeats of one task are no independent evidence), Wilson's interval "
             f"over the tasks where it has no width; none for turns to fix from fewer than {MIN_BOOTSTRAP} tasks",
             "fixed by swap: passed only by handing in a known correct kernel (up to comments and spacing, the kernel "
             "the task was made from, or the one builtin/reference hands in for the workload): no repair, so in no "
             "other column",
             f"fixed with the speed kept: PASSED, targets executed when measured, >= {SPEED_KEPT}x "
             "the unbroken kernel's speedup"]
    if len({r.turn_budget for r in score.trajectories}) > 1:
        parts.append("rows are split by turn budget (the k of fixed@k, --turns): fixed within 1 turn and within 4 are "
                     "different measures, never pooled")
    unjudged = sum(not r.judged for r in score.trajectories)
    if unjudged:
        parts.append(f"not judged: {unjudged} of {len(score.trajectories)} trajectories compiled a changed kernel without "
                     "a GPU (COMPILED) and never passed: fixed or not is unknown, so they are left out of every rate")
    if unknown := sum(r.judged and r.speed_kept is None for r in score.trajectories):
        whys = Counter(r.speed_unknown_why or "no speed to compare" for r in score.trajectories
                       if r.judged and r.speed_kept is None)
        parts.append(f"speed unknown: {unknown} fixed trajector{'y' if unknown == 1 else 'ies'} had no speed to compare "
                     "(" + "; ".join(f"{n}: {md_cell(why)}" for why, n in whys.most_common())
                     + "): left out of 'fixed, speed kept'")
    if score.left_out:
        parts.append("left out of every rate (neither for nor against the model): " + ", ".join(
            f"{n} trajector{'y' if n == 1 else 'ies'}: {why}" for why, n in score.left_out.items()))
    if score.suite_tasks:
        parts.append(f"tasks run, of the {score.suite_tasks} in this machine's suite: " + ", ".join(
            f"{md_cell(m)} {n}" for m, n in score.tasks_by_model.items()))
    split = len({r.turn_budget for r in score.trajectories}) > 1
    ran = {name: {r.task for r in score.trajectories if row_name(r, split) == name} for name in score.by_model}
    if len({frozenset(tasks) for tasks in ran.values()}) > 1:  # a model on the easy tasks only reads better
        common = set.intersection(*ran.values())
        parts.append(f"the rows ran different tasks ({len(common)} in common): their rates are over different tasks, "
                     "so compare them by bug class and failure class, or over a run of the same tasks")
    parts += ["", head.format("model"), *[row(m, c) for m, c in score.by_model.items()]]
    for model in score.by_model:
        split = score.by_model_held_out.get(model, {})
        parts += ["", f"### {md_cell(model)} held out / in distribution", "",
                  "held out: tasks of a bug class no export trains on (synth-repairs and Fixit rows of it go to the "
                  "held-out split); a model fine-tuned on that data has seen the in-distribution classes' bugs, so its "
                  "held-out rows alone are clean", "", head.format("split"),
                  *[row(k.replace("_", " "), split[k]) for k in ("held_out", "in_distribution") if k in split]]
        parts += ["", f"### {md_cell(model)} by bug class", "", head.format("bug class"),
                  *[row(k, c) for k, c in score.by_model_bug_class[model].items()],
                  "", f"### {md_cell(model)} by failure class", "", head.format("failure class"),
                  *[row(k, c) for k, c in score.by_model_failure_class[model].items()]]
        if len(prompts := score.by_model_prompt.get(model, {})) > 1:  # a prompt ablation: its arms side by side
            parts += ["", f"### {md_cell(model)} by prompt", "", head.format("prompt"),
                      *[row(k, c) for k, c in prompts.items()]]
    return "\n".join(parts) + "\n"
