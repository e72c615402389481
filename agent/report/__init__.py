"""Reports from a run directory: summary.md, a self-contained index.html with plots, a page per trajectory.

    from ptxbench.agent.report import write_report
    files = write_report("runs/bench-1", "runs/bench-1/report")
"""
from .build import ReportFiles, index_html, markdown_summary, write_report

__all__ = ["ReportFiles", "index_html", "markdown_summary", "write_report"]
