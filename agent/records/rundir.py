"""The run directory: the one module that writes and reads runs/.

    runs/<run>/manifest.json                       config, git revision, package versions, GPU, driver
    runs/<run>/checkpoints.sqlite                  LangGraph checkpointer (thread id = trajectory id)
    runs/<run>/trajectories/<traj>/trajectory.jsonl  append-only events (agent/records/events.py); once the run is
                                                   sealed (agent/records/sealing.py), trajectory.jsonl.gz instead
    runs/<run>/trajectories/<traj>/kernels/turn_NN.<cu|ptx>  the kernel of every turn
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from pydantic import BaseModel, ConfigDict, ValidationError

from ptxbench.tools.atomic import atomic_write
from ptxbench.tools.held_signals import signals_held
from ptxbench.tools.results import OLD_TURN_STATUSES

from .events import EVENT_ADAPTER, Event, TrajectoryStart, _Event


def runs_root() -> Path:
    """Where new run folders go: $PTXBENCH_RUNS, else runs/ under the working directory."""
    # set but empty (`PTXBENCH_RUNS= ptxbench ...`) is unset, not Path(""): the working directory itself; a `~` no shell
    # expanded (a unit file, a .env) is the home folder, not a folder named `~` in the working directory
    return Path(os.environ.get("PTXBENCH_RUNS") or "runs").expanduser()

KERNEL_SUFFIX = {"ptx": "ptx", "cuda": "cu"}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


LOG_NAME = "trajectory.jsonl"
SEALED_LOG_NAME = LOG_NAME + ".gz"


class SealedTrajectory(ValueError):
    """A trajectory whose log was sealed (gzipped) is finished: nothing may be appended to it."""


class DamagedRecord(ValueError):
    """A file of a run folder that cannot be what its name says (a manifest that is not a JSON object, a recorded value
    of the wrong type, `trajectories` that is not a folder): the message is `<path>: <what>`."""

    def __init__(self, path: Path, what: str):
        super().__init__(f"{path}: {what}")


def validation_line(exc: ValidationError) -> str:
    """A pydantic error as one short line: where, and what was expected (the first error; the count if more)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}, got {first.get('input')!r:.80}{more}"


def trajectory_log(folder: Path) -> Path | None:
    """A trajectory folder's event log: the live trajectory.jsonl, else the sealed trajectory.jsonl.gz, else None
    (a folder or other non-file under that name is no log)."""
    for name in (LOG_NAME, SEALED_LOG_NAME):
        if (path := Path(folder) / name).is_file():
            return path
    return None


