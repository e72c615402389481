"""`ptxbench bench`: run a model x workload x prompt matrix, then score it and write its report.

    ptxbench bench --models builtin/tuner,builtin/reference --workloads gemm_bf16_m8192_n7168_k5120,mha_fwd_d128 \\
        --trajectories 2 --turns 8 --run-dir runs/bench-h200
    ptxbench bench --run-dir runs/bench-h200 --resume          # after a kill: finished work is not repeated
    ptxbench bench ... --backend ray --ray-address auto        # GPU workers as Ray actors (num_gpus=1)
    ptxbench bench ... --no-gpu --api-base http://localhost:8000/v1   # compile-only, local OpenAI-compatible server
"""
from __future__ import annotations

from ptxbench.tools.figure_text import figure
from ptxbench.workloads.arch import DEFAULT_ARCH
import time
from pathlib import Path
from shlex import quote  # a path in a command the user is to run: a folder with a space is one word
from typing import Optional

import typer
from .terminal import rich_safe

from .application import app
from .sigterm import Terminated, on_sigterm, stop_exit
from ..records.events import MAX_TURNS


# trajectories per cell: --trajectories 100000000 expanded its matrix for half an hour, silent, its memory growing,
# before anything ran or was written (a thousand times a paper's dozen is still a bench)
MAX_TRAJECTORIES = 10_000


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _limits(text: str | None) -> dict[str, int]:
    from .inputs import BadInput

    out = {}
    for part in _split(text):
        name, _, value = part.partition("=")
        if not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise BadInput(f"--provider-limit: expected provider=N with N >= 1 (e.g. openai=4), got {part!r}")
        out[name.strip()] = int(value)
    return out


# the matrix a bench run recorded: a --resume goes on with it (only the runtime knobs, RUNTIME_FIELDS, may change)
MATRIX_OPTIONS = {"models": "--models", "workloads": "--workloads", "prompts": "--prompts", "trajectories": "--trajectories",
                  "turns": "--turns", "arch": "--arch", "mode": "--mode", "target_speedup": "--target-speedup",
                  "no_gpu": "--no-gpu", "seed": "--seed", "track": "--track", "suite": "--suite", "profile": "--profile"}


