"""The edit helpers every variant is built with: the checked-in kernel the edits apply to (REFERENCE), exact-text
edits that fail loudly when their text has moved (apply_edits) and a span replaced between two markers
(replace_span)."""
from __future__ import annotations

from pathlib import Path

# The checked-in backward (workloads/solutions/attention_bwd_wgmma.cu), the one copy of the kernel.
REFERENCE = Path(__file__).parents[1] / "attention_bwd_wgmma.cu"


def apply_edits(text: str, edits: list[tuple[str, str]], name: str) -> str:
    for old, new in edits:
        if text.count(old) != 1:
            raise ValueError(f"variant {name}: {old[:60]!r} occurs {text.count(old)} times in the reference, not once")
        text = text.replace(old, new)
    return text


def replace_span(text: str, start: str, end: str, new: str, name: str) -> str:
    """`text` with the span from the line starting `start` up to (not including) `end` replaced by `new`."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"variant {name}: the markers {start[:40]!r} .. {end[:40]!r} are not in the reference once, in order")
    return text[:text.index(start)] + new + text[text.index(end):]
