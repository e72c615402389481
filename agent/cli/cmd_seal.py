"""`ptxbench seal RUN...`: gzip the logs of a run's finished trajectories, for keeping and shipping; `--undo` restores.

    ptxbench seal runs/bench-h200            # each finished trajectory.jsonl -> trajectory.jsonl.gz (about 5x smaller)
    ptxbench seal runs/bench-h200 --undo     # back to trajectory.jsonl, before `--resume` continues the run

score, report, export and replay read a sealed run as they read a live one (agent/records/sealing.py).
"""
from __future__ import annotations

from pathlib import Path

import typer

from .application import app, reads_runs


@app.command()
@reads_runs
def seal(
    runs: list[Path] = typer.Argument(..., help="run folders (each with trajectories/)"),
    undo: bool = typer.Option(False, "--undo", help="unseal: restore each trajectory.jsonl so the run can be continued"),
) -> None:
    """Gzip the event logs of finished trajectories (every reader keeps working); --undo restores them."""
    from . import inputs, preflight
    from ..records.rundir import distinct_runs
    from ..records.sealing import seal_run, unseal_run

    for run in runs:
        inputs.run_folder(run)
        preflight.writable(run)  # a read-only run: one line naming it, not a temporary file's error read as damage
    for run in distinct_runs(runs):
        if undo:
            typer.echo(f"{run}: {len(unseal_run(run))} trajectories unsealed")
            continue
        before = _log_bytes(run)
        sealed, live = seal_run(run)
        line = f"{run}: {len(sealed)} trajectories sealed ({before / 2**20:.1f} -> {_log_bytes(run) / 2**20:.1f} MiB of logs)"
        if live:
            line += f"; {len(live)} left live (not stopped: still running, or killed before their stop event)"
        typer.echo(line)


def _log_bytes(run: Path) -> int:
    from ..records.rundir import trajectory_folders, trajectory_log

    return sum(trajectory_log(f).stat().st_size for f in trajectory_folders(run))
