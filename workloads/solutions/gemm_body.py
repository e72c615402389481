"""Text edits of the GEMM template's kernel body (gemm_template.cu.in) that the options' modules share."""
from __future__ import annotations

from .template_text import replace_counted


def swap(body: str, old: str, new: str, count: int = 1) -> str:
    """`body` with `old` replaced by `new`, which must occur exactly `count` times."""
    return replace_counted(body, old, new, "gemm_template.cu.in", count)


def replace_function(body: str, signature: str, replacement: str) -> str:
    """`body` with the function that starts at the line holding `signature` (up to its closing brace at column 0)
    replaced by `replacement`."""
    start = body.index(signature)
    start = body.rindex("\n", 0, start) + 1
    end = body.index("\n}\n", start) + 3
    return body[:start] + replacement + body[end:]
