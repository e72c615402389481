"""`ptxbench bench`: run a model x workload x prompt matrix of trajectories into one run directory.

    run_bench(BenchConfig(models=[...], workloads=[...]), run_dir)      a new run
    run_bench(None, run_dir, resume=True, overrides={"api_base": ...})   continue a killed one

Trajectories run concurrently (bench_scheduler: asyncio over a thread pool, model calls limited per
provider); GPU evaluations queue in the evaluator (local worker pool, or Ray actors with one GPU
each). Every trajectory checkpoints into the run's SQLite file, so a resumed run repeats neither
finished trajectories nor finished model calls. An infra failure (INFRA_ERROR, or an exception from
the harness) is retried from the last good step, up to `infra_retries` times; what stays failed is
marked infra-failed and left out of model scores. An evaluator that says it has no GPU worker left (`no_worker`: a
Ray cluster whose nodes are all lost, a machine whose GPUs no worker starts on any more) stops the bench instead (NoWorkerLeft), every trajectory resumable, and so does
the run folder's storage giving out (StorageGaveOut: a full disk or quota, a file system gone read-only, a folder of
it this user may not write), which every retry would meet again while the model replies made meanwhile went
unrecorded. A model the bench never reached (its
calls cannot open a connection, none answered: unreached.py) has its trajectories wait for --resume while the other
models run, then stops the bench (HostUnreached), none of them counted as infra-failed.
"""
from __future__ import annotations

import asyncio
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from .evaluators import BenchError, NoWorkerLeft, StorageGaveOut, make_evaluator
from .matrix import BenchConfig, check_startable, expand
from .retry import NOTHING_TO_RETRY
from .scheduler import BenchInterrupted, LimitedModel, ProviderGates, run_all
from .unreached import UNREACHED, ModelUnreached, ReachWatch, stopped
from ..records.checkpoint_guard import check_run
from ..repairs.track import suite_flush
from ..records.folder_lock import FolderHeld, hold_folder, release
from ..records.manifest import build_manifest
from ..records.revision import note_code_change
from ..records.storage import storage_failure
from ..models import Model
from ..loop.optimize import make_model, open_checkpointer, run_trajectory
from ..records.rundir import (TrajectoryWriter, read_manifest, trajectory_folders, write_evaluator_start, write_gpu_timeline,
                              write_manifest)
from ..loop.state import OptimizeConfig
from ptxbench.tools.results import DEFAULT_L2_FLUSH, LEGACY_L2_FLUSH


class TrajectoryReport(BaseModel):
    trajectory_id: str
    model: str
    workload: str
    prompt: str
    index: int
    stop_reason: str = ""
    statuses: list[str] = []
    best_speedup: float | None = None
    attempts: int = 1
    infra_failed: bool = False
    error: str = ""


class BenchOutcome(BaseModel):
    run_dir: str
    config: BenchConfig
    trajectories: list[TrajectoryReport]
    elapsed_s: float
    setup_s: float = 0.0  # a local GPU run: the workers' start (beside the first turns when the GPUs were known)
    close_s: float = 0.0  # closing it after the last one (the workers' exit)
    worker_start: list[dict] = []  # a local GPU run: each worker's start (GpuPool.startup: device, seconds, phases)
    gpu_use: dict = {}  # a local GPU run: GpuTimeline's summary (held share per GPU, waits, idle while pinned)


RUNTIME_FIELDS = ("backend", "ray_address", "gpus", "parallel", "provider_limits", "api_base", "infra_retries",
                  "model_timeout_s", "ray_placement_wait_s")


def with_flush(config: BenchConfig, mode: str) -> BenchConfig:
    """`config` with its trajectories' L2 flush mode set to `mode` where its `optimize` table leaves it out."""
    if "l2_flush" in config.optimize:
        return config
    return config.model_copy(update={"optimize": {**config.optimize, "l2_flush": mode}})


