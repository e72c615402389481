"""Re-evaluate a recorded run on this machine (new GPU, new library) without calling any model.

Every event is copied into a new run folder; each scored submission's kernel is evaluated again
and its eval_result and turn_end carry the new verdict (the feedback text stays what the model
saw). Identical kernels of one workload are evaluated once (under the same options). An INFRA_ERROR (or an exception from the evaluator) is
evaluated again (INFRA_ATTEMPTS) and never reused; one that stays gets an infra error event, as in the loop, so its trajectory is left out of trajectory
scores, not blamed on the model, except an exception raised alike on every attempt: each is logged with its traceback,
as the loop logs a harness crash, and scoring reads a crash the kernel brings on every time as the model's failed turn.
The new run scores like any other.

A re-evaluation killed part way (a GPU hour of kernels, a Ctrl-C, a lost machine) goes on with `resume=True`: each
trajectory is written into `.reevaluating/` and moved into trajectories/ only whole, so a finished one is kept as it
is (its verdicts seed the copies still to evaluate) and a half-written one is written again from its start.

The recorded run may come from someone else: a kernel is read only from inside its trajectory folder, and written
(the bytes read) only inside the new one (rundir.kernel_path / path_inside); a record that names a kernel elsewhere
stops the re-evaluation before anything is written.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import shutil
import time
import traceback
from pathlib import Path

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import LEGACY_L2_FLUSH, EvalResult

from ..records.events import ErrorEvent, EvalEvent, TurnEnd
from ..records.folder_lock import FolderHeld, hold_folder, release
from ..records.manifest import build_manifest
from ..records.rundir import (DamagedRecord, TrajectoryRecord, TrajectoryWriter, load_run, path_inside, read_log,
                              read_manifest, sha256_text, trajectory_folders, trajectory_log,
                              write_manifest)


def _options(record: TrajectoryRecord, no_gpu: bool) -> EvalOptions:
    start = record.start
    config = start.config if start else {}
    return EvalOptions(arch=start.arch if start else DEFAULT_ARCH, trials=config.get("trials"), no_gpu=no_gpu,
                       profile="full" if config.get("profile") in (True, "full") else "none", seed=config.get("seed"),
                       l2_flush=config.get("l2_flush", LEGACY_L2_FLUSH))


def _scored_kernels(record: TrajectoryRecord) -> dict[str, str]:
    """kernel_file -> its text, for every scored submission of the record; DamagedRecord for one that is not a
    UTF-8 regular file inside the trajectory folder (missing, absolute, climbing out with ../ or through a link)."""
    sources = {}
    for event in record.events:
        if isinstance(event, EvalEvent) and event.submission and event.kernel_file:
            source = record.kernel(event.kernel_file)
            if source is None:
                raise DamagedRecord(record.folder, f"turn {event.turn} names kernel file {event.kernel_file!r:.120}, which is "
                                    "not a readable file inside the trajectory folder")
            sources[event.kernel_file] = source
    return sources


def _write_kernel(folder: Path, rel: str, source: str) -> None:
    path = path_inside(folder, rel)
    if path is None:  # _scored_kernels found it inside the recorded folder; the new folder is laid out the same
        raise DamagedRecord(folder, f"kernel file {rel!r} would be written outside the trajectory folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(source.encode("utf-8"))


def _judged_under(options: EvalOptions) -> str:
    """What a verdict depends on besides the kernel (arch, trials, flush, profile...): trajectories of one run folder
    may differ in it (optimize keeps a config per trajectory). The seed is left out: it draws the inputs, and a
    bench gives each trajectory its own, which would evaluate every copy of a kernel again."""
    return options.model_copy(update={"seed": None}).model_dump_json()


INFRA_ATTEMPTS = 3  # evaluations of one kernel while the harness fails (INFRA_ERROR), as a bench retries its step


def _evaluate(evaluator, workload: str, source: str, options: EvalOptions, cache: dict, key: tuple):
    """The kernel's result, and the exceptions its evaluation raised on the way (one per failed attempt)."""
    if key in cache:
        return cache[key], []
    raised: list[BaseException] = []
    for _ in range(INFRA_ATTEMPTS):
        try:
            result = evaluator.evaluate(workload, source, options)
        except Exception as exc:  # noqa: BLE001 - a harness failure on one kernel must not end the whole re-evaluation
            raised.append(exc)
            result = EvalResult(workload=workload, status="INFRA_ERROR",
                                message=f"the evaluation raised {type(exc).__name__}: {exc}"[:2000])
        if result.status != "INFRA_ERROR":
            cache[key] = result  # a harness failure is no verdict on the kernel: never reused for its copies
            break
    return result, raised


