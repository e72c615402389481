"""The repair track: a suite of broken kernels (suite.py), how it is built (candidates.py, build.py), and
how the bench runs it (track.py). Scores: agent/scoring/repair_track.py."""
from .suite import HELD_OUT_CLASSES, RepairSuite, RepairTask, SuiteMissing, Verdict, load_suite, write_suite

__all__ = ["HELD_OUT_CLASSES", "RepairSuite", "RepairTask", "SuiteMissing", "Verdict", "load_suite", "write_suite"]
