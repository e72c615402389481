"""The CLI's live view colours the verdicts it prints and nothing a model wrote; a run folder that cannot be created
and a GPU run on a machine with no usable GPU are each one line on stderr, exit status 2, before anything is
written or any GPU worker starts (agent/cli/README.md)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app

W = "smoke_gemm_bf16_m256_n256_k512"


def _turn_end(turn: int, status: str):
    return SimpleNamespace(type="turn_end", turn=turn, status=status, speedup=None, tokens=0, cost_usd=0.0,
                           elapsed_s=1.0)


def test_the_live_view_colours_statuses_and_keeps_model_text_literal():
    from rich.console import Console

    from ptxbench.agent.cli.cmd_optimize import LiveView

    view = LiveView("t")
    view.targets = "[bold]x[/]"  # text a result carries (kernel names, verdicts): shown as written
    view(_turn_end(1, "COMPILED"))
    view(_turn_end(2, "PASSED"))
    view(_turn_end(3, "PLAN_ERROR"))
    console = Console(record=True, width=200, force_terminal=True, color_system="truecolor")
    console.print(view.render())
    plain = console.export_text(styles=False, clear=False)
    assert "[yellow]" not in plain and "[green]" not in plain and "[red]" not in plain, plain
    assert "COMPILED" in plain and "[/]" not in plain.replace("[bold]x[/]", ""), plain
    assert plain.count("[bold]x[/]") == 1, plain  # the hostile cell stays literal (one row had it)
    styled = console.export_text(styles=True)
    assert "\x1b[33mCOMPILED" in styled and "\x1b[32mPASSED" in styled and "\x1b[31mPLAN_ERROR" in styled, styled
    assert "\x1b[1mx" not in styled  # "[bold]" in model text is not a style


def test_the_live_view_escapes_a_status_that_looks_like_markup():
    from rich.console import Console

    from ptxbench.agent.cli.cmd_optimize import LiveView

    view = LiveView("t")
    view(_turn_end(1, "PLAN_ERROR [/y] [bold]z[/bold]"))
    console = Console(record=True, width=200)
    console.print(view.render())
    assert "PLAN_ERROR [/y] [bold]z[/bold]" in console.export_text()
