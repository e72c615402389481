"""Options that were taken and then dropped or misused without a word: a GPU-run option beside --no-gpu, a report
written among its own run's records, a unit spelled into one command's option name only, and a listing that a
narrow terminal cut into look-alike ids."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
W = "smoke_gemm_bf16_m256_n256_k512"
GOOD = str(ROOT / "tests/data/agent/good.ptx")
EXAMPLE_RUN = ROOT / "docs/examples/optimize-gemm-tuner"


def _one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


# each option only the GPU run uses, given with --no-gpu: eval compiled the file and said nothing of it
GPU_RUN = [["--trials", "2"], ["--dist", "spiky"], ["--seed", "7"], ["--no-time"], ["--timeout", "5"], ["--profile"],
           ["--l2-flush", "write"], ["--sanitize", "memcheck"], ["--dist", "normal"]]


@pytest.mark.parametrize("extra", GPU_RUN, ids=[" ".join(e) for e in GPU_RUN])
def test_eval_refuses_a_gpu_run_option_beside_no_gpu(workdir, extra):
    line = _one_line(CliRunner().invoke(app, ["eval", W, GOOD, "--no-gpu", *extra]))
    assert line == (f"error: {extra[0]} acts on the GPU run, which --no-gpu skips (it stops after compile + SASS): "
                    "drop it, or --no-gpu"), line


def test_eval_names_every_gpu_run_option_given_beside_no_gpu(workdir):
    line = _one_line(CliRunner().invoke(app, ["eval", W, GOOD, "--no-gpu", "--profile", "--seed", "3"]))
    assert line.startswith("error: --seed, --profile act on the GPU run, which --no-gpu skips"), line


@pytest.mark.parametrize("argv", [["optimize", W, "--no-gpu", "--profile", "full"],
                                  ["optimize", W, "--no-gpu", "--trials", "2"],
                                  ["optimize", W, "--no-gpu", "--l2-flush", "write"],
                                  ["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--profile", "full"],
                                  # the seed of the input sets only a GPU run draws: taken and dropped without a word
                                  ["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--seed", "5"],
                                  ["bench", "--track", "repair", "--models", "builtin/tuner", "--no-gpu", "--seed", "5"]],
                         ids=["optimize --profile", "optimize --trials", "optimize --l2-flush", "bench --profile",
                              "bench --seed", "bench --track repair --seed"])
def test_a_run_refuses_a_gpu_run_option_beside_no_gpu_and_writes_nothing(workdir, argv):
    line = _one_line(CliRunner().invoke(app, argv))
    assert "acts on the GPU run, which --no-gpu skips" in line, line
    assert not (workdir / "runs").exists()


@pytest.fixture
def run(tmp_path):
    shutil.copytree(EXAMPLE_RUN, tmp_path / "run")
    return tmp_path / "run"


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("out, words", [
    ("{run}", "is the run folder itself"), ("{run}/", "is the run folder itself"), ("{run}/.", "is the run folder itself"),
    ("{run}/trajectories", "is inside the run's trajectories/, which no report wrote"),
    ("{run}/trajectories/pages", "is inside the run's trajectories/, which no report wrote"),
    ("{parent}", "holds the run"),
])
def test_report_is_not_written_among_its_own_runs_records(run, out, words, monkeypatch):
    """`report RUN --out RUN` put index.html, summary.md and score.json beside the manifest and the trajectory pages
    into the run's own trajectories/ (beside the trajectory folders); nothing of the run is touched now."""
    monkeypatch.chdir(run.parent)
    before = _listing(run.parent)
    line = _one_line(CliRunner().invoke(app, ["report", str(run), "--out", out.format(run=run, parent=run.parent)]))
    assert words in line, line
    assert _listing(run.parent) == before


def test_report_may_go_to_a_new_folder_in_the_run_or_an_earlier_reports(run):
    for out in (run / "report", run / "report", run / "pages"):
        result = CliRunner().invoke(app, ["report", str(run), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert (out / "index.html").is_file()
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        "gemm_bf16_m8192_n7168_k5120__builtin-tuner__knowledge__00"]


@pytest.mark.parametrize("mine, words", [("summary.md", "holds summary.md, which no report wrote"),
                                         ("export_manifest.json", "holds an export (export_manifest.json)")])
def test_the_default_report_folder_is_checked_as_out_is(run, mine, words):
    """`report RUN` writes into RUN/report: someone's own summary.md there was replaced, and an export there got the
    report's pages among its data files, without a word, where --out naming that folder refused both."""
    (run / "report").mkdir()
    (run / "report" / mine).write_text("{}\n")
    before = _listing(run)
    line = _one_line(CliRunner().invoke(app, ["report", str(run)]))
    assert f"the report folder {run / 'report'} {words}" in line and "name another folder with --out" in line, line
    assert _listing(run) == before
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(run.parent / "elsewhere")])
    assert result.exit_code == 0, result.output


def _visible_options():
    import typer

    def walk(command, path=()):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, (*path, name))
        else:
            for param in command.params:
                if getattr(param, "param_type_name", "") == "option" and not getattr(param, "hidden", False):
                    yield " ".join(path), param

    return list(walk(typer.main.get_command(app)))


