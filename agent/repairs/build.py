"""Build the repair suite: evaluate every candidate on the GPU and keep what the GPU rejects.

The unbroken kernel (the workload's reference) is evaluated once per workload, timed, for the speed a
repair must keep (a candidate made from another base, e.g. the GEMM's clustered render, has that base
evaluated too, and its speed; a failing base skips its candidates); each candidate is evaluated untimed with a short watchdog. A candidate enters the suite
only with a failure status (compile, plan, runtime, timeout, wrong values), and with `confirm`, only when each
further evaluation gives that status again; one the GPU accepts, or whose status changes, is listed in `dropped`. Candidates run round-robin over bug classes, so a time limit cuts
repeats of a class before it cuts a class.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import datetime as _dt
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ...tools.evaluator import EvalOptions, Evaluator
from ...tools.figure_text import figure
from ...tools.results import EvalResult
from ..loop.feedback import render_eval
from ..export.bases import REFERENCE, base_source
from ..models.builtin import reference_source
from ..export.normalize import kernel_hash, normalized_kernel
from .candidates import FAILED, Candidate
from .suite import RepairSuite, RepairTask, UnbrokenKernel, Verdict, judged_without_gpu

# The origins whose broken kernel is one edit of a correct kernel (candidates.from_mutations); a fault corpus file or a
# recorded submission was made from none.
MADE_FROM_A_BASE = ("mutation", "repair_mutation")


@dataclass
class BuildReport:
    suite: RepairSuite
    sources: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # candidate id -> the status that kept it out
    skipped: list[str] = field(default_factory=list)  # not evaluated: out of time, or the unbroken kernel failed
    out_of_time: list[str] = field(default_factory=list)  # those of skipped cut by max_seconds: a partial suite
    seconds: float = 0.0


def round_robin(candidates: list[Candidate]) -> list[Candidate]:
    """Interleave bug classes: every class's first candidate, then every class's second, ..."""
    by_class: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_class.setdefault(c.bug_class, []).append(c)
    queues = list(by_class.values())
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def precompile(candidates: list[Candidate], arch: str, workers: int = 16) -> None:
    """Fill the compile cache in parallel (nvcc is the slow part; the GPU evaluations then hit the cache)."""
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.solution.parse import parse_solution
    from ptxbench.workloads.registry import get_workload

    def one(source: str, wid: str) -> None:
        wl = get_workload(wid)
        solution = parse_solution(source, wl, arch)
        if not isinstance(solution, list):
            compile_source(solution.source, solution.language, arch, wl)

    jobs = [(c.source, c.workload) for c in candidates]
    jobs += [(reference_source(w), w) for w in dict.fromkeys(c.workload for c in candidates)]
    jobs += [(base_source(w, b), w) for w, b in dict.fromkeys((c.workload, c.base) for c in candidates) if b != REFERENCE]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda j: one(*j), jobs))


def _gpu(result: EvalResult) -> str:
    return result.fingerprint.gpu if result.fingerprint else ""


def _changed_status(evaluator: Evaluator, c: Candidate, status: str, options: EvalOptions, times: int) -> str:
    """'' when `times` more evaluations (fresh inputs each) give the status again, else what they gave: a bug that
    bites only some of the time (a race) is no task, since a model's change that leaves it in could pass by luck."""
    for _ in range(times):
        again = evaluator.evaluate(c.workload, c.source, options).status
        if again != status:
            return f"FLAKY ({status}, then {again})"
    return ""


def build_suite(candidates: list[Candidate], evaluator: Evaluator, *, timeout_s: float = 3.0, max_seconds: float = 300.0,
                arch: str = DEFAULT_ARCH, on_result: Callable[[Candidate, EvalResult, bool], None] | None = None,
                clock=time.monotonic, confirm: int = 0) -> BuildReport:
    """`confirm`: further evaluations of each rejected candidate, each of which must give its status again for it to
    become a task (bench/build_repair_suite.py --confirm)."""
    t0 = clock()
    today = _dt.date.today().isoformat()
    timed = EvalOptions(arch=arch, profile_on_pass=False, timeout_s=max(timeout_s, 10.0))
    untimed = EvalOptions(arch=arch, profile_on_pass=False, time=False, timeout_s=timeout_s)
    suite = RepairSuite(built=today)
    report = BuildReport(suite=suite)
    for wid in dict.fromkeys(c.workload for c in candidates):
        good = evaluator.evaluate(wid, reference_source(wid), timed)
        suite.unbroken[wid] = UnbrokenKernel(status=good.status, speedup=good.speedup)
        suite.gpu = suite.gpu or _gpu(good)
        if good.timing and not suite.l2_flush:  # what the unbroken speedups were timed from: a fix compares only so
            suite.l2_flush = good.timing.l2_flush
    bases = {(w, b): evaluator.evaluate(w, base_source(w, b), timed)
             for w, b in dict.fromkeys((c.workload, c.base) for c in candidates) if b != REFERENCE}
    base_hashes: dict[tuple[str, str], str] = {}  # (workload, base) -> its kernel_hash: rendered and normalised once

    def base_hash(c: Candidate) -> str:
        key = (c.workload, c.base)
        if key not in base_hashes:
            base_hashes[key] = kernel_hash(reference_source(c.workload) if c.base == REFERENCE
                                           else base_source(c.workload, c.base))
        return base_hashes[key]

    for c in round_robin(candidates):
        base_failed = c.base != REFERENCE and bases[(c.workload, c.base)].status != "PASSED"
        if suite.unbroken[c.workload].status != "PASSED" or base_failed:
            report.skipped.append(c.id)
            continue
        if clock() - t0 > max_seconds:
            report.skipped.append(c.id)
            report.out_of_time.append(c.id)
            continue
        result = evaluator.evaluate(c.workload, c.source, untimed)
        kept = result.status not in FAILED
        if on_result:
            on_result(c, result, kept)
        if not kept:
            report.dropped[c.id] = result.status
            continue
        if flaky := _changed_status(evaluator, c, result.status, untimed, confirm):
            report.dropped[c.id] = flaky
            continue
        suite.gpu = suite.gpu or _gpu(result)
        suite.tasks.append(RepairTask(
            id=c.id, workload=c.workload, bug_class=c.bug_class, description=c.description, origin=c.origin,
            provenance=c.provenance, solution_file=f"solution.{'ptx' if c.language == 'ptx' else 'cu'}",
            unbroken_speedup=(suite.unbroken[c.workload].speedup if c.base == REFERENCE
                              else bases[(c.workload, c.base)].speedup), held_out=c.held_out,
            verdict=Verdict(status=result.status, message=result.message, feedback=render_eval(result, 0, False),
                            gpu=_gpu(result), date=today, evaluations=1 + confirm),
            unbroken_kernel_hash=base_hash(c) if c.origin in MADE_FROM_A_BASE else ""))
        report.sources[c.id] = c.source
    report.seconds = clock() - t0
    return report