def open_run(config: BenchConfig | None, run_dir: Path, resume: bool, overrides: dict | None = None) -> BenchConfig:
    """The matrix to run: a new run's, or the recorded one when resuming
    (where only the runtime knobs of RUNTIME_FIELDS may change, through `overrides`)."""
    manifest = read_manifest(run_dir)
    if resume:
        if (command := manifest.get("command")) != "bench":
            if command:  # a run of another command: say which, and how that one goes on
                hint = (f": continue it with ptxbench {command} --resume {shlex.quote(str(run_dir))}"
                        if command == "optimize" else "")
                article = "an" if str(command)[:1] in "aeiou" else "a"
                raise BenchError(f"{run_dir} holds {article} {command} run, not a bench run{hint}")
            raise BenchError(f"{run_dir} is not a bench run to resume (no bench manifest.json)")
        recorded = BenchConfig.model_validate(manifest["config"])
        # a run recorded before the flush mode existed was timed under the written flush: it goes on as it started
        recorded = with_flush(recorded, LEGACY_L2_FLUSH)
        if "no_gpu_judged_only" not in manifest["config"]:  # recorded before --no-gpu left runtime repair tasks out
            recorded = recorded.model_copy(update={"no_gpu_judged_only": False})
        return recorded.model_copy(update={k: v for k, v in (overrides or {}).items() if k in RUNTIME_FIELDS and v is not None})
    if config is None:
        raise BenchError("give a bench config, or resume=True")
    # recorded in the manifest, whatever a later default becomes; the repair track's is its suite's, so that a fix's
    # speed compares with the unbroken kernel's as timed
    config = with_flush(config, (config.track == "repair" and suite_flush(config)) or DEFAULT_L2_FLUSH)
    if manifest or trajectory_folders(run_dir):
        raise BenchError(f"{run_dir} already holds a run: pass --resume to continue it, or choose another --run-dir")
    try:
        expand(config)  # a bad matrix fails here, before anything is written
        check_startable(config)
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    return config


def recorded_matrix(config: BenchConfig, run_dir: Path) -> list[OptimizeConfig]:
    """The trajectories a resumed run goes on with: its matrix as it expands now, less those its manifest does not
    name. What a matrix expands to can change under a run (a repair suite pulled with tasks added or taken out): a
    resume then began trajectories the run never had, another suite's tasks scored as this run's, and passed over
    started ones it no longer expanded to. BenchError when a recorded one is no longer in the matrix."""
    try:
        configs = expand(config)
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    recorded = read_manifest(run_dir).get("trajectories")
    if not recorded:  # a manifest without its list: the matrix as it expands
        return configs
    now = {c.trajectory_id() for c in configs}
    if missing := [t for t in recorded if t not in now]:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise BenchError(f"{run_dir} holds trajectories its matrix no longer makes ({missing[0]}{more}): its repair "
                         "suite (or how trajectories are named) changed since the run began; resume it with the suite "
                         "it began with")
    if extra := sorted(now - set(recorded)):
        print(f"note: {len(extra)} trajectories the matrix makes now ({extra[0]}{', ...' if len(extra) > 1 else ''}) "
              f"are not this run's (its repair suite changed since it began) and are left out: run them in a new "
              "--run-dir", file=sys.stderr)
    names = set(recorded)
    return [c for c in configs if c.trajectory_id() in names]


def hold_run(run_dir: Path) -> int | None:
    """An exclusive lock on the run folder (flock on the folder itself: no file left behind, released when the process
    dies however it dies), or BenchError when another bench holds it: two benches in one folder would run the same
    unfinished trajectories, pay for their model calls twice and interleave their events. None when the file system
    has no such locks."""
    try:
        return hold_folder(run_dir)
    except FolderHeld:
        raise BenchError(f"{run_dir} is in use by another bench process: wait for it to end (or stop it), "
                         "then --resume") from None


def _write_manifest(config: BenchConfig, run_dir: Path) -> None:
    ids = [c.trajectory_id() for c in expand(config)]
    write_manifest(run_dir, build_manifest(config.model_dump(mode="json"), "bench", ids, config.arch))


def _record_gpu_use(run_dir: Path, pool, gpus: int, setup_s: float) -> tuple[float, list[dict], dict]:
    """A local GPU run's records (evaluator_start.json, gpu_timeline.json): (the workers' start, each worker's start
    by phase, the timeline's summary)."""
    worker_start = list(getattr(pool, "startup", None) or [])
    if worker_start:  # the actives' start (spares and replacements come later in the list)
        setup_s = max(setup_s, max(w.get("ready_after_s", 0.0) for w in worker_start[:max(1, gpus)]))
        write_evaluator_start(run_dir, setup_s, worker_start)
    timeline = getattr(pool, "timeline", None)
    if timeline is None or not timeline.entries:
        return setup_s, worker_start, {}
    record = timeline.to_json()
    write_gpu_timeline(run_dir, record)
    return setup_s, worker_start, record["summary"]


