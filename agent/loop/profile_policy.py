"""Which Nsight Compute profile a turn's evaluation takes (OptimizeConfig.profile):

- auto (the default): every passing kernel gets the runtime target verdict (one cheap ncu run);
  the full per-line profile, whose findings are the feedback, is taken on the first passing
  kernel and on each new best (EvalOptions.profile_on_pass = new_best: a kernel time under the best
  passing one so far, as builtin/tuner picks its base, the library's time moving more between
  evaluations than a kernel's; by speedup where times are missing), decided in the
  evaluator once pass and timing are known, so no turn's GPU pays for two ncu runs; with early
  slots to spare both may start beside the timing, and the one not asked for dies before its
  replay). In tools mode the model also gets it whenever it calls the `profile` tool;
- full: the full profile on every evaluation (`--profile full`; `true` in older configs);
- verdict: never the full profile unasked (the verdict on every pass; the profile tool still works).

The level each evaluation got and why are in its EvalResult (profile_level, profile_reason), so the
trajectory records them, and a turn without the full profile is told so and why.
"""
from __future__ import annotations

from typing import Literal

from ptxbench.tools.evaluator import EvalOptions

ProfilePolicy = Literal["auto", "full", "verdict"]
POLICIES: tuple[str, ...] = ("auto", "full", "verdict")
TOOL_REASON = "asked for through the profile tool"


def base_options(policy: str) -> dict:
    """The EvalOptions fields a policy fixes for the whole trajectory."""
    if policy == "full":
        return {"profile": "full", "profile_reason": "--profile full: every evaluation gets the full profile"}
    return {"profile": "none", "profile_on_pass": "verdict",
            "profile_reason": "" if policy == "auto" else "--profile verdict: only the runtime target check is taken"}


def turn_options(options: EvalOptions, policy: str, best_speedup: float | None,
                 best_kernel_ms: float | None = None) -> EvalOptions:
    """The options of one scored evaluation: with `auto`, a full profile when it passes and beats the best so far (its
    own time under `best_kernel_ms` when that is known, else its speedup over `best_speedup`)."""
    if policy != "auto":
        return options
    return options.model_copy(update={"profile_on_pass": "new_best", "best_speedup": best_speedup,
                                      "best_kernel_ms": best_kernel_ms})
