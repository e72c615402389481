"""The CLI's live view colours the verdicts it prints and nothing a model wrote; a run folder that cannot be created
and a GPU run on a machine with no usable GPU are each one line on stderr, exit status 2, before anything is
written or any GPU worker starts (agent/cli/README.md)."""
from __future__ import annotations

from pathlib import Path
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


def _files(root):
    return {p.relative_to(root) for p in root.rglob("*")}


def _one_error_line(result, status: int, words: str) -> None:
    text = result.output
    assert "Traceback" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == status, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], text


def _refuse(path):
    raise PermissionError(13, "Permission denied")


def _unwritable(tmp_path, monkeypatch):
    """A folder nothing can be created in: a read-only folder, or (as root, who writes there anyway) a path in sysfs;
    where neither refuses, a folder whose write probe is made to fail."""
    import os
    from pathlib import Path

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        (locked / "probe").mkdir()
    except OSError:
        return locked / "run"
    (locked / "probe").rmdir()
    sysfs = Path("/sys/ptxbench-no-such-folder")
    if os.path.isdir("/sys"):
        try:
            sysfs.mkdir()
        except OSError:
            return sysfs
        sysfs.rmdir()
    monkeypatch.setattr("ptxbench.agent.cli.preflight.write_probe", _refuse)
    return tmp_path / "refused" / "run"


@pytest.mark.parametrize("command", ["optimize", "bench"])
@pytest.mark.parametrize("how", ["--run-dir", "PTXBENCH_RUNS"])
def test_a_run_folder_that_cannot_be_made_is_one_line_before_any_work(workdir, monkeypatch, command, how):
    from ptxbench.tools.evaluate import LocalEvaluator

    target = _unwritable(workdir, monkeypatch)
    monkeypatch.setattr(LocalEvaluator, "pool", property(lambda self: pytest.fail("a GPU worker was started")))
    argv = {"optimize": ["optimize", W, "--no-gpu", "--turns", "1", "--quiet"],
            "bench": ["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--trajectories", "1",
                      "--turns", "1", "--no-report"]}[command]
    if how == "--run-dir":
        argv += ["--run-dir", str(target)]
    else:
        monkeypatch.setenv("PTXBENCH_RUNS", str(target))
    before = _files(workdir)
    result = CliRunner().invoke(app, argv)
    shown = target if how == "--run-dir" or command == "optimize" else target / "bench-"
    _one_error_line(result, 2, f"cannot create run folder {shown}")
    assert _files(workdir) == before


def test_a_run_folder_already_there_but_unwritable_is_not_said_to_be_uncreatable(workdir, monkeypatch):
    """A folder already there cannot be "created": the line says it cannot be written into (as root too: the probe is
    made to fail)."""
    target = workdir / "ro"
    target.mkdir()
    monkeypatch.setattr("ptxbench.agent.cli.preflight.write_probe", _refuse)
    result = CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--turns", "1", "--quiet", "--run-dir", str(target)])
    _one_error_line(result, 2, f"cannot write into run folder {target}: Permission denied")
    assert target.is_dir() and list(target.iterdir()) == []


@pytest.fixture
def no_usable_gpu(monkeypatch):
    """This machine as one without a usable GPU, also on a GPU machine: nothing in sight, no driver; a GPU worker
    started anyway fails the test (the refusal must come without one)."""
    from ptxbench.tools.evaluate import LocalEvaluator

    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: None)
    monkeypatch.setattr("ptxbench.tools.gpu.pool.missing_gpu", lambda: "no NVIDIA driver on this machine (test)")
    monkeypatch.setattr(LocalEvaluator, "pool", property(lambda self: pytest.fail("a GPU worker was started")))


def _example_run(tmp_path):
    import shutil
    from pathlib import Path

    run = tmp_path / "example"
    shutil.copytree(Path(__file__).resolve().parents[2] / "docs/examples/optimize-gemm-tuner", run)
    return run


