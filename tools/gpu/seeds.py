"""An evaluation's input seeds (no torch import: the evaluator draws them before the GPU job starts).

The evaluator draws the first set's seed itself, so the profile that starts beside the timing (tools/profile/early.py)
replays the very inputs the evaluated calls had: a fixed profile seed would be inputs a kernel could know by their
values and run its target instructions only there.
"""
from __future__ import annotations

import secrets

from ...workloads.schema import DISTS

CHECK_SEED_OFFSET = 1000  # the final checks draw inputs no set used: seed + this (new inputs), + 2x (each declared
# distribution besides the evaluation's: the workload's input_dist, at most len(DISTS) - 1 of them)


def input_sets(trials: int | None, workload_trials: int) -> int:
    """How many input sets an evaluation checks: the job's trials or the workload's, at least two (the timed calls
    rotate among them)."""
    return max(2, int(trials or workload_trials))


def check_seed_offset(n_sets: int) -> int:
    """How far each final check moves set 0's seed: past every set's own (--trials has no bound; at 1001 sets the new
    inputs were set 1000's and an honest output read as a replay), CHECK_SEED_OFFSET up to that many sets (recorded
    runs replay with the inputs they had)."""
    return max(CHECK_SEED_OFFSET, n_sets)


def draw_base_seed(n_sets: int) -> int:
    """A fresh first seed, leaving room above the sets for the final checks' seeds."""
    return secrets.randbelow(2**31 - len(DISTS) * check_seed_offset(n_sets) - n_sets)


def evaluation_seeds(seed: int | None, n_sets: int) -> list[int]:
    """The input seeds of one evaluation: from `seed` when given (the evaluator's draw, or a replay's), else drawn now."""
    base = draw_base_seed(n_sets) if seed is None else int(seed)
    return [base + k for k in range(n_sets)]
