"""Re-evaluate a recorded run on this machine (new GPU, new library) without calling any model.

Every event is copied into a new run folder; each scored submission's kernel is evaluated again
and its eval_result and turn_end carry the new verdict (the feedback text stays what the model
saw). Identical kernels of one workload are evaluated once. The new run scores like any other.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import shutil
import time
from pathlib import Path

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import LEGACY_L2_FLUSH

from ..records.events import EvalEvent, TurnEnd
from ..records.manifest import build_manifest
from ..records.rundir import TrajectoryRecord, TrajectoryWriter, load_run, read_manifest, write_manifest


def _options(record: TrajectoryRecord, no_gpu: bool) -> EvalOptions:
    start = record.start
    config = start.config if start else {}
    return EvalOptions(arch=start.arch if start else DEFAULT_ARCH, trials=config.get("trials"), no_gpu=no_gpu,
                       profile="full" if config.get("profile") in (True, "full") else "none", seed=config.get("seed"),
                       l2_flush=config.get("l2_flush", LEGACY_L2_FLUSH))


def _copy_trajectory(record: TrajectoryRecord, folder: Path, evaluator, no_gpu: bool, cache: dict) -> None:
    writer = TrajectoryWriter(folder)
    options = _options(record, no_gpu)
    workload = record.start.workload if record.start else ""
    new_status: dict[int, tuple[str, float | None]] = {}
    for event in record.events:
        if isinstance(event, EvalEvent) and event.submission and event.kernel_file:
            source = record.kernel(event.kernel_file)
            key = (workload, event.kernel_sha256 or source)
            if key not in cache:
                cache[key] = evaluator.evaluate(workload, source, options)
            result = cache[key]
            (folder / event.kernel_file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(record.folder / event.kernel_file, folder / event.kernel_file)
            new_status[event.turn] = (result.status, result.speedup if result.status == "PASSED" else None)
            event = event.model_copy(update={"result": result})
        elif isinstance(event, TurnEnd) and event.turn in new_status and event.status not in ("NO_SUBMISSION", "FORMAT_ERROR"):
            status, speedup = new_status[event.turn]
            event = event.model_copy(update={"status": status, "speedup": speedup})
        writer.append(event)


def reevaluate_run(run_dir: Path, out_run: Path | None = None, *, no_gpu: bool = False, evaluator=None) -> Path:
    run_dir = Path(run_dir)
    out_run = Path(out_run) if out_run else run_dir.with_name(f"{run_dir.name}-reeval-{time.strftime('%Y%m%d-%H%M%S')}")
    if (out_run / "trajectories").exists():
        raise FileExistsError(f"{out_run} already holds trajectories")
    records = [r for r in load_run(run_dir) if r.start is not None]
    old = read_manifest(run_dir)
    arch = records[0].start.arch if records else DEFAULT_ARCH
    manifest = build_manifest(old.get("config", {}), "reevaluate", [r.id for r in records], arch)
    manifest["source_run"] = {"path": str(run_dir), "manifest": old}
    write_manifest(out_run, manifest)
    own = evaluator is None
    if own:
        from ptxbench.tools.evaluate import LocalEvaluator

        evaluator = LocalEvaluator()
    cache: dict = {}
    try:
        for record in records:
            _copy_trajectory(record, out_run / "trajectories" / record.id, evaluator, no_gpu, cache)
    finally:
        if own:
            evaluator.close()
    return out_run
