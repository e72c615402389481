"""`ptxbench synth-repairs`: broken variants of correct kernels, evaluated on the GPU, recorded as a run."""
from __future__ import annotations

from shlex import quote
from typing import Optional

import typer

from .application import app


@app.command("synth-repairs")
def synth_repairs(
    ctx: typer.Context,
    workloads: list[str] = typer.Argument(None, help="workloads whose reference kernels are broken (default: the GEMM task)"),
    run_dir: Optional[str] = typer.Option(None, help="run directory the repair pairs are written to (default <runs root>/synth-repairs)"),
    mutations: Optional[str] = typer.Option(None, help="comma-separated bug classes (default: every class that applies, except "
                                  "the repair suite's held-out classes)"),
    trials: Optional[int] = typer.Option(None, help="correctness trials per evaluation"),
    timeout: float = typer.Option(60.0, "--timeout", help="watchdog limit in seconds per candidate's GPU work (as "
                                  "eval's --timeout)"),
    timeout_s: Optional[float] = typer.Option(None, "--timeout-s", hidden=True,
                                              help="the former spelling of --timeout"),
    list_only: bool = typer.Option(False, "--list", help="list the bug classes that apply, evaluate nothing"),
) -> None:
    """Inject named Hopper bugs into correct kernels; keep each variant the evaluator really rejects."""
    from rich.console import Console
    from rich.table import Table

    from ...tools.evaluator import EvalOptions
    from ..export.bases import base_source, extra_bases
    from ..export.mutations import MUTATIONS, applicable
    from ..export.synth import synthesize
    from ..loop.feedback import render_eval
    from ..models.builtin import reference_source
    from ..records.rundir import write_manifest
    from ..loop.state import OptimizeConfig
    from ..loop.task import system_prompt, task_prompt
    from ...workloads.registry import get_workload

    from . import inputs, preflight
    from ..records.rundir import runs_root

    console = Console()
    if list_only and (given := inputs.given_options(ctx, ("run_dir", "trials", "timeout", "timeout_s"))):
        # --list evaluates and writes nothing: these were taken and dropped without a word
        one = len(given) == 1
        raise inputs.BadInput(f"{', '.join(given)} {'acts' if one else 'act'} on the synthesis run, which --list skips "
                              f"(it evaluates and writes nothing): drop {'it' if one else 'them'}, or --list")
    ids = [inputs.workload(w) for w in workloads or ["gemm_bf16_m8192_n7168_k5120"]]
    # given empty (an unset shell variable) it named no class and every class was synthesized without a word
    names = inputs.mutations(inputs.listed(mutations, "--mutations", "give comma-separated bug classes (`--list` "
                                           "shows them), or leave it out for every class that applies")) or None
    # a name given twice evaluated its variants twice on the GPU, and its table and pair count said each twice
    for flag, given in (("WORKLOADS", ids), ("--mutations", names or [])):
        if twice := next((n for i, n in enumerate(given) if n in given[:i]), None):
            raise inputs.BadInput(f"{flag} names {twice} twice: each is synthesized once")
    if names is None:  # training data: the repair suite's held-out bug classes are left out unless named
        from ..repairs.suite import HELD_OUT_CLASSES

        names = [m.name for m in MUTATIONS if m.name not in HELD_OUT_CLASSES]
    if timeout_s is not None:  # the former spelling: still taken, never beside the new one
        if inputs.given_options(ctx, ["timeout"]):
            raise inputs.BadInput("--timeout-s is the former spelling of --timeout: give one of them")
        inputs.positive(timeout_s, "--timeout-s"), inputs.within_a_week(timeout_s, "--timeout-s")
        timeout = timeout_s
    inputs.positive(trials, "--trials"), inputs.positive(timeout, "--timeout"), inputs.within_a_week(timeout, "--timeout")
    inputs.trials(trials)  # as eval's
    # taken as text: typer's Path made an empty one '.', the working directory
    run_dir = inputs.new_folder(runs_root() / "synth-repairs" if run_dir is None else run_dir, "--run-dir")
    inputs.no_other_files(run_dir, "--run-dir")
    # as optimize's and bench's: a damaged manifest was a traceback, and one no run wrote (no command) was taken,
    # to be written over (read before the write probe: nothing is written into another command's run)
    manifest = inputs.run_manifest(run_dir, "--run-dir")
    if manifest and (command := manifest.get("command")) != "synth-repairs":
        what = f"{'an' if command[:1] in 'aeiou' else 'a'} {command}" if command else "a foreign"
        raise inputs.BadInput(f"--run-dir {run_dir} holds {what} run; choose another folder")
    if not list_only:
        preflight.writable(run_dir)
    if list_only:
        for wid in ids:
            found = [m.name for m, _ in applicable(reference_source(wid), names)]
            console.print(f"{wid}: {', '.join(found) or 'none'}")
            for b in extra_bases(wid):
                chosen = [n for n in (names or [m.name for m in MUTATIONS]) if b.classes is None or n in b.classes]
                found = [m.name for m, _ in applicable(base_source(wid, b.name), chosen)] if chosen else []
                console.print(f"{wid} ({b.name}: {b.description}): {', '.join(found) or 'none'}")
        from ..repairs.suite import HELD_OUT_CLASSES

        console.print("classes: " + ", ".join(m.name + (" (held out: only when named)" if m.name in HELD_OUT_CLASSES else "")
                                              for m in MUTATIONS))
        return

    from ...tools.evaluate import LocalEvaluator

    def prompts(wid: str) -> tuple[str, str]:
        cfg = OptimizeConfig(workload=wid, model="synthetic")
        return system_prompt(cfg), task_prompt(cfg, get_workload(wid))

    from ...tools.gpu.pool import NoGpuError

    no_gpu = "synth-repairs evaluates every variant on a GPU and found none ({}); `--list` shows the bug classes without one"
    if reason := preflight.no_gpu_reason():  # the machine shows it has none: said without starting a worker
        raise inputs.BadInput(no_gpu.format(reason))
    preflight.toolchain(EvalOptions().arch)  # no ptxas here: every variant would be an INFRA_ERROR
    evaluator = LocalEvaluator()
    try:
        evaluator.pool  # every variant runs on a GPU: find out before anything is written
    except NoGpuError as exc:
        evaluator.close()
        raise inputs.BadInput(no_gpu.format(exc)) from None
    write_manifest(run_dir, {"command": "synth-repairs", "workloads": ids, "mutations": names or "all"})
    table = Table("workload", "bug class", "status", "expected", "kept")
    try:
        report = synthesize(
            ids, evaluator, run_dir, sources=reference_source, prompts=prompts,
            feedback=lambda result, turn: render_eval(result, turn, no_gpu=False),
            mutations=names, options=EvalOptions(trials=trials, timeout_s=timeout, profile_on_pass=False),
            on_outcome=lambda o: console.print(f"  {o.workload} {o.mutation}: {o.status}"),
            extra_sources=lambda w: [(b.name, base_source(w, b.name), b.classes) for b in extra_bases(w)],
        )
    finally:
        evaluator.close()
    for wid, status in report.reference_status.items():
        console.print(f"reference kernel of {wid}: {status}")
    for o in report.outcomes:
        table.add_row(o.workload, o.mutation, o.status, "yes" if o.as_expected else "no", "yes" if o.kept else "no")
    console.print(table)
    # the fixed kernels are evaluated unprofiled: no runtime target evidence, which export requires by default
    console.print(f"{len(report.kept)} repair pairs in {run_dir}; export them with "
                  f"`ptxbench export {quote(str(run_dir))} --recipe fixit --out DIR --no-require-target`",
                  markup=False, highlight=False)
