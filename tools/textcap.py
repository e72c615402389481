"""Bounded text: keep the head and the tail of a long log and say what was cut; a kernel name cut short.

Model text can make a compiler print megabytes (one error per line of a 2 MB file); the start says
what went wrong first, the end how it finished, and the middle is not worth storing.
"""
from __future__ import annotations

from collections import deque

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


class CappedText:
    """cap_text of a text that arrives in pieces, holding only its head and tail: a compiler's output is read as it is
    written, so the gigabytes model text can make nvcc print never sit in the harness's memory."""

    def __init__(self, limit: int | None = LOG_CHARS):
        self.limit = limit
        self.head_chars = limit * 3 // 4 if limit is not None else None
        self.head: list[str] = []
        self.tail: deque[str] = deque()  # pieces whose total length is kept near `limit - head_chars`
        self.head_len = self.tail_len = 0
        self.after_head = 0  # characters past the head, and the newlines among them
        self.newlines_after_head = 0

    def add(self, piece: str) -> None:
        if self.head_chars is None:
            self.head.append(piece)
            return
        room = self.head_chars - self.head_len
        if room > 0:
            self.head.append(piece[:room])
            self.head_len += len(self.head[-1])
            piece = piece[room:]
        if not piece:
            return
        self.after_head += len(piece)
        self.newlines_after_head += piece.count("\n")
        self.tail.append(piece)
        self.tail_len += len(piece)
        keep = self.limit - self.head_chars
        while self.tail and self.tail_len - len(self.tail[0]) >= keep:
            self.tail_len -= len(self.tail.popleft())

    def text(self) -> str:
        head = "".join(self.head)
        if self.head_chars is None or self.head_len + self.after_head <= self.limit:
            return head + "".join(self.tail)
        keep = self.limit - self.head_chars
        tail = "".join(self.tail)[-keep:] if keep else ""
        cut = self.after_head - len(tail)
        cut_lines = self.newlines_after_head - tail.count("\n")
        return (head + f"\n[... {cut} characters ({cut_lines} lines) cut by ptxbench: the log is capped at "
                f"{self.limit} characters ...]\n" + tail)


def short_name(name: str, limit: int = NAME_CHARS) -> str:
    """A kernel name cut to `limit` characters: the model picks it, at any length (a PTX identifier, a demangled C++
    name), and feedback quotes it, in the profile's (one longer than its token budget pushed every finding out) and in
    each sanitizer finding (which has no budget)."""
    return name if len(name) <= limit else name[:limit - 1] + "…"
