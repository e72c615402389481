"""`ptxbench optimize`: run the agent on one workload, with a live view of turns, verdicts and speedups.

    ptxbench optimize gemm_bf16_m8192_n7168_k5120                       # built-in tuner, no key
    ptxbench optimize mha_fwd_d128 --model anthropic/claude-opus-4-1 --prompt expert
    ptxbench optimize gemm_bf16_m8192_n7168_k5120 --model hosted_vllm/Qwen/Qwen3-32B --api-base http://localhost:8000/v1
    ptxbench optimize smoke_gemm_bf16_m256_n256_k512 --no-gpu           # compile + SASS only (laptops)
    ptxbench optimize --resume runs/<run>                               # continue a killed run
"""
from __future__ import annotations

from ptxbench.tools.figure_text import figure
from ptxbench.tools.results import DEFAULT_L2_FLUSH
from ptxbench.workloads.arch import DEFAULT_ARCH
from enum import Enum
from pathlib import Path
from shlex import quote  # a path in a command the user is to run: a folder with a space is one word
from typing import Optional

import typer

from .application import app
from .sigterm import Terminated, on_sigterm, stop_exit
from .terminal import terminal_text
from ..records.events import MAX_TURNS


# OptimizeConfig fields whose option is spelled otherwise (for one-line validation errors)
FLAGS = {"max_cost_usd": "--max-cost", "max_wall_s": "--max-wall", "retry_wait_s": "--retry-wait",
         "model_timeout_s": "--model-timeout"}


class ModeChoice(str, Enum):
    pipeline = "pipeline"
    tools = "tools"


class ContextChoice(str, Enum):
    full = "full"
    last = "last"
    summary = "summary"


# COMPILED (--no-gpu): compiled cleanly but never run, so not green: correctness is unknown.
STATUS_STYLES = {"PASSED": "green", "COMPILED": "yellow"}


def target_summary(result) -> str:
    """'wgmma executed, tma executed' at runtime, else what the SASS shows ('wgmma in SASS')."""
    if result.targets_runtime:
        return ", ".join(f"{name} {t.verdict}" for name, t in result.targets_runtime.items())
    static = result.compile.targets if result.compile else {}
    return ", ".join(f"{name} {'in SASS' if t.in_sass else 'absent'}" for name, t in static.items()) or "-"


def retry_line(event) -> str:
    return (f"turn {event.turn}: model call attempt {event.attempt}/{event.max_attempts} failed ({terminal_text(event.reason[:160])})"
            + (f"; retrying in {event.wait_s:.0f} s" if event.attempt < event.max_attempts else ""))


def print_retries(event) -> None:
    """--quiet still shows a model's retries: minutes of back-off must not look like a hang."""
    if event.type == "model_retry":
        typer.echo(retry_line(event), err=True)


class LiveView:
    """A rich table with one row per turn, refreshed as trajectory events arrive."""

    def __init__(self, title: str):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.title = title
        self.rows: list[tuple[str, ...]] = []
        self.note = "starting"
        self.targets = "-"
        self.live = None

    def render(self):
        from rich.table import Table

        from .terminal import rich_safe

        table = Table(title=rich_safe(self.title), caption=rich_safe(self.note))  # the note quotes errors: model text
        for col in ("turn", "status", "speedup", "targets", "tokens", "cost $", "elapsed s"):
            table.add_column(col, justify="left" if col in ("status", "targets") else "right")
        for turn, status, *rest in self.rows:  # every cell is escaped; only the status gets our colour around it
            style = STATUS_STYLES.get(status, "red")
            table.add_row(rich_safe(turn), f"[{style}]{rich_safe(status)}[/{style}]", *(rich_safe(c) for c in rest))
        return table

    def __call__(self, event) -> None:
        if event.type == "model_call":
            self.note = f"turn {event.turn}: model answered in {event.latency_s:.1f} s; evaluating"
        elif event.type == "model_retry":
            self.note = retry_line(event)
            self.console.print(self.note, highlight=False, markup=False)  # stays above the table
        elif event.type == "tool_call":
            self.note = f"turn {event.turn}: tool {event.name}"
        elif event.type == "eval_result" and event.submission:
            self.targets = target_summary(event.result)
        elif event.type == "turn_end":
            speed = f"{figure(event.speedup)}x" if event.speedup is not None else "-"
            self.rows.append((str(event.turn), event.status, speed, self.targets, str(event.tokens),
                              f"{event.cost_usd:.4f}", f"{event.elapsed_s:.1f}"))
            self.note = f"turn {event.turn} done; querying the model"
            self.targets = "-"
        elif event.type == "stop":
            self.note = f"stopped: {event.reason} ({terminal_text(event.detail)})"
        elif event.type == "error":  # a Ctrl-C is no error: its message says so
            from ..loop.optimize import INTERRUPTED

            interrupted = event.message.startswith(INTERRUPTED)
            self.note = event.message if interrupted else f"error in {event.where}: {event.message[:120]}"
        if self.live is not None:
            self.live.update(self.render())

    def __enter__(self):
        return self

    def start(self) -> None:
        """The table on screen from now: called once the run's own lines are printed (loop/optimize's `ready`), since
        a line printed while it is drawn lands among its redraws, cut to the terminal's width."""
        from rich.live import Live

        self.live = Live(self.render(), console=self.console, refresh_per_second=4)
        self.live.__enter__()

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)


