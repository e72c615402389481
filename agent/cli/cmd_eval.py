"""`ptxbench eval WORKLOAD FILE`: the full evaluation of one solution file on the local GPU.

With --no-gpu, an option that only the GPU run uses (--trials, --dist, --seed, --no-time, --timeout, --profile,
--l2-flush, --sanitize) is refused in one line rather than dropped without a word.

Exit status 0 whenever the file could be evaluated, whatever the verdict (a wrong or crashing
kernel is a result, and so is COMPILED: with --no-gpu it compiled and was not run); 2 when it
could not (no GPU, a missing package), with a message that says what is missing, and for bad input
(an unknown workload, arch, distribution or sanitizer tool; a missing file), in one line.
"""
from __future__ import annotations

from ptxbench.tools.results import DEFAULT_L2_FLUSH
from ptxbench.workloads.arch import DEFAULT_ARCH
from ptxbench.workloads.schema import DISTS
import json
from pathlib import Path
from typing import Optional

import typer

from .application import app


# the options only the GPU run uses (correctness, timing, profile, sanitizer): --no-gpu refuses them
GPU_RUN_OPTIONS = ("trials", "dist", "seed", "no_time", "timeout", "profile", "l2_flush", "sanitize")


def _print_rich(result) -> None:
    from rich.console import Console
    from rich.table import Column, Table

    from .terminal import rich_safe as safe

    console = Console()
    colour = {"PASSED": "green", "COMPILED": "yellow"}.get(result.status, "red")  # COMPILED: never run, not a pass
    console.print(f"[bold]{result.workload}[/bold]: [{colour}]{result.status}[/{colour}]"
                  + ("" if result.gpu_evaluated else "  (not run on a GPU)"))
    console.print(safe(result.message), highlight=False, soft_wrap=True)
    for err in result.plan_errors:
        console.print(f"  [red]plan[/red] {safe(err)}", highlight=False)
    if result.runtime_error:
        console.print(f"  [red]runtime[/red] {safe(result.runtime_error)}", highlight=False)
    if result.compile and result.compile.kernels:
        # on a narrow terminal a name is folded onto more lines, not cut short ("gemm…" for every kernel)
        table = Table(Column("kernel", overflow="fold"), "regs", "spills", "smem",
                      Column("top SASS opcodes", overflow="fold"))
        for name, k in result.compile.kernels.items():
            top = ", ".join(f"{op} {n}" for op, n in list(k.sass_opcodes.items())[:6])
            table.add_row(safe(name), str(k.registers), str(k.spill_stores + k.spill_loads), str(k.smem_static), top)
        console.print(table)
    if result.targets_static:
        console.print("targets (static): " + ", ".join(f"{f}: {'SASS' if t.in_sass else 'PTX' if t.in_ptx else 'absent'}"
                                                      for f, t in result.targets_static.items()))
    if result.correctness:
        table = Table("run", "inputs", Column("tensor", overflow="fold"), "ok", "max abs", "max rel", "rel fro", "matched", "NaN", "note")
        for s in result.correctness:
            table.add_row(str(s.trial), safe(s.dist), safe(s.tensor), "yes" if s.passed else "NO", f"{s.max_abs_err or 0:.3g}",
                          f"{s.max_rel_err or 0:.3g}", f"{s.rel_fro_err or 0:.3g}", f"{(s.frac_matched or 0) * 100:.3f}%",
                          str(s.n_nan), safe(s.note[:60]))
        console.print(table)
    t = result.timing
    if t:
        table = Table("timed", "median ms", "95% CI", "n")
        table.add_row("candidate", f"{t.candidate.median_ms:.4f}", f"[{t.candidate.ci_low_ms:.4f}, {t.candidate.ci_high_ms:.4f}]",
                      str(t.candidate.n))
        for name, b in t.baselines.items():
            table.add_row(safe(name), f"{b.median_ms:.4f}", f"[{b.ci_low_ms:.4f}, {b.ci_high_ms:.4f}]", str(b.n))
        console.print(table)
        lo, hi = t.speedup_ci or (float("nan"), float("nan"))
        console.print(f"speedup vs {t.primary_baseline}: {t.speedup:.3f}x [{lo:.3f}, {hi:.3f}]   {t.tflops:.1f} TFLOP/s   "
                      f"{t.sol_pct:.1f}% SOL" + (f"   flags: {', '.join(t.flag_labels())}" if t.flags else ""))
    fp = result.fingerprint
    if fp.gpu:
        console.print("[dim]" + safe(f"{fp.gpu} ({fp.sm_count} SMs), driver {fp.driver}, CUDA {fp.cuda_runtime}, torch {fp.torch}, "
                                     f"cuDNN {fp.cudnn}, ptxas {fp.ptxas}") + "[/dim]", highlight=False)