@pytest.mark.parametrize("argv,words", [
    (["optimize", W, "--turns", "1", "--run-dir", "run"], "pass --no-gpu"),
    (["optimize", W, "--turns", "1"], "pass --no-gpu"),
    (["synth-repairs", "--run-dir", "run"], "`--list` shows the bug classes"),
    (["bench", "--models", "builtin/tuner", "--workloads", W, "--trajectories", "1", "--run-dir", "run"], "pass --no-gpu"),
    # the repair track's notes (builtin models at one trajectory per task) came first: two lines for one refusal
    (["bench", "--track", "repair", "--models", "builtin/reference", "--run-dir", "run"], "pass --no-gpu"),
    (["eval", W, "GOOD"], "pass --no-gpu"),
    (["score", "EXAMPLE", "--re-evaluate"], "pass --no-gpu to re-evaluate"),
    (["score", "EXAMPLE", "--re-evaluate", "--out-run", "run"], "pass --no-gpu to re-evaluate"),
], ids=lambda a: " ".join(a)[:40] if isinstance(a, list) else None)
def test_a_gpu_run_without_a_usable_gpu_is_refused_up_front(workdir, no_usable_gpu, argv, words):
    from pathlib import Path

    good = str(Path(__file__).resolve().parents[2] / "tests/data/agent/good.ptx")
    example = str(_example_run(workdir)) if "EXAMPLE" in argv else ""
    argv = [good if a == "GOOD" else example if a == "EXAMPLE" else a for a in argv]
    before = _files(workdir)
    result = CliRunner().invoke(app, argv)
    _one_error_line(result, 2, "GPU")
    assert "no NVIDIA driver on this machine (test)" in result.output and words in result.output, result.output
    assert _files(workdir) == before, "a refused run left files behind"


@pytest.mark.parametrize("command", ["optimize", "bench"])
def test_a_resumed_gpu_run_where_there_is_none_is_not_sent_to_no_gpu(workdir, no_usable_gpu, command):
    """Resuming a GPU run on a machine without one said "pass --no-gpu to compile only", and --no-gpu with --resume is
    refused (a resumed run goes on as it started): the line now says where it can go on."""
    from ptxbench.agent.bench.matrix import BenchConfig, expand
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.records.rundir import write_manifest

    if command == "optimize":
        config = OptimizeConfig(workload=W, model="builtin/tuner", turns=1)
        ids, argv = [config.trajectory_id()], ["optimize", "--resume", "r"]
    else:
        config = BenchConfig(models=["builtin/tuner"], workloads=[W], trajectories=1, turns=1)
        ids, argv = [c.trajectory_id() for c in expand(config)], ["bench", "--resume", "--run-dir", "r"]
    write_manifest(workdir / "r", {"command": command, "config": config.model_dump(mode="json"), "trajectories": ids})
    before = _files(workdir)
    result = CliRunner().invoke(app, argv)
    _one_error_line(result, 2, "GPU")
    assert "resume it on a machine with a GPU, or start a new run with --no-gpu" in result.output, result.output
    assert "pass --no-gpu" not in result.output, result.output
    given = CliRunner().invoke(app, [*argv, "--no-gpu"])  # what the old line sent the user to: refused, and says why
    _one_error_line(given, 2, "--no-gpu")
    assert "True" not in given.output and "False" not in given.output, given.output
    assert _files(workdir) == before


def test_a_resumed_no_gpu_run_goes_on_where_there_is_no_gpu(workdir, monkeypatch):
    from ptxbench.tools.evaluate import LocalEvaluator

    monkeypatch.setattr("ptxbench.tools.gpu.pool.visible_devices", lambda: None)
    monkeypatch.setattr("ptxbench.tools.gpu.pool.missing_gpu", lambda: "no NVIDIA driver on this machine (test)")
    monkeypatch.setattr(LocalEvaluator, "pool", property(lambda self: pytest.fail("a GPU worker was started")))
    result = CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--turns", "2", "--run-dir", "run", "--quiet"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["optimize", "--resume", "run", "--quiet"])
    assert result.exit_code == 0 and "turn_limit" in result.output, result.output


def _under_file_size_limit(argv: list[str], cwd, limit: int):
    """argv as a child process whose files may not grow past `limit` bytes (as a full disk: writes fail with EFBIG,
    SQLite says 'disk I/O error')."""
    import resource
    import signal
    import subprocess
    import sys

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of the process being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "ptxbench.agent", *argv], cwd=cwd, preexec_fn=limited,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("limit", [20_000, 200_000])  # the checkpoint database's first write; a later turn's
def test_storage_that_gives_out_mid_run_is_one_line_naming_the_resume(tmp_path, limit):
    """A full disk (here a file-size limit) under a running optimize: SQLite's 'disk I/O error' or the OS's EFBIG came
    out as a traceback. One line says what gave out and the --resume that continues the run; exit status 1."""
    done = _under_file_size_limit(["optimize", W, "--no-gpu", "--turns", "30", "--run-dir", "r", "--quiet"], tmp_path, limit)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: cannot write the run any more: ") and line.endswith("resume with: ptxbench optimize --resume r")


