"""Run one trajectory: the graph, its checkpointer, its events; and the run folder around it.

    run_trajectory(config, evaluator, writer, ...)   one trajectory into a given TrajectoryWriter
                                                     (what the bench runner calls; resumes by itself
                                                     when the checkpointer holds an unfinished thread)
    arun_trajectory(...)                             the same, awaitable (runs in a worker thread)
    optimize(config, run_dir=..., resume=...)        `ptxbench optimize`: run folder, manifest,
                                                     SQLite checkpoints, the local evaluator
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field, ValidationError

from ptxbench.tools.evaluator import EvalOptions, Evaluator
from ptxbench.tools.held_signals import stop_since, stops_so_far
from ptxbench.tools.results import LEGACY_L2_FLUSH
from ptxbench.workloads.registry import get_workload

from ..bench.retry import FORKED, fork_before_infra_stop
from ..bench.scheduler import BenchInterrupted
from ..records.checkpoint_guard import check_run
from ..records.checkpoint_store import open_checkpointer
from ..records.folder_lock import FolderHeld, hold_folder, release
from .graph import Deps, build_graph
from .profile_policy import base_options
from ..records.manifest import build_manifest
from ..records import revision
from ..records.revision import RESUMED_UNDER, note_resumed_revision
from ..models import Model, load_model
from ...tools.redact import register_secret_env
from ..records.rundir import TrajectoryWriter, read_events, read_manifest, runs_root, validation_line, write_manifest
from .start_kernel import read_start
from .state import AgentState, OptimizeConfig, initial_state
from .task import system_prompt, task_prompt
from ..records.trajectory import Listener, TrajectoryLog
from ..records.events import INTERRUPTED  # the error event a Ctrl-C leaves in the trajectory log

RECURSION_LIMIT = 100_000  # budgets end a trajectory, not LangGraph's step counter
# Checkpoints are written with durability="sync": each node's result is on disk before the next node
# starts, so a kill loses at most the node in flight (never a completed model call).


class TrajectoryOutcome(BaseModel):
    trajectory_id: str
    folder: str
    stop_reason: str
    stop_detail: str = ""
    turns: int
    best_speedup: float | None
    best_turn: int
    statuses: list[str]
    tokens: int
    cost_usd: float
    elapsed_s: float
    resumed: bool = False
    infra_retry: str = Field("", description="with retry_infra_stop: 'forked' or 'nothing_to_retry' (agent/bench/retry.py)")


def eval_options(config: OptimizeConfig) -> EvalOptions:
    """The trajectory's base options; each scored evaluation adds its turn's part (profile_policy.turn_options)."""
    return EvalOptions(arch=config.arch, trials=config.trials, no_gpu=config.no_gpu, seed=config.seed,
                       l2_flush=config.l2_flush, **base_options(config.profile))


def make_model(config: OptimizeConfig, on_retry=None) -> Model:
    """The model of a trajectory; `on_retry(turn, attempt, max_attempts, reason, wait_s)` hears an LLM's back-offs."""
    options: dict[str, Any] = {}
    register_secret_env(config.api_key_env)  # its value is masked in everything written, whatever its name
    if not config.model.startswith(("builtin/", "replay/")):
        options = dict(api_key_env=config.api_key_env, temperature=config.temperature, max_tokens=config.max_output_tokens,
                       timeout_s=config.model_timeout_s, max_attempts=config.retry_attempts, retry_wait_s=config.retry_wait_s,
                       on_retry=on_retry)
    return load_model(config.model, config.workload, api_base=config.api_base, **options)


def _outcome(tid: str, folder: Path, state: AgentState, resumed: bool, infra_retry: str = "") -> TrajectoryOutcome:
    stop = state.get("stop") or {"reason": "", "detail": ""}
    done = state.get("done_turns", [])
    return TrajectoryOutcome(
        trajectory_id=tid, folder=str(folder), stop_reason=stop["reason"], stop_detail=stop.get("detail", ""),
        turns=len(done), best_speedup=state.get("best_speedup"), best_turn=state.get("best_turn", 0),
        statuses=[t["outcome"]["status"] for t in done], tokens=state.get("tokens", 0),
        cost_usd=state.get("cost_usd", 0.0), elapsed_s=state.get("elapsed_s", 0.0), resumed=resumed,
        infra_retry=infra_retry)


def _started(writer: TrajectoryWriter) -> bool:
    """Whether the writer's log holds its trajectory_start already."""
    return writer.path.exists() and any(e.type == "trajectory_start" for e in read_events(writer.path))


