"""Bounded text: keep the head and the tail of a long log and say what was cut; a kernel name cut short.

Model text can make a compiler print megabytes (one error per line of a 2 MB file); the start says
what went wrong first, the end how it finished, and the middle is not worth storing.
"""
from __future__ import annotations

LOG_CHARS = 64_000  # a stored compile log: head + tail
NAME_CHARS = 80  # a kernel name as feedback quotes it


def cap_text(text: str, limit: int | None = LOG_CHARS) -> str:
    """`text` if it fits in `limit` characters, else its head and tail around a note of the cut."""
    if limit is None or len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    cut = len(text) - head - tail
    cut_lines = text.count("\n", head, len(text) - tail)
    return (text[:head] + f"\n[... {cut} characters ({cut_lines} lines) cut by ptxbench: the log is capped at "
            f"{limit} characters ...]\n" + text[len(text) - tail:])


def short_name(name: str, limit: int = NAME_CHARS) -> str:
    """A kernel name cut to `limit` characters: the model picks it, at any length (a PTX identifier, a demangled C++
    name), and feedback quotes it, in the profile's (one longer than its token budget pushed every finding out) and in
    each sanitizer finding (which has no budget)."""
    return name if len(name) <= limit else name[:limit - 1] + "…"
