"""`ptxbench export`: turn recorded runs into KernelGen or Fixit training data."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .application import app, reads_runs


def _ops(workload_ids: set[str]) -> dict[str, str]:
    from ...workloads.registry import get_workload

    ops = {}
    for wid in workload_ids:
        try:
            ops[wid] = get_workload(wid).op
        except KeyError:  # a workload recorded elsewhere and unknown here still exports
            ops[wid] = ""
    return ops


@app.command()
@reads_runs
def export(
    runs: list[Path] = typer.Argument(..., help="run directories"),
    recipe: str = typer.Option(..., help="kernelgen | fixit"),
    out: str = typer.Option(..., help="output folder: new, or one an earlier export wrote (its split files are "
                                      "replaced); a folder holding other data files is refused"),
    format: str = typer.Option("parquet", help="parquet | jsonl | openai (OpenAI's chat fine-tuning files: messages "
                                               "only, the wrong kernel of a Fixit row at weight 0)"),
    min_speedup: Optional[float] = typer.Option(None, help="completion kernels at least this fast vs. the library"),
    first_k: Optional[int] = typer.Option(None, help="only turns 1..k"),
    max_per_group: Optional[int] = typer.Option(None, help="balance: at most n rows per (workload, failure class)"),
    require_target: bool = typer.Option(True, help="completion kernels must have executed the target instructions"),
    include_held_out: bool = typer.Option(False, help="include held-out workloads"),
    dedup: bool = typer.Option(True, help="drop rows whose kernels are the same up to comments and white space"),
    test_workloads: Optional[str] = typer.Option(None, help="comma-separated workloads that form the test split"),
    separate_by: str = typer.Option("pair", help="fixit: what a train row may not share with a test or left-out "
                                                 "held-out row: pair (wrong kernel and fix) | completion (the fix "
                                                 "alone, whatever the wrong kernel)"),
    tokenizer: str = typer.Option("estimate", help="estimate | tiktoken:<encoding> | hf:<name or path>"),
    max_tokens: Optional[int] = typer.Option(None, help="drop rows longer than this"),
    teacher: Optional[str] = typer.Option(None, help="litellm model that writes <think> reasoning for fixit rows"),
    teacher_api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint for the teacher"),
) -> None:
    """Export KernelGen (task -> kernel) or Fixit (wrong kernel + evaluation log -> fixed kernel) rows."""
    from rich import print as rprint
    from rich.markup import escape

    from . import inputs
    from .terminal import terminal_text
    from ..export import ExportConfig, collect_samples
    from ..export.recipes import materialize, plan_rows
    from ..export.recipes import REJECTED
    from ..export.tokens import TokenizerUnavailable, counter
    from ..export.writer import FORMATS, foreign_files, write_dataset
    from ..export.collect import canonical_runs

    for run in runs:
        inputs.run_folder(run)
    runs = canonical_runs(runs)  # a run named twice is exported once; the same files whatever the runs' order
    # "a, b" (a space after the comma) named the workload " b", refused as one no trajectory has beside a list
    # showing b; given empty (an unset shell variable) it named none and exported no test split without a word
    test_split = inputs.listed(test_workloads, "--test-workloads", "give comma-separated workload ids, or leave it "
                               "out for no test split")
    inputs.one_of(recipe, ("kernelgen", "fixit"), "--recipe"), inputs.one_of(format, FORMATS, "--format")
    inputs.one_of(separate_by, ("pair", "completion"), "--separate-by")
    if recipe != "fixit":  # a kernelgen row is its kernel alone, kept apart from the test rows by it either way
        from .cmd_optimize import current_context

        if inputs.given_options(current_context(), ("separate_by",)):
            raise inputs.BadInput("--separate-by chooses what a Fixit train row may not share with a test row (its pair "
                                  "or its fix); a kernelgen row is its kernel alone, kept apart by it either way: drop "
                                  "it, or export --recipe fixit")
    for value, flag in ((first_k, "--first-k"), (max_per_group, "--max-per-group"), (max_tokens, "--max-tokens")):
        inputs.positive(value, flag)
    if min_speedup is not None and not 0 <= min_speedup < float("inf"):  # nan: no speedup passes, and no word of it
        raise inputs.BadInput(f"--min-speedup must be a finite number, 0 or more, got {min_speedup}")
    out = inputs.new_folder(out, "--out")
    inputs.outside_runs(out, "--out")  # a dataset among a run's records: as report and --run-dir refuse theirs
    if format == "parquet" and not inputs.utf8(str(out.resolve())):  # pyarrow's writer failed on it, read as the
        # run's damage ("RUN: 'utf-8' codec can't encode"), after the folder was made
        raise inputs.BadInput(f"--out {str(out)!r}: the path is not UTF-8 text, to which pyarrow writes no parquet file; "
                              "name another folder, or --format jsonl")
    if foreign := foreign_files(out):  # datasets.load_dataset(data_dir=out) would read them as rows of this export
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise inputs.BadInput(f"--out {out} holds {foreign[0].relative_to(out)}{more}: data files no export wrote, which "
                              "datasets.load_dataset would read with this export's rows; name a new folder, or one an "
                              "earlier export wrote")
    try:  # loaded now, before any run is read: a tokenizer that cannot load is a usage error, not a late traceback
        counter(tokenizer)
    except TokenizerUnavailable as exc:
        raise inputs.BadInput(f"--tokenizer {exc}") from None
    inputs.not_empty(teacher, "--teacher", "name the litellm model, or leave it out for rows without reasoning")
    inputs.not_empty(teacher_api_base, "--teacher-api-base", "give the server's URL, or leave it out")
    if teacher_api_base and not teacher:  # the teacher's server, with no teacher to send to it: dropped without a word
        raise inputs.BadInput("--teacher-api-base goes with --teacher: the model that writes the reasoning on that server")
    if teacher and recipe != "fixit":  # only a Fixit row's completion gets reasoning: a kernelgen export ignored it
        raise inputs.BadInput(f"--teacher writes reasoning before the fix of each Fixit row: it goes with --recipe fixit, "
                              f"and --recipe {recipe} rows get none; drop it, or export --recipe fixit")
    if teacher:
        if teacher.startswith(("builtin/", "replay/")):  # they hand in kernels, never prose: litellm would refuse it late
            raise inputs.BadInput(f"--teacher {teacher}: the teacher writes reasoning, so it is a litellm model string "
                                  "such as openai/gpt-5, not a builtin/ or replay/ model")
        inputs.model(teacher, "--teacher")
        inputs.credentials(teacher, teacher_api_base, None, report=lambda line: typer.echo(line, err=True), flag="--teacher")
    cfg = ExportConfig(
        recipe=recipe, min_speedup=min_speedup, first_k_turns=first_k, max_per_group=max_per_group,
        require_target_executed=require_target, include_held_out=include_held_out, dedup=dedup,
        test_workloads=test_split, separate_by=separate_by, tokenizer=tokenizer,
        max_tokens=max_tokens, teacher=teacher, teacher_api_base=teacher_api_base,
    )
    from ..scoring import DuplicateTrajectory

    unstarted: list[Path] = []  # logs with no readable start: left out, and said (as score says it)
    try:
        samples = collect_samples(runs, unstarted)
    except DuplicateTrajectory as exc:  # as `score` and `report` say it
        raise inputs.BadInput(str(exc)) from None
    for w in cfg.test_workloads:
        if w not in {s.workload for s in samples}:
            raise inputs.BadInput(f"--test-workloads {w}: no trajectory of the runs is of that workload "
                                  f"(they have: {', '.join(sorted({s.workload for s in samples})) or 'none'})")
    cache = _teacher_cache(out) if teacher else None
    inputs.create_folder(out, "--out")  # now that every check passed: a refused command leaves no folder behind
    _hold(out)
    ops = _ops({s.workload for s in samples})
    plan, stats = plan_rows(samples, cfg, ops)  # chosen without their text; built again one trajectory at a time
    if unstarted:
        stats["trajectory_logs_without_start"] = len(unstarted)
    rows = materialize(plan, samples, cfg, ops)
    if teacher:
        from ..export.teacher import take_old_cache, with_reasoning

        take_old_cache(out, cache)  # an earlier export's, inside the dataset: its answers kept, the folder gone
        stats["teacher"] = {}
        rows = with_reasoning(rows, teacher, cache, teacher_api_base,
                              max_tokens=cfg.max_tokens, totals=stats["teacher"])  # --max-tokens holds with the reasoning too
    from ..models.base import ModelError

    try:
        paths = write_dataset(rows, out, format, cfg, stats, [str(r) for r in runs])
    except ModelError as exc:  # the teacher's provider (no other part asks a model), not the export: its staged
        # files are gone, and the answers so far stay in the cache
        raise inputs.RunFailed(f"--teacher {teacher}: {exc}; nothing was written. Its answers so far are kept in "
                               f"{cache}: run the same export again to go on from them") from None
    where = ", ".join(f"{k}: {v}" for k, v in paths.items()) or str(out)  # a path may hold [ ]: not rich markup
    rprint(f"[bold]{stats['rows']}[/] {recipe} rows from {len(samples)} trajectories -> " + escape(terminal_text(where)))
    for line in dropped_lines(stats, REJECTED):
        typer.echo(line)
    if failed := (stats.get("teacher") or {}).get("teacher_errors"):  # kept, without reasoning: said, not hidden
        typer.echo(f"{failed} fixit rows without teacher reasoning: the teacher's request for them failed (its answer "
                   f"is cached in {cache}; delete it there to ask again)")


def _teacher_cache(out: Path) -> Path:
    """The teacher's answers for `out` (export/teacher.py's cache_folder: under the ptxbench cache, not in the dataset
    folder), made and written to once now: one that cannot be is said before --out is made or any teacher asked."""
    from . import preflight
    from ..export.teacher import cache_folder

    return preflight.cache_folder(cache_folder(out), "the teacher's answers into")


def _hold(out) -> None:
    """The --out folder held by this export until the command ends: a second export into it removed the split and
    staged files of the first, which then said it wrote a train file no longer there."""
    from . import inputs
    from .cmd_optimize import current_context
    from ..records.folder_lock import FolderHeld, hold_folder, release

    try:
        held = hold_folder(out)
    except FolderHeld:
        raise inputs.BadInput(f"--out {out} is being written by another export: wait for it to end, or name another "
                              "folder") from None
    current_context().call_on_close(lambda: release(held))


def dropped_lines(stats: dict, reasons: dict[str, str]) -> list[str]:
    """What each filter removed, in words: trajectories that gave no row, then rows dropped later."""
    from ..records.rundir import UNREADABLE

    lines = []
    for reason, n in _with_prefix(stats, "trajectories_without_rows."):
        lines.append(f"{n} trajectories gave no row: {reasons.get(reason, reason)}")
    words = {"trajectory_logs_without_start": "trajectory logs left out: no readable start (empty, or their "
                                              "trajectory_start line unreadable), model and workload unknown",
             "skipped_record_lines": f"lines of the trajectory logs skipped: no readable event ({UNREADABLE})",
             # a run of smoke workloads (a machine with no GPU) met this line with no held-out workload in sight
             "held_out_trajectories_skipped": "held-out trajectories skipped: of the held-out and smoke workloads "
                                              "(`ptxbench workloads --all`) and held-out bug classes; "
                                              "--include-held-out keeps them",
             "duplicates_dropped": "duplicate rows dropped (--no-dedup keeps them)",
             "chat_markup_dropped": "rows dropped: their text holds chat-template markup (a special token such as "
                                    "<|im_end|>, a think tag), which a tokenizer reads as a turn's end or start",
             "over_token_cap_dropped": "rows over --max-tokens dropped", "balance_dropped": "rows dropped by --max-per-group",
             "train_copies_of_test_dropped": "train rows dropped: the same kernel stands in the test split",
             "train_copies_of_held_out_dropped": "train rows dropped: the same kernel is a held-out workload's row",
             "train_rows_sharing_a_test_fix": "train rows kept whose fix is a test row's fix after another wrong "
                                              "kernel (--separate-by completion drops them)"}
    for key, text in words.items():
        if stats.get(key):
            lines.append(f"{stats[key]} {text}")
        if key == "held_out_trajectories_skipped":  # what keeping them would not change, said at once
            lines += [f"  {n} of them would give no row even so: {reasons.get(reason, reason)}"
                      for reason, n in _with_prefix(stats, "held_out_without_rows.")]
    return lines


def _with_prefix(stats: dict, prefix: str) -> list[tuple[str, int]]:
    return [(key.removeprefix(prefix), n) for key, n in sorted(stats.items()) if key.startswith(prefix) and n]