class TrajectoryWriter:
    """Appends events to trajectory.jsonl, flushing and fsyncing each, so a kill loses at most one."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        if (self.folder / SEALED_LOG_NAME).exists():
            raise SealedTrajectory(f"{self.folder} is sealed ({SEALED_LOG_NAME}): unseal its run "
                                   "(`ptxbench seal RUN --undo`) before continuing it")
        (self.folder / "kernels").mkdir(parents=True, exist_ok=True)
        self.path = self.folder / LOG_NAME
        self.torn = repair_torn_tail(self.path)  # a kill mid-write: the partial line moved aside, never appended onto
        self._seq = sum(1 for _ in _lines(self.path)) if self.path.exists() else 0

    def append(self, event: _Event) -> _Event:
        event.seq = self._seq
        # Ctrl-C or SIGTERM raised inside pydantic's serializer came out as its error (a crash, the line lost): held
        # until the line is written and counted, then raised
        with signals_held():
            line = (one_line(event.model_dump_json()) + "\n").encode("utf-8")
            try:
                with open(self.path, "ab") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            except BaseException:
                # A write that failed part way (the disk full): a line cut short is moved aside, and one that is in
                # the file whole keeps its seq, which the next event must not take again
                if not _ends_with(self.path, line):
                    repair_torn_tail(self.path)  # set aside, or (only its newline missing) made whole
                if _ends_with(self.path, line):
                    self._seq += 1
                raise
            self._seq += 1
        return event

    def save_kernel(self, turn: int, language: str, source: str, tag: str = "") -> str:
        """Write the kernel of a turn; returns its path relative to the trajectory folder."""
        name = f"turn_{turn:02d}{('_' + tag) if tag else ''}.{KERNEL_SUFFIX.get(language, 'txt')}"
        rel = f"kernels/{name}"
        # on disk before the event that names it (fsynced, as the event is), and never written through a link planted
        # at its name
        atomic_write(self.folder / rel, source.encode("utf-8"))
        return rel


# Characters a JSON string holds raw (the model writes them) but str.splitlines() and some JSONL readers break a line
# at: a model_call line read that way came apart into pieces, each no event (the export writer escapes them too)
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}


def one_line(text: str) -> str:
    """A serialized event with the line breaks only some readers see written as JSON escapes (the same value)."""
    for raw, escaped in _LINE_BREAKS.items():
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def _ends_with(path: Path, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size < len(data):
                return False
            f.seek(size - len(data))
            return f.read() == data
    except OSError:
        return False


def side_path(path: Path, tag: str) -> Path:
    """The first free `<path>.<tag>-<n>` (n = 1, 2, ...): where bytes or files set aside are kept."""
    n = 1
    while (found := path.with_name(f"{path.name}.{tag}-{n}")).exists():
        n += 1
    return found


def _whole_object(tail: bytes) -> bool:
    """A tail that is a whole JSON object: a line cut only of its newline (a JSON object cut anywhere else is no JSON)."""
    try:
        return isinstance(json.loads(tail), dict)
    except (ValueError, RecursionError):
        return False


def repair_torn_tail(path: Path) -> Path | None:
    """Bytes after the last newline of an append-only file are a line torn by a kill: move them to
    `<path>.torn-<n>` and cut the file back to its last whole line. Returns the side file (None if whole). A tail
    that lacks only its newline is a whole line: the newline is written and the line kept."""
    if not path.exists():
        return None
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return None
        keep = data.rfind(b"\n") + 1
        if _whole_object(data[keep:]):
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
            return None
        side = side_path(path, "torn")
        side.write_bytes(data[keep:])
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return side


def _lines(path: Path) -> Iterator[bytes]:
    """The non-blank lines of a log, as bytes (each decoded on its own, so one line that is not UTF-8 spoils only
    itself); a sealed (.gz) log cut short or corrupt ends where its readable part ends."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        try:
            for line in f:
                if line.strip():
                    yield line
        except (EOFError, gzip.BadGzipFile, zlib.error):
            return


def read_events(path: Path) -> list[Event]:
    """Events of one trajectory (read_log, less the count of lines it skipped)."""
    return read_log(path)[0]


# Why a log line is no readable event, as score, report and export say it
UNREADABLE = "cut by a kill, not UTF-8, not JSON, or of another version"


def read_log(path: Path) -> tuple[list[Event], int]:
    """Events of one trajectory, and how many lines were skipped: a torn last line (a kill mid-write), or any line
    that is not a JSON object (not UTF-8, nested past the parser's depth) or no event of this version, is dropped, not
    fatal, and counted so that scores of a damaged log say so. Older records are brought to today's words first
    (migrate_old_records), then validated into typed events."""
    raws: list[dict] = []
    skipped = 0
    for line in _lines(Path(path)):
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError):  # ValueError: not JSON, or not UTF-8 (UnicodeDecodeError)
            raw = None
        if isinstance(raw, dict):
            raws.append(raw)
        else:
            skipped += 1
    events: list[Event] = []
    for raw in migrate_old_records(raws):
        try:
            events.append(EVENT_ADAPTER.validate_python(raw))
        except ValueError:
            skipped += 1
    return events, skipped


