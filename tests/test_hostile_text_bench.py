"""bench/hostile_text_cost.py: every case fills a solution's room with its shape, and the script's table reads the
checks' seconds (the timings themselves: bench/results/hostile_text_cost.md)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from hostile_text_cost import CASES, measure  # noqa: E402

from ptxbench.tools.solution.parse import MAX_SOLUTION_CHARS  # noqa: E402


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_case_fills_a_solutions_room_and_stays_a_ptx_module(name):
    text = CASES[name]()
    assert MAX_SOLUTION_CHARS - 10_000 < len(text) <= MAX_SOLUTION_CHARS
    assert text.startswith(".version 8.5\n.target sm_90a\n") and text.rstrip().endswith("}")


def test_the_literal_case_is_measured_and_refused_not_raised():
    reading = measure(CASES["long_literal"]())
    assert "raised" not in reading and reading["issues"] == 1
    assert set(reading["seconds"]) == {"policy", "read", "static", "system_calls", "module_data", "parameters",
                                       "line_info"}


def test_the_command_line_prints_a_row_a_case_and_refuses_an_unknown_one(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "hostile_text_cost.py"), "blank_lines", "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1].startswith("| blank_lines | ") and (tmp_path / "r.json").is_file()
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "hostile_text_cost.py"), "nothing"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no case nothing" in bad.stderr