class TurnSeen:
    """A listener that keeps the turn of the latest trajectory event (the turn a Ctrl-C cut short)."""

    def __init__(self):
        self.turn = 0

    def __call__(self, event) -> None:
        self.turn = max(self.turn, event.turn)


def interrupted_line(folder: Path, turn: int, turns: int, exc: BaseException | None = None) -> str:
    """What a Ctrl-C (or SIGTERM) leaves on stderr: where the run stopped and how to go on (a folder with no run yet:
    nothing to)."""
    where = f"at turn {turn} of {turns}" if turn else "before the first turn"
    if isinstance(exc, Terminated):
        where += " by SIGTERM"
    if not (folder / "manifest.json").exists():
        return f"interrupted {where}; no run was recorded"
    return f"interrupted {where}; resume with: ptxbench optimize --resume {quote(str(folder))}"


def recorded_turns(outcome) -> int:
    """Turns as the score tables count them: a turn an infra failure cut short is a turn there too."""
    from ..records.rundir import TrajectoryRecord, read_events, trajectory_log
    from ..scoring.turns import score_trajectory

    folder = Path(outcome.folder)
    log = trajectory_log(folder)
    return len(score_trajectory(TrajectoryRecord(folder, read_events(log))).turns) if log is not None else outcome.turns


def current_context():
    try:  # typer >= 0.29 carries its own copy of click
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context
    return get_current_context()


# the options a resumed run fixes: its recorded config holds them (option -> OptimizeConfig field)
RESUME_FIXED = {"workload": "workload", "model": "model", "api_key_env": "api_key_env",
                "mode": "mode", "turns": "turns", "target_speedup": "target_speedup", "prompt": "prompt",
                "context": "context", "no_gpu": "no_gpu", "trials": "trials", "max_tokens": "max_tokens",
                "max_cost": "max_cost_usd", "max_wall": "max_wall_s", "max_tool_calls": "max_tool_calls", "arch": "arch",
                "temperature": "temperature", "retry_wait": "retry_wait_s", "start_from": "start_from",
                "profile": "profile", "l2_flush": "l2_flush"}
# the options a resumed run takes anew (option -> field of loop.optimize.RESUME_RUNTIME)
# the options only an LLM's calls use: given beside a builtin/ or replay/ model, refused rather than dropped
LLM_OPTIONS = ("api_base", "api_key_env", "temperature", "retry_wait", "model_timeout")
RESUME_RUNTIME_OPTIONS = {"model_timeout": "model_timeout_s", "api_base": "api_base"}


def given_here(ctx, name: str) -> bool:
    """Whether the command line gave option `name` (not left at its default)."""
    source = ctx.get_parameter_source(name)  # click's ParameterSource (typer may carry its own click)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def resume_conflict(ctx, given: dict, recorded, folder: Path) -> Optional[str]:
    """The refusal for an option given with --resume that the resumed run fixes, with a value other than recorded
    (None when every such option is absent or equal). --run-dir cannot name another folder; --turns cannot extend the
    run: its turn limit is part of the checkpointed trajectory (a finished run stays finished)."""
    def spelled(name: str) -> str:
        param = next(p for p in ctx.command.params if p.name == name)
        return param.opts[0] if param.opts and param.opts[0].startswith("-") else name.upper()

    if given_here(ctx, "run_dir") and given["run_dir"] is not None and Path(given["run_dir"]).resolve() != folder.resolve():
        return f"--resume continues {folder}'s run: --run-dir {given['run_dir']} names another folder; drop it"
    for name, field in RESUME_FIXED.items():
        if not given_here(ctx, name) or given[name] is None and name == "workload":
            continue
        value = given[name]
        value = value.value if isinstance(value, Enum) else value
        if name == "start_from" and value is not None:
            value = str(Path(value).resolve())
        if value != getattr(recorded, field):
            shown = "" if isinstance(value, bool) else f" {value}"
            why = ("; the turn limit is part of the checkpointed run and cannot change (a run that reached it stays "
                   "finished): drop it, or start a new run with --start-from its best kernel") if name == "turns" else \
                "; drop it or start a new run"
            theirs = getattr(recorded, field)
            theirs = "unset" if theirs is None else ("on" if theirs else "off") if isinstance(theirs, bool) else theirs
            return f"--resume continues {folder}'s run: {spelled(name)}{shown} differs from its {theirs}{why}"
    return None


