"""What the CLI says where a user would otherwise be misled: an --out that cannot be made, an export folder holding
another dataset, every filter that kept a trajectory out, and a profile that could not be taken (on stderr)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from export_runs import build_run, write_trajectory
from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
W = "smoke_gemm_bf16_m256_n256_k512"
UNMAKEABLE = "/proc/ptxbench-nope"  # /proc takes no new folders, not even root's


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart by itself
        return CliRunner()


@pytest.fixture
def run(tmp_path):
    return build_run(tmp_path)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("argv", [["export", "{run}", "--recipe", "kernelgen", "--out", UNMAKEABLE],
                                  ["report", "{run}", "--out", UNMAKEABLE + "/sub"]])
def test_an_out_folder_that_cannot_be_made_says_so(run, argv):
    result = CliRunner().invoke(app, [a.format(run=run) for a in argv])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: cannot create --out folder /proc/"), lines[0]


def _export(run: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["export", str(run), "--recipe", "kernelgen", "--out", str(out), "--format", "jsonl",
                                    *extra])


def test_export_adds_to_a_folder_of_notes_or_an_earlier_export_but_not_to_other_data(run, tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    (out / "notes.txt").write_text("not data\n")
    assert _export(run, out).exit_code == 0
    assert (out / "notes.txt").read_text() == "not data\n" and (out / "train.jsonl").is_file()
    again = _export(run, out, "--format", "parquet")  # an earlier export's splits are replaced, not mixed
    assert again.exit_code == 0, again.output
    assert not (out / "train.jsonl").exists() and (out / "train.parquet").is_file()

    other = tmp_path / "other"
    (other / "old").mkdir(parents=True)
    (other / "old" / "train-0.jsonl").write_text('{"text": "another dataset"}\n')
    refused = _export(run, other)
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert refused.exit_code == 2 and len(lines) == 1 and "old/train-0.jsonl" in lines[0], refused.output
    assert sorted(p.name for p in other.rglob("*")) == ["old", "train-0.jsonl"]  # nothing written or removed

    bare = tmp_path / "bare"  # split files with no export manifest: someone else's, never removed
    bare.mkdir()
    (bare / "train.jsonl").write_text('{"text": "mine"}\n')
    assert _export(run, bare).exit_code == 2 and (bare / "train.jsonl").read_text() == '{"text": "mine"}\n'


def test_a_held_out_skip_also_says_what_keeping_it_would_not_change(run):
    write_trajectory(run, "h", W, [("h", {"workload": W, "status": "COMPILED"}, "compiled, never ran")], held_out=True)
    out = run.parent / "kg"
    shown = _export(run, out)
    assert shown.exit_code == 0, shown.output
    # W is a smoke workload: held out as the set column of `ptxbench workloads --all` shows, which the line says
    assert ("2 held-out trajectories skipped: of the held-out and smoke workloads (`ptxbench workloads --all`) and held-out "
            "bug classes; --include-held-out keeps them") in " ".join(shown.output.split())
    assert "1 of them would give no row even so: the kernel only compiled (--no-gpu), never ran" in shown.output
    kept = json.loads((out / "export_manifest.json").read_text())["counts"]
    assert sum(kept.values()) == 2  # the message changed, the rows did not (t1's turns 2 and 3)
    included = _export(run, run.parent / "kg2", "--include-held-out")
    assert "1 trajectories gave no row: the kernel only compiled (--no-gpu), never ran" in included.output


def test_a_profile_that_cannot_be_taken_prints_its_reason_on_stderr(monkeypatch):
    import ptxbench.tools.profile.runner as runner

    monkeypatch.setattr(runner, "find_ncu", lambda: None)
    monkeypatch.setattr("ptxbench.agent.cli.preflight.no_gpu_reason", lambda: None)  # a GPU machine without ncu
    result = _runner().invoke(app, ["profile", W, str(ROOT / "tests/data/agent/good.ptx")])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "no profile: Nsight Compute (ncu) was not found" in result.stderr


def _refuse(path):
    raise PermissionError(13, "Permission denied")


def test_a_read_only_out_folder_is_said_up_front(run, tmp_path, monkeypatch):
    import os

    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        if os.access(out, os.W_OK):  # root writes into a read-only folder: its probe is made to fail instead
            monkeypatch.setattr("ptxbench.agent.cli.inputs.write_probe", _refuse)
        result = CliRunner().invoke(app, ["report", str(run), "--out", str(out)])
    finally:
        out.chmod(0o755)
    # a folder already there is not to be created, only written into (the default report folder of a read-only run too)
    assert result.exit_code == 2 and result.output.startswith(f"error: cannot write into --out folder {out}: "), \
        result.output


def test_a_default_report_folder_that_cannot_be_written_is_said_up_front(run, monkeypatch):
    """No --out: RUN/report goes through the same check (a read-only run folder), not a Permission denied exit 1 on
    the first file written; as root too (the probe is made to fail)."""
    monkeypatch.setattr("ptxbench.agent.cli.inputs.write_probe", _refuse)
    result = CliRunner().invoke(app, ["report", str(run)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == f"error: cannot create report folder {run / 'report'}: Permission denied", lines[0]
    assert not (run / "report").exists()  # the folder made for the probe is not left behind
    (run / "report").mkdir()
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.output.strip() == f"error: cannot write into report folder {run / 'report'}: Permission denied"


def test_profile_on_a_machine_without_a_gpu_says_so_and_what_runs_here(tmp_path, monkeypatch):
    """Not "ncu was not found (set PTXBENCH_NCU)" after a compile, where setting it would change nothing."""
    monkeypatch.setattr("ptxbench.agent.cli.preflight.no_gpu_reason", lambda: "no NVIDIA driver on this machine")
    monkeypatch.chdir(tmp_path)
    good = str(ROOT / "tests/data/agent/good.ptx")
    result = CliRunner().invoke(app, ["profile", W, good, "--keep", "kept"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == (f"error: no GPU to evaluate on (no NVIDIA driver on this machine); Nsight Compute profiles on a "
                        f"GPU; `ptxbench compile {good} --workload {W}` checks the file here"), lines[0]
    assert list(tmp_path.iterdir()) == []


def test_report_out_refuses_a_folder_whose_index_or_summary_no_report_wrote(run, tmp_path):
    """`report RUN --out .` in a site or notes folder replaced its index.html / summary.md without a word; an earlier
    report's folder is written again."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "summary.md").write_text("my notes\n")
    refused = CliRunner().invoke(app, ["report", str(run), "--out", str(site)])
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert refused.exit_code == 2 and len(lines) == 1, refused.output
    assert lines[0].startswith(f"error: --out {site} holds summary.md, which no report wrote"), lines[0]
    assert sorted(p.name for p in site.iterdir()) == ["summary.md"] and (site / "summary.md").read_text() == "my notes\n"

    earlier = tmp_path / "earlier"
    for attempt in range(2):
        result = CliRunner().invoke(app, ["report", str(run), "--out", str(earlier)])
        assert result.exit_code == 0, (attempt, result.output)


