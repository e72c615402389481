"""`ptxbench compile`: assemble a solution file and report resources, SASS and targets.

Exit status 0 whenever the file could be compiled or its errors reported (status "error"
included); 2 when the CUDA tools are missing.
"""
from __future__ import annotations

import json
import re
from enum import Enum
from pathlib import Path

import typer

from .app import app

_PLAN_LANGUAGE = re.compile(r"/\*\s*ptxbench\b(?:(?!\*/).)*?^\s*language\s*=\s*[\"'](\w+)[\"']", re.S | re.M)
_PTX_DIRECTIVE = re.compile(r"^\s*\.(entry|version|target)\b", re.M)


class Arch(str, Enum):
    sm_90a = "sm_90a"
    sm_100a = "sm_100a"


def detect_language(text: str, path: Path | None = None) -> str:
    """The plan block's `language`, else the suffix (.ptx / .cu), else the content (.entry/.version means PTX)."""
    try:
        from ptxbench.tools.plan_toml import parse_plan_block

        if (planned := parse_plan_block(text).language) in ("ptx", "cuda"):
            return planned
    except Exception:  # a broken plan must not stop a compile: fall back to the plain reading below
        pass
    if m := _PLAN_LANGUAGE.search(text):
        if m.group(1) in ("ptx", "cuda"):
            return m.group(1)
    if path is not None and path.suffix in (".ptx", ".cu", ".cuh"):
        return "ptx" if path.suffix == ".ptx" else "cuda"
    return "ptx" if _PTX_DIRECTIVE.search(text) else "cuda"


def compile_record(result, path: Path | None = None) -> dict:
    """The JSON `ptxbench compile --json` prints."""
    return {
        "file": str(path) if path else None,
        "status": result.status,
        "arch": result.arch,
        "language": result.language,
        "errors": [{"line": e.line, "message": e.message} for e in result.errors],
        "warnings": [{"line": w.line, "message": w.message} for w in result.warnings],
        "kernels": {
            name: {
                "registers": k.registers,
                "spills": k.spill_stores + k.spill_loads,
                "spill_stores": k.spill_stores,
                "spill_loads": k.spill_loads,
                "smem": k.smem_static,
                "stack": k.stack,
                "cmem": k.cmem,
                "sass_opcodes": k.sass_opcodes,
            }
            for name, k in result.kernels.items()
        },
        "targets": {f: t.model_dump() for f, t in result.targets.items()},
        "sass_by_line": result.sass_by_line,
        "tools": result.tools,
        "cached": result.cached,
        "cubin_path": result.cubin_path,
        "ptx_sha256": result.ptx_sha256,
        "seconds": result.seconds,
        "log": result.log,
    }


def _print_rich(result, path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    colour = "green" if result.status == "ok" else "red"
    cached = " (cached)" if result.cached else ""
    console.print(f"[bold]{path}[/bold]  {result.language} -> {result.arch}: [{colour}]{result.status}[/{colour}]{cached}")
    for issue in result.errors + result.warnings:
        where = f"line {issue.line}" if issue.line else "-"
        console.print(f"  [{'red' if issue.severity == 'error' else 'yellow'}]{issue.severity}[/] {where}: {issue.message}", markup=True, highlight=False)
    if result.kernels:
        table = Table("kernel", "regs", "spill st/ld", "smem", "stack", "top SASS opcodes")
        for name, k in result.kernels.items():
            top = ", ".join(f"{op} {n}" for op, n in list(k.sass_opcodes.items())[:8])
            table.add_row(name, str(k.registers), f"{k.spill_stores}/{k.spill_loads}", str(k.smem_static), str(k.stack), top)
        console.print(table)
    if result.targets:
        table = Table("target family", "in PTX", "in SASS", "SASS count")
        for fam, t in result.targets.items():
            table.add_row(fam, "yes" if t.in_ptx else "no", "yes" if t.in_sass else "no", str(t.sass_count))
        console.print(table)
    for tool, desc in result.tools.items():
        console.print(f"  [dim]{tool}: {desc}[/dim]", highlight=False, soft_wrap=True)


@app.command("compile")
def compile_cmd(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True, help="A solution file, or a bare .ptx / .cu file."),
    arch: Arch = typer.Option(Arch.sm_90a, "--arch", help="Target architecture (ptxas -arch)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    workload: str = typer.Option(None, "--workload", help="Report only this workload's target families."),
    language: str = typer.Option(None, "--language", help="ptx or cuda (default: from the plan block, the suffix or the content)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompile even if a cached result exists."),
    sass: bool = typer.Option(False, "--sass", help="Also print the full SASS listing."),
) -> None:
    """Assemble FILE with ptxas for --arch; report errors by line, resources, SASS opcodes and target instructions."""
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.toolchain import ToolchainError, toolchain_report

    if workload is not None:
        from ptxbench.workloads.registry import get_workload

        try:
            get_workload(workload)
        except KeyError as e:
            raise typer.BadParameter(str(e), param_hint="--workload") from None
    text = file.read_text(errors="replace")
    lang = language or detect_language(text, file)
    try:
        result = compile_source(text, lang, arch.value, workload, use_cache=not no_cache)
        listing = ""
        if sass and result.cubin_path:
            from ptxbench.tools.sass import sass_listing

            listing = sass_listing(result.cubin_path)
    except ToolchainError as e:
        if as_json:
            print(json.dumps({"status": "toolchain_missing", "message": str(e), "toolchain": toolchain_report(arch.value)}, indent=1))
        else:
            typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        record = compile_record(result, file)
        if sass:
            record["sass"] = listing
        print(json.dumps(record, indent=1))
    else:
        _print_rich(result, file)
        if listing:
            print(listing)