def run_trajectory(
    config: OptimizeConfig,
    evaluator: Evaluator,
    writer: TrajectoryWriter,
    *,
    model: Model | None = None,
    checkpointer=None,
    listeners: list[Listener] | None = None,
    trajectory_id: str | None = None,
    retry_infra_stop: bool = False,
) -> TrajectoryOutcome:
    """Run (or, if `checkpointer` holds an unfinished thread of this trajectory, resume) one trajectory.

    The trajectory id (the checkpointer's thread id) defaults to the writer's folder name. Without a
    checkpointer the run is kept in memory and cannot be resumed. With `retry_infra_stop`, a thread that
    stopped on an infra error is forked before the failed step and continued (agent/bench/retry.py).
    A failed kernel is a turn outcome;
    an exception here is a harness failure (recorded as an error event, then raised).
    """
    from langgraph.checkpoint.memory import InMemorySaver

    tid = trajectory_id or writer.folder.name
    log = TrajectoryLog(writer, tid, listeners)
    model = model or make_model(config, on_retry=log.model_retry)
    deps = Deps(config, model, evaluator, log, eval_options(config))
    graph = build_graph(deps, checkpointer or InMemorySaver())
    run_config = {"configurable": {"thread_id": tid}, "recursion_limit": RECURSION_LIMIT}
    snapshot = graph.get_state(run_config)
    resumed = deps.resumed = bool(snapshot.values)
    retry = fork_before_infra_stop(graph, tid) if resumed and retry_infra_stop else ""
    if retry == FORKED:
        snapshot = graph.get_state(run_config)
    deps.resumed_into = snapshot.next[0] if resumed and snapshot.next else ""
    stops_before = stops_so_far()
    try:
        # finished before: past its finish node, which every stop rule leads to. A thread without a stop and nothing
        # next is the input a kill cut off before the first node's checkpoint: invoked again, it goes on from there.
        # A stop with a task still held is the deciding node's stored writes, shown as the state, with its checkpoint
        # (and the finish node, which logs the stop) cut off by a kill: invoked again, finish runs
        if resumed and not snapshot.next and not snapshot.tasks and snapshot.values.get("stop"):
            return _outcome(tid, writer.folder, snapshot.values, resumed, retry)
        if resumed:
            graph.invoke(None, run_config, durability="sync")
        else:
            workload = get_workload(config.workload)
            if not _started(writer):  # else a kill came before the first checkpoint: the trajectory starts once
                log.start(config.model_dump(mode="json"), workload=config.workload, model=config.model, prompt=config.prompt,
                          mode=config.mode, arch=config.arch, index=config.index, held_out=workload.held_out)
            state = initial_state(system_prompt(config), task_prompt(config, workload))
            if config.start_from:
                state["start"] = read_start(config.start_from)
            graph.invoke(state, run_config, durability="sync")
    except BaseException as exc:
        # a stop raised inside an extension's callback (pydantic's serializer) comes out as that extension's error:
        # still the stop, known by the handler's record (tools/held_signals.py), not a crash
        raised = exc
        stop = stop_since(stops_before, raised)
        exc = stop or raised
        turn = (graph.get_state(run_config).values or {}).get("turn", 0)
        # a stop asked for (Ctrl-C, the bench stopping) is no crash: logged without its traceback, so two at one turn
        # are never read as a crash the kernel brings on (scoring/turns.py, 'reproduced')
        # Ctrl-C: infra=True keeps the cut-short turn out of the model's scores (and the trajectory out of trajectory
        # scores until --resume finishes it: scoring/turns.py); the message says what happened, not an empty exception
        if isinstance(exc, KeyboardInterrupt):
            message = f"{INTERRUPTED} ({getattr(exc, 'how', 'Ctrl-C')}): --resume continues this turn"  # or SIGTERM
        else:
            message = f"{type(exc).__name__}: {exc}" if isinstance(exc, BenchInterrupted) else exc
        log.error(turn, "graph", message, infra=True,
                  stop_asked=isinstance(exc, (KeyboardInterrupt, BenchInterrupted)))
        if stop is not None:
            raise stop from raised
        raise
    return _outcome(tid, writer.folder, graph.get_state(run_config).values, resumed, retry)


async def arun_trajectory(*args: Any, **kwargs: Any) -> TrajectoryOutcome:
    """run_trajectory in a worker thread, for asyncio callers (several trajectories at once)."""
    return await asyncio.to_thread(run_trajectory, *args, **kwargs)


# -- the run folder of `ptxbench optimize` ----------------------------------------------------------
def new_run_dir(config: OptimizeConfig) -> Path:
    return runs_root() / f"{time.strftime('%Y%m%d-%H%M%S')}_{config.workload}_{config.model_slug()}"


def find_run(run: str | Path) -> Path:
    for candidate in (Path(run), runs_root() / str(run)):
        if (candidate / "manifest.json").exists():
            return candidate
    raise FileNotFoundError(f"no run at {run} (nor under {runs_root()}): expected a folder with manifest.json")


