"""Optional reasoning synthesis: a teacher model writes the reasoning that leads from a wrong kernel and
its evaluation log to the fix. Stored as <think>...</think> before the fixed kernel; cached; cost recorded."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from ...tools.solution.parse import THINK_END, THINK_START
from .recipes import CHAT_MARKUP
from .schema import Row

INSTRUCTIONS = (
    "You are an expert Hopper (sm_90a) kernel engineer teaching a student. Below are a task, a WRONG kernel the "
    "student wrote, the evaluation log it got, and (for your eyes only) the FIXED kernel. Write the reasoning an "
    "engineer would go through, reading the log and the wrong kernel, to find the cause and decide the fix: what the "
    "log says, which lines are at fault and why, what must change. Do NOT quote or reproduce the fixed kernel or any "
    "line of it; describe changes in words. At most 250 words. Plain prose, no code blocks."
)


# Where an earlier export cached the answers: inside --out, so an upload of the dataset folder published them.
OLD_CACHE_NAME = ".teacher_cache"


def cache_folder(out: Path) -> Path:
    """The teacher's answers for the dataset in `out`: under the ptxbench cache ($PTXBENCH_CACHE, tools/cache.py;
    its compile entries are pruned, these never), one folder per --out by its resolved path. The same export into the
    same folder asks nothing again; two datasets keep their answers (and their cached failures) apart; and `out`
    holds the dataset alone, whole to upload."""
    from ...tools.cache import cache_root

    key = hashlib.sha256(str(Path(out).resolve()).encode("utf-8", "backslashreplace")).hexdigest()[:16]
    return cache_root() / "teacher" / key


def take_old_cache(out: Path, cache_dir: Path) -> None:
    """An earlier export's `out/.teacher_cache` moved into `cache_dir` (its answers are paid for: kept, where no
    answer to the same request is there already) and removed from the dataset folder."""
    old = Path(out) / OLD_CACHE_NAME
    if old.is_symlink() or not old.is_dir():  # a link is not followed into: only what an export made is moved
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    for entry in old.glob("*.json"):
        if entry.is_file() and not entry.is_symlink() and not (cache_dir / entry.name).exists():
            shutil.move(str(entry), str(cache_dir / entry.name))  # a rename, or a copy across file systems
    shutil.rmtree(old)


def _read(row: Row) -> str:
    """What the model read before the fix: the wrong kernel and its log, or, for a handed-in wrong kernel (--start-from,
    the repair track: prompt = system and task only), the task, which shows that kernel with its verdict and log."""
    if len(row.prompt) >= 4:
        return "\n\n".join(["## Task\n" + row.prompt[1].content, "## Wrong kernel\n" + row.prompt[2].content,
                            "## Evaluation log\n" + row.prompt[3].content])
    return "## Task (the wrong kernel and its evaluation log are in it)\n" + row.prompt[-1].content


def _leaks(reasoning: str, row: Row) -> bool:
    """True when the reasoning copies a line that only the fixed kernel has (the fix must not be quoted)."""
    wrong = row.prompt[2].content if len(row.prompt) > 2 else row.prompt[-1].content
    fixed_lines = {ln.strip() for ln in row.completion[-1].content.splitlines() if len(ln.strip()) >= 30}
    new_lines = {ln for ln in fixed_lines if ln not in wrong}
    return any(ln in reasoning for ln in new_lines)


# The reply is model output placed inside the trained completion: a think tag would close the reasoning early (what
# follows it reads as the answer) and a fenced block would put an unverified kernel before the real one.
_FORMAT_BREAK = re.compile(r"</?think>|^ {0,3}(?:`{3,}|~{3,})", re.I | re.M)


def add_reasoning(rows: list[Row], model: str, cache_dir: Path, api_base: str | None = None,
                  max_tokens: int | None = None) -> dict:
    """Prepend teacher reasoning to each fixit row's completion in place; returns cost and counts."""
    totals: dict = {}
    for _ in with_reasoning(rows, model, cache_dir, api_base, max_tokens, totals):
        pass
    return totals


