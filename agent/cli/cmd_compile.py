"""`ptxbench compile`: assemble a solution file and report resources, SASS and targets.

With --workload the file goes through exactly what `eval` does before the GPU (the solution parser:
plan, plan against the workload, kernel signatures, source policy; then the compile), so a file
that compiles here is one eval and optimize run. Exit status 0 when it compiled cleanly, 1 when it
has errors (all of them printed), 2 when the CUDA tools are missing.
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from ptxbench.tools.solution.language import detect_language

from .application import app



class Arch(str, Enum):
    sm_90a = "sm_90a"
    sm_100a = "sm_100a"


def compile_record(result, path: Path | None = None) -> dict:
    """The JSON `ptxbench compile --json` prints."""
    return {
        "file": str(path) if path else None,
        "status": result.status,
        "arch": result.arch,
        "language": result.language,
        "jail": result.jail,
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

    from .terminal import rich_safe as safe

    console = Console()
    colour = "green" if result.status == "ok" else "red"
    cached = " (cached)" if result.cached else ""
    console.print(f"[bold]{safe(path)}[/bold]  {result.language} -> {result.arch}: [{colour}]{result.status}[/{colour}]{cached}")
    for issue in result.errors + result.warnings:
        where = f"line {issue.line}" if issue.line else "-"
        console.print(f"  [{'red' if issue.severity == 'error' else 'yellow'}]{issue.severity}[/] {where}: {safe(issue.message)}", markup=True, highlight=False)
    if result.kernels:
        table = Table("kernel", "regs", "spill st/ld", "smem", "stack", "top SASS opcodes")
        for name, k in result.kernels.items():
            top = ", ".join(f"{op} {n}" for op, n in list(k.sass_opcodes.items())[:8])
            table.add_row(safe(name), str(k.registers), f"{k.spill_stores}/{k.spill_loads}", str(k.smem_static), str(k.stack), top)
        console.print(table)
    if result.targets:
        table = Table("target family", "in PTX", "in SASS", "SASS count")
        for fam, t in result.targets.items():
            table.add_row(fam, "yes" if t.in_ptx else "no", "yes" if t.in_sass else "no", str(t.sass_count))
        console.print(table)
    for tool, desc in result.tools.items():
        console.print(f"  [dim]{tool}: {safe(desc)}[/dim]", highlight=False, soft_wrap=True)


@app.command("compile")
def compile_cmd(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True, help="A solution file, or a bare .ptx / .cu file."),
    arch: Arch = typer.Option(Arch.sm_90a, "--arch", help="Target architecture (ptxas -arch)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    workload: str = typer.Option(None, "--workload", help="Check the file as eval does for this workload (plan, "
                                 "signatures, source policy) before compiling; report only its target families."),
    language: str = typer.Option(None, "--language", help="ptx or cuda (default: from the plan block, the suffix or the content; "
                                 "not with --workload, which compiles the plan's language as eval does)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompile even if a cached result exists (not with --workload, "
                                  "which compiles as eval does)."),
    sass: bool = typer.Option(False, "--sass", help="Also print the full SASS listing."),
) -> None:
    """Assemble FILE with ptxas for --arch; report errors by line, resources, SASS opcodes and target instructions."""
    from ptxbench.tools.compile import CompilerKilled, compile_source
    from ptxbench.tools.toolchain import ToolchainError, toolchain_report

    from . import inputs

    if workload is not None:
        inputs.workload(workload)
        # --workload compiles through eval's own steps (the plan's language, the compile cache): these were dropped
        # without a word, and a .ptx given --language cuda was compiled, and reported, as PTX
        if dropped := [flag for flag, given in (("--language", language is not None), ("--no-cache", no_cache)) if given]:
            raise inputs.BadInput(f"{' and '.join(dropped)} cannot act with --workload, which checks and compiles the "
                                  "file as eval does (the plan's language, the compile cache): drop "
                                  f"{'it' if len(dropped) == 1 else 'them'}, or --workload")
    if language not in (None, "ptx", "cuda"):
        raise inputs.BadInput(f"--language {language!r}: expected ptx or cuda")
    from .preflight import compile_cache

    compile_cache()  # where the cubin goes: one that cannot be written is one line, not a traceback
    text = file.read_text(errors="replace")
    try:
        if workload is not None:
            result, plan_errors = _checked_like_eval(workload, text, arch.value)
        else:
            result, plan_errors = compile_source(text, language or detect_language(text, file), arch.value, use_cache=not no_cache), []
        listing = ""
        if sass and result is not None and result.cubin_path:
            from ptxbench.tools.sass import sass_listing

            listing = sass_listing(result.cubin_path)
    except ToolchainError as e:  # a missing tool (exit 2), or a compiler killed from outside twice (exit 1: run again)
        killed = isinstance(e, CompilerKilled)
        if as_json:
            status = "compiler_killed" if killed else "toolchain_missing"
            print(json.dumps({"status": status, "message": str(e), "toolchain": toolchain_report(arch.value)}, indent=1))
        else:
            typer.echo(f"error: {e}" + ("; nothing was cached: compile again" if killed else ""), err=True)
        raise typer.Exit(1 if killed else 2) from None
    if as_json:
        record = compile_record(result, file) if result is not None else {"file": str(file), "status": "error", "arch": arch.value}
        record["plan_errors"] = plan_errors
        if plan_errors:
            record["status"] = "error"
        if sass:
            record["sass"] = listing
        print(json.dumps(record, indent=1))
    else:
        from .terminal import terminal_text

        for err in plan_errors:  # they quote the plan: a TOML "\\u001b" is an ESC
            typer.echo(terminal_text(f"{file}: {err}"), err=True)
        if result is not None:
            _print_rich(result, file)
        if listing:
            print(listing)
    if plan_errors or result is None or result.status != "ok":
        raise typer.Exit(1)


def _checked_like_eval(workload: str, text: str, arch: str):
    """(CompileResult or None, the solution's issues): the evaluator's own steps up to the GPU, so that
    compile --workload accepts exactly what eval and optimize accept."""
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.toolchain import ToolchainError

    result = LocalEvaluator().evaluate(workload, text, EvalOptions(arch=arch, no_gpu=True))  # no_gpu: the pool never starts
    if result.status == "INFRA_ERROR":
        raise ToolchainError(result.message)
    return result.compile, result.plan_errors