def check_numbers(max_wall, max_cost, model_timeout, target_speedup, retry_wait, temperature) -> None:
    """The number options, before a run is looked up or made: `--max-wall inf` (meant as no budget) was kept, as was
    a --resume's --model-timeout inf (runtime options replace the recorded config's unchecked); each is refused in
    one line naming its option."""
    from . import inputs

    inputs.positive(max_wall, "--max-wall", "a wall-clock budget in seconds; leave it out for none")
    inputs.positive(max_cost, "--max-cost", "a budget in USD; leave it out for none")
    inputs.positive(model_timeout, "--model-timeout", "seconds one model call may take (default 600)")
    inputs.not_negative(target_speedup, "--target-speedup", "0 never stops early")
    inputs.not_negative(retry_wait, "--retry-wait"), inputs.not_negative(temperature, "--temperature")
    inputs.within_a_week(model_timeout, "--model-timeout"), inputs.within_a_week(retry_wait, "--retry-wait")


@app.command()
def optimize(
    workload: Optional[str] = typer.Argument(None, help="workload id (see `ptxbench workloads`); not needed with --resume"),
    model: str = typer.Option("builtin/tuner", help="builtin/tuner, builtin/reference, replay/<path>, or any litellm model string"),
    api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint (vLLM, ollama, ...)"),
    api_key_env: Optional[str] = typer.Option(None, help="environment variable holding the key (default: the provider's own)"),
    mode: ModeChoice = typer.Option(ModeChoice.pipeline, help="pipeline: each reply is a submission; tools: function calling"),
    turns: int = typer.Option(8, min=1, max=MAX_TURNS, help="turn limit"),
    target_speedup: Optional[float] = typer.Option(None, help="stop when a passing kernel reaches this speedup (0: never; "
                                                   "default: the workload's target, from the library's share of the roof)"),
    prompt: str = typer.Option("knowledge", help="prompt variant: basic | knowledge | expert"),
    context: ContextChoice = typer.Option(ContextChoice.full, help="context policy"),
    run_dir: Optional[str] = typer.Option(None, help="run folder (default <runs root>/<time>_<workload>_<model>; the "
                                           "root is $PTXBENCH_RUNS or runs/)"),
    resume: Optional[str] = typer.Option(None, help="continue the run in this folder (or <runs root>/<name>) "
                                          "where it stopped, with the options it recorded: one given with another "
                                          "value is refused (--turns cannot extend a run); a folder of several runs "
                                          "continues its newest trajectory"),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="evaluate up to compile + SASS only (--trials, --profile and "
                                "--l2-flush are refused with it)"),
    trials: Optional[int] = typer.Option(None, help="correctness trials per evaluation (default: the workload's)"),
    max_tokens: Optional[int] = typer.Option(None, help="token budget of the trajectory"),
    max_cost: Optional[float] = typer.Option(None, help="cost budget in USD"),
    max_wall: Optional[float] = typer.Option(None, help="wall-time budget in seconds"),
    max_tool_calls: int = typer.Option(40, help="tools mode: tool calls in the whole trajectory"),
    arch: str = typer.Option(DEFAULT_ARCH, help="sm_90a | sm_100a"),
    temperature: Optional[float] = typer.Option(None, help="sampling temperature"),
    retry_wait: float = typer.Option(2.0, help="first back-off (s) after a rate limit or server error"),
    model_timeout: float = typer.Option(600.0, "--model-timeout", min=1.0, help="seconds one model call may take before it is "
                                        "retried as a timeout (6 calls at most); with --resume it replaces the run's"),
    start_from: Optional[str] = typer.Option(None, "--start-from", help="a solution file to start from: evaluated as turn 0 and shown to the model with its verdict"),
    profile: str = typer.Option("auto", "--profile", help="Nsight Compute policy: auto (the target verdict on every pass, "
                                "the full per-line profile on the first pass and each new best), full (every "
                                "submission), verdict (never unasked)"),
    l2_flush: str = typer.Option(DEFAULT_L2_FLUSH, "--l2-flush", help="how each timed call finds L2 cold: read (a "
                                 "buffer twice its size read: clean lines) or write (written, the field's usual "
                                 "practice: the call pays the dirty lines' write-back, docs/timing-integrity.md)"),
    quiet: bool = typer.Option(False, help="no live view"),
    restart_trajectory: bool = typer.Option(False, "--restart-trajectory", help="with --resume: when the checkpoints "
                                            "cannot continue the trajectory, set it aside (abandoned/) and start over"),
) -> None:
    """Run the agent on WORKLOAD: write, evaluate and revise a kernel, logging the trajectory under runs/."""
    from . import inputs, preflight
    from ..loop.optimize import RunFolderInUse, find_run, new_run_dir, resume_config
    from ..loop.optimize import optimize as run_optimize
    from ..loop.profile_policy import POLICIES
    from ..loop.start_kernel import start_file
    from ..loop.state import OptimizeConfig
    from ..records.rundir import SealedTrajectory, read_manifest
    from ptxbench.tools.results import L2_FLUSH_MODES

    config = recorded = runtime = None
    # given empty (an unset shell variable): taken as not given (the provider's own endpoint or key), or as '.'
    for text, flag, expected in ((api_base, "--api-base", "give the server's URL, or leave it out for the provider's"),
                                 (api_key_env, "--api-key-env", "name the variable, or leave it out for the provider's"),
                                 (resume, "--resume", "give the run folder to continue"),
                                 (start_from, "--start-from", "give the kernel file to start from")):
        inputs.not_empty(text, flag, expected)
    check_numbers(max_wall=max_wall, max_cost=max_cost, model_timeout=model_timeout, target_speedup=target_speedup,
                  retry_wait=retry_wait, temperature=temperature)
    if resume is not None:
        try:
            resume = str(find_run(resume))
        except FileNotFoundError as exc:
            raise inputs.BadInput(f"--resume: {exc}{inputs.run_above(Path(resume))}") from None
        inputs.resumable(Path(resume), "--resume")  # first: a sealed run of another command is refused as that, not
        # sent to `seal --undo` to be refused after it
        inputs.unsealed(Path(resume), "--resume")
        try:
            recorded, tid = resume_config(Path(resume))
        except RunFolderInUse as exc:
            raise inputs.BadInput(str(exc)) from None
        ctx = current_context()
        conflict = resume_conflict(ctx, dict(ctx.params), recorded, Path(resume))
        if conflict:
            raise inputs.BadInput(conflict)
        run_dir, no_gpu = None, recorded.no_gpu
        runtime = {field: ctx.params[option] for option, field in RESUME_RUNTIME_OPTIONS.items() if given_here(ctx, option)}
        # the recorded model's key and endpoint (or the one given again): one line now, not a trajectory stopped on
        # them (the endpoint after its retries)
        inputs.credentials(recorded.model, runtime.get("api_base", recorded.api_base), recorded.api_key_env,
                           report=lambda line: typer.echo(line, err=True))
        others = [t for t in read_manifest(Path(resume)).get("trajectories", []) if t != tid]
        if others:  # a folder that several --run-dir runs share: --resume goes on with its newest trajectory
            typer.echo(f"note: {resume} holds {len(others) + 1} trajectories; --resume continues the newest, {tid}",
                       err=True)
    else:
        if workload is None:
            raise inputs.BadInput("give a WORKLOAD (see `ptxbench workloads`), or --resume RUN")
        if restart_trajectory:  # it acts on what a --resume cannot continue: a new run went on without a word
            raise inputs.BadInput("--restart-trajectory goes with --resume: a new run has no trajectory to set aside; drop it")
        inputs.workload(workload), inputs.arch(arch), inputs.prompt(prompt), inputs.model(model)
        inputs.one_of(profile, POLICIES, "--profile"), inputs.one_of(l2_flush, L2_FLUSH_MODES, "--l2-flush")
        if no_gpu:  # as eval's: options of the GPU run, given with --no-gpu, are refused rather than dropped
            inputs.gpu_only(inputs.given_options(current_context(), ("trials", "profile", "l2_flush")))
        inputs.llm_only([model], inputs.given_options(current_context(), LLM_OPTIONS))  # and an LLM's, beside none
        if model.startswith("replay/"):  # a run folder of several such trajectories: which one is replayed
            from ..models.replay import replay_choice, replay_mismatch

            if why := replay_mismatch(model.removeprefix("replay/"), workload, mode.value):
                raise inputs.BadInput(f"--model {model}: {why}")
            if note := replay_choice(model.removeprefix("replay/"), workload):
                typer.echo(note, err=True)
        if mode.value == "pipeline" and inputs.given_options(current_context(), ("max_tool_calls",)):
            raise inputs.BadInput("--max-tool-calls bounds the tool calls of --mode tools, and the pipeline mode (the "
                                  "default) makes none: add --mode tools, or drop it")
        if run_dir is not None:  # taken as text: typer's Path made an empty one '.', the working directory
            run_dir = inputs.new_folder(run_dir, "--run-dir")
            inputs.no_other_files(run_dir, "--run-dir")
            manifest = inputs.run_manifest(run_dir, "--run-dir")
            if manifest and manifest.get("command") != "optimize":  # said before trajectories/ is made in the folder
                raise inputs.BadInput(f"{run_dir} holds a {manifest.get('command') or 'foreign'} run; choose another "
                                      "--run-dir")
        inputs.credentials(model, api_base, api_key_env, report=lambda line: typer.echo(line, err=True))
        config = inputs.config(
            OptimizeConfig, FLAGS, workload=workload, model=model, api_base=api_base, api_key_env=api_key_env, mode=mode.value,
            turns=turns, target_speedup=target_speedup, prompt=prompt, context=context.value, no_gpu=no_gpu,
            trials=trials, max_tokens=max_tokens, max_cost_usd=max_cost, max_wall_s=max_wall,
            max_tool_calls=max_tool_calls, arch=arch, temperature=temperature, retry_wait_s=retry_wait, start_from=start_file(None if start_from is None else Path(start_from)),
            model_timeout_s=model_timeout,
            profile=profile, l2_flush=l2_flush)
    from ..records.rundir import runs_root

    preflight.writable(resume or run_dir or runs_root())  # a run folder that cannot be made: said before any work
    if not no_gpu:  # a resumed run's own setting (above)
        # no usable GPU here: said before a run folder is made or a worker started
        preflight.gpu(preflight.RESUMED_GPU_RUN_HINT if resume is not None else preflight.NO_GPU_HINT)
    preflight.toolchain((config or recorded).arch)  # no ptxas here: every turn would be an INFRA_ERROR
    title = f"ptxbench optimize {(config or recorded).workload}" + ("  (no GPU: compile + SASS only)" if no_gpu else "")
    view = LiveView(title)
    if resume is not None:  # a run with no turn left shows no event: its caption says what was done, not "starting"
        view.note = f"resuming {resume}"
    if resume is None and run_dir is None:
        run_dir = new_run_dir(config)  # named here, so that a Ctrl-C can say what --resume continues
    turn = TurnSeen()
    try:
        with on_sigterm():  # a scheduler's stop or `kill` ends the run as Ctrl-C does: recorded, resumable
            if quiet:
                outcome = run_optimize(config, run_dir=run_dir, resume=resume, listeners=[print_retries, turn],
                                       restart=restart_trajectory, runtime=runtime)
            else:
                with view:
                    outcome = run_optimize(config, run_dir=run_dir, resume=resume, listeners=[turn, view],
                                           restart=restart_trajectory, runtime=runtime, ready=view.start)
                view.console.line()
    except (RunFolderInUse, SealedTrajectory) as exc:
        raise inputs.BadInput(str(exc)) from None
    except Exception as exc:  # storage that gave out mid-run: one line; anything else as it is
        raise preflight.storage_stop(exc, f"ptxbench optimize --resume {quote(str(Path(resume or run_dir)))}",
                                     resume or run_dir) from None
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (sigterm.Terminated)
        if not quiet:
            view.console.line()  # below the table the live view left
        typer.echo(interrupted_line(Path(resume or run_dir), turn.turn, (config or recorded).turns, exc), err=True)
        raise typer.Exit(stop_exit(exc)) from None
    best = f"{figure(outcome.best_speedup)}x (turn {outcome.best_turn})" if outcome.best_speedup is not None else "none"
    typer.echo(f"stop: {outcome.stop_reason} ({terminal_text(outcome.stop_detail)}); turns {recorded_turns(outcome)}; best speedup {best}; "
               f"trajectory {outcome.folder}")
    if outcome.stop_reason == "infra_error" and "GPU" in outcome.stop_detail and not no_gpu:
        typer.echo("No usable GPU here: add --no-gpu to evaluate up to compile + SASS only.", err=True)
    elif outcome.stop_reason == "infra_error":  # the provider's or the harness's failure: the run is not over
        typer.echo(f"not the model's failure: once that is fixed, resume with: ptxbench optimize --resume "
                   f"{quote(str(Path(resume or run_dir)))} (it tries the failed step again)", err=True)
    if outcome.stop_reason in ("error", "infra_error"):
        raise typer.Exit(1)