def with_reasoning(rows: Iterable[Row], model: str, cache_dir: Path, api_base: str | None = None,
                   max_tokens: int | None = None, totals: dict | None = None) -> Iterator[Row]:
    """Each row as it comes, a fixit row with the teacher's reasoning before its completion; cost and counts are
    kept in `totals` as they grow (the export's manifest, written after the last row, reads them complete).

    The teacher is called like any agent model (agent/models/litellm_model.py: retries, keys from the
    environment only, usage and cost recorded). A row's n_tokens is counted again with its reasoning, and
    reasoning that would take a row past `max_tokens` (the export's --max-tokens) is left out."""
    from ..models.litellm_model import LiteLLMModel

    teacher = LiteLLMModel(model, api_base=api_base, retry_wait_s=1.0)
    cache_dir.mkdir(parents=True, exist_ok=True)
    totals = {} if totals is None else totals
    totals.update({"teacher": model, "calls": 0, "cached": 0, "cost_usd": 0.0, "rejected_leaks": 0, "tokens": 0,
                   "over_token_cap": 0, "rejected_format": 0, "rejected_cut": 0, "teacher_errors": 0})
    for row in rows:
        if row.recipe == "fixit":
            _reason(row, teacher, model, cache_dir, max_tokens, totals)
        yield row


def _entry(user: str, teacher, model: str, cache_dir: Path, totals: dict) -> dict:
    """The teacher's answer to `user`, from the cache or asked for (and cached, a request's own failure too)."""
    from ..models.base import ModelError, ModelRequest, ModelUnavailable

    path = cache_dir / f"{hashlib.sha256(json.dumps([model, INSTRUCTIONS, user]).encode()).hexdigest()}.json"
    if path.exists():
        totals["cached"] += 1
        return json.loads(path.read_text())
    try:
        reply = teacher.query(ModelRequest(messages=[{"role": "system", "content": INSTRUCTIONS},
                                                     {"role": "user", "content": user}]))
        entry = {"reasoning": reply.content or "", "cost_usd": reply.cost_usd or 0.0,  # None: no known price
                 "usage": reply.usage, "latency_s": reply.latency_s, "cut": reply.finish_reason == "length"}
    except ModelUnavailable:  # an outage or a refused set-up: the whole pass stops (export says so)
        raise
    except ModelError as exc:  # this request's own failure (past the teacher's context window, a 400): the
        # row goes without reasoning, and the answer is cached, so a rerun neither stops on it nor pays again
        entry = {"reasoning": "", "error": str(exc)[:500], "cost_usd": 0.0, "usage": {}, "latency_s": 0.0}
    path.write_text(json.dumps(entry))
    totals["calls"] += 1
    totals["cost_usd"] += entry["cost_usd"]
    totals["tokens"] += int(entry["usage"].get("total_tokens", 0) or 0)
    return entry


def _reason(row: Row, teacher, model: str, cache_dir: Path, max_tokens: int | None, totals: dict) -> None:
    """One fixit row's reasoning put before its completion, unless it fails a check (counted in `totals`)."""
    from .tokens import count_messages

    entry = _entry(_read(row) + "\n\n## Fixed kernel (do not quote)\n" + row.completion[-1].content, teacher, model,
                   cache_dir, totals)
    reasoning = entry["reasoning"].strip()
    if entry.get("error"):
        totals["teacher_errors"] += 1
        return
    if entry.get("cut"):  # stopped at the teacher's token limit: reasoning that breaks off mid-thought
        totals["rejected_cut"] += 1
        return
    if not reasoning or _leaks(reasoning, row):
        totals["rejected_leaks"] += int(bool(reasoning))
        return
    if _FORMAT_BREAK.search(reasoning) or CHAT_MARKUP.search(reasoning):  # a special token ends the turn inside it
        totals["rejected_format"] += 1
        return
    done = row.completion[-1].model_copy(update={"content": f"{THINK_START}\n{reasoning}\n{THINK_END}\n\n{row.completion[-1].content}"})
    # the cap was applied before the reasoning existed: count again, so n_tokens and the cap hold for what is written
    n_tokens = count_messages([m.model_dump() for m in [*row.prompt, done]], row.tokenizer)
    if max_tokens is not None and n_tokens > max_tokens:
        totals["over_token_cap"] += 1
        return
    row.completion[-1] = row.messages[-1] = done
    row.n_tokens = n_tokens
