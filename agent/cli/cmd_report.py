"""`ptxbench report RUN [--out DIR]`: summary.md, a self-contained index.html with plots, a page per trajectory."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .application import app


@app.command()
def report(
    run: Path = typer.Argument(..., help="a run folder"),
    out: Optional[Path] = typer.Option(None, help="output folder (default <run>/report)"),
) -> None:
    """Write the report of a run (opens offline: plots are inlined)."""
    from ..report import write_report

    from . import inputs

    inputs.run_folder(run)
    if out is not None:
        inputs.new_folder(out, "--out")
    files = write_report(run, out)
    typer.echo(f"{files.html}\n{files.markdown}\n{len(files.trajectories)} trajectory pages")
