"""`ptxbench report RUN [--out DIR]`: summary.md, a self-contained index.html with plots, a page per trajectory."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .application import app, reads_runs

# What a report writes at the top of its folder: in a folder no report wrote, each would replace someone's own file
REPORT_FILES = ("index.html", "summary.md", "score.json", "repair.md", "repair.json")


def foreign_report_file(folder: Path) -> str | None:
    """The first of REPORT_FILES in `folder` when no earlier report wrote it (an earlier report's index.html names itself
    in its title, and is replaced as a new report replaces it); None when there is none to lose."""
    there = [name for name in REPORT_FILES if (folder / name).exists()]
    if not there:
        return None
    try:
        with open(folder / "index.html", "rb") as f:
            head = f.read(300)
    except OSError:
        head = b""
    return None if b"<title>ptxbench report: " in head else there[0]


@app.command()
@reads_runs
def report(
    run: Path = typer.Argument(..., help="a run folder"),
    out: Optional[str] = typer.Option(None, help="output folder (default <run>/report)"),
) -> None:
    """Write the report of a run (opens offline: plots are inlined)."""
    from ..report import write_report
    from ..report.build import LinkedReportFolder

    from . import inputs
    from .terminal import terminal_text

    inputs.run_folder(run)
    if out is not None and (mine := foreign_report_file(inputs.new_folder(out, "--out"))):
        raise inputs.BadInput(f"--out {out} holds {mine}, which no report wrote: a report would replace it; name a new "
                              "folder, or an earlier report's")
    # the default folder (<run>/report) goes through the same check: a read-only run folder said up front, in one line
    out_dir = inputs.create_folder(out, "--out") if out is not None else inputs.create_folder(run / "report", "report")
    try:
        files = write_report(run, out_dir)
    except LinkedReportFolder as exc:
        raise inputs.BadInput(str(exc)) from None
    typer.echo(terminal_text(f"{files.html}\n{files.markdown}\n{len(files.trajectories)} trajectory pages"))
