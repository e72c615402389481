"""`ptxbench profile WORKLOAD FILE`: Nsight Compute on one solution -> feedback text (or --json).

Compiles the file, replays its plan once under ncu on this machine's GPU, prints the ranked
feedback and the runtime target-instruction verdicts; `--json` prints the verdicts, the profile
summary and every raw metric ncu collected. Exit status: 0 profiled, 1 the file did not compile,
2 no profile could be taken (the reason is printed on stderr; --json still prints its record on stdout) or bad
input (one line), 3 the CUDA tools are missing.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from shlex import quote
from typing import Optional

import typer

from .application import app
from ptxbench.tools.solution.language import detect_language

from .cmd_compile import Arch


def raw_metrics(csv_path: Path) -> list[dict]:
    """Every metric of ncu's raw page, per profiled kernel: name -> number (or text)."""
    from ptxbench.tools.profile.ncu_csv import parse_raw, to_number

    if not csv_path.is_file():
        return []
    out = []
    for k in parse_raw(csv_path.read_text()):
        values = {}
        for name, (unit, text) in k.values.items():
            number = to_number(text, unit)
            values[name] = number if number is not None and "(" not in text else text
        out.append({"kernel": k.name, "id": k.id, "metrics": values})
    return out


@app.command("profile")
def profile_cmd(
    workload: str = typer.Argument(..., help="workload id (see `ptxbench workloads`)"),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="the solution file"),
    arch: Arch = typer.Option(Arch.sm_90a, "--arch", help="Target architecture (ptxas -arch) the file is compiled for."),
    json_out: bool = typer.Option(False, "--json", help="verdicts, summary and raw metrics as JSON"),
    verdict_only: bool = typer.Option(False, "--verdict-only", help="only the executed-instruction counters (fast)"),
    timeout: float = typer.Option(120.0, "--timeout", help="seconds ncu may take"),
    budget: int = typer.Option(450, "--budget", help="token budget of the feedback text"),
    keep: Optional[str] = typer.Option(None, "--keep", help="keep ncu's report and CSV pages in this folder"),
    seed: int = typer.Option(0, "--seed", help="seed of the input set the profiled call runs on"),
) -> None:
    """Profile one solution with Nsight Compute and print feedback a model can act on."""
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.profile import profile_candidate
    from ptxbench.tools.toolchain import ToolchainError

    from . import inputs
    from .terminal import terminal_text

    inputs.workload(workload), inputs.positive(timeout, "--timeout"), inputs.positive(budget, "--budget")
    inputs.seed(seed), inputs.within_a_week(timeout, "--timeout")  # ncu's subprocess timeout overflowed past ~1e10 s
    if keep is not None:  # taken as text: typer's Path made an empty one '.', the working directory
        keep = inputs.new_folder(keep, "--keep")
    from . import preflight

    # ncu replays the kernel on a GPU: without one, say so and what runs here, not "ncu was not found" after a compile
    preflight.gpu(f"Nsight Compute profiles on a GPU; `ptxbench compile {quote(str(file))} --workload {workload}` checks "
                  "the file here")
    preflight.compile_cache()  # where the cubin goes: one that cannot be written is one line, not a traceback
    text = file.read_text(errors="replace")
    try:
        compiled = compile_source(text, detect_language(text, file), arch.value, workload)
    except ToolchainError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(3)
    if compiled.status != "ok" or not compiled.cubin_path:
        for issue in compiled.errors:
            typer.echo(terminal_text(f"{file}:{issue.line or '?'}: {issue.message}"), err=True)
        raise typer.Exit(1)
    with tempfile.TemporaryDirectory(prefix="ptxbench-profile-") as tmp:
        work = keep or Path(tmp)
        outcome = profile_candidate(workload, text, compiled.cubin_path, arch=arch.value, compile_result=compiled,
                                    full=not verdict_only, timeout_s=timeout, seed=seed, token_budget=budget, workdir=work)
        metrics = raw_metrics(work / "raw.csv") if json_out else []
    if json_out:
        record = {"workload": workload, "file": str(file), "ok": outcome.ok, "error": outcome.error,
                  "seconds": round(outcome.seconds, 3),
                  "targets_runtime": {k: v.model_dump() for k, v in outcome.targets_runtime.items()},
                  "summary": outcome.summary.model_dump() if outcome.summary else None,
                  "feedback": outcome.feedback, "raw_metrics": metrics,
                  "range_check": outcome.range_check.model_dump() if outcome.range_check is not None else None}
        typer.echo(json.dumps(record, indent=1, default=str))
    else:
        err = not outcome.ok  # no profile: what is printed says why, so it goes to stderr like every error
        if outcome.feedback:
            typer.echo(terminal_text(outcome.feedback) + "\n", err=err)  # quotes the solution's lines: its control characters
        for family, v in outcome.targets_runtime.items():
            counts = f" ({v.executed_thread_insts_true:,} predicate-true thread executions)" if v.executed_thread_insts_true else ""
            typer.echo(terminal_text(f"{family}: {v.verdict}{counts} - {v.reason}"), err=err)
        summary = outcome.summary
        if summary is not None and summary.output_passed is not None:  # this call's own output, by the evaluation's rule
            judged = "passed" if summary.output_passed else f"wrong ({summary.output_status}: {summary.output_note})"
            typer.echo(terminal_text(f"the profiled call's output: {judged}"), err=err)
        if (rc := outcome.range_check) is not None:  # a plan of 2+ launches, read again with them back to back
            read = (f"short, {rc.reason()}" if rc.short else "the same work" if rc.ok else f"not read ({rc.error})")
            typer.echo(terminal_text(f"the {rc.launches} launches back to back (range replay): {read}"), err=err)
        typer.echo(terminal_text(f"profile took {outcome.seconds:.1f} s" + ("" if outcome.ok else f"; no profile: {outcome.error}")),
                   err=err)
    raise typer.Exit(0 if outcome.ok else 2)
