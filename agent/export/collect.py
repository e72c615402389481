"""Read run directories into per-trajectory samples: the prompts the model saw and each turn's scored kernel."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from ...workloads.registry import get_workload
from ..repairs.suite import held_out_bug
from ..records.rundir import distinct_runs, read_manifest, sha256_text
from ..scoring.run_score import unique_records
from ..scoring.turns import measured_figure, evaluated_gpu
from .host_paths import model_name, replay_model, run_name
from .replayed import authored_events, feedback_read, tags


@dataclass
class Turn:
    turn: int
    status: str
    language: str
    kernel: str
    kernel_sha256: str
    feedback: str
    speedup: float | None
    target_executed: bool | None
    infra: bool = False
    gpu: str = ""  # the card that measured this turn (its result's fingerprint): a resumed run may have met two


@dataclass
class TrajectorySample:
    run: str
    trajectory: str
    workload: str
    model: str
    prompt: str
    gpu: str
    held_out: bool
    system: str
    task: str
    synthetic: str | None = None
    started: str = ""  # the trajectory_start's time: a run folder's name alone is not unique (run1 of two examples)
    replayed_from: str | None = None  # the replay/<log> model that resubmitted the replies; `model` is their author
    skipped_lines: int = 0  # lines of its log that are no readable event (rundir.read_log): said by `export`
    turns: list[Turn] = field(default_factory=list)


def _utc(ts: float | None) -> str:
    """An event's time as ISO 8601 in UTC, to the microsecond ("" without one, or for a recorded NaN or a time no
    calendar holds, which stopped the export with a traceback)."""
    try:
        return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="microseconds") if ts else ""
    except (ValueError, OverflowError, OSError):
        return ""


def _text(content) -> str:
    """A recorded message's content as text: a string, the text parts of a list of parts (OpenAI's form), else ""
    (a number or an object there stopped the export)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _first_prompts(events, start) -> tuple[str, str]:
    """System and task text: from the first model call, else from the start event's config (synthetic runs)."""
    for e in events:
        if e.type == "model_call":
            system = next((_text(m.get("content")) for m in e.messages if m.get("role") == "system"), "")
            task = next((_text(m.get("content")) for m in e.messages if m.get("role") == "user"), "")
            return system, task
    cfg = start.config if start else {}
    return cfg.get("system_prompt") or "", cfg.get("task_prompt") or ""


def _author(events, model: str) -> tuple[str, str | None]:
    """(the model that wrote the trajectory's replies, the replay model that resubmitted them or None): a replay's rows
    were attributed to `replay/<path>`, their author named only in each model call's tags."""
    if not model.startswith("replay/"):
        return model, None
    for e in events:
        if isinstance(author := tags(e).get("recorded_model"), str) and author:
            return author, model
    return model, None


TOOLS_HEADING = "\n## Tools\n"  # prompts/system_tools.md, the last part of a --mode tools system prompt (loop/task.py)


def _without_tools(system: str) -> str:
    """A --mode tools system prompt less its tools part: rows hold no tools, their completion is a fenced kernel, and
    an instruction to call `submit` that a fenced reply answers would be trained on. What is left is the pipeline's."""
    at = system.rfind(TOOLS_HEADING)
    return system[:at].rstrip("\n") + "\n" if at >= 0 else system


def _gpu_name(manifest: dict) -> str:
    gpu = manifest.get("gpu", "")
    return str(gpu.get("name", "")) if isinstance(gpu, dict) else str(gpu or "")


def _registry_held_out(workload: str) -> bool:
    """Whether this machine's registry holds the workload out (a record may lack the flag, or be edited)."""
    try:
        return get_workload(workload).held_out
    except KeyError:  # a workload recorded elsewhere and unknown here: the record's word stands
        return False