def resume_conflict(ctx, given: dict, recorded, run_dir) -> str | None:
    """The first matrix option given on the command line with a value other than the one `run_dir`'s run recorded:
    `bench --resume --turns 12` kept the recorded turns without a word. The same value again (the first command
    repeated with --resume) is no conflict."""
    for name, flag in MATRIX_OPTIONS.items():
        source = ctx.get_parameter_source(name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        value, before = given[name], getattr(recorded, name)
        if value != before:
            shown = (lambda v: ",".join(v) if isinstance(v, list) else ("on" if v else "off") if isinstance(v, bool) else v)
            return (f"{flag} {shown(value)}: bench --resume goes on with the matrix {run_dir}'s run recorded ({flag} "
                    f"{shown(before)}); drop it, or start a new --run-dir (only the runtime options, --backend, "
                    "--ray-address, --gpus, --parallel, --provider-limit, --api-base, --infra-retries, --model-timeout, "
                    "--ray-placement-wait, may change)")
    return None


def check_limits(limits: dict[str, int], models: list[str]) -> None:
    """Each --provider-limit names a provider a model of the matrix calls: a misspelt one (opnai=4) was kept and never
    applied, the real provider's calls going at the default concurrency."""
    from ..bench.matrix import provider
    from .inputs import BadInput
    import difflib

    providers = sorted({provider(m) for m in models})
    for name in limits:
        if name not in providers:
            close = difflib.get_close_matches(name, providers, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise BadInput(f"--provider-limit {name}={limits[name]}: no model of the matrix calls {name!r}: {hint}"
                           f"its providers are {', '.join(providers)}")


def check_matrix(models: list[str], workloads: list[str], prompts: list[str], arch: str, api_base: str | None,
                 report) -> None:
    """Every name of the matrix, and every LLM's key and endpoint, before anything starts (BadInput on the first miss)."""
    from . import inputs

    for flag, names in (("--models", models), ("--workloads", workloads), ("--prompts", prompts)):
        if twice := next((n for i, n in enumerate(names) if n in names[:i]), None):  # two cells of one id
            raise inputs.BadInput(f"{flag} names {twice} twice: each is one cell of the matrix; --trajectories N runs "
                                  "N trajectories of a cell")
    for w in workloads:
        inputs.workload(w)
    for p in prompts:
        inputs.prompt(p)
    inputs.arch(arch)
    for m in models:
        inputs.model(m, "--models")
    check_models(models, api_base, report)


def replays_fit(models: list[str], workloads: list[str], mode: str) -> None:
    """Each replay/ model answers each workload in `mode`: a cell of another task was an infra failure at its first
    call, retried, left out of the scores, with a --resume that could only fail the same way."""
    from . import inputs
    from ..models.replay import replay_mismatch

    for m in models:
        for w in workloads if m.startswith("replay/") else ():
            if why := replay_mismatch(m.removeprefix("replay/"), w, mode):
                raise inputs.BadInput(f"--models {m} on {w}: {why}")


def check_models(models: list[str], api_base: str | None, report) -> None:
    """Every LLM's key and endpoint (the endpoint probed once): a new matrix's, or the one a --resume goes on with."""
    from . import inputs

    checked_base = False
    for m in models:
        inputs.credentials(m, api_base, None, report=report, probe=not checked_base, flag="--models")
        checked_base = checked_base or bool(api_base and not m.startswith(("builtin/", "replay/")))


def models_left_to_run(run_dir: Path, config) -> list[str]:
    """The recorded models that a --resume still calls: those with a trajectory not finished (no stop yet, or an
    infra stop it retries). A finished run's resume only writes its report: its key and server were asked for, and
    a server gone since refused it."""
    from ..bench.matrix import expand
    from ..records.rundir import TrajectoryRecord, read_events, trajectory_log
    from ..scoring.turns import score_trajectory

    left: set[str] = set()
    for cfg in expand(config):
        if cfg.model in left:
            continue
        log = trajectory_log(Path(run_dir) / "trajectories" / cfg.trajectory_id())
        try:
            done = log is not None and not score_trajectory(TrajectoryRecord(log.parent, read_events(log))).left_out
        except Exception:  # noqa: BLE001 - a log that cannot be read or scored: the resume may call the model
            done = False
        if not done:
            left.add(cfg.model)
    return [m for m in config.models if m in left]


def _repair_matrix(config, one_builtin: bool, console):
    """The repair track's matrix, said in a line or two: builtin/ models at one trajectory per task (unless
    --trajectories was given), and the tasks --no-gpu leaves out (a runtime failure's repair is not judged)."""
    from . import inputs
    from ..repairs.track import deterministic, left_out_line

    builtin = [m for m in config.models if deterministic(m)]
    note = None
    if one_builtin and builtin and config.trajectories > 1:
        config = config.model_copy(update={"builtin_trajectories": 1})
        note = (f"{', '.join(builtin)}: 1 trajectory per task, not {config.trajectories} (a builtin model answers "
                "the same input the same way; --trajectories N runs N)")
    try:
        line = left_out_line(config)
    except ValueError as exc:  # no suite, no task of the workloads, none judged without a GPU
        raise inputs.BadInput(str(exc)) from None
    if not config.no_gpu and config.backend == "local":  # no GPU here: one line, before the notes of a run that won't
        from .preflight import gpu

        gpu()
    for said in (note, line):  # once the suite is read: a refused bench is one line, with no note before it
        if said:
            console.print(said, markup=False, highlight=False)
    return config


def _interrupted(exc: KeyboardInterrupt, where: str, run_dir, recorded: bool):
    """Ctrl-C or SIGTERM: one line saying where the bench stopped and how to go on, then the stop's exit code."""
    by = " by SIGTERM" if isinstance(exc, Terminated) else ""
    typer.echo(f"interrupted{by} {where}; " + (f"resume with: ptxbench bench --resume --run-dir {quote(str(run_dir))}"
                                               if recorded else "no run was recorded"), err=True)
    raise typer.Exit(stop_exit(exc)) from None


@app.command()
def bench(
    models: Optional[str] = typer.Option(None, help="comma-separated model strings (builtin/..., litellm names)"),
    workloads: Optional[str] = typer.Option(None, help="comma-separated workload ids (see `ptxbench workloads`)"),
    trajectories: Optional[int] = typer.Option(None, min=1, max=MAX_TRAJECTORIES, help="trajectories per (model, workload, prompt) cell (default 12; "
                                               "repair track: 1 for a builtin/ model, which answers the same input the same way)"),
    turns: Optional[int] = typer.Option(None, min=1, max=MAX_TURNS, help="turns per trajectory (default 8; repair track 4)"),
    track: str = typer.Option("optimize", help="optimize | repair (the repair suite: each trajectory starts from a broken kernel)"),
    suite: Optional[str] = typer.Option(None, help="repair track: the suite folder (default workloads/repairs)"),
    prompts: str = typer.Option("knowledge", help="comma-separated prompt variants: basic, knowledge, expert"),
    run_dir: Optional[str] = typer.Option(None, help="run folder (default <runs root>/bench-<time>; the root is $PTXBENCH_RUNS or runs/)"),
    arch: str = typer.Option(DEFAULT_ARCH, help="target architecture: sm_90a | sm_100a"),
    backend: Optional[str] = typer.Option(None, help="local (this machine's GPUs; the default) | ray (GPU actors on a Ray cluster)"),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address ('auto', ray://host:10001); default: a local Ray"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in --run-dir: its recorded matrix is used (a "
                                "matrix option given with another value is refused); only runtime options (backend, ray "
                                "address and placement wait, gpus, parallel, provider limits, api base, infra retries, "
                                "model timeout) may change"),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="evaluate up to compile + SASS only (--profile, --gpus and "
                                "--seed are refused with it)"),
    api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint for the models (vLLM, ollama, ...)"),
    mode: str = typer.Option("pipeline", help="pipeline | tools"),
    target_speedup: Optional[float] = typer.Option(None, help="end a trajectory early once a kernel reaches this speedup"),
    gpus: Optional[int] = typer.Option(None, help="GPU workers to use (default: all visible / all in the Ray cluster)"),
    ray_placement_wait: Optional[float] = typer.Option(None, "--ray-placement-wait", min=1.0, help="--backend ray: "
                                                       "seconds an evaluation waits for a placed GPU actor before the "
                                                       "bench stops, recorded and resumable (default 600)"),
    parallel: Optional[int] = typer.Option(None, min=1, help="trajectories in flight at once (default 16)"),
    provider_limit: Optional[str] = typer.Option(None, help="model calls in flight per provider, e.g. openai=4,anthropic=2 (default 8)"),
    infra_retries: Optional[int] = typer.Option(None, min=0, help="retries of an infra-failed trajectory from its last good step (default 2)"),
    seed: Optional[int] = typer.Option(None, help="seed of the GPU evaluations' input sets (trajectory i of a cell "
                                       "gets seed + i; default: drawn per evaluation)"),
    model_timeout: Optional[float] = typer.Option(None, "--model-timeout", min=1.0, help="seconds one model call may "
                                                  "take before it is retried as a timeout (default 600; 6 calls at "
                                                  "most); with --resume it replaces the run's"),
    profile: Optional[str] = typer.Option(None, "--profile", help="Nsight Compute policy of every trajectory: auto | full | verdict "
                                "(see `ptxbench optimize --help`)"),
    report: bool = typer.Option(True, help="write the report into <run>/report when done"),
    restart_trajectory: bool = typer.Option(False, "--restart-trajectory", help="with --resume: trajectories the "
                                            "checkpoints cannot continue are set aside (abandoned/) and started over"),
) -> None:
    """Run a benchmark matrix into one run folder; print the leaderboard."""
    from rich.console import Console

    from ..bench.evaluators import BenchError, RunStopped, make_evaluator
    from ..bench.matrix import BenchConfig

    from . import inputs
    from ..records.rundir import runs_root

    console = Console(stderr=True, soft_wrap=True)
    # a list option given empty (an unset shell variable) names nothing: refused, not read as the option left out
    model_names = inputs.listed(models, "--models", "give comma-separated model strings (builtin/tuner, replay/<run>, openai/gpt-5)")
    workload_names = inputs.listed(workloads, "--workloads", "give comma-separated workload ids (see `ptxbench workloads`); the repair "
                  "track runs its suite's every task when it is left out")
    prompt_names = inputs.listed(prompts, "--prompts", "give comma-separated prompt variants (basic, knowledge, expert), or leave it "
                  "out for knowledge")
    # given empty (an unset shell variable): taken as not given, or (--suite) as '.'
    for text, flag, expected in ((api_base, "--api-base", "give the server's URL, or leave it out for the providers'"),
                                 (ray_address, "--ray-address", "give the cluster's address, or leave it out for a local Ray"),
                                 (provider_limit, "--provider-limit", "give provider=N pairs, or leave it out for 8 each"),
                                 (suite, "--suite", "give the suite folder, or leave it out for workloads/repairs")):
        inputs.not_empty(text, flag, expected)
    suite = Path(suite) if suite is not None else None
    # inf (meant as no limit) was kept, on --resume too (its runtime options replace the recorded config's unchecked)
    inputs.positive(model_timeout, "--model-timeout", "seconds one model call may take (default 600)")
    inputs.positive(ray_placement_wait, "--ray-placement-wait", "seconds an evaluation waits for a GPU actor "
                    "(default 600)")
    inputs.not_negative(target_speedup, "--target-speedup", "leave it out to run every turn")
    inputs.within_a_week(model_timeout, "--model-timeout"), inputs.within_a_week(ray_placement_wait, "--ray-placement-wait")
    inputs.seed(seed)
    if resume and run_dir is None:
        raise inputs.BadInput("--resume needs --run-dir: the bench run folder to continue")
    if backend not in (None, "local", "ray"):
        raise inputs.BadInput(f"--backend {backend!r}: expected local or ray")
    if run_dir is not None:
        run_dir = inputs.new_folder(run_dir, "--run-dir")  # taken as text: typer's Path made an empty one '.'
        if not resume:
            inputs.no_other_files(run_dir, "--run-dir")
        else:
            inputs.run_folder(run_dir, "bench run")
        manifest = inputs.run_manifest(run_dir, "--run-dir")  # a damaged one: one line, not run_bench's traceback
        if resume and manifest.get("command") in (None, "bench"):  # another command's run is refused as one below:
            # "unseal it first, then continue it" sent the user to unseal a run a bench cannot continue
            inputs.unsealed(run_dir, "--resume")
    config = recorded = None
    overrides = {"backend": backend, "ray_address": ray_address, "gpus": gpus, "parallel": parallel,
                 "provider_limits": _limits(provider_limit) or None, "api_base": api_base, "infra_retries": infra_retries,
                 "model_timeout_s": model_timeout, "ray_placement_wait_s": ray_placement_wait}
    if resume:  # the recorded models' keys and endpoint (--api-base applied), said in one line before any trajectory
        from ..bench.runner import open_run

        try:
            recorded = open_run(None, run_dir, True, overrides)
        except (BenchError, KeyError, ValueError):  # not a bench run, a damaged config: said by run_bench, as before
            recorded = None
        if recorded is not None:
            from .cmd_optimize import current_context

            given = dict(models=model_names, workloads=workload_names, prompts=prompt_names,
                         trajectories=trajectories, turns=turns, arch=arch, mode=mode, target_speedup=target_speedup,
                         no_gpu=no_gpu, seed=seed, track=track, suite=str(suite) if suite else None, profile=profile)
            if conflict := resume_conflict(current_context(), given, recorded, run_dir):
                raise inputs.BadInput(conflict)
            check_limits(_limits(provider_limit), recorded.models)
            check_models(models_left_to_run(run_dir, recorded), recorded.api_base,
                         report=lambda line: console.print(line, markup=False, highlight=False))
    if track not in ("optimize", "repair"):
        raise inputs.BadInput(f"--track {track!r}: expected optimize or repair")
    # options the run would ignore are refused, as score's --no-gpu without --re-evaluate is (a resume's record
    # holds its track and backend)
    if restart_trajectory and not resume:
        raise inputs.BadInput("--restart-trajectory goes with --resume: a new run has no trajectory to set aside; drop it")
    if suite is not None and track != "repair" and not resume:
        raise inputs.BadInput(f"--suite {suite}: the repair suite's folder goes with --track repair")
    if (ray_address or ray_placement_wait) and backend != "ray" and not resume:
        raise inputs.BadInput(f"--{'ray-address' if ray_address else 'ray-placement-wait'} goes with --backend ray: "
                              "a local run evaluates on this machine's GPUs")
    turns = turns or (4 if track == "repair" else 8)
    one_builtin = track == "repair" and trajectories is None  # repair track: a builtin/ model's copies are left out
    trajectories = trajectories or 12
    if not resume:
        if not model_names or not (workload_names or track == "repair"):
            raise inputs.BadInput("give --models (comma-separated; the repair track's tasks are its workloads), or "
                                  "--resume with --run-dir" if track == "repair" else
                                  "give --models and --workloads (comma-separated), or --resume with --run-dir")
        from ..loop.profile_policy import POLICIES

        if profile is not None:
            inputs.one_of(profile, POLICIES, "--profile")
        if no_gpu:  # as eval's and optimize's: the Nsight policy, the GPU count, or the input seed (only the GPU
            # run draws inputs) of a run that never reaches a GPU
            inputs.gpu_only([flag for flag, value in (("--profile", profile), ("--gpus", gpus), ("--seed", seed))
                             if value is not None])
        check_matrix(model_names, workload_names, prompt_names, arch, api_base,
                     report=lambda line: console.print(line, markup=False, highlight=False))
        check_limits(_limits(provider_limit), model_names)
        inputs.llm_only(model_names, [flag for flag, value in (("--api-base", api_base), ("--model-timeout", model_timeout))
                                         if value is not None], "--models")
        config = inputs.config(
            BenchConfig, {"provider_limits": "--provider-limit"}, models=model_names, workloads=workload_names,
            prompts=prompt_names, trajectories=trajectories, turns=turns, mode=mode, arch=arch,
            target_speedup=target_speedup, no_gpu=no_gpu, api_base=api_base, backend=backend or "local",
            ray_address=ray_address, gpus=gpus, parallel=parallel or 16, provider_limits=_limits(provider_limit),
            infra_retries=2 if infra_retries is None else infra_retries, seed=seed, track=track,
            model_timeout_s=model_timeout, **({"ray_placement_wait_s": ray_placement_wait} if ray_placement_wait else {}),
            suite=str(suite) if suite else None, **({"profile": profile} if profile else {}))
        if config.track == "optimize":  # (the mode checked by now); the repair track's cells are its suite's tasks
            replays_fit(config.models, config.workloads, config.mode)
    if config is not None and config.track == "repair":
        config = _repair_matrix(config, one_builtin, console)
    run_dir = run_dir or runs_root() / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    from . import preflight
    from .preflight import writable

    writable(run_dir)  # a run folder that cannot be made: said before any worker starts
    if (matrix := config or recorded) is not None and matrix.backend == "local":  # Ray's actors compile on their nodes
        preflight.toolchain(matrix.arch)  # no ptxas here: every trajectory would end infra-failed
    if recorded is not None and not recorded.no_gpu and recorded.backend == "local":  # not "pass --no-gpu", refused
        preflight.gpu(preflight.RESUMED_GPU_RUN_HINT)
    evaluator = None
    try:
        with on_sigterm():  # a stop while the workers start: one line, and the workers that started end
            # a new run's GPU workers start now, while the agent loop's modules (LangGraph) import below
            evaluator = make_evaluator(config) if config is not None else None
            from ..bench.runner import TrajectoryReport, run_bench
            from ..bench.unreached import UNREACHED, sentence
    except BenchError as exc:  # no GPU for a GPU run: said before a run folder is made
        raise inputs.BadInput(str(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM before the bench began: a traceback out of the pool's start
        if evaluator is not None:
            evaluator.close()
        _interrupted(exc, "while the GPU workers started", run_dir, recorded=resume)

    done = []
    unreached: set[str] = set()  # models said to be out of reach (bench/unreached.py): their trajectories wait
    several = len((config or recorded).models) > 1 if (config or recorded) is not None else False

    def on_done(r: TrajectoryReport) -> None:
        if r.stop_reason == UNREACHED:  # not run, and no result: the bench's stop line says it in the end; where other
            # models run on (hours, maybe), said once as it happens too
            if several and r.model not in unreached:
                unreached.add(r.model)
                console.print(f"{r.model}: {sentence(r.error)} Its trajectories wait for --resume; the other models run on",
                              markup=False, highlight=False)
            return
        done.append(r)
        best = f"{figure(r.best_speedup)}x" if r.best_speedup is not None else "-"
        flag = " [red]infra-failed[/red]" if r.infra_failed else ""
        retried = f", attempts {r.attempts}: {rich_safe(r.error[:160])}" if r.attempts > 1 else ""  # why it was retried
        console.print(f"[{len(done)}] {rich_safe(r.trajectory_id)}: {' '.join(r.statuses) or '-'} best {best} "
                      f"({r.stop_reason}{retried}){flag}")

    try:
        with on_sigterm():  # a scheduler's stop or `kill` ends the bench as Ctrl-C does: recorded, resumable
            outcome = run_bench(config, run_dir, resume=resume, overrides=overrides, on_done=on_done,
                                restart=restart_trajectory, evaluator=evaluator, own_evaluator=True)
    except RunStopped as exc:  # every Ray GPU worker lost, the storage gave out, a model's host never reached: what
        # ran is recorded, resumable; not a usage error
        raise inputs.RunFailed(str(exc)) from None
    except BenchError as exc:  # a run folder in the way, no GPU, a matrix with repeated ids: nothing was written
        raise inputs.BadInput(str(exc)) from None
    except Exception as exc:  # storage that gave out mid-run: one line; anything else as it is
        raise preflight.storage_stop(exc, f"ptxbench bench --resume --run-dir {quote(str(run_dir))}", run_dir) from None
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the trajectories in flight stopped at their next step
        where = f"({len(done)} trajectories finished)" if done else "(no trajectory finished)"
        _interrupted(exc, where, run_dir, recorded=(Path(run_dir) / "manifest.json").exists())
    failed = sum(r.infra_failed for r in outcome.trajectories)
    console.print(f"{len(outcome.trajectories)} trajectories in {outcome.elapsed_s:.0f} s (evaluator start {outcome.setup_s:.1f} s, "
                  f"close {outcome.close_s:.1f} s), {failed} infra-failed; run: {run_dir}",
                  markup=False, highlight=False)  # a folder named [b]x[/b] is printed as it is, not as markup
    if failed:  # an outage, a refused key, a lost GPU: not the models' results, and not the run's end
        console.print(f"the infra-failed trajectories are left out of the scores; once the cause is fixed, resume with: "
                      f"ptxbench bench --resume --run-dir {quote(str(run_dir))}", markup=False, highlight=False)
    for w in outcome.worker_start:  # where the evaluator's start went (also in the run folder: evaluator_start.json)
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in w.get("phases", {}).items() if v >= 0.05)
        if "process_start_s" in w:  # before its code ran: the forkserver, the preload, the fork
            phases = f"process start {w['process_start_s']:.1f} s, " + phases
        console.print(f"GPU {w['device']} worker ready after {w['ready_after_s']:.1f} s ({phases or 'no phases'})")
    use = outcome.gpu_use  # where the GPU time went (also in the run folder: gpu_timeline.json)
    for d, u in sorted(use.get("devices", {}).items()):
        console.print(f"GPU {d} held {u['held_s']:.1f} s of {use['window_s']:.1f} s ({100 * u['share']:.0f}%): "
                      f"{u['jobs']} jobs, {u['holds']} profiler / sanitizer holds")
    if use.get("idle_while_pinned_waited_s"):
        console.print(f"GPU idle while a profiler replay waited for another GPU: {use['idle_while_pinned_waited_s']:.1f} s")
    try:
        with on_sigterm():  # a stop now cuts short only the tables and the report: the run is whole
            _tables_and_report(run_dir, outcome.config.track, report, console)
    except KeyboardInterrupt as exc:
        by = " by SIGTERM" if isinstance(exc, Terminated) else ""
        typer.echo(f"interrupted{by} while the finished run was scored and reported (every trajectory is recorded): "
                   f"ptxbench report {quote(str(run_dir))} writes its report", err=True)
        raise typer.Exit(stop_exit(exc)) from None


def _tables_and_report(run_dir, track: str, report: bool, console) -> None:
    """What a finished bench prints and writes: the leaderboard (and the repair track's tables), then its report."""
    from . import inputs, preflight
    from ..report.tables import leaderboard
    from ..scoring import score_runs

    typer.echo(leaderboard(score_runs([run_dir])).markdown())
    if track == "repair":  # the run's track: a --resume's is its record's, whatever --track says
        from ..scoring.repair_track import repair_markdown, score_repair_runs

        typer.echo(repair_markdown(score_repair_runs([run_dir])))
    if report:
        from ..report import write_report

        try:
            files = write_report(run_dir)
        except Exception as exc:  # the run is whole; only its report found no room
            if (what := preflight.storage_failure(exc, run_dir)) is None:
                raise
            raise inputs.RunFailed(f"the run is recorded, but its report could not be written: {what}; once there "
                                   f"is room: ptxbench report {quote(str(run_dir))}") from None
        console.print(f"report: {files.html}", markup=False, highlight=False)
