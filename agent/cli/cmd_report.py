"""`ptxbench report RUN [--out DIR]`: summary.md, a self-contained index.html with plots, a page per trajectory."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from .application import app, reads_runs
from .inputs import written_by_report  # an earlier report's folder: its index.html names itself

# What a report writes at the top of its folder: in a folder no report wrote, each would replace someone's own file
REPORT_FILES = ("index.html", "summary.md", "score.json", "repair.md", "repair.json")


def foreign_report_file(folder: Path) -> str | None:
    """The first of REPORT_FILES in `folder` when no earlier report wrote it (an earlier report's index.html names itself
    in its title, and is replaced as a new report replaces it); None when there is none to lose."""
    there = [name for name in REPORT_FILES if (folder / name).exists()]
    return None if not there or written_by_report(folder) else there[0]


def out_in_run(out: Path, run: Path) -> str | None:
    """Why --out would write among the run's own records, or None. The report writes index.html, summary.md,
    score.json and a trajectories/ folder of pages: into the run folder itself its pages went into the run's
    trajectories/, beside the trajectory folders; into a folder that holds the run, a trajectories/ beside it made
    that folder read as a run. Inside the run, --out may be a new folder or an earlier report's (the default
    <run>/report), not one of the run's own entries (trajectories/, abandoned/, ...)."""
    o, r = out.resolve(), run.resolve()
    if o == r:
        return (f"--out {out} is the run folder itself: the report's pages would go among its records; leave --out "
                f"out (the report goes to {run / 'report'}) or name a folder outside the run")
    if r.is_relative_to(o):
        return (f"--out {out} holds the run {run}: the report's trajectories/ folder would go beside it, and the "
                "folder would read as a run; name a folder of its own")
    if o.is_relative_to(r):
        top = r / o.relative_to(r).parts[0]
        if top.exists() and not (top.is_dir() and (top.name == "report" or written_by_report(top))):
            return (f"--out {out} is inside the run's {top.name}{'/' if top.is_dir() else ''}, which no report wrote; "
                    f"leave --out out (the report goes to {run / 'report'}) or name a new folder")
    return None


@app.command()
@reads_runs
def report(
    run: Path = typer.Argument(..., help="a run folder"),
    out: Optional[str] = typer.Option(None, help="output folder (default <run>/report); not the run folder, a folder holding it, or one of its own entries"),
) -> None:
    """Write the report of a run (opens offline: plots are inlined)."""
    from ..report import write_report
    from ..report.build import LinkedReportFolder
    from ..scoring import DuplicateTrajectory

    from . import inputs
    from .terminal import terminal_text

    inputs.run_folder(run)
    if out is not None and (inside := out_in_run(inputs.new_folder(out, "--out"), run)):
        raise inputs.BadInput(inside)
    # the default folder (<run>/report) goes through the same checks: a folder of someone's own files there (their
    # summary.md replaced, a report among an export's data) was written into without a word
    target = inputs.new_folder(out, "--out") if out is not None else run / "report"
    named = f"--out {out}" if out is not None else f"the report folder {target}"
    other = "name a new folder" if out is not None else "name another folder with --out"
    if (target / "export_manifest.json").exists():
        # its score.json and pages among the dataset's files: the next export there was refused as foreign data
        raise inputs.BadInput(f"{named} holds an export (export_manifest.json): a report there would go among its "
                              f"data files; {other}")
    if target.is_dir() and (mine := foreign_report_file(target)):
        raise inputs.BadInput(f"{named} holds {mine}, which no report wrote: a report would replace it; {other}"
                              + (", or an earlier report's" if out is not None else ""))
    # and through create_folder: a read-only run folder said up front, in one line
    fresh = not target.exists()
    out_dir = inputs.create_folder(out, "--out") if out is not None else inputs.create_folder(run / "report", "report")
    try:
        files = write_report(run, out_dir)
    except (LinkedReportFolder, DuplicateTrajectory) as exc:  # as `score` says the second
        if fresh:  # a refused report leaves no folder behind (rmdir: only while nothing is in it)
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise inputs.BadInput(str(exc)) from None
    typer.echo(terminal_text(f"{files.html}\n{files.markdown}\n{len(files.trajectories)} trajectory pages"))
