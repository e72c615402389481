"""`--start-from FILE`: a kernel handed in before the first turn, evaluated as turn 0.

The file's text is put into the initial graph state (so a resumed run never needs the file again),
the `start` node evaluates it once like any submission (kernel file, eval_result and turn_end of turn
0 in the trajectory), and the task message gains a section showing the kernel, its verdict and its
feedback (prompts/start_from.md). Turn 0 does not count against the turn budget: it is not the model's.
"""
from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Any

import ptxbench.prompts as prompts

from .extract import extract_solution
from .feedback import render_eval
from ..records.rundir import read_events, sha256_text

START_TURN = 0


def read_start(path: str | Path) -> dict[str, Any]:
    """The start kernel as graph state: its source, language and where it came from."""
    source = Path(path).read_text(encoding="utf-8")
    language = extract_solution(f"```\n{source}\n```").language or "cuda"
    return {"source": source, "language": language, "path": str(path)}


def start_section(start: dict[str, Any], status: str, speedup: float | None, feedback: str) -> str:
    return Template(prompts.load("start_from")).safe_substitute(
        status=status, speedup_text=f" (speedup {speedup:.3f}x)" if speedup is not None else "",
        language=start["language"], source=start["source"].rstrip("\n"), feedback=feedback.strip())


def recorded_start(log, source: str) -> tuple[Any, bool]:
    """The start kernel's eval_result a kill left without its checkpoint (not an INFRA_ERROR, which a retry evaluates
    again), and whether its turn_end followed; (None, False) when there is none."""
    events = read_events(log.writer.path) if log.writer.path.exists() else []
    sha = sha256_text(source)
    for i, event in enumerate(events):
        if (event.type == "eval_result" and event.turn == START_TURN and event.kernel_sha256 == sha
                and event.result.status != "INFRA_ERROR"):
            return event, any(e.type == "turn_end" and e.turn == START_TURN for e in events[i + 1:])
    return None, False


def evaluate_start(state: dict, deps, rerun: bool = False) -> dict:
    """The `start` node: evaluate the start kernel as turn 0 and show it in the task. No start kernel: nothing.
    `rerun` (the node a kill cut short, run again on resume): what it recorded before the kill stands, so the kernel
    is not evaluated (GPU time) and turn 0 not recorded twice."""
    start = state.get("start")
    if not start or start.get("status"):
        return {}
    log, config = deps.log, deps.config
    done, ended = recorded_start(log, start["source"]) if rerun else (None, False)
    if done is not None:
        kernel_file, result, feedback = done.kernel_file, done.result, done.feedback
    else:
        kernel_file = log.save_kernel(START_TURN, start["language"], start["source"])
        result = deps.evaluator.evaluate(config.workload, start["source"], deps.turn_options(state, START_TURN))
        feedback = render_eval(result, START_TURN, config.no_gpu)
        log.eval_result(START_TURN, result, feedback, kernel_file, start["source"], start["language"])
    if not ended:
        log.turn_end(START_TURN, result.status, result.speedup if result.passed else None, 0, 0.0, 0.0)
    if result.status == "INFRA_ERROR":  # not the kernel's verdict: a retry evaluates it again
        log.error(START_TURN, "start", result.message or "infrastructure error", infra=True)
        return {"stop": {"reason": "infra_error", "detail": result.message[:500]}}
    return {"start": {**start, "status": result.status, "kernel_file": kernel_file, "speedup": result.speedup},
            "task": state["task"] + start_section(start, result.status, result.speedup, feedback)}


def start_file(path: Path | None) -> str | None:
    """--start-from's value as an absolute path (the run records it), or a usage error naming the problem."""
    import typer

    if path is None:
        return None
    if path.is_dir():
        raise typer.BadParameter(f"--start-from {path}: is a folder, not a kernel file")
    if not path.exists():
        raise typer.BadParameter(f"--start-from {path}: no such file")
    if not path.is_file():  # /dev/null, or a shell's <(...): it is read again when the run starts, and a pipe is empty then
        raise typer.BadParameter(f"--start-from {path}: not a regular file (a device or a pipe); give the kernel's file")
    try:
        path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"--start-from {path}: cannot be read as text ({exc})") from None
    resolved = str(path.resolve())
    try:  # the run records the path (JSON): a name of other bytes than UTF-8 was a traceback at turn 0
        resolved.encode("utf-8")
    except UnicodeEncodeError:
        raise typer.BadParameter(f"--start-from {resolved!r}: the path is not UTF-8 text, which the run's records "
                                 "cannot hold; rename the file") from None
    return resolved
