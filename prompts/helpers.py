"""The helper reference of the prompt (helpers_sm90a.md), generated from the wrapper headers.

Every `__device__ __forceinline__` function of prompts/include/ptxbench/*.cuh is listed with its
exact declaration and the comment above it, so the prompt cannot drift from the headers
(tests/prompts/test_prompt_contract.py checks the file equals `render()` and compiles calls to each).

Regenerate after editing a header: python3 -m ptxbench.prompts.helpers
"""
from __future__ import annotations

import argparse
import functools

import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include" / "ptxbench"
HEADERS = ("mbarrier.cuh", "tma.cuh", "wgmma.cuh")
OUT = HERE / "helpers_sm90a.md"

INTRO = """## Wrapper headers for `cuda` solutions (exact declarations)
Include the ones you use: `#include "ptxbench/mbarrier.cuh"`, `"ptxbench/tma.cuh"`,
`"ptxbench/wgmma.cuh"` (each includes `<stdint.h>`; tma.cuh needs `<cuda.h>` only for your
`CUtensorMap` parameters). Everything is in `namespace ptxbench`: write `using namespace ptxbench;`
after the includes (or call `ptxbench::mbar_init`), else nvcc reports `identifier "mbar_init" is
undefined` and `expected an expression` at `wgmma_wait<1>()`. All are `__device__ __forceinline__`.
Shared-memory arguments are generic pointers into shared memory (`&full[s]`, `smem + offset`), not
32-bit shared addresses; a tensor map is passed as the address of the kernel's
`const __grid_constant__ CUtensorMap` parameter (`&tmA`). You may also copy and edit them.
"""


@dataclass
class Helper:
    header: str
    name: str
    declaration: str   # one line, without __device__ __forceinline__ and without the body
    comment: list[str]


def _strip_qualifiers(sig: str) -> str:
    return re.sub(r"\s+", " ", sig.replace("__device__", "").replace("__forceinline__", "")).strip()


def parse(header: Path) -> tuple[list[Helper], dict[str, list[int]]]:
    """The helpers a header declares (specialisations folded into their primary template)."""
    helpers: list[Helper] = []
    specialised: dict[str, list[int]] = {}
    comment: list[str] = []
    template: str | None = None
    depth = 0
    started = False
    lines = iter(header.read_text().splitlines())
    for raw in lines:
        line = raw.strip()
        if not started:
            started = line.startswith("namespace ptxbench")
            continue
        if depth > 0:
            depth += line.count("{") - line.count("}")
            continue
        if line.startswith("//"):
            comment.append(line[2:].strip())
            continue
        if line.startswith("template"):
            template = line
            continue
        if line.startswith("__device__"):
            while "{" not in line and not line.endswith(";"):  # a declaration over several lines
                line += " " + next(lines).strip()
            head = line.split("{", 1)[0].rstrip(";").strip()
            name = re.search(r"(\w+)\s*(<[^>]*>)?\s*\(", head).group(1)
            if template == "template <>":
                n = re.search(r"<(\d+)>\s*\(", head)
                specialised.setdefault(name, []).append(int(n.group(1)))
            else:
                decl = _strip_qualifiers(head) + ";"
                if template:
                    decl = f"{template} {decl}"
                helpers.append(Helper(header.name, name, decl, comment))
            depth = line.count("{") - line.count("}")
            comment, template = [], None
            continue
        if line == "" or line.startswith("#") or line.startswith("}"):
            comment, template = ([], None) if line == "" else (comment, template)
    return helpers, specialised


@functools.lru_cache(maxsize=1)
def helpers() -> tuple[Helper, ...]:
    """Every helper the headers declare (parsed once per process: the feedback asks on each compile error)."""
    return tuple(h for name in HEADERS for h in parse(INCLUDE / name)[0])


def render() -> str:
    out = [INTRO]
    for name in HEADERS:
        found, specialised = parse(INCLUDE / name)
        out.append(f'### "ptxbench/{name}"\n```cpp')
        for h in found:
            out += [f"// {c}" for c in h.comment]
            out.append(h.declaration)
            if h.name in specialised:
                values = specialised[h.name]
                out.append(f"//   defined for N = {', '.join(map(str, values))}")
        out.append("```\n")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    """Writes helpers_sm90a.md. A parser even with no options: `--help` must answer, not rewrite the file."""
    argparse.ArgumentParser(
        prog="python3 -m ptxbench.prompts.helpers",
        description="Regenerate prompts/helpers_sm90a.md (the prompt's helper reference) from the wrapper headers "
                    "prompts/include/ptxbench/*.cuh; run it after editing a header. Takes no options.").parse_args(argv)
    OUT.write_text(render())
    print(f"wrote {OUT} ({len(helpers())} helpers)")


if __name__ == "__main__":
    main()
