"""Prompt texts (Markdown files next to this module) and the named prompt variants.

    load("task")                  the text of task.md (or task.txt)
    variant("knowledge")          which texts a variant puts into the system prompt and the task
    VARIANTS                      basic | knowledge | expert (as PTXBench's three)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


def path(name: str) -> Path:
    for suffix in (".md", ".txt"):
        candidate = HERE / f"{name}{suffix}"
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no prompt {name!r} in {HERE} (have: {', '.join(names())})")


def load(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


def names() -> list[str]:
    return sorted(p.stem for p in HERE.iterdir() if p.suffix in (".md", ".txt"))


@dataclass(frozen=True)
class PromptVariant:
    name: str
    system: tuple[str, ...]     # prompt files joined into the system message
    knowledge: tuple[str, ...]  # prompt files appended to the task ("{arch}" is replaced by the arch name)
    doc: str


VARIANTS: dict[str, PromptVariant] = {
    v.name: v
    for v in (
        PromptVariant("basic", ("system_basic",), (), "the task and the solution format only"),
        PromptVariant("knowledge", ("system_basic",), ("knowledge_{arch}", "helpers_{arch}"),
                      "plus the PTX knowledge pack of the arch and its wrapper headers' declarations"),
        PromptVariant("expert", ("system_basic",), ("knowledge_{arch}", "helpers_{arch}", "expert"),
                      "plus how the fastest published kernels are built"),
    )
}


def variant(name: str) -> PromptVariant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown prompt variant {name!r}; valid: {', '.join(VARIANTS)}") from None


def load_optional(name: str) -> str:
    """The text of a prompt file, or '' when there is none (e.g. no knowledge pack for an arch yet)."""
    try:
        return load(name)
    except FileNotFoundError:
        return ""
