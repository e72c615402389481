"""Checks of what a user typed, made before any path is built or file written: each failure is one
BadInput line saying what is wrong and what would be right (agent/cli/application.py prints it, exit status 2).

    workload(name), arch(name), prompt(name), model(name), mutations(names)   the name, or BadInput
    credentials(model, api_base, api_key_env, report)   a missing key or an unreachable endpoint
    run_folder(path, what)                               an existing run folder (manifest or a trajectory; no report's)
    unsealed(path, flag)                                 a run folder that may be continued (no sealed log)
    resumable(path, flag)                                an optimize run folder `--resume` can continue
    new_folder(path, flag)                               a path a run may be written to (its text not empty, no file in the way)
    run_manifest(path, flag)                             the manifest of a --run-dir, {} if none (a damaged one is BadInput)
    create_folder(path, flag)                            new_folder, then made: one that cannot be is BadInput
    outside_runs(path, flag)                             a folder for a command's own files, no run folder nor in one
    enclosing_run(path)                                  the run folder a path lies inside (resolved), or None
    config(cls, **fields)                                a pydantic config, its errors as one line
    not_empty(text, flag, expected)                      an option's text (None if not given; given empty is BadInput)
    listed(text, flag, expected)                         the names of a comma-separated option ([] if not given; given
                                                         with none, `--prompts ""`, is BadInput)
    given_options(ctx, names)                            the options of `names` the command line gave (not defaults)
    gpu_only(given)                                      options given with --no-gpu that only a GPU run uses: BadInput
    positive(value, flag), not_negative(value, flag)     a finite number above 0 / 0 or more (None: not given)
    within_a_week(value, flag)                           a wait in seconds a clock can keep (None: not given)
    trials(value, flag)                                  correctness trials of at most MAX_TRIALS (None: not given)
    seed(value, flag)                                    an input seed torch can take, from 0 to 2**63 - 1 (None: not given)
    utf8(text)                                           whether a path can be recorded (no bytes other than UTF-8)
"""
from __future__ import annotations

import difflib
import os
import re
import shlex
import tempfile
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)
# Model strings become folder names (slugs): printable, no white space, no parent-directory steps.
_MODEL_TEXT = re.compile(r"^[\w.:/@+\-]+$")


class BadInput(ValueError):
    """A usage error: the command line names something that does not exist or cannot work (exit status 2)."""


class RunFailed(RuntimeError):
    """The command ran and failed in a way the user must act on (exit status 1)."""


def _choice(kind: str, name: str, valid: Iterable[str], listing: str) -> BadInput:
    valid = list(valid)
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return BadInput(f"unknown {kind} {name!r}: {hint}{listing}")


def workload(name: str) -> str:
    from ptxbench.workloads.registry import WORKLOADS

    if name not in WORKLOADS:
        raise _choice("workload", name, WORKLOADS, "the ids are listed by `ptxbench workloads --all`")
    return name


def arch(name: str) -> str:
    from ptxbench.workloads.arch import ARCHS

    if name not in ARCHS:
        raise _choice("arch", name, ARCHS, f"expected one of {', '.join(ARCHS)}")
    return name


def prompt(name: str) -> str:
    from ptxbench.prompts import VARIANTS

    if name not in VARIANTS:
        raise _choice("prompt variant", name, VARIANTS, f"expected one of {', '.join(VARIANTS)}")
    return name


def model(name: str, flag: str = "--model") -> str:
    """A model string that can be built: a known builtin, a replay of a recorded run, or a litellm string (`flag`: the
    option that named it, for the message)."""
    from ..models.registry import BUILTINS

    if not name.strip():
        raise BadInput(f"{flag} is empty: give builtin/tuner, builtin/reference, replay/<run> or a litellm "
                       "model string such as openai/gpt-5")
    if name.startswith("builtin/"):
        if name not in BUILTINS:
            raise _choice("built-in model", name, BUILTINS, f"expected one of {', '.join(BUILTINS)}")
        return name
    if name.startswith("replay/"):
        from ..models.replay import find_trajectory

        if not utf8(name):  # the model string is part of the trajectory id, a checkpoint key: a traceback mid-run
            raise BadInput(f"{flag} {name!r}: the path is not UTF-8 text, which a run's records (JSON, the checkpoint "
                           "database) cannot hold; rename it, or link to it from a UTF-8 name")
        try:
            find_trajectory(name.removeprefix("replay/"))
        except (FileNotFoundError, OSError) as exc:
            raise BadInput(f"{flag} {name}: {exc}; expected replay/<trajectory.jsonl, trajectory or run folder>") from None
        return name
    if not _MODEL_TEXT.match(name) or ".." in name.split("/"):
        raise BadInput(f"{flag} {name!r} is not a model string: expected provider/name, e.g. openai/gpt-5")
    return name