def _writable(obj):
    """`obj` (a Turn or TrajectorySample) with each text field as UTF-8 can write it: a lone surrogate (a record's JSON
    escape "\\ud800", a folder name that is not UTF-8) becomes its escape, as the report writes it; the row hashes,
    the tokenizers, JSONL and Parquet all refuse one."""
    for f in fields(obj):
        if isinstance(value := getattr(obj, f.name), str):
            setattr(obj, f.name, value.encode("utf-8", "backslashreplace").decode("utf-8"))
    return obj


def canonical_runs(run_dirs: list[Path]) -> list[Path]:
    """The run folders, each once, by name (then by resolved path, for two runs of one name): the order rows are read,
    de-duplicated and written in. In the order given, `export A B` and `export B A` kept other copies of a duplicate
    row and wrote other files from the same runs."""
    return sorted(distinct_runs(run_dirs), key=lambda run: (run_name(run), str(Path(run).resolve())))


def collect_samples(run_dirs: list[Path], unstarted: list[Path] | None = None) -> list[TrajectorySample]:
    """The runs' trajectories in canonical_runs' order, each run's by folder name, whatever order the runs are given
    in; `unstarted` (a list) gets the folders of the logs with no readable trajectory_start, as score counts them."""
    samples: list[TrajectorySample] = []
    gpus: dict[Path, str] = {}
    # unique_records, as `score` and `report` read runs: a trajectory folder copied inside a run (one trajectory_start
    # twice) is DuplicateTrajectory, not its rows twice (--no-dedup kept both, and the copy's rows weighed double)
    for run_dir, rec in unique_records(canonical_runs(run_dirs), unstarted):
        if run_dir not in gpus:
            gpus[run_dir] = _gpu_name(read_manifest(run_dir))
        start = rec.start
        author, replayed_from = _author(rec.events, start.model)
        # a replay's replies answered the recorded run's prompts and feedback: those are the rows' (replayed.py); when
        # that log cannot be read, no feedback is known (no Fixit row) and the prompts are this run's
        authored = authored_events(rec.events, rec.folder / "trajectory.jsonl") if replayed_from else rec.events
        system, task = _first_prompts(authored or rec.events, start)
        told = feedback_read(authored) if replayed_from and authored else None
        if start.mode == "tools":
            system = _without_tools(system)
        sample = TrajectorySample(
            # the run by its folder's name as the manifest names it (Path(".").name is "")
            run=run_name(str(run_dir)), trajectory=rec.id, workload=start.workload, model=model_name(author),
            prompt=start.prompt,
            gpu=start.gpu or evaluated_gpu(rec.events) or gpus[run_dir], system=system, task=task,
            held_out=start.held_out or held_out_bug(start.config) or _registry_held_out(start.workload),
            synthetic=start.config.get("synthetic_bug"), started=_utc(start.ts),
            replayed_from=replay_model(replayed_from) if replayed_from else None,  # no host path (host_paths.py)
            skipped_lines=rec.skipped_lines,
        )
        for e in rec.events:
            if e.type != "eval_result" or not e.submission or not e.kernel_file:
                continue
            kernel = rec.kernel(e.kernel_file)
            if kernel is None:  # missing, unreadable, or outside the trajectory folder (rundir.read_kernel)
                continue
            if e.kernel_sha256 and sha256_text(kernel) != e.kernel_sha256:
                # not the kernel this result scored: the file is named by its turn, and a turn done again (a
                # retry from the last good turn) wrote its new kernel over it; the verdict is not this text's
                continue
            status = e.result.status
            # as score reads it: NaN passed --min-speedup and is no JSON, a hand-edited 1e308 passed it too
            speedup = measured_figure(e.result.speedup)
            sample.turns.append(_writable(Turn(
                turn=e.turn, status=status, language=e.language or "cuda", kernel=kernel,
                kernel_sha256=e.kernel_sha256 or sha256_text(kernel),
                feedback=e.feedback if not replayed_from else (told or {}).get((e.turn, sha256_text(kernel)), ""),
                speedup=speedup, target_executed=e.result.target_executed, infra=status == "INFRA_ERROR",
                gpu=e.result.fingerprint.gpu if e.result.gpu_evaluated else "",
            )))
        samples.append(_writable(sample))
    return samples
