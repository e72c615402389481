"""Trajectory dataset export: KernelGen and Fixit rows from run directories, and bug injection.

Reads runs/ only (agent/records/rundir.py); the bug injector (synth.py) is the one part that evaluates kernels.
"""
from .collect import collect_samples
from .recipes import build_rows
from .schema import ExportConfig, Row

__all__ = ["ExportConfig", "Row", "build_rows", "collect_samples"]