@pytest.mark.parametrize("argv", [["score", "{tid}"], ["report", "{run}/manifest.json"], ["seal", "{tid}/kernels"],
                                  ["optimize", "--resume", "{tid}"], ["optimize", "--resume", "{tid}/trajectory.jsonl"]],
                         ids=["score a trajectory", "report a manifest", "seal a kernels folder", "resume a trajectory",
                              "resume a log"])
def test_a_path_inside_a_run_names_the_run_to_give(tmp_path, argv):
    """A trajectory folder, its log or the manifest is what a newcomer names for the run: the line says which run."""
    import shutil

    example = ROOT / "docs/examples/optimize-gemm-tuner"
    run = tmp_path / "run"
    shutil.copytree(example, run)
    tid = next((run / "trajectories").iterdir())
    result = CliRunner().invoke(app, [a.format(run=run, tid=tid) for a in argv])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].endswith(f"; it is in the run {run}: give {run}"), lines[0]


@pytest.mark.parametrize("argv", [["score", "{runs}"], ["report", "{runs}"], ["seal", "{runs}"],
                                  ["export", "{runs}", "--recipe", "kernelgen", "--out", "{out}"],
                                  ["bench", "--resume", "--run-dir", "{runs}"]],
                         ids=["score", "report", "seal", "export", "bench resume"])
def test_the_folder_of_runs_itself_names_a_run_to_give(tmp_path, argv):
    """`ptxbench score runs` (the folder the runs go into, not a run) is what a newcomer types first: the line names
    one of the runs in it."""
    import shutil

    runs = tmp_path / "runs"
    for name in ("20261201-000000_a", "20261202-000000_b"):
        shutil.copytree(ROOT / "docs/examples/optimize-gemm-tuner", runs / name)
    result = CliRunner().invoke(app, [a.format(runs=runs, out=tmp_path / "out") for a in argv])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].endswith(f"is not a run folder: expected manifest.json, or trajectories/ holding a trajectory, in "
                             f"it; it holds 2 runs: name one, e.g. {runs / '20261202-000000_b'}"), lines[0]
    assert not (tmp_path / "out").exists()


