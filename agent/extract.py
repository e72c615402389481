"""The extract step: take the solution file out of a model reply (tools/solution.py does the slicing).

Replies are untrusted text: this only slices strings; the evaluator parses and checks the file.
"""
from __future__ import annotations

from pydantic import BaseModel

from ptxbench.tools.solution import extract_solution as _extract


class Extracted(BaseModel):
    source: str = ""
    language: str = ""
    error: str = ""  # why no solution could be taken from the reply ("" when one was)
    warnings: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.error


def extract_solution(reply: str) -> Extracted:
    found = _extract(reply)
    if isinstance(found, list):
        return Extracted(error="; ".join(str(issue) for issue in found).capitalize() + ".")
    return Extracted(source=found.source, language=found.language or "cuda", warnings=found.warnings)
