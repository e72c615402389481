"""Nsight Compute's per-instruction counters folded onto the lines of the solution file.

The source page (`--page source --print-source sass`, SourceCounters section) lists every SASS
instruction of a profiled kernel in address order with its warp-stall samples by reason and its
executed count. The compile recorded the solution line of each instruction in the same order
(KernelResources.sass_lines, tools/sass_lines.py), so the two join by position; the join is refused
when the instruction counts differ (another ptxas made the profiled cubin), never guessed.
"""
from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from .ncu_csv import SourceKernel

ISSUING = ("selected", "not_selected")  # a sample of a warp that issued or could have: not a stall


class HotLine(BaseModel):
    line: int = Field(description="1-based line in the solution file")
    text: str = Field("", description="the line as the model wrote it (stripped, capped)")
    samples: float = Field(0.0, description="warp-stall samples at this line's instructions (all reasons)")
    share_pct: float = Field(0.0, description="share of the kernel's samples")
    stalls: dict[str, float] = Field(default_factory=dict, description="reason -> samples, largest first")
    executed: float | None = Field(None, description="warp-level instructions executed at this line")

    @property
    def dominant(self) -> str:
        return _largest_wait(self.stalls) or next(iter(self.stalls), "")


def _largest_wait(stalls: dict[str, float]) -> str:
    """The largest stall reason that is not an issue sample ("" when there is none)."""
    waiting = {r: v for r, v in stalls.items() if r not in ISSUING}
    return max(waiting, key=waiting.get) if waiting else ""


def _joined_total(source: SourceKernel, sass_lines: list[int | None]) -> float:
    """The kernel's stall samples, or 0 when the page and the compile disagree on the instruction count (another
    ptxas made the profiled cubin: the join is refused, never guessed) or there are none."""
    if not source.lines or len(source.lines) != len(sass_lines):
        return 0.0
    return max(0.0, sum(ln.samples for ln in source.lines))


def fold_lines(source: SourceKernel, sass_lines: list[int | None], solution: str, top: int = 8) -> list[HotLine]:
    """The `top` lines by stall samples ([] when the page and the compile disagree on the instruction count)."""
    total = _joined_total(source, sass_lines)
    if not total:
        return []
    text = solution.split("\n")  # numbered as the compilers and line_of number them: splitlines() also breaks at \f, \x85
    samples: Counter = Counter()
    reasons: dict[int, Counter] = {}
    executed: Counter = Counter()
    for ins, line in zip(source.lines, sass_lines):
        if line is None:
            continue
        samples[line] += ins.samples
        reasons.setdefault(line, Counter()).update(ins.stalls)
        executed[line] += ins.inst_executed or 0.0
    out = []
    for line, n in samples.most_common(top):
        if n <= 0:
            break
        words = text[line - 1].strip() if 0 < line <= len(text) else ""
        out.append(HotLine(line=line, text=words[:120], samples=n, share_pct=round(100 * n / total, 1),
                           stalls=dict(reasons[line].most_common()), executed=executed[line]))
    return out


class HotInstruction(BaseModel):
    """One SASS instruction of the profiled kernel by its stall samples: what a hot line is made of, and where the
    samples of code with no line of the solution (inlined header helpers, ptxas's own code) land."""
    index: int = Field(description="0-based position in the kernel's SASS (address order)")
    sass: str = Field(description="the instruction as the source page prints it (capped)")
    line: int | None = Field(None, description="its line in the solution file, None when the compile has none")
    share_pct: float = Field(0.0, description="share of the kernel's stall samples")
    dominant: str = Field("", description="its largest stall reason (not counting issue samples)")


def hot_instructions(source: SourceKernel, sass_lines: list[int | None], top: int = 24) -> list[HotInstruction]:
    """The `top` instructions by stall samples, each with its solution line ([] when the page and the compile
    disagree on the instruction count, as fold_lines)."""
    total = _joined_total(source, sass_lines)
    if not total:
        return []
    ranked = sorted(range(len(source.lines)), key=lambda i: -source.lines[i].samples)[:top]
    out = []
    for i in ranked:
        ins = source.lines[i]
        if ins.samples <= 0:
            break
        out.append(HotInstruction(index=i, sass=" ".join(ins.sass.split())[:80], line=sass_lines[i],
                                  share_pct=round(100 * ins.samples / total, 2), dominant=_largest_wait(ins.stalls)))
    return out

