"""Which language a solution text is written in: the one place that decides it."""
from __future__ import annotations

import re
from pathlib import Path

# The plan comment's `language = "..."` line, read when the plan itself does not parse; searched in the first
# `/* ptxbench ... */` only (from every unclosed `/* ptxbench` the search is quadratic). [^\S\n]: a `\s*` after
# `^` crosses lines, quadratic over a long blank run.
_PLAN_LANGUAGE = re.compile(r"^[^\S\n]*language[^\S\n]*=[^\S\n]*[\"'](\w+)[\"']", re.M)
_ANY_LANGUAGE = re.compile(r'language\s*=\s*"(ptx|cuda)"')
_PTX_DIRECTIVE = re.compile(r"^[^\S\n]*\.(version|target|entry|visible)\b", re.M)
SUFFIXES = {".ptx": "ptx", ".cu": "cuda", ".cuh": "cuda"}


def plan_language(text: str) -> str | None:
    """The language the `/* ptxbench` plan names (parsed, else its `language` line), or None."""
    from .plan_toml import parse_plan_block

    try:
        if (planned := parse_plan_block(text).language) in ("ptx", "cuda"):
            return planned
    except Exception:  # a broken plan must not hide the language: read the line below
        pass
    span = _plan_span(text)
    for m in (_PLAN_LANGUAGE.search(text, *span) if span else None, _ANY_LANGUAGE.search(text)):
        if m and m.group(1) in ("ptx", "cuda"):
            return m.group(1)
    return None


def _plan_span(text: str) -> tuple[int, int] | None:
    """Where the first `/* ptxbench` comment's text lies, to its `*/` or the end (None when there is none)."""
    from .plan_toml import PLAN_START

    if (start := PLAN_START.search(text)) is None:
        return None
    end = text.find("*/", start.end())
    return start.end(), end if end >= 0 else len(text)


def detect_language(text: str, path: Path | None = None, default: str | None = "cuda") -> str | None:
    """The plan's language, else the file suffix (.ptx / .cu / .cuh), else the content (PTX directives
    at a line start mean ptx, `__global__` cuda), else `default`."""
    if planned := plan_language(text):
        return planned
    if path is not None and path.suffix in SUFFIXES:
        return SUFFIXES[path.suffix]
    if _PTX_DIRECTIVE.search(text):
        return "ptx"
    return "cuda" if "__global__" in text else default