@pytest.mark.parametrize("limit", [20_000, 200_000])
def test_a_bench_whose_storage_gives_out_stops_in_one_line_naming_the_resume(tmp_path, limit):
    """Under a bench the trajectories met the full disk one by one, each an infra failure after its retries, and the
    bench went on to the report (whose failure was then the only line said). It stops at the first one now."""
    done = _under_file_size_limit(["bench", "--models", "builtin/tuner", "--workloads", W, "--turns", "2",
                                   "--trajectories", "2", "--run-dir", "b", "--no-gpu"], tmp_path, limit)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("error: cannot write the run any more: ") and "(room, permissions)" in last, last
    assert last.endswith("resume with: ptxbench bench --resume --run-dir b"), last


def test_a_bench_whose_report_finds_no_room_says_so_in_one_line(tmp_path, monkeypatch):
    import errno

    import ptxbench.agent.report as report

    def no_room(run_dir, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(run_dir) / "report" / "index.html"))

    monkeypatch.setattr(report, "write_report", no_room)
    result = CliRunner().invoke(app, ["bench", "--models", "builtin/tuner", "--workloads", W, "--turns", "1",
                                      "--trajectories", "1", "--run-dir", str(tmp_path / "b"), "--no-gpu"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "the run is recorded, but its report could not be written: No space left on device" in result.output
    assert f"ptxbench report {tmp_path / 'b'}" in result.output.replace("\n", "")


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_stop_while_the_finished_bench_writes_its_report_says_the_run_is_whole(tmp_path, monkeypatch, stop):
    """Ctrl-C (or SIGTERM) after the last trajectory, while the tables and the report were made, ended with no line at
    all (a half-written report folder, no index.html): the run is whole, and the line names the report to write."""
    import ptxbench.agent.report as report
    from ptxbench.agent.cli.sigterm import Terminated

    def stopped(run_dir, *a, **k):
        raise Terminated() if stop == "sigterm" else KeyboardInterrupt()

    monkeypatch.setattr(report, "write_report", stopped)
    run = tmp_path / "b"
    result = CliRunner().invoke(app, ["bench", "--models", "builtin/tuner", "--workloads", W, "--turns", "1",
                                      "--trajectories", "1", "--run-dir", str(run), "--no-gpu"])
    assert result.exit_code == (143 if stop == "sigterm" else 130), result.output
    last = [line for line in result.output.splitlines() if line.strip()][-1]
    assert last == (f"interrupted{' by SIGTERM' if stop == 'sigterm' else ''} while the finished run was scored and "
                    f"reported (every trajectory is recorded): ptxbench report {run} writes its report"), last


def test_only_storage_failures_are_said_as_such():
    import errno
    import sqlite3

    from ptxbench.agent.cli.preflight import storage_failure

    assert storage_failure(OSError(errno.ENOSPC, "No space left on device", "/runs/r/manifest.json")) == \
        "No space left on device (/runs/r/manifest.json)"
    assert "disk I/O error" in storage_failure(sqlite3.OperationalError("disk I/O error"))
    assert storage_failure(OSError(errno.ENOENT, "No such file or directory")) is None  # a bug keeps its traceback
    assert storage_failure(OSError(errno.EIO, "Input/output error")) is None  # a terminal gone away, not the disk
    assert storage_failure(OSError(errno.EIO, "Input/output error", "/runs/r/x.jsonl")) is not None
    assert storage_failure(sqlite3.OperationalError("no such table: checkpoints")) is None
    assert storage_failure(ValueError("x")) is None


@pytest.mark.parametrize("manifest,words", [("not json\n", "manifest.json: not readable as JSON"),
                                            ("[1, 2]\n", "manifest.json: a JSON list, expected an object"),
                                            ('{"name": "my app", "icons": []}\n', "holds a foreign run"),
                                            ("{}\n", "trajectories: not a folder")],
                         ids=["not json", "a list", "a web app's manifest", "trajectories a file"])
@pytest.mark.parametrize("argv", [["optimize", W, "--no-gpu", "--quiet", "--run-dir", "d"],
                                  ["bench", "--models", "builtin/tuner", "--workloads", W, "--no-gpu", "--run-dir", "d"],
                                  ["bench", "--resume", "--run-dir", "d"],
                                  ["synth-repairs", "smoke_gemm_bf16_m256_n256_k512", "--run-dir", "d"]],
                         ids=["optimize", "bench", "bench --resume", "synth-repairs"])
def test_a_run_dir_whose_manifest_is_damaged_or_foreign_is_one_line_and_left_as_it_was(tmp_path, monkeypatch, argv,
                                                                                       manifest, words):
    """A damaged manifest.json was a DamagedRecord traceback, and optimize made trajectories/ in the folder before it
    refused a foreign one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "manifest.json").write_text(manifest)
    if manifest == "{}\n":  # no manifest to read: `trajectories` a file (FileExistsError or DamagedRecord, both traced)
        (tmp_path / "d" / "manifest.json").unlink()
        (tmp_path / "d" / "trajectories").write_text("a file\n")
    result = CliRunner().invoke(app, argv)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    if argv[0] != "bench" or words.startswith("manifest"):  # bench's own words otherwise ("already holds a run")
        assert words in lines[0], lines[0]
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["trajectories" if manifest == "{}\n" else "manifest.json"]


@pytest.mark.parametrize("argv", [
    ["optimize", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1", "--run-dir"],
    ["bench", "--models", "builtin/tuner", "--workloads", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1",
     "--trajectories", "1", "--run-dir"],
    ["synth-repairs", "smoke_gemm_bf16_m256_n256_k512", "--run-dir"],
])
def test_a_run_is_not_written_among_other_files(tmp_path, argv):
    """`--run-dir .` (or a home folder) put manifest.json, checkpoints.sqlite and trajectories/ among the user's own
    files; a folder that holds other files and no run is refused before anything is written."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    mine = tmp_path / "home"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    (mine / "thesis").mkdir()
    out = CliRunner().invoke(app, [*argv, str(mine)])
    assert out.exit_code == 2, out.output
    assert f"--run-dir {mine} holds other files (notes.txt, thesis) and no run" in out.output
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "thesis"]


@pytest.mark.parametrize("argv", [
    ["optimize", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1", "--quiet", "--run-dir"],
    ["bench", "--models", "builtin/tuner", "--workloads", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1",
     "--trajectories", "1", "--run-dir"],
], ids=["optimize", "bench"])
@pytest.mark.parametrize("where", ["report", "trajectories/new", "report/deeper"])
def test_a_run_is_not_written_into_a_report_or_inside_another_run(tmp_path, argv, where):
    """A report's folder holds a trajectories/ and was taken for a run (manifest.json and trajectories went among its
    pages), and a folder inside a run took a run of its own among that run's records."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = _example_run(tmp_path)
    assert CliRunner().invoke(app, ["report", str(run)]).exit_code == 0
    before = _files(run)
    target = run / where
    out = CliRunner().invoke(app, [*argv, str(target)])
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert out.exit_code == 2 and len(lines) == 1, out.output
    assert lines[0] == (f"error: --run-dir {target} is a report (ptxbench report wrote it): name a new or empty folder "
                        "for the run" if where == "report" else
                        f"error: --run-dir {target} is inside the run {run}: name a folder outside it"), lines[0]
    assert _files(run) == before


@pytest.mark.parametrize("argv", [
    ["optimize", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1", "--quiet", "--run-dir"],
    ["bench", "--models", "builtin/tuner", "--workloads", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1",
     "--trajectories", "1", "--run-dir"],
], ids=["optimize", "bench"])
@pytest.mark.parametrize("given", ["link/new", "link"])
def test_a_run_dir_linked_into_another_run_is_refused(tmp_path, monkeypatch, argv, given):
    """The run above a --run-dir was looked for in the path as typed: a link into a run's trajectories/ put a run of
    its own among that run's records, as export's --out (inputs.outside_runs) resolves first."""
    run = _example_run(tmp_path)
    (tmp_path / "link").symlink_to(run / "trajectories")
    monkeypatch.chdir(tmp_path)
    before = _files(run)
    out = CliRunner().invoke(app, [*argv, given])
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert out.exit_code == 2 and len(lines) == 1, out.output
    assert lines[0] == f"error: --run-dir {given} is inside the run {run.resolve()}: name a folder outside it", lines[0]
    assert _files(run) == before


def test_a_run_dir_whose_dots_lead_out_of_a_run_is_not_inside_it(tmp_path):
    """'RUN/trajectories/../../beside' names a folder beside the run, not in it: read as typed, RUN was among its
    parents and the folder was refused as inside the run."""
    from ptxbench.agent.cli import inputs

    run = _example_run(tmp_path)
    inputs.no_other_files(run / "trajectories" / ".." / ".." / "beside", "--run-dir")  # no refusal


def test_a_run_folder_an_empty_one_or_one_of_hidden_files_takes_a_run(tmp_path):
    from ptxbench.agent.cli import inputs

    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / ".DS_Store").write_text("")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trajectories").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("")
    (tmp_path / "empty").mkdir()
    for name in ("hidden", "run", "empty", "new"):
        inputs.no_other_files(tmp_path / name, "--run-dir")  # no refusal


@pytest.mark.parametrize("flag", ["--max-wall", "--max-tokens", "--max-cost"])
def test_a_budget_of_zero_is_refused(tmp_path, flag):
    """A budget of 0 ran no turn and ended as a finished run with exit 0, while --turns 0 was refused."""
    out = CliRunner().invoke(app, ["optimize", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", flag, "0",
                                   "--run-dir", str(tmp_path / "r")])
    # --max-wall and --max-cost are checked with the other number options (cmd_optimize.check_numbers), in its words
    said = (f"{flag} 0", "greater than 0") if flag == "--max-tokens" else (f"{flag} must be positive, got 0.0",)
    assert out.exit_code == 2 and all(words in out.output for words in said), out.output
    assert not (tmp_path / "r").exists()


def test_a_re_evaluation_goes_under_the_runs_root_and_names_out_run_where_it_cannot(workdir, monkeypatch):
    """`score RUN --re-evaluate` wrote its new run beside RUN, not under $PTXBENCH_RUNS as every other run (the
    README's word): into docs/examples/ for the shipped example, and, for a run on a read-only mount, the line was the
    OSError of the manifest, exit status 1, with no word of --out-run."""
    import shutil

    from ptxbench.agent.cli.inputs import write_probe

    run = _example_run(workdir)
    done = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu"])
    assert done.exit_code == 0, done.output
    (new,) = (workdir / "runs").iterdir()
    assert new.name.startswith(f"{run.name}-reeval-") and (new / "manifest.json").is_file()
    assert not list(workdir.glob(f"{run.name}-reeval-*"))
    shutil.rmtree(new)  # a second re-evaluation within the same second would name the same folder
    monkeypatch.setattr("ptxbench.agent.cli.preflight.write_probe",  # the compile cache stays writable
                        lambda path: _refuse(path) if "-reeval-" in str(path) else write_probe(path))
    before = _files(workdir)
    result = CliRunner().invoke(app, ["score", str(run), "--re-evaluate", "--no-gpu"])
    _one_error_line(result, 2, f"cannot create run folder {workdir / 'runs' / run.name}-reeval-")
    assert result.output.rstrip().endswith("Permission denied; name a folder you can write with --out-run"), \
        result.output
    assert _files(workdir) == before


def test_re_evaluations_of_two_runs_of_one_name_go_to_two_folders(workdir):
    import shutil

    example = _example_run(workdir)
    for parent in ("a", "b"):
        shutil.copytree(example, workdir / parent / "run")
    CliRunner().invoke(app, ["score", "a/run", "b/run", "--re-evaluate", "--no-gpu"])  # then scored: copies, refused
    names = sorted(p.name for p in (workdir / "runs").iterdir())
    assert len(names) == 2 and names[1] == names[0] + "-2", names


@pytest.mark.parametrize("undo", [False, True])
def test_sealing_a_run_that_cannot_be_written_is_one_line_and_leaves_it_as_it_was(workdir, monkeypatch, undo):
    """The line named a temporary file inside a trajectory folder and read as a damaged run, exit status 1."""
    run = _example_run(workdir)
    if undo:
        assert CliRunner().invoke(app, ["seal", str(run)]).exit_code == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    monkeypatch.setattr("ptxbench.agent.cli.preflight.write_probe", _refuse)
    result = CliRunner().invoke(app, ["seal", str(run), *(["--undo"] if undo else [])])
    _one_error_line(result, 2, f"cannot write into run folder {run}: Permission denied")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("how", ["--run-dir", "PTXBENCH_RUNS"])
def test_a_tilde_left_unexpanded_is_the_home_folder_not_a_folder_named_tilde(workdir, monkeypatch, how):
    """`--run-dir '~/runs/x'` (quoted, or from a config file) and `PTXBENCH_RUNS=~/runs` in a unit file or .env, where
    no shell expands it, made a folder named `~` in the working directory (which `rm -rf ~` then "cleans up")."""
    home = workdir / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    argv = ["optimize", W, "--no-gpu", "--turns", "1", "--quiet"]
    if how == "--run-dir":
        argv += ["--run-dir", "~/runs/x"]
    else:
        monkeypatch.setenv("PTXBENCH_RUNS", "~/runs")
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert not (workdir / "~").exists()
    assert [p.name for p in (home / "runs").iterdir()] != []
