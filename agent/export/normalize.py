"""Normalised kernel hash for de-duplication: comments and white space do not count; the plan block does."""
from __future__ import annotations

import hashlib
import re

_PLAN = re.compile(r"/\*\s*ptxbench.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_SPACE = re.compile(r"\s+")


def normalized_kernel(source: str) -> str:
    plans = _PLAN.findall(source)  # kept whole: `M // 128` inside it is an expression, not a comment
    code = _PLAN.sub(" ", source)
    code = _BLOCK_COMMENT.sub(" ", code)
    code = _LINE_COMMENT.sub(" ", code)
    return _SPACE.sub(" ", " ".join(plans) + " " + code).strip()


def kernel_hash(*sources: str) -> str:
    h = hashlib.sha256()
    for s in sources:
        h.update(normalized_kernel(s).encode())
        h.update(b"\0")
    return h.hexdigest()
