"""Scores computed from run directories alone (never the GPU): turns, trajectories, cells, repair.

    from ptxbench.agent.scoring import score_runs
    score = score_runs(["runs/bench-1"])      # RunScore (pydantic): .model_workload, .cells, .models
"""
from .cells import P_VALUES, WITHIN_TURNS, CellScore, is_fast, score_cell
from .repair import RepairStats, repair_stats
from .run_score import DuplicateTrajectory, RunScore, load_trajectory_scores, score_runs, score_trajectories
from .stats import Estimate, geomean_estimate, mean_estimate, ratio_estimate, share_estimate, wilson_interval
from .turns import TrajectoryScore, TurnScore, score_trajectory

__all__ = [
    "P_VALUES", "WITHIN_TURNS", "CellScore", "DuplicateTrajectory", "Estimate", "RepairStats", "RunScore", "TrajectoryScore", "TurnScore",
    "geomean_estimate", "is_fast", "load_trajectory_scores", "mean_estimate", "ratio_estimate", "repair_stats",
    "score_cell", "score_runs", "score_trajectories", "score_trajectory", "share_estimate", "wilson_interval",
]
