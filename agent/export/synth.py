"""`synth-repairs`: break correct kernels on purpose, evaluate every variant for real, and record the ones
the evaluator rejects as two-turn trajectories (broken kernel + its true evaluation log -> the correct
kernel), so `ptxbench export --recipe fixit` turns them into Fixit rows like any recorded run. Besides each
workload's reference, `extra_sources` may name further correct kernels of it (bases.py: the GEMM's clustered
render, broken only by the cluster / multicast classes); the pair's fixed kernel is then that base."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...tools.evaluator import EvalOptions, Evaluator
from ...tools.results import EvalResult
from ...tools.solution.language import detect_language
from ..records.events import EvalEvent, Stop, TrajectoryStart, TurnEnd
from ..records.rundir import TrajectoryWriter, sha256_text
from .mutations import MUTATIONS, applicable


@dataclass
class SynthOutcome:
    workload: str
    mutation: str
    expected: tuple[str, ...]
    status: str
    kept: bool
    as_expected: bool
    trajectory: str = ""


@dataclass
class SynthReport:
    outcomes: list[SynthOutcome] = field(default_factory=list)
    reference_status: dict[str, str] = field(default_factory=dict)

    @property
    def kept(self) -> list[SynthOutcome]:
        return [o for o in self.outcomes if o.kept]


def _record(run_dir: Path, tid: str, workload_id: str, held_out: bool, mutation, prompts: tuple[str, str],
            turns: list[tuple[str, EvalResult, str]], base: str = "reference") -> None:
    folder = run_dir / "trajectories" / tid
    if folder.exists():  # made again (synth-repairs into its own run): the new pair replaces the old, never appends to
        shutil.rmtree(folder)  # it (a second start and turns 1, 2 over kernel files the new run had overwritten)
    w = TrajectoryWriter(folder)
    w.append(TrajectoryStart(
        trajectory_id=tid, workload=workload_id, model=f"synthetic/{mutation.name}", prompt="synthetic", mode="pipeline",
        held_out=held_out, config={"synthetic_bug": mutation.name, "description": mutation.description,
                                   "expected": list(mutation.expected), "system_prompt": prompts[0], "task_prompt": prompts[1],
                                   **({"base": base} if base != "reference" else {})},
    ))
    for turn, (source, result, feedback) in enumerate(turns, start=1):
        lang = detect_language(source)
        rel = w.save_kernel(turn, lang, source)
        w.append(EvalEvent(trajectory_id=tid, turn=turn, kernel_file=rel, kernel_sha256=sha256_text(source), language=lang,
                           result=result.model_dump(mode="json"), feedback=feedback))
        w.append(TurnEnd(trajectory_id=tid, turn=turn, status=result.status, speedup=result.speedup))
    w.append(Stop(trajectory_id=tid, turn=len(turns), reason="submitted", detail="synthetic repair pair"))


def synthesize(
    workload_ids: list[str],
    evaluator: Evaluator,
    run_dir: Path,
    *,
    sources: Callable[[str], str],
    prompts: Callable[[str], tuple[str, str]],
    feedback: Callable[[EvalResult, int], str],
    mutations: list[str] | None = None,
    options: EvalOptions | None = None,
    on_outcome: Callable[[SynthOutcome], None] | None = None,
    extra_sources: Callable[[str], list[tuple[str, str, tuple[str, ...] | None]]] | None = None,
) -> SynthReport:
    """For each workload: evaluate its correct kernel once, then every applicable mutation; record rejected ones.

    `sources(workload)` gives the correct kernel, `prompts(workload)` the (system, task) text a model would
    have seen, `feedback(result, turn)` the evaluation log text a model would have read. `extra_sources(workload)`:
    further (name, correct kernel, the bug classes made on it or None for all) of the workload; each is evaluated
    too (its status in reference_status under `workload@name`) and must pass.
    """
    from ...workloads.registry import get_workload

    options = options or EvalOptions()
    report = SynthReport()
    for wid in workload_ids:
        workload = get_workload(wid)
        bases = [("reference", sources(wid), mutations)]
        for name, source, classes in (extra_sources(wid) if extra_sources else []):
            names = [n for n in (mutations or [m.name for m in MUTATIONS]) if classes is None or n in classes]
            if names:
                bases.append((name, source, names))
        for base, good_source, names in bases:
            good = evaluator.evaluate(wid, good_source, options)
            report.reference_status[wid if base == "reference" else f"{wid}@{base}"] = good.status
            if not good.passed and not options.no_gpu:
                continue  # a repair pair needs a kernel that really is correct
            for mutation, broken in applicable(good_source, names):
                result = evaluator.evaluate(wid, broken, options)
                # COMPILED (--no-gpu) only says the variant assembles: the evaluator has not rejected it.
                rejected = result.status not in ("PASSED", "COMPILED", "INFRA_ERROR")
                outcome = SynthOutcome(wid, mutation.name, mutation.expected, result.status, rejected,
                                       result.status in mutation.expected)
                if rejected:
                    outcome.trajectory = f"{wid}__synthetic-{mutation.name}"
                    _record(run_dir, outcome.trajectory, wid, workload.held_out, mutation, prompts(wid),
                            [(broken, result, feedback(result, 1)), (good_source, good, feedback(good, 2))], base)
                report.outcomes.append(outcome)
                if on_outcome:
                    on_outcome(outcome)
    return report