def test_a_run_named_as_resume_takes_it_names_its_path_under_the_runs_root(tmp_path, monkeypatch):
    """`optimize --resume NAME` finds NAME under $PTXBENCH_RUNS; score, report, export and seal took NAME as a path and
    said only that there was no run folder there."""
    import shutil

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_RUNS", str(tmp_path / "elsewhere"))
    shutil.copytree(ROOT / "docs/examples/optimize-gemm-tuner", tmp_path / "elsewhere" / "r1")
    for argv in (["score", "r1"], ["report", "r1"], ["seal", "r1"], ["export", "r1", "--recipe", "fixit", "--out", "o"]):
        result = CliRunner().invoke(app, argv)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0] == f"error: no run folder at r1; there is one under the runs root: give {tmp_path}/elsewhere/r1"
    missing = CliRunner().invoke(app, ["score", "r2"])
    assert missing.output.strip() == "error: no run folder at r2"


def test_version_and_the_short_help_option():
    """`ptxbench --version` and `-h` were unknown options (one line each, pointing at --help)."""
    from importlib.metadata import version

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"ptxbench {version('ptxbench')}"
    for argv in (["-h"], ["eval", "-h"], ["optimize", "-h"]):
        out = CliRunner().invoke(app, argv)
        assert out.exit_code == 0 and "Usage:" in out.output, argv


@pytest.mark.parametrize("argv", [["score", "{rep}"], ["report", "{rep}", "--out", "{out}"], ["seal", "{rep}"],
                                  ["export", "{rep}", "--recipe", "kernelgen", "--out", "{out}"]],
                         ids=["score", "report", "seal", "export"])