def _report(cfg: OptimizeConfig, **fields) -> TrajectoryReport:
    return TrajectoryReport(trajectory_id=cfg.trajectory_id(), model=cfg.model, workload=cfg.workload, prompt=cfg.prompt,
                            index=cfg.index, **fields)


class _Runner:
    """Runs one trajectory with retries; shared by all threads (the checkpointer serialises itself)."""

    def __init__(self, config: BenchConfig, run_dir: Path, evaluator, checkpointer,
                 model_factory: Callable[[OptimizeConfig], Model]):
        self.config, self.run_dir, self.evaluator, self.checkpointer = config, run_dir, evaluator, checkpointer
        self.model_factory = model_factory
        self.gates = ProviderGates(config.provider_limits)
        self.stopping = threading.Event()  # set on Ctrl-C: trajectories in flight end at their next model call
        self.reach = ReachWatch()  # models no call reached: their trajectories wait for --resume (unreached.py)

    def stop(self) -> None:
        self.stopping.set()

    def __call__(self, cfg: OptimizeConfig) -> TrajectoryReport:
        tid = cfg.trajectory_id()
        error = ""
        for attempt in range(1, self.config.infra_retries + 2):
            if (line := self.reach.line(cfg.model)) is not None and not (self.run_dir / "trajectories" / tid).exists():
                # its model was never reached: not begun (one begun, maybe finished, runs: its next call is not made)
                return _report(cfg, stop_reason=UNREACHED, attempts=attempt - 1, error=line)
            model = self.reach.watch(LimitedModel(self.model_factory(cfg), self.gates.gate(cfg.model), self.stopping),
                                     cfg.model)
            try:
                # its folder made here: storage that gives out as it is made stops the bench as a failed write does
                writer = TrajectoryWriter(self.run_dir / "trajectories" / tid)
                # a thread that stopped on an infra error (an earlier attempt, or a run this one resumes) is forked
                # before the failed step and goes on from there
                out = run_trajectory(cfg, self.evaluator, writer, model=model, checkpointer=self.checkpointer,
                                     trajectory_id=tid, retry_infra_stop=True)
            except ModelUnreached as exc:  # no infra stop recorded: --resume makes the call
                if self.stopping.is_set():
                    raise
                return _report(cfg, stop_reason=UNREACHED, attempts=attempt - 1, error=str(exc))
            except Exception as exc:  # noqa: BLE001 - a harness failure (logged as an infra error event); resume retries it
                if isinstance(exc, BenchInterrupted) or self.stopping.is_set():
                    raise  # stopping: no retry
                if (what := storage_failure(exc, self.run_dir)) is not None:
                    self.stop()  # the others end at their next model call, whose reply could not be recorded either
                    raise StorageGaveOut(f"cannot write the run any more: {what}; the bench stopped, and what was "
                                         f"recorded is kept: once that is mended (room, permissions), resume with: "
                                         f"ptxbench bench --resume --run-dir {shlex.quote(str(self.run_dir))}") from exc
                error = f"{type(exc).__name__}: {exc}"
                continue
            tried = attempt - 1 if out.infra_retry == NOTHING_TO_RETRY else attempt  # that attempt ran nothing
            if out.stop_reason == "infra_error" and not self.stopping.is_set() and (
                    gone := getattr(self.evaluator, "no_worker", "")):
                self.stop()  # no retry could run: the others end at their next model call, the unstarted never start
                raise NoWorkerLeft(f"{gone}: the bench stopped, and what ran is recorded; once there are GPUs "
                                   f"again, resume with: ptxbench bench --resume --run-dir "
                                   f"{shlex.quote(str(self.run_dir))}")
            if out.stop_reason == "infra_error" and attempt <= self.config.infra_retries and tried == attempt:
                if self.stopping.is_set():  # a stop kills the GPU workers too: their INFRA_ERROR is no cause to
                    # evaluate again (on a worker started for it) while the bench stops; the infra stop stays for --resume
                    raise BenchInterrupted("the bench was stopped before this trajectory's failed step was retried; "
                                           "--resume retries it")
                error = out.stop_detail
                continue
            return _report(cfg, stop_reason=out.stop_reason, statuses=out.statuses, best_speedup=out.best_speedup,
                           attempts=tried, infra_failed=out.stop_reason == "infra_error", error=error if tried > 1 else "")
        return _report(cfg, stop_reason="infra_error", attempts=self.config.infra_retries + 1, infra_failed=True, error=error)