def _reproduced(raised: list[BaseException]) -> bool:
    """Every attempt raised, and alike: the kernel's doing, as scoring reads a crash a retry hits again the same way."""
    return len(raised) == INFRA_ATTEMPTS and len({f"{type(e).__name__}: {e}" for e in raised}) == 1


def _copy_trajectory(record: TrajectoryRecord, sources: dict[str, str], folder: Path, evaluator, no_gpu: bool,
                     cache: dict) -> None:
    writer = TrajectoryWriter(folder)
    options = _options(record, no_gpu)
    workload = record.start.workload if record.start else ""
    new_status: dict[int, tuple[str, float | None]] = {}
    crashed: set[int] = set()  # turns whose kernel made every evaluation raise alike
    for event in record.events:
        infra = None
        if isinstance(event, EvalEvent) and event.submission and event.kernel_file:
            source = sources[event.kernel_file]
            # identical kernels found by the text read, not by the hash the record names (a foreign record's failing
            # kernel could name a passing one's and take its verdict unevaluated)
            sha = sha256_text(source)
            result, raised = _evaluate(evaluator, workload, source, options, cache, (workload, sha, _judged_under(options)))
            _write_kernel(folder, event.kernel_file, source)
            new_status[event.turn] = (result.status, result.speedup if result.status == "PASSED" else None)
            event = event.model_copy(update={"result": result, "kernel_sha256": sha})
            if result.status == "INFRA_ERROR" and _reproduced(raised):
                # each crash with its traceback, as the loop logs a harness crash: scoring reads the same crash on
                # every attempt as the model's failed turn (else a kernel escapes its score by crashing the harness)
                infra = [ErrorEvent(trajectory_id=event.trajectory_id, turn=event.turn, where="reevaluate", infra=True,
                                    message=f"{type(exc).__name__}: {exc}",
                                    traceback="".join(traceback.format_exception(exc))) for exc in raised]
                crashed.add(event.turn)
            elif result.status == "INFRA_ERROR":  # recorded as the loop records one: the turn is not the model's
                infra = [ErrorEvent(trajectory_id=event.trajectory_id, turn=event.turn, where="reevaluate", infra=True,
                                    message=f"re-evaluation: {result.message or result.runtime_error or 'infrastructure error'}")]
        elif isinstance(event, TurnEnd) and event.turn in new_status and event.status not in ("NO_SUBMISSION", "FORMAT_ERROR"):
            status, speedup = new_status[event.turn]
            event = event.model_copy(update={"status": status, "speedup": speedup})
        writer.append(event)
        for error in infra or []:
            writer.append(error)
    lost = sorted(t for t, (status, _) in new_status.items() if status == "INFRA_ERROR" and t not in crashed)
    if lost:  # its best is unknown: the trajectory ends on an infra failure, left out of trajectory scores, not a 0
        writer.append(ErrorEvent(trajectory_id=record.start.trajectory_id, where="reevaluate", infra=True,
                                 message=f"re-evaluation: turns {', '.join(map(str, lost))} could not be evaluated "
                                         f"after {INFRA_ATTEMPTS} attempts (INFRA_ERROR)"))


PARTIAL = ".reevaluating"  # trajectories being written; one moves into trajectories/ only once it is whole


class ReevaluationRefused(ValueError):
    """The new run folder cannot take this re-evaluation (or its resume): said in one line, nothing written."""


def _source_ids(manifest: dict) -> list[str] | None:
    ids = manifest.get("trajectories")
    return ids if isinstance(ids, list) else None


def _check_resumable(out_run: Path, run_dir: Path, ids: list[str], no_gpu: bool) -> None:
    """ReevaluationRefused unless out_run's unfinished re-evaluation is one of this run (its source folder and
    trajectories) made the same way (with the GPU or compile-only)."""
    manifest = read_manifest(out_run)
    source = manifest.get("source_run") if isinstance(manifest.get("source_run"), dict) else {}
    if manifest.get("command") != "reevaluate":
        raise ReevaluationRefused(f"{out_run} holds no re-evaluation to resume (its manifest's command is "
                                  f"{manifest.get('command')!r})")
    if source.get("path") is not None and Path(str(source["path"])).resolve() != run_dir.resolve():
        raise ReevaluationRefused(f"{out_run} re-evaluates {source['path']}, not {run_dir}: resume it with that run")
    if _source_ids(manifest) != ids:  # the source run went on (a bench --resume) since: a new re-evaluation, not a resume
        raise ReevaluationRefused(f"{run_dir}'s trajectories are not those {out_run} began re-evaluating: re-evaluate "
                                  "it into a new folder")
    began = manifest.get("reevaluation") if isinstance(manifest.get("reevaluation"), dict) else {}
    if "no_gpu" in began and began["no_gpu"] != no_gpu:  # half the trajectories timed, half compile-only: no one run
        raise ReevaluationRefused(f"{out_run} began {'compile-only (--no-gpu)' if began['no_gpu'] else 'on the GPU'}: "
                                  "resume it the same way")


