"""Text from a model, its server or a run's records, made fit for a terminal.

Such text can hold control sequences (an OSC that retitles the window, an ANSI erase, a carriage return that hides
what came before); printed raw, it acts on the user's terminal. Control characters other than tab and newline are
shown escaped instead.
"""
from __future__ import annotations

import re

from ptxbench.tools.visible import bidi_escaped

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """`text` with every control character except tab and newline written as its escape (`\\x1b`), the bidirectional
    controls too (tools/visible.py: they reorder what the terminal shows), and a lone surrogate (a record's JSON escape
    "\\ud800", a folder name that is not UTF-8), which no terminal encoding takes, as its escape."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return bidi_escaped(_CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text))


def rich_safe(text: object) -> str:
    """`text` for a rich console with markup on: control characters escaped and `[` no longer opens a tag (a plan
    argument "[/x]" raised MarkupError, "[name]" vanished as an unknown style)."""
    from rich.markup import escape

    return escape(terminal_text(str(text)))
