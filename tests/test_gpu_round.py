"""bench/gpu_round.sh drives the GPU measurements of a round: every step it names must call a script that
exists with options that script accepts (a typo there would cost a whole device call to find)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROUND = (ROOT / "bench" / "gpu_round.sh").read_text()


def _steps() -> dict[str, str]:
    body = ROUND[ROUND.index("case $name in"):ROUND.index("esac")]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s{4}([a-z-]+)\)(.*?);;", body, re.S | re.M)}


def test_every_step_has_a_budget_and_a_documented_line():
    budgets = set(re.findall(r"\[([a-z-]+)\]=\d+", ROUND))
    steps = set(_steps())
    assert steps == budgets, (steps ^ budgets)
    for name in steps:
        assert re.search(rf"^#\s+{re.escape(name)} \(\d+\)", ROUND, re.M), f"{name} is not in the header"


def _calls() -> list[tuple[str, str, str]]:
    """(step, script, the text of its options: up to the next command of the step)."""
    out = []
    for name, cmd in _steps().items():
        for part in cmd.split("python3 ")[1:]:
            script, _, opts = part.partition(" ")
            if script.startswith("bench/") and script.endswith(".py"):
                out.append((name, script, opts.split("\n      done")[0]))
    return out


CALLS = _calls()


@pytest.mark.parametrize("name, script, opts", CALLS, ids=[c[0] + ":" + Path(c[1]).stem for c in CALLS])
def test_each_python_step_calls_a_script_with_options_it_accepts(name, script, opts):
    assert (ROOT / script).is_file(), script
    helptext = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
    assert helptext.returncode == 0, helptext.stderr[-2000:]
    for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", opts):
        assert flag in helptext.stdout, f"{script} does not take {flag}"


def test_the_shell_steps_call_scripts_that_exist():
    for name, cmd in _steps().items():
        for script in re.findall(r"bash (bench/\S+\.sh)", cmd):
            assert (ROOT / script).is_file(), (name, script)
        for path in re.findall(r"(tests/\S+\.py)", cmd):
            assert (ROOT / path).is_file(), (name, path)