def utf8(text: str) -> bool:
    """Whether `text` is UTF-8 text: a file name of other bytes reaches Python as lone surrogates ('\\udcff'), which the
    run's JSON records and its SQLite checkpoints cannot hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def credentials(name: str, api_base: str | None, api_key_env: str | None,
                report: Callable[[str], None] | None = None, probe: bool = True, flag: str = "--model") -> None:
    """For an LLM: the key is there and the endpoint answers (BadInput / RunFailed otherwise); probe=False when the
    same endpoint was reached already (the key check still needs it: a local server needs no key)."""
    from ..models.endpoint import bad_url, local_server, unreachable
    from ..models.keys import key_problem

    teacher = flag == "--teacher"  # export's: it writes prose, so no builtin/ stands in, and its server has its own option
    base_flag = "--teacher-api-base" if teacher else "--api-base"
    if api_base and (problem := bad_url(api_base, base_flag)):
        raise BadInput(problem)
    if name.startswith(("builtin/", "replay/")):
        return
    _provider_known(name, api_base, flag)  # a misspelt provider: one line now, not an infra stop after the run began
    fix = "export it, or give a --teacher that needs no key (a server of your own, with --teacher-api-base)"
    if problem := key_problem(name, api_base, api_key_env, **({"fix": fix} if teacher else {})):
        raise BadInput(problem)
    if report is not None and (note := _key_goes_elsewhere(name, api_base, api_key_env)):
        report(note)
    if api_base and probe and (problem := unreachable(api_base, report=report)):
        raise RunFailed(problem)
    # ollama/... with no --api-base goes where litellm's default points: probed as well, or a run was made whose first
    # turn spent a minute of back-off on refused connections
    if not api_base and probe and (local := local_server(name)):
        url, source = local
        if problem := bad_url(url, source):  # OLLAMA_API_BASE=localhost:11434
            raise BadInput(problem)
        if problem := unreachable(url, report=report):
            raise RunFailed(f"{problem} ({source}; {base_flag} names another server)")


def _key_goes_elsewhere(name: str, api_base: str | None, api_key_env: str | None) -> str | None:
    """A note when the user's OpenAI key is about to go to another server: litellm sends OPENAI_API_KEY to whatever
    --api-base names (a proxy may need it; a local vLLM does not, and an http:// one sends it in the clear)."""
    from urllib.parse import urlparse

    if not api_base or api_key_env or not name.startswith("openai/") or not os.environ.get("OPENAI_API_KEY"):
        return None
    url = urlparse(api_base)
    if (url.hostname or "").endswith("openai.com"):
        return None
    clear = " in the clear (http)" if url.scheme == "http" and url.hostname not in ("127.0.0.1", "localhost", "::1") else ""
    return (f"note: OPENAI_API_KEY is sent to {url.scheme}://{url.netloc}{clear} with every call; unset it for a "
            "server that needs no key, or name another variable with --api-key-env")


def _provider_known(name: str, api_base: str | None, flag: str) -> None:
    """The provider litellm would send `name` to: one it knows (a misspelt one, `opnai/gpt-5`, failed the first call
    and stopped the run as an outage), and for `hosted_vllm/` a server to send it to (--api-base, or litellm's
    HOSTED_VLLM_API_BASE): without one every call went nowhere, retried as a connection error. The usual providers are
    answered without importing litellm (seconds)."""
    from ..models.keys import KEYLESS, KNOWN_KEYS

    provider = name.split("/", 1)[0] if "/" in name else ""
    if provider == "hosted_vllm" and not api_base and not os.environ.get("HOSTED_VLLM_API_BASE"):
        raise BadInput(f"{flag} {name}: a hosted_vllm model is served by a vLLM server of your own: give its URL with "
                       "--api-base, e.g. --api-base http://localhost:8000/v1")
    if _absent("litellm"):  # the `llm` extra: without it the run would be made, then stop at its first call
        raise BadInput(f"{flag} {name}: LLM models are called through litellm, which is not installed in this Python: "
                       "pip install -e '.[llm]' (builtin/tuner and builtin/reference need no litellm)")
    if provider in KNOWN_KEYS or provider in KEYLESS:
        return
    from ..models.litellm_model import _litellm

    litellm = _litellm()
    try:
        litellm.get_llm_provider(name, api_base=api_base)
    except Exception:  # noqa: BLE001 - litellm raises its BadRequestError; any failure means no provider
        if not provider:
            bare = name.strip("/") or "gpt-5"
            raise BadInput(f"{flag} {name!r} names no provider: write provider/name, e.g. openai/{bare} or "
                           f"hosted_vllm/{bare} with --api-base") from None
        known = [str(getattr(p, "value", p)) for p in getattr(litellm, "provider_list", [])]
        close = difflib.get_close_matches(provider, known, n=1)
        guess = f"did you mean {close[0]}/{name.split('/', 1)[1]}? " if close else ""
        raise BadInput(f"{flag} {name!r}: litellm knows no provider {provider!r}: {guess}write provider/name, e.g. "
                       f"openai/gpt-5, or hosted_vllm/<model> with --api-base for a server of your own "
                       "(https://docs.litellm.ai/docs/providers)") from None


def _absent(module: str) -> bool:
    """Whether `module` cannot be imported here, found out without importing it (litellm takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def mutations(names: list[str]) -> list[str]:
    from ..export.mutations import MUTATIONS

    valid = [m.name for m in MUTATIONS]
    for n in names:
        if n not in valid:
            raise _choice("bug class", n, valid, f"expected some of {', '.join(valid)}")
    return names


def run_folder(path: Path, what: str = "run") -> Path:
    """An existing run folder: one with manifest.json, or with a trajectories/ that holds a trajectory (a report's
    folder has a trajectories/ of pages: taken for a run, it was scored and exported as one of no trajectory)."""
    path = Path(path)
    if not path.exists():
        from ..records.rundir import runs_root

        under = runs_root() / path  # a run named as `optimize --resume` takes it: by its name under the runs root
        hint = f"; there is one under the runs root: give {under}" if not path.is_absolute() and under.is_dir() else ""
        raise BadInput(f"no {what} folder at {path}{hint}")
    if is_report(path):
        raise BadInput(f"{path} is a report (ptxbench report wrote it), not a run: give the run folder it was made "
                       f"from{run_above(path)}")
    if not path.is_dir() or not ((path / "manifest.json").is_file() or _holds_trajectory(path)):
        raise BadInput(f"{path} is not a run folder: expected manifest.json, or trajectories/ holding a trajectory, "
                       f"in it{run_above(path) or runs_below(path)}")
    return path


def _holds_trajectory(path: Path) -> bool:
    from ..records.rundir import DamagedRecord, trajectory_folders

    if not (path / "trajectories").is_dir():
        return False
    try:
        return bool(trajectory_folders(path))
    except (DamagedRecord, OSError):  # one the readers will name
        return True


def is_report(path: Path) -> bool:
    """A folder a report was written into, and no run's (a run holds its manifest.json)."""
    return path.is_dir() and not (path / "manifest.json").is_file() and written_by_report(path)


def written_by_report(folder: Path) -> bool:
    """A folder `ptxbench report` wrote: its index.html names itself in its title."""
    try:
        with open(Path(folder) / "index.html", "rb") as f:
            return b"<title>ptxbench report: " in f.read(300)
    except OSError:
        return False


def runs_below(path: Path) -> str:
    """'; it holds N runs: name one, e.g. R' when `path` is a folder of runs (runs/, $PTXBENCH_RUNS: what a
    newcomer names for "my runs"), else ''."""
    try:
        runs = sorted(p for p in Path(path).iterdir() if p.is_dir() and (p / "manifest.json").is_file())
    except OSError:
        return ""
    if not runs:
        return ""
    return f"; it holds {len(runs)} run{'s' if len(runs) > 1 else ''}: name one, e.g. {runs[-1]}"


def run_above(path: Path) -> str:
    """'; it is in the run R: give R' when `path` is a trajectory folder, its log or the manifest of a run R (what a
    newcomer names for the run), else ''."""
    for run in (path.parent, path.parent.parent, path.parent.parent.parent):
        if run != path and (run / "manifest.json").is_file() and path.is_relative_to(run):
            return f"; it is in the run {run}: give {run}"
    return ""


def unsealed(path: Path, flag: str) -> Path:
    """A run folder to continue: none of its trajectories sealed (agent/records/sealing.py), since a sealed log takes
    no more events."""
    from ..records.rundir import SEALED_LOG_NAME, DamagedRecord, trajectory_folders

    try:
        folders = trajectory_folders(path)
    except DamagedRecord as exc:  # `trajectories` is a file: nothing there to continue
        raise BadInput(f"{flag} {exc}") from None
    if any((folder / SEALED_LOG_NAME).exists() for folder in folders):
        raise BadInput(f"{flag} {path}: the run is sealed; `ptxbench seal {shlex.quote(str(path))} --undo` first, then "
                       "continue it")
    return Path(path)


def resumable(path: Path, flag: str) -> Path:
    """A run folder `optimize --resume` can continue: an optimize run whose manifest holds a config to go on with
    (loop/optimize.resume_config). Checked before anything starts, so a bench run is one line, not a live view."""
    from ..loop.optimize import RunFolderInUse, resume_config
    from ..records.rundir import DamagedRecord

    try:
        resume_config(Path(path))
    except (RunFolderInUse, DamagedRecord) as exc:
        raise BadInput(f"{flag} {exc}") from None
    return Path(path)


def run_manifest(path: Path, flag: str) -> dict:
    """The manifest of a folder a run will be written into (--run-dir), {} where there is none: a damaged one (no JSON
    object, a field of the wrong type, `trajectories` a file) is one line naming the file, before anything is made in
    the folder."""
    from ..records.rundir import DamagedRecord, read_manifest, trajectory_folders

    try:
        return read_manifest(Path(path)) if Path(path).is_dir() and trajectory_folders(path) is not None else {}
    except DamagedRecord as exc:
        raise BadInput(f"{flag} {exc}") from None


def new_folder(path: str | Path, flag: str) -> Path:
    """A folder a command may create or add to: not empty, not a file, and its parent not a file either. Give the
    text as typed: an empty one made into a Path reads as '.', the working directory."""
    if not str(path).strip():
        raise BadInput(f"{flag} is empty: name the folder to write to")
    path = Path(path).expanduser()  # '~/x' quoted, or from a config file: the home folder, not a folder named '~'
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise BadInput(f"{flag} {path}: {p} is a file, not a folder")
    return path


RUN_ENTRIES = ("manifest.json", "trajectories", "checkpoints.sqlite")  # what a run folder holds at its top


def no_other_files(path: Path, flag: str) -> None:
    """A --run-dir that exists holds a run or nothing (hidden files aside): `--run-dir .` or a home folder put a run's
    manifest.json, checkpoints.sqlite and trajectories/ among the user's own files. Nor is it inside another run (a run
    of its own among that run's records) or a report's folder (whose trajectories/ of pages read as a run's)."""
    if is_report(path):
        raise BadInput(f"{flag} {path} is a report (ptxbench report wrote it): name a new or empty folder for the run")
    if run := enclosing_run(path):
        raise BadInput(f"{flag} {path} is inside the run {run}: name a folder outside it")
    if not path.is_dir() or any((path / name).exists() for name in RUN_ENTRIES):
        return
    others = sorted(p.name for p in path.iterdir() if not p.name.startswith("."))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise BadInput(f"{flag} {path} holds other files ({shown}) and no run: name a new or empty folder for the run")


def outside_runs(path: Path, flag: str) -> None:
    """A folder a command writes its own files into (export's dataset) that is no run folder and inside none: there
    its files went among the run's records (a trajectories/x export read as a damaged trajectory by score and report),
    as no_other_files refuses for a run and report's out_in_run for a report. Resolved first: '..' and a link lead
    into a run as its name does."""
    if (Path(path).resolve() / "manifest.json").is_file():
        raise BadInput(f"{flag} {path} is a run folder: name a folder outside it")
    if run := enclosing_run(path):
        raise BadInput(f"{flag} {path} is inside the run {run}: name a folder outside it")


def enclosing_run(path: Path) -> Path | None:
    """The run folder `path` lies inside, None if none. Resolved first: '..' and a link lead into a run as its name
    does, and 'RUN/../x' is beside RUN, not in it."""
    return next((p for p in Path(path).resolve().parents if (p / "manifest.json").is_file()), None)


def write_probe(path: Path) -> None:
    """A file made in `path` and removed again: OSError where the folder, though it exists, cannot be written (a
    read-only or virtual file system, no permission)."""
    fd, probe = tempfile.mkstemp(dir=path, prefix=".ptxbench-probe-")
    os.close(fd)
    os.unlink(probe)


def create_folder(path: str | Path, flag: str) -> Path:
    """new_folder(path, flag), made now (with its parents) and written to once: the reason it cannot be (a read-only
    or virtual file system, no permission) said as such, rather than as whatever error the first file written into it
    meets (for /proc/x: "No such file or directory")."""
    path = new_folder(path, flag)
    if path.is_symlink():  # the writer's to judge: a report refuses a linked folder with its own message
        return path
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        write_probe(path)
    except OSError as exc:
        for made in missing:  # a refused command leaves no empty folder behind (innermost first)
            try:
                made.rmdir()
            except OSError:
                pass
        verb = "write into" if not missing else "create"  # one already there is not to be made, only written into
        raise BadInput(f"cannot {verb} {flag} folder {path}: {exc.strerror or exc}") from None
    return path


def one_of(value: str, valid: Iterable[str], flag: str) -> str:
    valid = list(valid)
    if value not in valid:
        close = difflib.get_close_matches(value, valid, n=1)
        raise BadInput(f"{flag} {value!r}: {'did you mean ' + close[0] + '? ' if close else ''}expected one of {', '.join(valid)}")
    return value


def not_empty(text: str | None, flag: str, expected: str) -> str | None:
    """An option's text, None when it was not given; given empty (an unset shell variable) is BadInput. It was taken
    as not given, without a word (export's --teacher "" wrote no reasoning), and a path option typer made '.' of it:
    `--start-from ""` was 'a folder, not a kernel file'. `expected`: what to give instead, for the message."""
    if text is not None and not text.strip():
        raise BadInput(f"{flag} is empty: {expected}")
    return text


def listed(text: str | None, flag: str, expected: str) -> list[str]:
    """The names of a comma-separated option, [] when it was not given (None). Given with none (`--prompts ""`,
    `--prompts ,`: an unset shell variable) is BadInput: an empty --prompts ran the default prompt without a word, and
    the repair track's empty --workloads its suite's every task. `expected`: what to give instead, for the message."""
    if text is None:
        return []
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise BadInput(f"{flag} {text!r} names nothing: {expected}")
    return names


def positive(value: float | None, flag: str, unset: str = "") -> None:
    # `not 0 < value` for nan too (every comparison with it is false); inf is no limit a watchdog can keep either.
    # `unset`: what leaving the option out does, for the message ("leave it out for no budget")
    if value is not None and not 0 < value < float("inf"):
        raise BadInput(f"{flag} must be positive{'' if value <= 0 else ' and finite'}, got {value}"
                       + (f"; {unset}" if unset else ""))


MAX_WAIT_S = 7 * 24 * 3600  # a wait in seconds becomes a socket's, a subprocess's or a sleep's timeout: from about
# 1e10 s (--model-timeout 1e11) each overflowed the clock that keeps it, every model call failing as a server error


def within_a_week(value: float | None, flag: str) -> None:
    """A wait (a timeout, a back-off) of at most a week: any longer is no wait a run can keep, and past ~1e10 s the
    clocks that keep it overflow."""
    if value is not None and value > MAX_WAIT_S:
        raise BadInput(f"{flag} must be at most {MAX_WAIT_S} seconds (a week), got {value:g}")


def not_negative(value: float | None, flag: str, unset: str = "") -> None:
    """A finite number, 0 or more (`not 0 <= value` for nan too): inf passed the configs' `>= 0`, a value no run can
    reach, that a run's JSON records write as null (another value on --resume) or as Infinity."""
    if value is not None and not 0 <= value < float("inf"):
        raise BadInput(f"{flag} must be a finite number, 0 or more, got {value}" + (f"; {unset}" if unset else ""))


def trials(value: int | None, flag: str = "--trials") -> None:
    """Correctness trials of at most tools/results.MAX_TRIALS, each a fresh input set held on the GPU (EvalOptions'
    own bound was a traceback after a run's manifest was written)."""
    from ...tools.results import MAX_TRIALS

    if value is not None and value > MAX_TRIALS:
        raise BadInput(f"{flag} must be at most {MAX_TRIALS} (each is an input set held on the GPU), got {value}")


MAX_SEED = 2**63 - 1  # an evaluation seeds its input sets from seed + k (its final checks a few thousand above, a
# bench's trajectory i from seed + i): torch's generator takes 64 bits, so 2**64 - 1 passed here and every set after
# the first failed, on the GPU, as an INFRA_ERROR of the harness's own; below 2**63 all of them fit


def seed(value: int | None, flag: str = "--seed") -> None:
    if value is not None and not 0 <= value <= MAX_SEED:
        raise BadInput(f"{flag} must be a whole number from 0 to 2**63 - 1 (it seeds the evaluation's input sets), "
                       f"got {value}")


def config(cls: type[T], flags: dict[str, str] | None = None, **fields) -> T:
    """cls(**fields), with a validation error as one line naming the option (`flags`: field -> option
    where they differ, e.g. max_cost_usd -> --max-cost)."""
    try:
        return cls(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        option = (flags or {}).get(field) or "--" + field.replace("_", "-")
        raise BadInput(f"{option} {first.get('input')!r}: {first['msg'].lower()}") from None


def given_options(ctx, names: Iterable[str]) -> list[str]:
    """The options among `names` (parameter names) that the command line gave, whatever the value (not left at their
    default), spelled as typed on it (`--l2-flush`)."""
    given = []
    for name in names:
        source = ctx.get_parameter_source(name)  # click's ParameterSource (typer may carry its own click)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            param = next(p for p in ctx.command.params if p.name == name)
            given.append(param.opts[0])
    return given


def llm_only(models: list[str], given: list[str], flag: str = "--model") -> None:
    """Options that act on an LLM's calls (its server, key, sampling, timeouts) beside models that make none (builtin/,
    replay/): `optimize W --api-base http://localhost:8000/v1` without --model ran builtin/tuner and left the server
    alone without a word, so such an option is refused, naming each one given."""
    if given and all(m.startswith(("builtin/", "replay/")) for m in models):
        one = len(given) == 1
        raise BadInput(f"{', '.join(given)} {'acts' if one else 'act'} on an LLM's calls, and {', '.join(models)} "
                       f"{'makes' if len(models) == 1 else 'make'} none: name the LLM with {flag} (e.g. openai/gpt-5, "
                       f"or hosted_vllm/<name> with --api-base for "
                       f"a server of your own), or drop {'it' if one else 'them'}")


def gpu_only(given: list[str]) -> None:
    """--no-gpu stops after compile + SASS: an option that only the GPU run uses would be dropped without a word, so it
    is refused, naming each one given."""
    if given:
        one = len(given) == 1
        raise BadInput(f"{', '.join(given)} {'acts' if one else 'act'} on the GPU run, which --no-gpu skips (it stops "
                       f"after compile + SASS): drop {'it' if one else 'them'}, or --no-gpu")
