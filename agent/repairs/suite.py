"""The repair suite on disk: a versioned set of broken kernels, each with the verdict the GPU gave it.

    <suite>/suite.json          version, when and on which GPU it was built, the held-out bug classes,
                                the unbroken kernel of each workload (status, speedup), the task ids
    <suite>/<task id>/task.json a RepairTask (below)
    <suite>/<task id>/solution.cu | solution.ptx   the broken solution file, as it was evaluated

Read and written here only (load_suite / write_suite). The committed suite is workloads/repairs/, built
on an H200 by bench/build_repair_suite.py; tests/data/repair_suite/ is a small CPU fixture.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

SUITE_VERSION = 1
# Bug classes that never appear in exported training data (synth-repairs and the Fixit export route them
# to the held-out split): a model is scored on them without having been trained on them.
HELD_OUT_CLASSES = frozenset({"lse_log2_units", "smem_over_limit", "grid_too_small", "missing_header",
                              "softmax_max_not_reduced", "misaligned", "infinite_loop"})


# The verdicts the evaluator gives before anything runs on a GPU (the source does not compile or assemble, or its
# launch plan is refused); the suite records them with no GPU (`verdict.gpu` ""). A repair of such a kernel can be
# judged with --no-gpu (it compiles, or it still fails); one of a runtime failure (a wrong result, a fault, a hang)
# cannot: without a GPU its fix compiles as the broken kernel did (COMPILED), fixed or not.
NO_GPU_VERDICTS = frozenset({"COMPILE_ERROR", "PLAN_ERROR"})


def judged_without_gpu(status: str) -> bool:
    """Whether a broken kernel with this recorded verdict can have its repair judged without a GPU."""
    return status in NO_GPU_VERDICTS


def held_out_bug(config: dict) -> bool:
    """A trajectory (its recorded config) whose bug class is held out: a repair task's or a synth-repairs pair's."""
    if config.get("repair_held_out") is True:  # the suite it ran from held the task out
        return True
    bug = config.get("synthetic_bug") or (config.get("repair_task") or "").rpartition("__")[2]
    return bug in HELD_OUT_CLASSES


Origin = Literal["mutation", "repair_mutation", "fault_corpus", "trajectory"]
# A task id is its folder's name: one plain path component (`<workload>__<bug class>`), never "..", a slash or a
# leading dot. The id and the bug class of a recorded run are anyone's text, and a suite folder may be someone else's.
TASK_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
SOLUTION_FILES = ("solution.cu", "solution.ptx")


def plain_name(name: str) -> bool:
    """Whether `name` may be a task id, or the bug class in one: a folder name that stays inside the suite."""
    return re.fullmatch(TASK_ID, name) is not None


class Verdict(BaseModel):
    status: str = Field(description="EvalResult status the broken kernel got when the suite was built")
    message: str = ""
    feedback: str = Field("", description="the feedback text a model is shown for that result")
    gpu: str = ""
    date: str = Field("", description="ISO date of the evaluation")
    evaluations: int = Field(1, ge=1, description="evaluations at the build that all gave this status (fresh inputs "
                             "each; a candidate whose status changed is no task)")


class RepairTask(BaseModel):
    id: str = Field(pattern=TASK_ID)
    workload: str
    bug_class: str
    description: str = ""
    origin: Origin
    provenance: list[str] = Field(default_factory=list, description="where the broken kernel came from (recipe, file, trajectory)")
    solution_file: Literal["solution.cu", "solution.ptx"] = Field(description="the broken file's name inside the task folder")
    unbroken_speedup: float | None = Field(None, description="speedup of the unbroken kernel (the reference) on the build GPU")
    held_out: bool = False
    verdict: Verdict
    solution_sha256: str = Field("", description="sha256 of the broken file's text as it was evaluated (write_suite sets "
                                 "it); load_suite refuses a solution file that no longer has it (edited by hand)")
    unbroken_kernel_hash: str = Field("", description="export/normalize.kernel_hash of the correct kernel it was made "
                                      "from (the reference, or another base), as the build evaluated it: a fix that is "
                                      "that kernel again is a swap, not a repair (is_unbroken_kernel); '' when not "
                                      "recorded (a suite built before the field, or a task not made from one)")

    def is_unbroken_kernel(self, text: str) -> bool | None:
        """Whether `text` is the kernel this task was made from, up to comments and spacing (a model that hands in the
        reference, from memory or from training data, repairs nothing); None when the task records no such kernel."""
        from ..export.normalize import kernel_hash

        return kernel_hash(text) == self.unbroken_kernel_hash if self.unbroken_kernel_hash else None


class UnbrokenKernel(BaseModel):
    status: str
    speedup: float | None = None


# The evaluator's read flush became the default on this day (tools/results.py DEFAULT_L2_FLUSH); a suite built before
# it timed its unbroken kernels from a written flush, and a suite.json of then says nothing of it.
READ_FLUSH_SINCE = "2026-12-04"


class RepairSuite(BaseModel):
    version: int = SUITE_VERSION
    built: str = ""
    gpu: str = ""
    l2_flush: str = Field("", description="the L2 flush its unbroken speedups were timed from (read / write): a fix's "
                          "speed compares with them only when timed from the same one; in a suite.json without it, "
                          "write for a suite built before the read flush existed, else '' (unknown)")
    held_out_classes: list[str] = Field(default_factory=lambda: sorted(HELD_OUT_CLASSES))
    unbroken: dict[str, UnbrokenKernel] = Field(default_factory=dict, description="workload -> its unbroken kernel")
    tasks: list[RepairTask] = Field(default_factory=list)
    folder: str = Field("", exclude=True, description="where it was read from")

    @model_validator(mode="before")
    @classmethod
    def _flush_of_an_older_suite(cls, data):
        if isinstance(data, dict) and "l2_flush" not in data:
            built = data.get("built")
            data = {**data, "l2_flush": "write" if isinstance(built, str) and built and built < READ_FLUSH_SINCE else ""}
        return data

    def task(self, task_id: str) -> RepairTask:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"no repair task {task_id!r} in {self.folder or 'the suite'} ({len(self.tasks)} tasks)")

    def solution_path(self, task: RepairTask) -> Path:
        return Path(self.folder) / task.id / task.solution_file


def default_suite_dir() -> Path:
    import ptxbench.workloads

    return Path(ptxbench.workloads.__file__).resolve().parent / "repairs"


class SuiteMissing(FileNotFoundError):
    """No suite.json where a suite was expected (the committed one is built on a GPU)."""


def _damaged(path: Path, what: str) -> ValueError:
    """A suite file that is not what a build writes (damaged, or edited by hand): one line `<path>: <what>`, a
    rundir.DamagedRecord (a ValueError), which every command prints as one line."""
    from ..records.rundir import DamagedRecord

    return DamagedRecord(path, what)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _damaged(path, "missing") from None
    except OSError as exc:
        raise _damaged(path, exc.strerror or type(exc).__name__) from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON
        raise _damaged(path, f"not JSON ({' '.join(str(exc).split())})") from None


def load_suite(folder: str | Path | None = None) -> RepairSuite:
    """The suite in `folder`; SuiteMissing without a suite.json, else a one-line ValueError (rundir.DamagedRecord)
    for anything a build does not write: a file that is no JSON object, a task listed twice, a task folder the index
    does not list, a task whose solution file is not the text its task.json records (solution_sha256)."""
    from pydantic import ValidationError

    from ..records.rundir import validation_line

    given = folder is not None
    folder = Path(folder) if folder else default_suite_dir()
    index = folder / "suite.json"
    if not index.exists():
        # a --suite given: a misspelt folder or a file is the likelier cause than a suite never built, and a build of
        # the committed suite's folder would not make it
        build = ("`source bench/gpu_env.sh && python3 bench/build_repair_suite.py --out "
                 f"{shlex.quote(str(folder)) if given else 'workloads/repairs'}`")
        if not given:
            raise SuiteMissing(f"no repair suite at {folder} (no suite.json): build it on a GPU with {build}")
        what = "is a file" if folder.is_file() else "holds no suite.json" if folder.is_dir() else "does not exist"
        raise SuiteMissing(f"no repair suite at {folder}: it {what}; give the folder a suite build wrote (the committed "
                           f"one is {default_suite_dir()})" + ("" if folder.is_file() else f", or build one there on a "
                                                                                            f"GPU with {build}"))
    meta = _read_json(index)
    if not isinstance(meta, dict):
        raise _damaged(index, "not a JSON object")
    if meta.get("version") != SUITE_VERSION:
        raise ValueError(f"{index}: suite version {meta.get('version')!r}, this ptxbench reads {SUITE_VERSION}")
    ids = meta.pop("tasks", None)
    if not isinstance(ids, list):
        raise _damaged(index, "'tasks' is not a list of task ids")
    twice = sorted({str(t) for t in ids if ids.count(t) > 1})
    if twice:  # a task listed twice ran twice for every model and weighed double in every rate
        raise _damaged(index, f"task {twice[0]!r} is listed more than once")
    tasks = [_load_task(folder, tid) for tid in ids]
    unlisted = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in ids and (p / "task.json").exists())
    if unlisted:  # a task folder added by hand (or an index cut short) was skipped without a word
        raise _damaged(index, f"task folder {unlisted[0]!r} is not in its task list "
                              f"({len(unlisted)} unlisted): the suite is not as it was built")
    try:
        return RepairSuite(**meta, tasks=tasks, folder=str(folder))
    except ValidationError as exc:
        raise _damaged(index, validation_line(exc)) from None
    except TypeError as exc:  # a key that is not a string
        raise _damaged(index, str(exc)) from None


def _load_task(folder: Path, tid) -> RepairTask:
    """One task of a suite folder; its id, its folder and its solution file must stay inside the suite (the repair
    track reads that file and shows it to the model: a task, or a link, naming a host file must not reach it)."""
    from ..records.rundir import kernel_path, path_inside

    if not isinstance(tid, str) or not plain_name(tid) or path_inside(folder, tid) is None:
        raise ValueError(f"{folder / 'suite.json'}: task id {tid!r} is no folder name of the suite")
    from pydantic import ValidationError

    from ..records.rundir import sha256_text, validation_line

    path = folder / tid / "task.json"
    try:
        task = RepairTask.model_validate(_read_json(path))
    except ValidationError as exc:
        raise _damaged(path, validation_line(exc)) from None
    if task.id != tid:
        raise ValueError(f"{path}: its id {task.id!r} is not its folder's name")
    solution = kernel_path(folder / tid, task.solution_file)
    if solution is None:
        raise ValueError(f"{folder / tid / task.solution_file}: not a file inside the task folder")
    if task.solution_sha256:  # the broken kernel is handed to every model as it was evaluated, or not at all
        try:
            text = solution.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise _damaged(solution, f"cannot be read as text ({type(exc).__name__})") from None
        if sha256_text(text) != task.solution_sha256:
            raise _damaged(solution, f"sha256 {sha256_text(text)[:12]}… is not the {task.solution_sha256[:12]}… its "
                                     "task.json records: the broken kernel was edited after the suite was built")
    return task


def _task_json(task: RepairTask) -> str:
    return json.dumps(task.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def replace_solutions(suite: RepairSuite, texts: dict[str, str], verdicts: dict[str, Verdict] | None = None) -> list[str]:
    """Write new broken-kernel texts (task id -> text) into a suite read by load_suite, each task.json taking the new
    text's sha256 (and the verdict given in `verdicts`, if any); nothing else changes. Only for a text of the same
    code (build.suite_drift's comments_only): the GPU's verdict was given to that code. Returns the ids written."""
    from ..records.rundir import sha256_text

    folder = Path(suite.folder)
    for task_id, text in sorted(texts.items()):
        update = {"solution_sha256": sha256_text(text)}
        if verdicts and task_id in verdicts:
            update["verdict"] = verdicts[task_id]
        task = suite.task(task_id).model_copy(update=update)
        (folder / task.id / task.solution_file).write_text(text, encoding="utf-8")
        (folder / task.id / "task.json").write_text(_task_json(task))
    return sorted(texts)


def write_suite(folder: str | Path, suite: RepairSuite, sources: dict[str, str]) -> Path:
    """Write the suite (task id -> broken source in `sources`), replacing the task folders of an older build.
    Output is stable (sorted keys, fixed indent, tasks by id), so a rebuild diffs cleanly under git."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_dir() and (old / "task.json").exists():
            shutil.rmtree(old)
    from ..records.rundir import sha256_text

    tasks = [t.model_copy(update={"solution_sha256": sha256_text(sources[t.id])})
             for t in sorted(suite.tasks, key=lambda t: t.id)]
    for task in tasks:
        (folder / task.id).mkdir()
        (folder / task.id / task.solution_file).write_text(sources[task.id], encoding="utf-8")
        (folder / task.id / "task.json").write_text(_task_json(task))
    index = suite.model_dump(mode="json", exclude={"tasks"})
    index["tasks"] = [t.id for t in tasks]
    (folder / "suite.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return folder
