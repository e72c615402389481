"""The knowledge pack's sections and the PTX instruction lines each spells, for the tests that assemble them."""
from __future__ import annotations

import re

from ptxbench import prompts

PACK = prompts.load("knowledge_sm90a")


def section(title: str) -> str:
    """The section whose heading starts with `title`, up to the next heading."""
    return re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", PACK, re.S | re.M).group(0)


def instructions(text: str) -> list[str]:
    """Every inline `...;` span of `text` outside its code blocks that reads as one PTX instruction."""
    spans = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return [s for s in spans if re.fullmatch(r"[a-z][a-z0-9_]*(?:\.[\w:]+)+(?: [^;]*)?;", s)]


def opcode_key(line: str, expected: dict) -> str:
    """The longest key of `expected` the instruction line starts with."""
    return next(k for k in sorted(expected, key=len, reverse=True) if line.startswith(k))
