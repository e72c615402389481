"""The edit helpers every variant is built with: the checked-in kernel the edits apply to (REFERENCE), exact-text
edits that fail loudly when their text has moved (apply_edits) and a span replaced between two markers
(replace_span)."""
from __future__ import annotations

from pathlib import Path

from ..template_text import replace_counted

# The checked-in backward (workloads/solutions/attention_bwd_wgmma.cu), the one copy of the kernel.
REFERENCE = Path(__file__).parents[1] / "attention_bwd_wgmma.cu"


def apply_edits(text: str, edits: list[tuple[str, str]], name: str, count: int = 1) -> str:
    """`text` with each (old, new) edit made; each old text must occur exactly `count` times."""
    for old, new in edits:
        text = replace_counted(text, old, new, f"variant {name}: the reference", count)
    return text


def replace_span(text: str, start: str, end: str, new: str, name: str) -> str:
    """`text` with the span from the line starting `start` up to (not including) `end` replaced by `new`."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"variant {name}: the markers {start[:40]!r} .. {end[:40]!r} are not in the reference once, in order")
    return text[:text.index(start)] + new + text[text.index(end):]