def run_bench(config: BenchConfig | None, run_dir: str | Path, *, resume: bool = False, overrides: dict | None = None,
              evaluator=None, model_factory: Callable[[OptimizeConfig], Model] | None = None,
              on_done: Callable[[TrajectoryReport], None] | None = None, restart: bool = False,
              own_evaluator: bool | None = None) -> BenchOutcome:
    """Run (or with resume=True continue) the matrix into run_dir; returns one report per trajectory. A resumed
    run whose checkpoints cannot continue a started trajectory raises CheckpointLost before anything runs,
    unless `restart` (agent/records/checkpoint_guard.py). A given evaluator is the caller's to close, unless
    own_evaluator=True (the CLI makes it early with make_evaluator, so that its GPU workers start sooner)."""
    start = time.monotonic()
    run_dir = Path(run_dir)
    own_evaluator = evaluator is None if own_evaluator is None else own_evaluator
    lock = None
    try:
        if resume and run_dir.is_dir():  # held before check_run sets anything aside
            lock = hold_run(run_dir)
        config = open_run(config, run_dir, resume, overrides)
        configs = recorded_matrix(config, run_dir) if resume else expand(config)
        if resume:
            for line in check_run(run_dir, [c.trajectory_id() for c in configs], restart):
                print(f"note: {line}", file=sys.stderr)
            if (line := note_code_change(run_dir, "bench --resume")) is not None:
                print(f"warning: {line}", file=sys.stderr)
        t0 = time.monotonic()
        if evaluator is None:  # no GPU for a GPU run: fails before the run folder is made
            evaluator, own_evaluator = make_evaluator(config), True
        setup_s = time.monotonic() - t0
        if not resume:
            run_dir.mkdir(parents=True, exist_ok=True)
            lock = hold_run(run_dir)
            if read_manifest(run_dir) or trajectory_folders(run_dir):  # another new bench took the folder meanwhile
                raise BenchError(f"{run_dir} already holds a run: pass --resume to continue it, or choose another --run-dir")
            if (run_dir / "checkpoints.sqlite").exists():  # left by another run: every trajectory would meet it (garbage
                # there infra-failed each one, "file is not a database", and the bench still exited 0)
                raise BenchError(f"{run_dir} holds a checkpoints.sqlite of no run (no manifest.json): remove it, or "
                                 "choose another --run-dir")
            _write_manifest(config, run_dir)
    except BaseException:
        if own_evaluator and evaluator is not None:  # started for a run that cannot begin: its workers stop here
            evaluator.close()
        release(lock)
        raise
    close_s = 0.0
    worker_start: list[dict] = []
    checkpointer = open_checkpointer(run_dir / "checkpoints.sqlite")
    runner = _Runner(config, run_dir, evaluator, checkpointer, model_factory or make_model)
    callback = (lambda job, result: on_done(result if isinstance(result, TrajectoryReport)
                                             else _report(job, infra_failed=True, error=str(result)))) if on_done else None
    try:
        results = asyncio.run(run_all(configs, runner, config.parallel, on_done=callback, on_cancel=runner.stop,
                                      share=lambda c: c.model, fatal=(NoWorkerLeft, StorageGaveOut)))
    finally:
        checkpointer.conn.close()
        pool = getattr(evaluator, "_pool", None)  # a local evaluator's pool, once started: its workers' start times
        gpus = len(getattr(pool, "slots", None) or [])  # before the close empties them
        if own_evaluator:
            t0 = time.monotonic()
            evaluator.close()
            close_s = time.monotonic() - t0
        gpu_use = {}
        try:
            setup_s, worker_start, gpu_use = _record_gpu_use(run_dir, pool, gpus, setup_s)
        except Exception as exc:  # noqa: BLE001 - a record that cannot be written must not hide the run's outcome
            print(f"warning: the GPU start / use records were not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        release(lock)
    reports = [r if isinstance(r, TrajectoryReport) else _report(c, infra_failed=True, error=f"{type(r).__name__}: {r}")
               for c, r in zip(configs, results)]
    if (stop := stopped(reports, run_dir)) is not None:  # a model never reached: the bench stops, resumable
        stop.trajectories = reports
        raise stop
    return BenchOutcome(run_dir=str(run_dir), config=config, trajectories=reports, elapsed_s=time.monotonic() - start,
                        setup_s=setup_s, close_s=close_s, worker_start=worker_start, gpu_use=gpu_use)
