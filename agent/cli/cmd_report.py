"""`ptxbench report RUN [--out DIR]`: summary.md, a self-contained index.html with plots, a page per trajectory."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .application import app, reads_runs


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
    # the default folder (<run>/report) goes through the same check: a read-only run folder said up front, in one line
    out_dir = inputs.create_folder(out, "--out") if out is not None else inputs.create_folder(run / "report", "report")
    try:
        files = write_report(run, out_dir)
    except LinkedReportFolder as exc:
        raise inputs.BadInput(str(exc)) from None
    typer.echo(terminal_text(f"{files.html}\n{files.markdown}\n{len(files.trajectories)} trajectory pages"))
