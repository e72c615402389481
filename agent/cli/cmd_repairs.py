"""`ptxbench repairs list [--json]` and `ptxbench repairs show ID`: the repair suite (agent/repairs)."""
from __future__ import annotations

import json
from typing import Optional

import typer

from ptxbench.tools.figure_text import figure

from .application import app
from .terminal import terminal_text

repairs_app = typer.Typer(help="The repair suite: broken kernels with the verdict the GPU gave them.", no_args_is_help=True)
app.add_typer(repairs_app, name="repairs")
SUITE_HELP = "suite folder (default: workloads/repairs, the committed suite)"


def _load(suite: Optional[str]):
    from ..repairs.suite import SuiteMissing, load_suite
    from .inputs import not_empty

    not_empty(suite, "--suite", "give the suite folder, or leave it out for workloads/repairs")  # typer's Path made it '.'
    try:
        return load_suite(suite)
    except (SuiteMissing, ValueError) as exc:  # no suite; a damaged or hand-edited one (load_suite: one line)
        raise typer.BadParameter(str(exc)) from None


@repairs_app.command("list")
def list_tasks(suite: Optional[str] = typer.Option(None, help=SUITE_HELP),
               as_json: bool = typer.Option(False, "--json", help="a JSON list of task objects")) -> None:
    """Every task: id, workload, bug class, recorded status, GPU, held out."""
    s = _load(suite)
    rows = [{"id": t.id, "workload": t.workload, "bug_class": t.bug_class, "status": t.verdict.status,
             "gpu": t.verdict.gpu, "date": t.verdict.date, "held_out": t.held_out, "origin": t.origin,
             "unbroken_speedup": t.unbroken_speedup} for t in s.tasks]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    # A suite folder may be anyone's, and a task built from a recorded trajectory holds model text: control
    # characters are printed escaped (terminal_text), as every command prints records.
    typer.echo(terminal_text(f"repair suite v{s.version} ({s.folder}): {len(rows)} tasks, built {s.built} on {s.gpu or '?'}"))
    for r in rows:
        typer.echo(terminal_text(f"{r['id']:<58} {r['bug_class']:<28} {r['status']:<20} {'held-out' if r['held_out'] else ''}"))


def _judged_on(verdict) -> str:
    """Where the recorded verdict came from: a compile or plan error is found before anything runs, with no GPU."""
    from ..repairs.suite import judged_without_gpu

    if verdict.gpu:
        return f"on {verdict.gpu}"
    return "with no GPU needed" if judged_without_gpu(verdict.status) else "on an unrecorded GPU"


@repairs_app.command("show")
def show_task(task_id: str = typer.Argument(..., help="task id (see `ptxbench repairs list`)"),
              suite: Optional[str] = typer.Option(None, help=SUITE_HELP),
              as_json: bool = typer.Option(False, "--json", help="the task record as JSON")) -> None:
    """One task: its record, the recorded verdict and feedback, and the broken solution file."""
    s = _load(suite)
    try:
        task = s.task(task_id)
    except KeyError as exc:  # a misspelt id: the nearest one, and where the ids are listed
        import difflib

        from .inputs import BadInput

        close = difflib.get_close_matches(task_id, [t.id for t in s.tasks], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        listing = "`ptxbench repairs list" + (f" --suite {suite}`" if suite is not None else "`")
        raise BadInput(f"{exc.args[0]}: {hint}the ids are listed by {listing}") from None
    if as_json:
        typer.echo(json.dumps(task.model_dump(mode="json"), indent=2))
        return
    speed = f"{figure(task.unbroken_speedup)}x" if task.unbroken_speedup is not None else "unknown"
    typer.echo(terminal_text(
        f"{task.id}\n  workload {task.workload}; bug class {task.bug_class}{' (held out)' if task.held_out else ''}; "
        f"origin {task.origin}\n  {task.description}\n  from: {'; '.join(task.provenance)}\n"
        f"  unbroken kernel's speedup: {speed}\n  verdict {_judged_on(task.verdict)} ({task.verdict.date}): "
        f"{task.verdict.status}: {task.verdict.message}\n  file: {s.solution_path(task)}\n"))
    typer.echo(terminal_text(task.verdict.feedback))  # quotes the broken kernel's plan and compiler messages