class RunFolderInUse(ValueError):
    """The run folder holds a run of another command (a bench), or one without a config to go on with: optimize
    does not add to it or continue it."""


def hold_trajectory(folder: Path) -> int | None:
    """An exclusive lock on a trajectory's folder for as long as this process runs it (flock on the folder: no file
    left behind, released however the process ends), or RunFolderInUse when another process holds it: a --resume
    while the first run still goes (or two at once) repaired the log under the running one, ran the same turns twice,
    paid for their model calls twice and interleaved both runs' events. None where the file system has no such locks."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return hold_folder(folder)
    except FolderHeld:
        raise RunFolderInUse(f"{folder} is being run by another process: wait for it to end (or stop it), then "
                             "--resume") from None


def add_to_manifest(run_path: Path, config: OptimizeConfig,
                    before_write: Callable[[str], None] | None = None) -> tuple[OptimizeConfig, str]:
    """Record a new trajectory in the run folder's manifest, keeping the trajectories already there. A
    trajectory of the same cell gets the next free index. Returns the config it runs with and its id.
    Several `optimize --run-dir` may share a folder: its manifest is read, given the new trajectory and written back
    under an exclusive lock (flock on its trajectories folder), or two started together took the same index and wrote
    one trajectory's log and checkpoints both. `before_write(id)` runs once the id is chosen, before the manifest
    names it (optimize holds the trajectory there: a --resume reading the new manifest finds it held)."""
    with _manifest_held(run_path):
        return _add_to_manifest(run_path, config, before_write)


@contextlib.contextmanager
def _manifest_held(run_path: Path):
    """The run folder's manifest held for a read and write back (flock on its trajectories folder)."""
    folder = Path(run_path) / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):  # a file system without such locks: unguarded, as before
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def note_code_change(run_path: Path) -> None:
    """A resume under other code than the run began with (a git pull since): warned of, and recorded in its manifest
    (agent/records/revision.py)."""
    with _manifest_held(run_path):
        line = revision.note_code_change(run_path, "optimize --resume")
    if line is not None:
        print(f"warning: {line}", file=sys.stderr)


def _add_to_manifest(run_path: Path, config: OptimizeConfig,
                     before_write: Callable[[str], None] | None) -> tuple[OptimizeConfig, str]:
    manifest = read_manifest(run_path)
    if manifest and manifest.get("command") != "optimize":
        raise RunFolderInUse(f"{run_path} holds a {manifest.get('command') or 'foreign'} run; choose another --run-dir")
    taken = set(manifest.get("trajectories", []))
    while config.trajectory_id() in taken:
        config = config.model_copy(update={"index": config.index + 1})
    tid = config.trajectory_id()
    if before_write is not None:
        before_write(tid)
    configs = dict(manifest.get("configs") or {t: manifest["config"] for t in taken if "config" in manifest})
    configs[tid] = config.model_dump(mode="json")
    record = build_manifest(config.model_dump(mode="json"), "optimize", [*manifest.get("trajectories", []), tid], config.arch)
    line = None
    if manifest:
        record["config"], record["created"] = manifest.get("config", record["config"]), manifest.get("created")
        # the code the run began under stays recorded; a trajectory added under other code is noted as a resume is
        # (against the git_info build_manifest just took: git is not asked twice)
        now = record["git"]
        record["git"] = manifest.get("git") if isinstance(manifest.get("git"), dict) else {}
        if RESUMED_UNDER in manifest:
            record[RESUMED_UNDER] = manifest[RESUMED_UNDER]
        line = note_resumed_revision(record, "optimize --run-dir", now)
    record["configs"] = configs  # trajectory id -> its OptimizeConfig ("config" stays the first one's)
    write_manifest(run_path, record)
    if line is not None:
        print(f"warning: {line}", file=sys.stderr)
    return config, tid


def config_to_resume(manifest: dict) -> tuple[OptimizeConfig, str]:
    """The newest trajectory of an optimize run folder and its config."""
    tid = manifest["trajectories"][-1]
    saved = (manifest.get("configs") or {}).get(tid) or manifest["config"]
    # a run saved before the flush mode existed was timed under the written flush: it goes on as it started
    return OptimizeConfig.model_validate({"l2_flush": LEGACY_L2_FLUSH, **saved}), tid


# what a resumed run may change, as a bench resume may: where the model is served and how long to wait on it are the
# run's circumstances, not its task (a local server restarted on another port, one gone silent resumed with a shorter
# wait); every other field is the trajectory's own
RESUME_RUNTIME = ("model_timeout_s", "api_base")