@pytest.mark.parametrize("where", ["inside", "outside"])
def test_a_report_folder_is_no_run(tmp_path, argv, where):
    """A report's folder holds a trajectories/ of pages: taken for a run it scored, reported, sealed and exported
    nothing, exit status 0, as if the run had no trajectory. It is refused, naming the run where the report sits in one."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ROOT / "docs/examples/optimize-gemm-tuner", run)
    rep = run / "report" if where == "inside" else tmp_path / "rep"
    assert CliRunner().invoke(app, ["report", str(run), "--out", str(rep)]).exit_code == 0
    result = CliRunner().invoke(app, [a.format(rep=rep, out=tmp_path / "out") for a in argv])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == (f"error: {rep} is a report (ptxbench report wrote it), not a run: give the run folder it was "
                        f"made from" + (f"; it is in the run {run}: give {run}" if where == "inside" else "")), lines[0]
    assert not (tmp_path / "out").exists()


def test_a_trajectories_folder_with_no_trajectory_and_no_manifest_is_no_run(tmp_path):
    folder = tmp_path / "pages"
    (folder / "trajectories").mkdir(parents=True)
    (folder / "trajectories" / "a.html").write_text("<p>")
    result = CliRunner().invoke(app, ["score", str(folder)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and lines == [f"error: {folder} is not a run folder: expected manifest.json, or "
                                               "trajectories/ holding a trajectory, in it"], result.output


def test_a_resumed_optimize_shows_its_workload_and_that_it_resumes(tmp_path, monkeypatch):
    """The live view of `optimize --resume RUN` was titled with the run's path where the workload goes, and its
    caption said "starting" to the end when the run had no turn left."""
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["optimize", W, "--no-gpu", "--turns", "1", "--run-dir", "myrun",
                                    "--quiet"]).exit_code == 0
    result = CliRunner().invoke(app, ["optimize", "--resume", "myrun"])
    assert result.exit_code == 0, result.output
    assert f"ptxbench optimize {W}" in result.output and "ptxbench optimize myrun" not in result.output, result.output
    assert "resuming myrun" in result.output and "starting" not in result.output, result.output


def test_separate_by_with_a_kernelgen_export_is_refused_not_dropped(tmp_path):
    """--separate-by chooses what a Fixit train row may not share with a test row; beside --recipe kernelgen it was
    dropped without a word, as --teacher was before it was refused."""
    out = tmp_path / "kg"
    result = CliRunner().invoke(app, ["export", str(ROOT / "docs/examples/optimize-gemm-tuner"), "--recipe", "kernelgen",
                                      "--out", str(out), "--separate-by", "completion"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: --separate-by "), result.output
    assert "--recipe fixit" in lines[0] and not out.exists()


@pytest.mark.parametrize("argv", [["optimize", W, "--no-gpu", "--turns", "1", "--quiet", "--run-dir", "{out}"],
                                  ["bench", "--models", "builtin/tuner", "--workloads", W, "--trajectories", "1",
                                   "--turns", "1", "--no-gpu", "--run-dir", "{out}"]], ids=["optimize", "bench"])
def test_restart_trajectory_without_resume_is_refused_not_dropped(tmp_path, argv):
    """--restart-trajectory acts on the trajectories a --resume cannot continue: a new run went on without a word."""
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [a.format(out=out) for a in argv] + ["--restart-trajectory"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and lines == ["error: --restart-trajectory goes with --resume: a new run has no "
                                               "trajectory to set aside; drop it"], result.output
    assert not out.exists()


def test_a_report_is_not_written_into_an_export_folder(tmp_path):
    """An export's folder took a report: its score.json and pages went among the dataset's files, and the next export
    into that folder was refused as one holding data files no export wrote."""
    out = tmp_path / "data"
    example = str(ROOT / "docs/examples/optimize-gemm-tuner")
    assert CliRunner().invoke(app, ["export", example, "--recipe", "kernelgen", "--out", str(out)]).exit_code == 0
    before = sorted(p.name for p in out.iterdir())
    result = CliRunner().invoke(app, ["report", example, "--out", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and lines == [f"error: --out {out} holds an export (export_manifest.json): a report "
                                               "there would go among its data files; name a new folder"], result.output
    assert sorted(p.name for p in out.iterdir()) == before
    assert CliRunner().invoke(app, ["export", example, "--recipe", "kernelgen", "--out", str(out)]).exit_code == 0


@pytest.mark.parametrize("what", ["empty folder", "file"])
def test_an_hf_tokenizer_path_that_holds_no_tokenizer_says_so(tmp_path, what):
    """hf:<folder> of no tokenizer ended on transformers' first line, "Couldn't instantiate the backend tokenizer
    from one of:", cut at its colon."""
    path = tmp_path / "tok"
    path.mkdir() if what == "empty folder" else path.write_text("{}")
    result = CliRunner().invoke(app, ["export", str(ROOT / "docs/examples/optimize-gemm-tuner"), "--recipe",
                                      "kernelgen", "--out", str(tmp_path / "out"), "--tokenizer", f"hf:{path}"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --tokenizer 'hf:{path}' cannot be loaded: {path} holds no tokenizer files "
                               "(tokenizer.json, tokenizer_config.json"), lines[0]
    assert "save_pretrained" in lines[0] and not (tmp_path / "out").exists()


def test_a_teachers_missing_key_or_server_names_the_teachers_options(tmp_path, monkeypatch):
    """The lines were optimize's: a teacher with no key was told to use builtin/tuner (which writes no reasoning, and
    --teacher refuses), and one whose local server did not answer to give --api-base, an option export has not."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OLLAMA_API_BASE", "http://127.0.0.1:9")
    argv = ["export", str(ROOT / "docs/examples/synth-repairs/run"), "--recipe", "fixit", "--no-require-target",
            "--out", str(tmp_path / "out"), "--teacher"]
    keyless = CliRunner().invoke(app, [*argv, "openai/gpt-5"])
    assert keyless.exit_code == 2 and "builtin/" not in keyless.output, keyless.output
    assert keyless.output.strip().endswith("needs OPENAI_API_KEY, which is not set: export it, or give a --teacher "
                                           "that needs no key (a server of your own, with --teacher-api-base)"), \
        keyless.output
    unreached = CliRunner().invoke(app, [*argv, "ollama/qwen3"])
    assert unreached.exit_code == 1, unreached.output
    assert unreached.output.strip().endswith("($OLLAMA_API_BASE; --teacher-api-base names another server)"), \
        unreached.output
    no_url = CliRunner().invoke(app, [*argv, "openai/m", "--teacher-api-base", "localhost:8000"])
    assert no_url.exit_code == 2 and no_url.output.startswith("error: --teacher-api-base 'localhost:8000' is not an "
                                                              "http(s) URL"), no_url.output
    assert not (tmp_path / "out").exists()


def test_an_export_into_a_folder_another_export_writes_is_refused(tmp_path):
    """Two exports into one --out at once: each removes the split files and staged .partial files it finds there, so
    one said it wrote train.jsonl, which the other had removed, and the others ended on a missing .partial file."""
    from ptxbench.agent.records.folder_lock import hold_folder, release

    out = tmp_path / "data"
    example = str(ROOT / "docs/examples/optimize-gemm-tuner")
    assert CliRunner().invoke(app, ["export", example, "--recipe", "kernelgen", "--out", str(out)]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    held = hold_folder(out)  # as a running export holds it
    try:
        result = CliRunner().invoke(app, ["export", example, "--recipe", "kernelgen", "--out", str(out),
                                          "--format", "jsonl"])
    finally:
        release(held)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and lines == [f"error: --out {out} is being written by another export: wait for it "
                                               "to end, or name another folder"], result.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
