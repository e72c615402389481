"""`ptxbench score RUN...`: scores from run folders alone (several runs merge), as tables or JSON.

    ptxbench score runs/bench-h200                     # leaderboard, fast_p, success, repair tables
    ptxbench score runs/a runs/b --json > score.json   # merged cells, every estimate with its 95% CI
    ptxbench score runs/bench-h200 --re-evaluate       # run the recorded kernels again on this GPU, then score
    ptxbench score runs/bench-h200 --re-evaluate --out-run runs/re --resume   # after a stop: the rest of it
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .application import app, reads_runs


def exclusion_lines(runs: list[Path]) -> list[str]:
    """Why trajectories were left out of trajectory-level scores: one line per reason, with its count (a
    trajectory is left out when it ended on an infra failure no retry repaired; the reason is its last
    infra error's first line)."""
    from collections import Counter

    from ..scoring.run_score import unique_records
    from ..scoring.turns import score_trajectory

    reasons: Counter[str] = Counter()
    # the trajectories the score counts (unique_records): a log with no readable start is said apart, as unscored,
    # and its infra stop counted here too had this line and the last one disagree on how many were infra-failed
    for _, record in unique_records(runs):
        if score_trajectory(record).infra_failed:
            errors = [e for e in record.events if e.type == "error" and e.infra]
            first = (errors[-1].message.strip().splitlines() or [""])[0] if errors else ""
            reasons[(first[:160] or "stopped on an infra error with no message")] += 1
    if not reasons:
        return []
    total = sum(reasons.values())
    return [f"excluded: {total} trajector{'y' if total == 1 else 'ies'} ended on an infra failure no retry repaired:",
            *(f"  {n} x {reason}" for reason, n in reasons.most_common())]


@app.command()
@reads_runs
def score(
    runs: list[Path] = typer.Argument(..., help="run folders (each with trajectories/)"),
    json_out: bool = typer.Option(False, "--json", help="print the full RunScore as JSON"),
    re_evaluate: bool = typer.Option(False, "--re-evaluate", help="evaluate the recorded kernels again (no model calls) into a new run, and score that"),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="with --re-evaluate: compile + SASS only"),
    out_run: Optional[str] = typer.Option(None, help="with --re-evaluate: the new run folder (default <runs root>/<run name>-reeval-<time>; the root is "
                                           "$PTXBENCH_RUNS or runs/)"),
    resume: bool = typer.Option(False, "--resume", help="with --re-evaluate --out-run: go on with the re-evaluation stopped "
                                "part way in that folder (finished trajectories kept)"),
) -> None:
    """Score recorded runs: per turn, trajectory, model x workload cell, and repair behaviour."""
    from . import inputs
    from .terminal import terminal_text
    from ptxbench.tools.redact import mask_strings, scrub_text
    from ..records.rundir import distinct_runs
    from ..report.tables import all_tables
    from ..scoring import DuplicateTrajectory, score_runs
    from ..bench.reevaluate import ReevaluationRefused, reevaluate_run, unfinished as not_reevaluated

    for run in runs:
        inputs.run_folder(run)
    runs = distinct_runs(runs)  # a run named twice (or by two paths) is scored once
    if re_evaluate:
        if out_run is not None:  # taken as text: typer's Path made an empty one '.', which exists
            out_run = inputs.new_folder(out_run, "--out-run")
        if len(runs) > 1 and out_run is not None:
            raise inputs.BadInput("--out-run takes one run: re-evaluate several runs without it")
        if resume and out_run is None:
            raise inputs.BadInput("--resume goes on with the re-evaluation in --out-run: name its folder")
        if out_run is not None and out_run.exists() and not resume:
            hint = " (a re-evaluation stopped part way: add --resume)" if not_reevaluated(out_run) else ""
            raise inputs.BadInput(f"--out-run {out_run} exists: name a new folder{hint}")
        if out_run is not None and not resume:  # as a new run's --run-dir: a run among another run's records (its trajectories/ got a
            inputs.no_other_files(out_run, "--out-run")  # trajectory folder holding a whole run) or a report's pages
        from . import preflight

        import time

        from ..records.rundir import run_name, runs_root

        # the new runs: --out-run, else under the runs root as every run (beside its source they went into the
        # repository's docs/examples/ for the shipped example, and nowhere for a run on a read-only mount)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        names = [f"{run_name(run)}-reeval-{stamp}" for run in runs]  # `score . --re-evaluate` too
        names = [f"{n}-{names[:i].count(n) + 1}" if n in names[:i] else n for i, n in enumerate(names)]  # a/r, b/r
        targets = [out_run] if out_run is not None else [runs_root() / name for name in names]
        for target in targets:
            preflight.writable(target, "" if out_run is not None else "name a folder you can write with --out-run")
        if not no_gpu:  # no usable GPU here: said before a new run is written or a worker started
            preflight.gpu("pass --no-gpu to re-evaluate up to compile + SASS only")
        from ptxbench.workloads.arch import DEFAULT_ARCH

        preflight.toolchain(DEFAULT_ARCH)  # no ptxas here: every kernel would be re-evaluated to an INFRA_ERROR
        def done(trajectory: str, kept: bool) -> None:  # a line per trajectory: a GPU hour of kernels shows it moves
            typer.echo(terminal_text(f"  {trajectory}: {'kept (finished before the stop)' if kept else 're-evaluated'}"), err=True)

        done_runs = []
        for run, target in zip(runs, targets):
            try:
                done_runs.append(reevaluate_run(run, target, no_gpu=no_gpu, resume=resume, on_done=done))
            except ReevaluationRefused as exc:
                raise inputs.BadInput(str(exc)) from None
            except KeyboardInterrupt:
                typer.echo(terminal_text(f"stopped: go on with `ptxbench score {run} --re-evaluate --out-run {target} "
                                         f"--resume{' --no-gpu' if no_gpu else ''}`"), err=True)
                raise
        runs = done_runs
        typer.echo(f"re-evaluated into: {', '.join(map(str, runs))}", err=True)
    elif out_run is not None or no_gpu or resume:
        raise inputs.BadInput("--out-run, --no-gpu and --resume go with --re-evaluate")
    from ..scoring.repair_track import repair_markdown, score_repair_runs

    try:
        result = score_runs(runs)
    except DuplicateTrajectory as exc:
        raise inputs.BadInput(str(exc)) from None
    repair = score_repair_runs(runs)
    if json_out:  # the RunScore, plus the repair track's scores when the runs hold repair trajectories
        import json

        from ..report.build import _json  # a lone surrogate in the records (model_dump_json refuses it) as its escape

        data = json.loads(_json(result))
        if repair.trajectories:
            data["repair_track"] = json.loads(_json(repair))
        typer.echo(json.dumps(mask_strings(data), indent=1))  # keys masked, as in the report's score.json
        return
    # Names and infra messages are the records' text: control characters escaped (terminal_text) before they print.
    for table in all_tables(result):
        typer.echo(terminal_text(scrub_text(table.markdown())))
    if repair.trajectories:  # a repair-track run (bench --track repair)
        typer.echo(terminal_text(scrub_text(repair_markdown(repair))))
    for line in exclusion_lines(runs):
        typer.echo(terminal_text(scrub_text(line)))
    if result.n_skipped_lines:  # a damaged log: its scores lack whatever those lines held
        from ..records.rundir import UNREADABLE

        damaged = [t for t in result.trajectories if t.skipped_lines]
        typer.echo(terminal_text(f"skipped: {result.n_skipped_lines} lines of the trajectory logs are no readable event "
                                 f"({UNREADABLE}) and are left out of every "
                                 f"score, in {len(damaged)} trajectories, first {damaged[0].run}/{damaged[0].id}"))
    if result.n_figures_set_aside:  # a hand-edited or foreign record: its turns keep their verdicts, not that speed
        from ..scoring.run_score import first_set_aside
        from ..scoring.turns import MEASURABLE

        typer.echo(terminal_text(scrub_text(
            f"unmeasured: {result.n_figures_set_aside} recorded speedups or %SOL are NaN, infinite, not positive or "
            f"past {MEASURABLE:.0e} either way (no timing measures that: a hand-edited or foreign record) and count as "
            f"unmeasured, their turns keeping their verdicts; first {first_set_aside(result)}")))
    from ..records.rundir import read_manifest

    for run in runs:  # a re-evaluation stopped part way: its scores lack the trajectories still to come
        if missing := not_reevaluated(run):
            source = (read_manifest(run).get("source_run") or {}).get("path", "SOURCE_RUN")
            typer.echo(terminal_text(scrub_text(
                f"unfinished re-evaluation: {len(missing)} trajectories of {run} are not re-evaluated yet and are left "
                f"out of every score; go on with `ptxbench score {source} --re-evaluate --out-run {run} --resume`")))
    # what the figures over trajectories leave out: infra failures no retry repaired, trajectories with no stop yet
    unfinished = f", {result.n_unfinished} unfinished" if result.n_unfinished else ""
    unstarted = (f", {result.n_unstarted} trajectory logs with no readable start (not scored)"
                 if result.n_unstarted else "")
    typer.echo(f"{result.n_trajectories} trajectories ({result.n_infra_failed} infra-failed{unfinished}, left out){unstarted}, "
               f"{result.n_infra_turns} infra turns, {result.n_target_unknown} correct turns with unknown target verdict"
               + (f", {result.n_compile_only} COMPILED turns never run on a GPU (not counted as correct)"
                  if result.n_compile_only else ""))