def resume_config(run_path: Path) -> tuple[OptimizeConfig, str]:
    """config_to_resume for the run folder `--resume` names; RunFolderInUse when it is not an optimize run (a bench
    continues with `ptxbench bench --resume`) or its manifest holds no config an optimize trajectory can go on with."""
    manifest = read_manifest(run_path)
    command = manifest.get("command")
    if command != "optimize":
        hint = (f" (continue a bench with `ptxbench bench --resume --run-dir {shlex.quote(str(run_path))}`)"
                if command == "bench" else "")
        raise RunFolderInUse(f"{run_path} holds a {command or 'foreign'} run: --resume continues optimize runs{hint}")
    try:
        return config_to_resume(manifest)
    except (LookupError, TypeError, ValueError) as exc:  # no trajectories or config, or a config of another shape
        what = validation_line(exc) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
        raise RunFolderInUse(f"{run_path}: its manifest holds no config to continue ({what})") from None


def default_evaluator(config: OptimizeConfig) -> Evaluator:
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.gpu.pool import visible_devices

    # Before any worker starts: the GPU workers' fork server erases the variables registered by then (keyless.py)
    register_secret_env(config.api_key_env)
    evaluator = LocalEvaluator()  # options.no_gpu (from the config) keeps it off the GPU
    if not config.no_gpu and visible_devices():  # the workers start while the first turn asks its model
        evaluator.start_in_background()
    return evaluator


def optimize(
    config: OptimizeConfig | None = None,
    *,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    evaluator: Evaluator | None = None,
    model: Model | None = None,
    listeners: list[Listener] | None = None,
    restart: bool = False,
    runtime: dict[str, Any] | None = None,
    ready: Callable[[], None] | None = None,
) -> TrajectoryOutcome:
    """Start a trajectory for `config` in a new run folder (or add it to `run_dir`), or continue the
    newest trajectory of the run `resume` where it stopped, with the RESUME_RUNTIME fields of `runtime` in place of
    the recorded ones. A run whose checkpoints cannot continue its trajectory raises CheckpointLost, unless `restart`
    (agent/records/checkpoint_guard.py). `ready()` is called once the run's own lines (its notes, the warning of a
    resume under other code) are printed and before its first event: where a live view starts, so that they stand
    above it whole rather than among its redraws."""
    if resume is not None:
        run_path = find_run(resume)
        config, tid = resume_config(run_path)
        config = config.model_copy(update={k: v for k, v in (runtime or {}).items() if k in RESUME_RUNTIME})
        folder = run_path / "trajectories" / tid
        held = hold_trajectory(folder)  # before its log is checked or repaired
        try:
            set_aside = check_run(run_path, [tid], restart)
        except BaseException:
            release(held)
            raise
        held = _hold_again(held, folder)  # a log check_run set aside took the hold with its folder
        try:
            note_code_change(run_path)
        except BaseException:
            release(held)
            raise
    else:
        assert config is not None, "give a config or a run to resume"
        run_path = Path(run_dir) if run_dir else new_run_dir(config)
        set_aside = check_run(run_path, [], restart)
        holds: list[int | None] = []
        try:  # held before the manifest names it: a --resume that reads the new manifest finds it taken
            config, tid = add_to_manifest(run_path, config,
                                          lambda tid: holds.append(hold_trajectory(run_path / "trajectories" / tid)))
        except BaseException:
            for fd in holds:
                release(fd)
            raise
        held = holds[0]
    try:
        for line in set_aside:
            print(f"note: {line}", file=sys.stderr)
        if ready is not None:
            ready()
        writer = TrajectoryWriter(run_path / "trajectories" / tid)
        checkpointer = open_checkpointer(run_path / "checkpoints.sqlite")
        own_evaluator = evaluator is None
        evaluator = evaluator or default_evaluator(config)
        try:
            # --resume retries a trajectory an infra failure stopped (a provider outage, a lost GPU worker) from the
            # step that failed: that stop is the harness's, not the run's end
            return run_trajectory(config, evaluator, writer, model=model, checkpointer=checkpointer, listeners=listeners,
                                  trajectory_id=tid, retry_infra_stop=resume is not None)
        finally:
            checkpointer.conn.close()
            if own_evaluator:
                evaluator.close()
    finally:
        release(held)


def _hold_again(held: int | None, folder: Path) -> int | None:
    """The hold on `folder` once check_run is done: a folder it moved aside (abandoned/) took the flock with it, and
    the trajectory starts over in a new folder, held here before the old hold is let go (let go however it ends)."""
    if held is None:
        return None
    with contextlib.suppress(FileNotFoundError):
        if os.path.samestat(os.fstat(held), os.stat(folder)):
            return held
    try:
        return hold_trajectory(folder)
    finally:
        release(held)


