"""`ptxbench workloads`: list the workload registry as a table or as JSON."""
from __future__ import annotations

import json
from typing import Any

import typer

from .application import app


def workload_record(w) -> dict[str, Any]:
    """One workload as plain JSON data, shapes resolved to integers."""
    return {
        "id": w.id,
        "op": w.op,
        "title": w.title,
        "causal": w.causal,
        "held_out": w.held_out,
        "tags": w.tags,
        "symbols": w.symbols,
        "shapes": {t.name: list(w.shape(t.name)) for t in w.tensors},
        "dtypes": {t.name: t.dtype for t in w.tensors},
        "roles": {t.name: t.role for t in w.tensors},
        "tensors": [t.model_dump() for t in w.tensors],
        "flops": w.flops,
        "min_bytes": w.min_bytes,
        "reference": w.reference,
        "baselines": [b.name for b in w.baselines],
        "primary_baseline": w.primary_baseline.name,
        "tolerance": w.tolerance.model_dump(),
        "targets": w.targets,
        "trials": w.trials,
        "input_dist": w.input_dist,
    }


def _sizes_text(w) -> str:
    """MxNxK for a GEMM, BxHxSxD for attention (H/HKV with GQA)."""
    sym = w.symbols
    if w.op == "gemm":
        return f"{sym['M']}x{sym['N']}x{sym['K']}"
    heads = f"{sym['H']}/{sym['HKV']}" if "HKV" in sym else f"{sym['H']}"
    return f"{sym['B']}x{heads}x{sym['S']}x{sym['D']}"


@app.command("workloads")
def workloads(
    as_json: bool = typer.Option(False, "--json", help="Print every workload (smoke ones included) as JSON."),
    show_all: bool = typer.Option(False, "--all", help="Also list the smoke workloads (tiny shapes for harness tests)."),
) -> None:
    """List the workloads: the main tasks, the held-out ones (flagged) and, with --all, the smoke ones."""
    from ptxbench.workloads.registry import list_workloads

    if as_json:
        typer.echo(json.dumps({"workloads": [workload_record(w) for w in list_workloads()]}, indent=2))
        return

    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ptxbench workloads", box=box.SIMPLE_HEAD)
    table.add_column("id", no_wrap=True)
    table.add_column("MxNxK | BxHxSxD", no_wrap=True)
    table.add_column("GFLOP", justify="right")
    table.add_column("min MB", justify="right")
    table.add_column("baseline")
    table.add_column("set")
    shown = [w for w in list_workloads() if show_all or "smoke" not in w.tags]
    for w in shown:
        table.add_row(w.id, _sizes_text(w), f"{w.flops / 1e9:.4g}", f"{w.min_bytes / 1e6:.4g}", w.primary_baseline.name,
                      _group(w, markup=True))
    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze to 80 columns
        console = Console(width=120)
    from rich.measure import Measurement

    if Measurement.get(console, console.options.update_width(10_000), table).maximum > console.width:
        # a narrow terminal: the table dropped its last columns (the held-out flag among them) and cut ids short
        # into look-alikes; one workload per line pair instead, its id whole
        for w in shown:
            typer.echo(w.id)
            typer.echo(f"    {_sizes_text(w)}, {w.flops / 1e9:.4g} GFLOP, {w.min_bytes / 1e6:.4g} MB min, "
                       f"{w.primary_baseline.name}, {_group(w, markup=False)}")
    else:
        console.print(table)
    console.print("baseline: the primary one (attention also records flash_sdpa). Targets: sm_90a wgmma + tma, "
                  "sm_100a tcgen05 + tma. Tensors, dtypes, shapes: --json.")


def _group(w, markup: bool) -> str:
    """main, held-out or smoke: the set a workload belongs to."""
    if not w.held_out:
        return "main"
    if "smoke" in w.tags:
        return "smoke"
    return "[yellow]held-out[/yellow]" if markup else "held-out"