@app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    workload: str = typer.Argument(..., help="Workload id (see `ptxbench workloads`)."),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True, help="The solution file."),
    trials: int = typer.Option(None, "--trials", help="Correctness runs with fresh inputs (default: the workload's)."),
    dist: str = typer.Option("normal", "--dist", help="Input distribution: normal, or spiky (heavy tails)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the first input set; drawn per evaluation when "
                                       "not given (a result's input_seed replays its verdict)."),
    no_time: bool = typer.Option(False, "--no-time", help="Check correctness only."),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Stop after compile + SASS (the options of the GPU run are "
                                "refused with it)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Watchdog limit in seconds for the kernel's GPU work."),
    arch: str = typer.Option(DEFAULT_ARCH, "--arch", help="Target architecture: sm_90a | sm_100a."),
    profile: bool = typer.Option(False, "--profile", help="Also take an Nsight Compute profile (where supported)."),
    l2_flush: str = typer.Option(DEFAULT_L2_FLUSH, "--l2-flush", help="How each timed call finds L2 cold: read (a "
                                 "buffer twice its size read: clean lines) or write (written, the field's usual "
                                 "practice: the call pays the dirty lines' write-back, docs/timing-integrity.md)."),
    sanitize: list[str] = typer.Option([], "--sanitize", help="compute-sanitizer tools: memcheck, racecheck, ..."),
    as_json: bool = typer.Option(False, "--json", help="Print the EvalResult as JSON."),
) -> None:
    """Compile FILE, check it on fresh inputs against the reference, time it against the library."""
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.results import L2_FLUSH_MODES
    from ptxbench.tools.sanitize import TOOLS

    from . import inputs

    inputs.workload(workload), inputs.arch(arch), inputs.one_of(dist, DISTS, "--dist")
    inputs.one_of(l2_flush, L2_FLUSH_MODES, "--l2-flush")
    for tool in sanitize:
        inputs.one_of(tool, TOOLS, "--sanitize")
    inputs.positive(trials, "--trials"), inputs.positive(timeout, "--timeout"), inputs.seed(seed)
    inputs.within_a_week(timeout, "--timeout")
    inputs.trials(trials)
    from . import preflight

    if no_gpu:
        inputs.gpu_only(inputs.given_options(ctx, GPU_RUN_OPTIONS))
    else:
        preflight.gpu()  # no usable GPU here: said without starting a worker
    preflight.toolchain(arch)  # no ptxas here: one line, not an INFRA_ERROR verdict
    options = EvalOptions(arch=arch, trials=trials, dist=dist, seed=seed, time=not no_time, no_gpu=no_gpu,
                          timeout_s=timeout, profile=profile, sanitize=sanitize, l2_flush=l2_flush)
    evaluator = LocalEvaluator()
    try:
        result = evaluator.evaluate(workload, file.read_text(errors="replace"), options)
    finally:
        evaluator.close()
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), indent=1))
    else:
        _print_rich(result)
    if result.status == "INFRA_ERROR":
        if not as_json:
            typer.echo(f"could not evaluate: {result.message}", err=True)
        raise typer.Exit(2)