def migrate_old_records(raws: list[dict]) -> list[dict]:
    """Older runs in today's vocabulary, on the raw records (before validation, where a missing key still shows):
    - a turn that handed in no kernel file was NO_SUBMISSION; it is FORMAT_ERROR now (tools/results.py);
    - runs recorded before the COMPILED status wrote a no-GPU success as PASSED with gpu_evaluated False. That kernel
      never ran, so its eval_result, and the turn_end of a turn it decided, read as COMPILED: old runs score, report
      and export like new ones. The feedback text stays what the model saw. Every record the evaluator wrote has
      the gpu_evaluated key; one without it (hand-made) is left as it is."""
    decided_by_old: set[int] = set()  # turns whose latest submission is such a result
    for raw in raws:
        kind, turn = raw.get("type"), raw.get("turn")
        if not isinstance(turn, (int, type(None))) or not isinstance(raw.get("status", ""), str):
            continue  # no event of ours (a turn or status that is a list was a TypeError here): validation drops it
        if kind == "eval_result" and isinstance(raw.get("result"), dict):
            result = raw["result"]
            old = result.get("status") == "PASSED" and result.get("gpu_evaluated") is False
            if old:
                raw["result"] = {**result, "status": "COMPILED"}
            if raw.get("submission", True):
                (decided_by_old.add if old else decided_by_old.discard)(turn)
        elif kind == "turn_end":
            if raw.get("status") in OLD_TURN_STATUSES:
                raw["status"] = OLD_TURN_STATUSES[raw["status"]]
            if raw.get("status") == "PASSED" and turn in decided_by_old:
                raw["status"] = "COMPILED"
    return raws


def path_inside(folder: Path, rel: str) -> Path | None:
    """`folder / rel` with every link and `..` resolved, or None when that leaves `folder`: a path read from a record
    (an absolute one, one that climbs out with ../, or goes through a link) must not reach the reader's own files.
    None too for a name with a NUL byte: a damaged record's, not a traceback."""
    root = Path(folder).resolve()
    try:
        path = (root / rel).resolve()
    except (ValueError, OSError):
        return None
    return path if path.is_relative_to(root) else None


def kernel_path(folder: Path, rel: str) -> Path | None:
    """The kernel file an eval_result's `kernel_file` names: a regular file inside its trajectory folder, else None."""
    path = path_inside(folder, rel) if rel else None
    try:
        return path if path is not None and path.is_file() else None
    except OSError:  # a name past the file system's length (a damaged record's): no file, not a traceback
        return None


def read_kernel(folder: Path, rel: str) -> str | None:
    """The text of a kernel file a record names (kernel_path), byte for byte; None when there is none to read: missing,
    outside the trajectory folder, not a regular file, or not UTF-8 (the harness writes every kernel as UTF-8)."""
    path = kernel_path(folder, rel)
    try:
        return path.read_bytes().decode("utf-8") if path is not None else None
    except (OSError, UnicodeDecodeError):
        return None


@dataclass
class TrajectoryRecord:
    folder: Path
    events: list[Event]
    skipped_lines: int = 0  # lines of its log read_log could not take as events: left out of everything read from it

    @property
    def start(self) -> TrajectoryStart | None:
        return next((e for e in self.events if e.type == "trajectory_start"), None)

    @property
    def id(self) -> str:
        return self.folder.name

    def kernel(self, rel: str) -> str | None:
        """The kernel file `rel` of this trajectory (read_kernel), or None."""
        return read_kernel(self.folder, rel)


class RecordedConfig(BaseModel):
    """The keys of a trajectory's recorded config that scoring, report, export and re-evaluation read, with the
    types they must have (None: not set); other keys are not looked at. Strict: a number is no text."""
    model_config = ConfigDict(extra="allow", strict=True)

    l2_flush: str | None = None
    synthetic_bug: str | None = None
    repair_task: str | None = None
    start_from: str | None = None
    system_prompt: str | None = None
    task_prompt: str | None = None
    trials: int | None = None
    seed: int | None = None
    profile: bool | str | None = None


def _checked(record: TrajectoryRecord, log: Path) -> TrajectoryRecord:
    """The record, once its start event's config holds the types its readers expect (else DamagedRecord)."""
    if record.start is not None:
        try:
            RecordedConfig.model_validate(record.start.config)
        except ValidationError as exc:
            raise DamagedRecord(log, f"trajectory_start config {validation_line(exc)}") from None
    return record


