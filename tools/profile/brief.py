"""The feedback of a verdict-only profile: where the kernel stands, the target verdicts, and why the
per-line profile was not taken this turn (so the model never reads the silence as "nothing to fix").

    verdict_feedback(summary, verdicts, workload, timing, arch=..., note="not a new best (...)")

Words: prompts/feedback_profile.md, section `verdict_only`.
"""
from __future__ import annotations

from ptxbench.tools.results import RuntimeTarget, Timing
from ptxbench.workloads.arch import DEFAULT_ARCH
from ptxbench.workloads.schema import Workload

from .feedback import _numbered, _verdict_items, standing, standing_text, template
from .summary import ProfileSummary


def verdict_feedback(summary: ProfileSummary, verdicts: dict[str, RuntimeTarget], wl: Workload | None,
                     timing: Timing | None, *, arch: str = DEFAULT_ARCH, note: str = "") -> str:
    t = template()["verdict_only"]
    parts = [standing_text(standing(summary, wl, timing))]
    items = [text for _, text in sorted(_verdict_items(verdicts, arch), key=lambda x: -x[0])]
    if items:  # the executed families are listed with the other verdicts; only what to change is said here
        parts.append(t["targets"] + "\n" + _numbered(items))
    if note:
        parts.append(t["not_taken"].format(reason=note))
    return "\n".join(p for p in parts if p).strip()