def incomplete(report: BuildReport) -> str:
    """Why the suite is not every candidate's verdict ('' when it is): a time limit that cut candidates makes a suite
    that depends on the machine's speed, not the builder's input."""
    if not report.out_of_time:
        return ""
    return (f"{len(report.out_of_time)} candidates were never evaluated (--max-seconds ran out), so this suite is "
            f"not the builder's whole output: raise --max-seconds. Cut: {', '.join(report.out_of_time)}")


def summary_table(report: BuildReport) -> str:
    """Markdown: one row per task, then the counts the issue asks for."""
    s = report.suite
    lines = ["| task | bug class | status | held out |", "| --- | --- | --- | --- |"]
    lines += [f"| {t.id} | {t.bug_class} | {t.verdict.status} | {'yes' if t.held_out else ''} |"
              for t in sorted(s.tasks, key=lambda t: t.id)]
    lines.append("")
    lines += [f"unbroken {w}: {u.status}" + (f" {figure(u.speedup)}x" if u.speedup is not None else "")
              for w, u in s.unbroken.items()]
    lines.append(f"{len(s.tasks)} tasks, {len({t.workload for t in s.tasks})} workloads, "
                 f"{len({t.bug_class for t in s.tasks})} bug classes, {sum(t.held_out for t in s.tasks)} held out; "
                 f"dropped (the GPU accepted them) {len(report.dropped)}: "
                 + ", ".join(f"{k}={v}" for k, v in sorted(report.dropped.items()))
                 + f"; skipped {len(report.skipped)}; {report.seconds:.0f} s on {s.gpu or 'no GPU'}")
    return "\n".join(lines)


@dataclass
class SuiteDrift:
    """How a built suite's broken kernels compare with the candidates the builder makes today (on the CPU)."""
    same: list[str] = field(default_factory=list)  # the builder's text, byte for byte
    comments_only: dict[str, str] = field(default_factory=dict)  # task id -> today's text: the same code
    code_changed: list[str] = field(default_factory=list)  # another kernel today: only a GPU build renews it
    no_candidate: list[str] = field(default_factory=list)  # the builder no longer makes it (e.g. a recorded run)


def suite_drift(suite: RepairSuite, candidates: list[Candidate]) -> SuiteDrift:
    """Each task's broken kernel beside today's candidate of the same id. A text that differs in comments and white
    space only is the same code, so the GPU's verdict stands and the text can be renewed without a GPU
    (suite.replace_solutions); one whose code differs (its reference kernel changed since the build) cannot."""
    today = {c.id: c.source for c in candidates}
    drift = SuiteDrift()
    for task in suite.tasks:
        built = suite.solution_path(task).read_text(encoding="utf-8")
        new = today.get(task.id)
        if new is None:
            drift.no_candidate.append(task.id)
        elif new == built:
            drift.same.append(task.id)
        elif normalized_kernel(new) == normalized_kernel(built):
            drift.comments_only[task.id] = new
        else:
            drift.code_changed.append(task.id)
    return drift


def cpu_verdicts(suite: RepairSuite, texts: dict[str, str], evaluator: Evaluator, arch: str = DEFAULT_ARCH) -> dict[str, Verdict]:
    """The verdicts of renewed texts (task id -> text) that need no GPU (a compile or plan error), given again on the
    CPU: their messages quote line numbers, which a renewed comment moves. Only where the status is the recorded one;
    a verdict a GPU gave is kept as it is (its messages name no source line)."""
    today = _dt.date.today().isoformat()
    out = {}
    for task_id, text in texts.items():
        task = suite.task(task_id)
        if task.verdict.gpu or not judged_without_gpu(task.verdict.status):
            continue
        result = evaluator.evaluate(task.workload, text, EvalOptions(arch=arch, no_gpu=True))
        if result.status == task.verdict.status:
            out[task_id] = Verdict(status=result.status, message=result.message, date=today,
                                   feedback=render_eval(result, 0, False))
    return out