def unfinished(out_run: Path) -> list[str]:
    """The trajectories a re-evaluation's manifest names that are not in its trajectories/ yet ([] for a finished
    re-evaluation and for any other run): scores of the folder would lack them."""
    manifest = read_manifest(out_run)
    if manifest.get("command") != "reevaluate":
        return []
    done = {p.name for p in trajectory_folders(out_run)}
    return [i for i in _source_ids(manifest) or [] if i not in done]


def _seed_cache(folder: Path, record: TrajectoryRecord, no_gpu: bool, cache: dict) -> None:
    """The verdicts a finished copy holds, for the kernels still to evaluate: identical kernels are evaluated once, a
    resume included (an INFRA_ERROR is never reused)."""
    log = trajectory_log(folder)
    if log is None:
        raise DamagedRecord(folder, "a re-evaluated trajectory moved in without its log")
    done = TrajectoryRecord(folder, *read_log(log))
    workload = record.start.workload if record.start else ""
    judged = _judged_under(_options(record, no_gpu))
    for event in done.events:
        if isinstance(event, EvalEvent) and event.submission and event.kernel_sha256 and event.result is not None \
                and event.result.status != "INFRA_ERROR":
            cache.setdefault((workload, event.kernel_sha256, judged), event.result)


def reevaluate_run(run_dir: Path, out_run: Path | None = None, *, no_gpu: bool = False, evaluator=None,
                   resume: bool = False, on_done=None) -> Path:
    """The new run folder, every trajectory of run_dir copied into it with its kernels evaluated again. on_done(id,
    kept) is called once per trajectory (kept: finished by the run resumed, not evaluated again)."""
    run_dir = Path(run_dir)
    out_run = Path(out_run) if out_run else run_dir.with_name(f"{run_dir.name}-reeval-{time.strftime('%Y%m%d-%H%M%S')}")
    records = [r for r in load_run(run_dir) if r.start is not None]
    ids = [r.id for r in records]
    sources = [_scored_kernels(r) for r in records]  # every kernel read (or refused) before anything is written
    made = not out_run.exists()
    out_run.mkdir(parents=True, exist_ok=True)
    try:
        held = hold_folder(out_run)  # checked and written by one process at a time
    except FolderHeld:
        raise ReevaluationRefused(f"{out_run} is being re-evaluated by another process: wait for it to end (or stop "
                                  "it), then resume") from None
    try:
        if resume and not (out_run / "manifest.json").is_file():
            raise ReevaluationRefused(f"{out_run} holds no re-evaluation to resume: re-evaluate without resume")
        if resume:
            _check_resumable(out_run, run_dir, ids, no_gpu)
        elif (out_run / "trajectories").exists() or (out_run / PARTIAL).exists():
            raise ReevaluationRefused(f"{out_run} already holds trajectories (a re-evaluation stopped part way goes on "
                                      "with resume)")
        else:
            old = read_manifest(run_dir)
            arch = records[0].start.arch if records else DEFAULT_ARCH
            manifest = build_manifest(old.get("config", {}), "reevaluate", ids, arch)
            manifest["source_run"] = {"path": str(run_dir), "manifest": old}
            manifest["reevaluation"] = {"no_gpu": no_gpu}  # a resume evaluates the rest the same way
            write_manifest(out_run, manifest)
    except BaseException:
        release(held)
        if made:
            shutil.rmtree(out_run, ignore_errors=True)
        raise
    own = evaluator is None
    cache: dict = {}
    try:
        finished, partial = out_run / "trajectories", out_run / PARTIAL
        finished.mkdir(parents=True, exist_ok=True)
        todo = []
        for record, kernels in zip(records, sources):
            if (finished / record.id).is_dir():  # moved in whole: kept as it is
                _seed_cache(finished / record.id, record, no_gpu, cache)
                if on_done:
                    on_done(record.id, True)
            else:
                todo.append((record, kernels))
        if todo and own:
            from ptxbench.tools.evaluate import LocalEvaluator

            evaluator = LocalEvaluator()
        for record, kernels in todo:
            folder = partial / record.id
            if folder.exists():  # a copy cut short by the stop this resumes: written again from its start
                shutil.rmtree(folder)
            _copy_trajectory(record, kernels, folder, evaluator, no_gpu, cache)
            folder.rename(finished / record.id)
            if on_done:
                on_done(record.id, False)
        if partial.exists() and not any(partial.iterdir()):
            partial.rmdir()
    finally:
        if own and evaluator is not None:
            evaluator.close()
        release(held)
    return out_run