def test_no_option_spells_its_unit_and_the_watchdog_is_timeout_everywhere():
    """synth-repairs alone said --timeout-s for what eval and profile call --timeout (seconds in every command)."""
    spelled = [f"{path} {opt}" for path, param in _visible_options() for opt in param.opts
               if opt.endswith(("-s", "-ms", "-min", "-usd"))]
    assert not spelled, spelled
    watchdogs = {path for path, param in _visible_options() if "--timeout" in param.opts}
    assert {"eval", "profile", "synth-repairs"} <= watchdogs, watchdogs


def _synthesis_options(monkeypatch) -> list:
    """synth-repairs run as if on a GPU, each synthesis's EvalOptions recorded instead of evaluated, and "closed"
    where the command closes its evaluator."""
    from types import SimpleNamespace

    import ptxbench.agent.export.synth as synth
    import ptxbench.tools.evaluate as evaluate
    from ptxbench.agent.cli import preflight

    taken: list = []

    class NoWorkEvaluator:
        pool = None

        def close(self):
            taken.append("closed")

    def synthesize(*args, options, **kw):
        taken.append(options)
        return SimpleNamespace(reference_status={}, outcomes=[], kept=[])

    monkeypatch.setattr(preflight, "no_gpu_reason", lambda: "")
    monkeypatch.setattr(preflight, "toolchain", lambda arch: None)
    monkeypatch.setattr(evaluate, "LocalEvaluator", NoWorkEvaluator)
    monkeypatch.setattr(synth, "synthesize", synthesize)
    return taken


def test_the_former_timeout_s_spelling_still_works_but_not_beside_timeout(workdir, monkeypatch):
    taken = _synthesis_options(monkeypatch)
    ok = CliRunner().invoke(app, ["synth-repairs", "--timeout-s", "5", "--run-dir", "r"])
    assert ok.exit_code == 0, ok.output
    assert taken[-1] == "closed"  # the evaluator the synthesis ran on is closed after it
    taken.pop()
    assert [o.timeout_s for o in taken] == [5.0]  # taken as --timeout
    assert "nan" in _one_line(CliRunner().invoke(app, ["synth-repairs", "--timeout-s", "nan"]))
    assert _one_line(CliRunner().invoke(app, ["synth-repairs", "--timeout", "0"])) == \
        "error: --timeout must be positive, got 0.0"
    line = _one_line(CliRunner().invoke(app, ["synth-repairs", "--timeout", "5", "--timeout-s", "5"]))
    assert line == "error: --timeout-s is the former spelling of --timeout: give one of them", line
    assert len(taken) == 1


def _terminal(monkeypatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr("rich.console.Console.is_terminal", property(lambda self: True))


@pytest.mark.parametrize("columns", [60, 40])
def test_workloads_on_a_narrow_terminal_shows_every_id_whole_and_its_set(monkeypatch, columns):
    """At 60 columns the table dropped GFLOP, min MB, baseline and set (the held-out flag); at 40 it cut ids into
    look-alikes (mha_fwd_d128_gqa_h32_k… twice)."""
    from ptxbench.workloads.registry import list_workloads

    _terminal(monkeypatch, columns)
    result = CliRunner().invoke(app, ["workloads", "--all"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for w in list_workloads():
        assert w.id in lines, w.id
        details = lines[lines.index(w.id) + 1]
        assert w.primary_baseline.name in details, details
        assert ("held-out" in details) == (w.held_out and "smoke" not in w.tags), details
    assert "…" not in result.output


def test_workloads_on_a_wide_terminal_is_still_the_table(monkeypatch):
    _terminal(monkeypatch, 160)
    result = CliRunner().invoke(app, ["workloads"])
    assert result.exit_code == 0 and "MxNxK | BxHxSxD" in result.output, result.output


def test_eval_folds_a_kernel_name_a_narrow_terminal_cannot_hold(monkeypatch, capsys):
    from ptxbench.agent.cli.cmd_eval import _print_rich
    from ptxbench.tools.results import CompileResult, EvalResult, KernelResources

    names = ["attention_bwd_dq_kernel_variant_a", "attention_bwd_dq_kernel_variant_b"]
    result = EvalResult(workload=W, status="COMPILED", compile=CompileResult(
        status="ok", arch="sm_90a", kernels={n: KernelResources(name=n, sass_opcodes={"HGMMA": 4}) for n in names}))
    monkeypatch.setenv("COLUMNS", "40")
    _print_rich(result)
    cells = "".join(line.split("│")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("│"))
    assert all(n in cells for n in names), cells


def test_every_option_of_every_command_says_what_it_does():
    """`ptxbench profile --help` listed --arch with no words; every option a command takes carries its help."""
    import typer

    from ptxbench.agent.cli.main import app

    group = typer.main.get_command(app)
    options = [(name, p) for name, cmd in group.commands.items() for p in cmd.params if p.param_type_name == "option"]
    assert len(options) > 50  # typer carries its own click: an isinstance check on click's classes matched none
    bare = [f"{name} {'/'.join(p.opts)}" for name, p in options
            if not p.hidden and not (p.help or "").strip() and "--help" not in p.opts]
    assert bare == []