def trajectory_folders(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "trajectories"
    if not root.exists():
        return []
    if not root.is_dir():
        raise DamagedRecord(root, "not a folder (a run keeps one folder per trajectory in it)")
    return sorted(p for p in root.iterdir() if trajectory_log(p) is not None)


def load_run(run_dir: Path) -> list[TrajectoryRecord]:
    return list(iter_run(run_dir))


def iter_run(run_dir: Path) -> Iterator[TrajectoryRecord]:
    """The run's trajectory records one at a time: a record holds every model call's whole conversation, so a large
    run read at once took most of an export's memory (600 MB for 300 trajectories of eight turns)."""
    for folder in trajectory_folders(run_dir):
        log = trajectory_log(folder)
        yield _checked(TrajectoryRecord(folder, *read_log(log)), log)


def distinct_runs(run_dirs: Iterable[Path]) -> list[Path]:
    """The run folders, each once (a folder named twice, or by two paths, would be read, and counted, twice)."""
    seen: set[Path] = set()
    out = []
    for run in map(Path, run_dirs):
        if run.resolve() not in seen:
            seen.add(run.resolve())
            out.append(run)
    return out


def run_name(run_dir: Path | str) -> str:
    """A run folder as the user gave it, by its own name: `.` from inside it, `..` and `runs/x/` too (Path(".").name is
    "", Path("..").name ".."). The one name score, report, re-evaluation and export give a run."""
    return os.path.basename(os.path.abspath(os.path.expanduser(os.fspath(run_dir))))


class _ManifestShape(BaseModel):
    """The types of the manifest fields that readers use (a gpu is a string in older manifests); others are kept."""
    model_config = ConfigDict(extra="allow", strict=True)

    command: str | None = None
    created: str | None = None
    config: dict[str, Any] | None = None
    configs: dict[str, Any] | None = None
    trajectories: list[str] | None = None
    gpu: dict[str, Any] | str | None = None
    git: dict[str, Any] | None = None
    resumed_under: list[dict[str, Any]] | None = None  # resumes under other code (records/revision.py)


def _read_json(run_dir: Path, name: str) -> dict:
    """A JSON object file of the run folder, {} when it is not there; DamagedRecord when it is no JSON object."""
    path = Path(run_dir) / name
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:  # a folder, not UTF-8, not JSON, nested too deep
        raise DamagedRecord(path, f"not readable as JSON ({exc.strerror if isinstance(exc, OSError) else exc})") from None
    if not isinstance(data, dict):
        raise DamagedRecord(path, f"a JSON {type(data).__name__}, expected an object")
    return data


def _write_json(run_dir: Path, name: str, data: dict, indent: int | None = None) -> Path:
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    path = Path(run_dir) / name
    # whole or not at all (tools/atomic.py): a kill or a full disk mid-write left a cut manifest no reader could read
    return atomic_write(path, json.dumps(data, indent=indent, default=str).encode("utf-8"))


def write_manifest(run_dir: Path, manifest: dict) -> Path:
    return _write_json(run_dir, "manifest.json", manifest, indent=2)


def read_manifest(run_dir: Path) -> dict:
    """The run's manifest as written, {} when there is none; DamagedRecord when it is no JSON object or a field its
    readers use has another type."""
    manifest = _read_json(run_dir, "manifest.json")
    try:
        _ManifestShape.model_validate(manifest)
    except ValidationError as exc:
        raise DamagedRecord(Path(run_dir) / "manifest.json", validation_line(exc)) from None
    return manifest


def write_evaluator_start(run_dir: Path, setup_s: float, workers: list[dict]) -> Path:
    """How long the evaluator took to start and where it went, per GPU worker (GpuPool.startup)."""
    return _write_json(run_dir, "evaluator_start.json", {"setup_s": round(setup_s, 3), "workers": workers}, indent=1)


def write_gpu_timeline(run_dir: Path, timeline: dict) -> Path:
    """Every hold of a GPU during the run and its summary (tools/gpu/timeline.py GpuTimeline.to_json)."""
    return _write_json(run_dir, "gpu_timeline.json", timeline)


def read_gpu_timeline(run_dir: Path) -> dict:
    return _read_json(run_dir, "gpu_timeline.json")


def read_evaluator_start(run_dir: Path) -> dict:
    return _read_json(run_dir, "evaluator_start.json")
