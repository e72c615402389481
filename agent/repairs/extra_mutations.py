"""Repair-suite bug classes beyond agent/export/mutations.py. synth-repairs never makes these, so they can
be held out of training data (suite.HELD_OUT_CLASSES): launch-plan, header and LSE-unit bugs."""
from __future__ import annotations

import re

from ..export.mutations import WRONG, Mutation


def _lse_in_log2_units(m: re.Match) -> str:
    """The ln 2 factor dropped, and every comment that spells the conversion out (the line above the LSE store,
    "= m ln 2 + ln(l)", and a file header's "LSE = m * ln 2 + ln(l)"): left in, it would hand the model the fix."""
    return f"{m.group(1)} + logf" if m.group(1) else ""


EXTRA_MUTATIONS: list[Mutation] = [
    Mutation("lse_log2_units",
             "the LSE is written in log2 units (the running max is not converted with ln 2), while the workload asks "
             "for the natural log", WRONG,
             r"(\w+) \* 0\.6931471805599453f \+ logf|^[ \t]*//[^\n]*\bm ln 2\b[^\n]*\n"
             r"|; LSE = m \* ln 2 \+ ln\(l\)(?=\.)", _lse_in_log2_units,
             requires=r"\w+ \* 0\.6931471805599453f \+ logf"),
    Mutation("smem_over_limit",
             "the plan asks for more dynamic shared memory than one Hopper SM has (256 KiB > 227 KiB)",
             ("PLAN_ERROR",), r"^smem = .*$", "smem = 262144", 1),
    Mutation("grid_too_small",
             "the plan launches half the CTAs along the first grid dimension: part of the output is never written",
             WRONG, r'^grid = \["([^"]+)"', r'grid = ["(\1) / 2"', 1),
    Mutation("missing_header",
             "the mbarrier wrapper header is not included: mbar_* are undeclared",
             ("COMPILE_ERROR",), r'^#include "ptxbench/mbarrier\.cuh"[ \t]*\n', "", 1),
]
