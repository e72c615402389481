"""Reports from the hand-built run of tests/trajectory_builder.py: files, tables, inline plots, pages."""
from __future__ import annotations

import base64
import json
import re

import pytest

from ptxbench.agent.report import write_report
from ptxbench.agent.report.build import page_name
from ptxbench.agent.scoring import score_runs
from trajectory_builder import build_sample_run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run_dir = build_sample_run(tmp_path_factory.mktemp("run") / "sample")
    return run_dir, write_report(run_dir, run_dir / "report")


def test_files_and_leaderboard(report):
    run_dir, files = report
    md = files.markdown.read_text()
    # Leaderboard in PTXBench's layout: a row per model, a column per workload (mean best speedup [CI] (max)).
    assert "| model | attn | gemm |" in md
    assert re.search(r"\| m/a \| – \| 0\.750 \[[0-9.]+, [0-9.]+\] \(max 1\.300; n=4\) \|", md)
    assert "| m/b | 0.000 (n=1) | 1.750 (max 2.000; n=2) |" in md  # two trajectories: no interval (MIN_BOOTSTRAP)
    assert "8 (1 infra-failed" in md
    # The score saved next to the report is the same as re-scoring the run directory.
    saved = json.loads(files.score_json.read_text())
    again = json.loads(score_runs([run_dir]).model_dump_json())
    assert saved["model_workload"] == again["model_workload"]
    assert saved == again  # every figure, count and cell: the report and `score` read the run alike


def test_html_is_self_contained_with_plots(report):
    _, files = report
    page = files.html.read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 4  # fast_p curves, speedup by turn, correct vs target, repair heatmap
    for data in images:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for title in ("fast_p curves per model", "speedup by turn", "repair transition heatmap", "correct vs. target executed by turn"):
        assert title in page
    assert f"href='trajectories/{page_name('a-gemm-1')}'" in page


def test_trajectory_pages(report):
    _, files = report
    ids = ["a-gemm-0", "a-gemm-1", "a-gemm-2", "a-gemm-3", "a-gemm-4", "b-attn-0", "b-gemm-0", "b-gemm-terse-0"]
    assert sorted(p.name for p in files.trajectories) == sorted(map(page_name, ids))
    page = next(p for p in files.trajectories if p.name == page_name("a-gemm-1")).read_text()
    for turn in range(1, 6):
        assert f"id='turn-{turn}'" in page
    # Turn 2's kernel is shown as a diff against turn 1's: one added line.
    assert "<span class='add'>+.reg .b32 r2; // RUNTIME_ERROR</span>" in page
    assert "feedback the model saw" in page and "Turn 2: RUNTIME_ERROR: see the log." in page
    assert "<td class='v-executed'>executed</td>" in page and "candidate" in page
    infra = next(p for p in files.trajectories if p.name == page_name("a-gemm-4")).read_text()
    assert "infra error in evaluate: GPU worker lost" in infra
    assert "present_not_executed" in infra


def test_without_matplotlib_the_report_is_written_without_plots(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    run = build_sample_run(tmp_path / "run")
    out = tmp_path / "report"
    write_report(run, out)
    page = (out / "index.html").read_text()
    assert "No plots: matplotlib is not installed" in page and "data:image/png" not in page
    assert (out / "summary.md").read_text().count("|") > 20  # the tables are all there


def test_a_link_planted_at_a_report_file_is_replaced_and_a_linked_folder_refused(tmp_path):
    run = build_sample_run(tmp_path / "shared")
    victim, victim_dir = tmp_path / "bashrc", tmp_path / "victim_dir"
    victim.write_text("the user's own file\n")
    victim_dir.mkdir()
    (run / "report").mkdir()
    (run / "report" / "index.html").symlink_to(victim)  # the default out folder is inside the run
    files = write_report(run)
    assert victim.read_text() == "the user's own file\n"
    assert not files.html.is_symlink() and "ptxbench report" in files.html.read_text()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trajectories").symlink_to(victim_dir)
    from ptxbench.agent.report.build import LinkedReportFolder

    with pytest.raises(LinkedReportFolder):
        write_report(run, tmp_path / "out")
    assert not any(victim_dir.iterdir())


HOSTILE = "[click](javascript:alert(1)) ![pix](http://evil.example/p.png) <b>bold</b> `code` *em* _u_ \\"


def test_record_text_cannot_add_markdown_links_images_html_or_rows(tmp_path):
    from ptxbench.agent.scoring.repair_track import repair_markdown, score_repair_runs
    from trajectory_builder import TrajectoryBuilder

    from ptxbench.agent.records.rundir import write_manifest

    run = tmp_path / "run"
    write_manifest(run, {"command": "bench " + HOSTILE, "gpu": {"gpus": HOSTILE}, "config": {"prompts": [HOSTILE]}})
    TrajectoryBuilder(run, "t](javascript:x)<svg onload=alert(1)>", "m/" + HOSTILE + " | col\n<script>x</script>",
                      "wl_" + HOSTILE, prompt=HOSTILE + "\n\n# heading", config={"repair_task": "wl__" + HOSTILE}) \
        .turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    summary = write_report(run, tmp_path / "out").markdown.read_text()
    repair = repair_markdown(score_repair_runs([run]))
    for md in (summary, repair):
        unescaped = re.sub(r"\\.", "", md)  # what a Markdown renderer reads as markup once the escapes are gone
        assert "](" not in unescaped.replace("](trajectories/", "") and "![" not in unescaped
        assert not re.search(r"<[a-z/]", unescaped) and "`" not in unescaped
    assert not any(line.startswith(("<script", "# heading", " col")) for line in summary.splitlines())
    row = next(line for line in summary.splitlines() if line.startswith("| [t"))
    assert re.sub(r"\\.", "", row).count("|") == 8  # seven cells, no border added by the records


def test_bidirectional_controls_in_a_kernel_or_record_show_as_escapes_in_every_page(tmp_path):
    """A kernel line with an RLO / isolates reads in a browser as another line than the compiler reads (Trojan Source,
    CVE-2021-42574): the pages and summary.md write each such control as its escape."""
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    b = TrajectoryBuilder(run, "t\u202e1", "m/\u2066x\u2069", "gemm")
    b.source = "/* \u202e } \u2066if (admin)\u2069 \u2067 */ // turn 0\n"
    b.turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    files = write_report(run, tmp_path / "out")
    pages = [files.html, files.markdown, *sorted((tmp_path / "out" / "trajectories").glob("*.html"))]
    assert len(pages) == 3
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not re.search("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]", text), page.name
    kernel_page = pages[2].read_text(encoding="utf-8")
    assert "\\u202e } \\u2066if (admin)\\u2069" in kernel_page and "\\u2066x\\u2069" in kernel_page


def test_a_dollar_in_a_model_name_is_plain_text_in_the_plots(tmp_path):
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    for i, model in enumerate((r"m/$\foo{$", r"m/$x^{$", "m/$5 and $6")):
        TrajectoryBuilder(run, f"t{i}", model, "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    files = write_report(run, tmp_path / "out")
    assert len(re.findall(r"src='data:image/png;base64,", files.html.read_text())) == 4


def test_ids_that_fold_to_the_same_file_name_keep_their_own_pages(tmp_path):
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    ids = ["gemm__hosted_vllm-qwen@v1__basic__00", "gemm__hosted_vllm-qwen+v1__basic__00"]
    TrajectoryBuilder(run, ids[0], "hosted_vllm/qwen@v1", "gemm").turn(1, "PASSED", 3.0, True).stop()
    TrajectoryBuilder(run, ids[1], "hosted_vllm/qwen+v1", "gemm").turn(1, "COMPILE_ERROR").stop()
    files = write_report(run, tmp_path / "out")
    assert len({p.name for p in files.trajectories}) == 2
    links = dict((text, href) for href, text in re.findall(r"href='(trajectories/[^']+)'>([^<]+)<", files.html.read_text()))
    assert set(links) == set(ids) and len(set(links.values())) == 2
    for tid in ids:
        assert f"<h1>{tid}</h1>" in (tmp_path / "out" / links[tid]).read_text()


def test_a_page_shows_no_kernel_file_from_outside_its_trajectory_folder(tmp_path):
    from trajectory_builder import TrajectoryBuilder

    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET=hunter2\n")
    run = tmp_path / "run"
    TrajectoryBuilder(run, "t0", "m/a", "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.2, True).stop()
    log = run / "trajectories" / "t0" / "trajectory.jsonl"
    text = log.read_text().replace("kernels/turn_01.ptx", "../../../secret.txt").replace("kernels/turn_02.ptx", str(secret))
    log.write_text(text)
    files = write_report(run, tmp_path / "out")
    assert "hunter2" not in files.trajectories[0].read_text()


def test_an_id_at_the_file_name_limit_gets_its_own_page(tmp_path):
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    ids = ["t" * 240 + "a", "t" * 240 + "b"]  # legal folder names (255 bytes at most), alike for their first 200
    for tid in ids:
        TrajectoryBuilder(run, tid, "m/a", "gemm").turn(1, "PASSED", 1.5, True).stop()
    files = write_report(run, tmp_path / "out")
    # The page and atomic_write's temporary name for it (`.<page>.<8>.tmp`) both fit a file name.
    assert len({p.name for p in files.trajectories}) == 2 and all(len(p.name) + 14 <= 255 for p in files.trajectories)
    for tid in ids:
        assert f"<h1>{tid}</h1>" in (tmp_path / "out" / "trajectories" / page_name(tid)).read_text()


def test_lone_surrogates_in_records_and_folder_names_are_written_as_escapes(tmp_path):
    import os

    from trajectory_builder import TrajectoryBuilder

    from ptxbench.agent.records.events import ToolCall

    run = tmp_path / "run"
    b = TrajectoryBuilder(run, "t0", "m/a-SURR", "gemm", config={"repair_task": "gemm__x-SURR"})
    b.turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True)
    b.writer.append(ToolCall(trajectory_id="t0", turn=2, name="compile", arguments={"source": "x-SURR"}))
    b.stop()
    TrajectoryBuilder(run, "t1", "m/b", "gemm").turn(1, "PASSED", 1.2, True).stop()
    log = run / "trajectories" / "t0" / "trajectory.jsonl"
    log.write_text(log.read_text().replace("-SURR", "\\ud800"))  # the JSON escape json reads as a lone surrogate
    os.rename(run / "trajectories" / "t1", os.fsencode(run / "trajectories") + b"/t\xff1")  # a folder name not UTF-8
    files = write_report(run, tmp_path / "out")
    assert len(files.trajectories) == 2 and len(re.findall(r"data:image/png", files.html.read_text())) == 4
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"summary.md", "score.json", "repair.md", "repair.json"}
    for path in written:
        text = path.read_bytes().decode("utf-8")  # every file is UTF-8, each JSON file JSON
        if path.suffix == ".json":
            json.loads(text)
    assert "m/a\\ud800" in files.html.read_text() and "t\\udcff1" in files.html.read_text()
    assert "x\\ud800" in files.trajectories[0].read_text()
    assert page_name("t\udcff1") != page_name("t\udcfe1")


def test_a_long_model_name_is_cut_in_the_plots(tmp_path):
    import struct

    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    # A legend is as wide as its text: at 2M characters the figure passed Agg's 2^23-pixel limit and stopped the report.
    TrajectoryBuilder(run, "t0", "m/" + "x" * 20000, "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    images = re.findall(r"base64,([A-Za-z0-9+/=]+)", write_report(run, tmp_path / "out").html.read_text())
    widths = [struct.unpack(">I", base64.b64decode(data)[16:20])[0] for data in images]
    assert len(widths) == 4 and max(widths) < 2000


def test_record_text_cannot_add_bare_links_github_would_make(tmp_path):
    from ptxbench.agent.report.tables import md_cell
    from ptxbench.agent.scoring.repair_track import repair_markdown, score_repair_runs
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    TrajectoryBuilder(run, "t0", "https://evil.example/login", "WWW.evil.example", prompt="ftp://evil.example/x",
                      config={"repair_task": "gemm__www.evil.example"}).turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    summary = write_report(run, tmp_path / "out").markdown.read_text()
    for md in (summary, repair_markdown(score_repair_runs([run]))):
        assert "evil.example" in md  # shown, but as text: GFM links a bare scheme:// URL and www. (autolinks)
        assert not re.search(r"(?<!\\)://", md) and not re.search(r"(?i)www(?!\\\.)", md)
    assert md_cell("qwen@v1:7b a:b") == "qwen@v1:7b a:b"  # a colon elsewhere stays as it is


def test_two_long_kernels_of_repeated_lines_are_shown_without_a_quadratic_diff():
    """difflib's matcher grows about as the cube of the line count on kernels of repeated short lines (8,000 lines took
    7 s, a 400 KB kernel hours): a hostile model held its report up. Past a bound the kernel is shown whole."""
    from ptxbench.agent.report.trajectory_page import _diff
    from waits import cpu_timed

    n = 12_000
    previous = "".join(f"x{i % 150};\n" for i in range(n))
    current = "".join(f"x{i * 7 % 150};\n" for i in range(n))
    html, took = cpu_timed(_diff, previous, current, "kernels/turn_02.ptx")
    assert took < 3, took
    assert html.count("class='add'") == n and "x7;" in html  # every line of the new kernel is on the page
    small, _ = cpu_timed(_diff, "a;\nb;\n", "a;\nc;\n", "kernels/turn_02.ptx")
    assert "diff against the previous turn" in small and small.count("class='add'") == 1


def test_the_diff_bound_counts_lines_as_the_diff_splits_them():
    """The bound counted "\\n" while difflib works on splitlines(), which also breaks at a form feed (white space to
    the compilers) or \\u2028: a kernel of 8,000 form-feed lines passed as one line and took 6 s, 400 KB hours."""
    from ptxbench.agent.report.trajectory_page import _diff
    from waits import cpu_timed

    n = 12_000
    previous = "".join(f"x{i % 150};\x0c" for i in range(n))
    current = "".join(f"x{i * 7 % 150};\u2028" for i in range(n))
    html, took = cpu_timed(_diff, previous, current, "kernels/turn_02.cu")
    assert took < 3, took
    assert "shown whole" in html and html.count("class='add'") == n


def test_the_leaderboard_says_when_a_cell_pools_both_l2_flushes(tmp_path):
    """A (model, workload) cell pools prompts and GPUs, and so trajectories timed from a read and from a written L2
    flush, whose speedups do not compare (docs/timing-integrity.md): the leaderboard's note names such cells."""
    from ptxbench.agent.report.tables import leaderboard
    from trajectory_builder import TrajectoryBuilder

    for i, flush in enumerate(("read", "write", "read")):
        TrajectoryBuilder(tmp_path, f"g{i}", "m", "gemm", config={"l2_flush": flush}).turn(1, "PASSED", 1.1, True).stop()
    TrajectoryBuilder(tmp_path, "a0", "m", "attn", config={"l2_flush": "read"}).turn(1, "PASSED", 1.0, True).stop()
    note = leaderboard(score_runs([tmp_path])).note
    assert "m x gemm pool trajectories timed from a read and from a written L2 flush" in note
    assert "attn" not in note
    assert "L2 flush" not in leaderboard(score_runs([build_sample_run(tmp_path / "sample")])).note


def test_the_leaderboard_note_writes_record_names_through_md_cell(tmp_path):
    """The note naming cells that pool both L2 flushes quoted model and workload names raw in summary.md (and in
    `ptxbench score`'s tables): a name made a link, raw HTML, or with a line break a heading of its own."""
    from trajectory_builder import TrajectoryBuilder

    evil = "m/[x](javascript:alert(1))<img src=x onerror=alert(1)>\n# head"
    for i, flush in enumerate(("read", "write")):
        TrajectoryBuilder(tmp_path / "run", f"g{i}", evil, "gemm", config={"l2_flush": flush}).turn(1, "PASSED", 1.1, True).stop()
    files = write_report(tmp_path / "run", tmp_path / "out")
    md = files.markdown.read_text()
    assert "pool trajectories timed from a read and from a written L2 flush" in md
    assert not re.search(r"(?<!\\)\]\(javascript|(?<!\\)<img", md) and "\n# head" not in md
    assert "m/\\[x\\]\\(javascript:alert\\(1\\)\\)\\<img src=x onerror=alert\\(1\\)\\> # head x gemm pool" in md
    # the page shows the names as they are, escaped for HTML once
    assert "m/[x](javascript:alert(1))&lt;img src=x onerror=alert(1)&gt;\n# head x gemm pool" in files.html.read_text()


def test_a_trajectory_copied_inside_the_run_stops_the_report_before_any_file(tmp_path):
    """A trajectory folder copied inside the run (one trajectory_start twice) was counted twice in summary.md,
    index.html and score.json, and only then refused by the repair page's reading, leaving that report behind; the
    message named the run twice ("RUN and RUN both hold ..."). Now DuplicateTrajectory comes first, naming both folders,
    and the CLI says it in one line as `score` does."""
    import shutil

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from ptxbench.agent.scoring import DuplicateTrajectory
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    TrajectoryBuilder(run, "t0", "m", "gemm").turn(1, "PASSED", 1.2, True).stop()
    shutil.copytree(run / "trajectories" / "t0", run / "trajectories" / "t0-copy")
    with pytest.raises(DuplicateTrajectory, match="t0 and .*t0-copy both hold"):
        write_report(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # not even its folders
    refused = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "out2")])
    assert refused.exit_code == 2 and refused.output.startswith("error: ") and "score one of them" in refused.output
    assert not (tmp_path / "out2").exists()  # a refused report leaves no folder behind (an empty trajectories/ stayed)
    (tmp_path / "mine").mkdir()  # a folder that was there before stays
    CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "mine")])
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_every_page_forbids_scripts_and_fetches_in_its_head(report):
    """Defence behind the escaping: were one text of a run ever written unescaped, a browser opening the page still
    runs no script and fetches nothing (an <img src=https://...> would tell a server who read the report)."""
    _, files = report
    for path in (files.html, *files.trajectories):
        text = path.read_text()
        head = text[:text.index("</head>")]
        csp = re.search(r"<meta http-equiv='Content-Security-Policy' content=\"([^\"]+)\">", head)
        assert csp, path.name
        rules = dict(r.strip().split(" ", 1) for r in csp.group(1).split(";"))
        assert rules["default-src"] == "'none'" and rules["img-src"] == "data:" and "script-src" not in rules
        assert b"<title>ptxbench report: " in path.read_bytes()[:300] or path != files.html  # cmd_report's marker


def test_control_characters_in_a_name_reach_no_terminal_through_the_plots(tmp_path):
    """matplotlib warns of each glyph its font lacks, quoting the character: a model name holding ESC, BEL, a C1 CSI or
    an RLO put each raw on the terminal of `ptxbench report`. The plots show them as escapes, as the pages do."""
    import warnings

    from ptxbench.tools.visible import BIDI
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    model = "m/\x1b]52;c;ZXZpbA==\x07\x1b[31m\x9b1m\u202eevil"
    TrajectoryBuilder(run, "t0", model, "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        write_report(run, tmp_path / "out")
    said = " ".join(str(w.message) for w in seen)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", said) and not BIDI.search(said), said


def test_a_key_in_the_records_reaches_no_report_file_nor_score_output(tmp_path, monkeypatch):
    """A run recorded before the key was set, by another version or by hand holds the key in its text: the export
    masked it, the report and `score` wrote it out."""
    import json

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from trajectory_builder import TrajectoryBuilder

    key = "k3y-0123456789abcdefXYZ"
    run = tmp_path / "run"
    TrajectoryBuilder(run, "t0", f"m/{key}", "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1.5, True).stop()
    kernel = run / "trajectories" / "t0" / "kernels" / "turn_02.ptx"
    kernel.write_text(kernel.read_text() + f"// {key}\n")
    monkeypatch.setenv("PROVIDER_API_KEY", key)
    files = write_report(run, tmp_path / "out")
    for path in (files.markdown, files.html, files.score_json, *files.trajectories):
        assert key not in path.read_text(), path.name
    assert "***" in files.score_json.read_text()
    for args in (["score", str(run)], ["score", str(run), "--json"]):
        out = CliRunner().invoke(app, args).output
        assert key not in out and "***" in out, args
    json.loads(CliRunner().invoke(app, ["score", str(run), "--json"]).output)


def test_masking_keys_leaves_the_plots_whole(tmp_path, monkeypatch):
    """A key's shape (AIza + 20 characters) can occur by chance in a plot's base64: the masking passes the plots by."""
    from ptxbench.agent.report import build

    png = "+AIza" + "B" * 30 + "=="
    written = build._write(tmp_path / "index.html", f"<p>AIza{'C' * 30}</p><img src='data:image/png;base64,{png}'>")
    assert written.read_text() == f"<p>***</p><img src='data:image/png;base64,{png}'>"


def test_a_nan_in_the_records_is_null_in_score_json_and_score_json_output(tmp_path):
    """A manifest value recorded as NaN or Infinity was written as `NaN` into score.json and `score --json`: JSON no
    strict reader takes (jq, JSON.parse), and unlike the model_dump_json these files say they match."""
    import json

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from ptxbench.agent.records.rundir import write_manifest
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    TrajectoryBuilder(run, "t", "m/a", "gemm").turn(1, "PASSED", 1.2, True).stop()
    write_manifest(run, {"command": "bench", "cost": float("nan"), "budget": float("inf")})

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))

    saved = strict(write_report(run, tmp_path / "out").score_json.read_text())
    assert saved["manifests"][str(run)]["cost"] is None and saved["manifests"][str(run)]["budget"] is None
    strict(CliRunner().invoke(app, ["score", str(run), "--json"]).output)


def test_a_run_of_two_turn_budgets_shows_each_budgets_rows_apart(tmp_path):
    """The leaderboard had one row per model, pooling a trajectory of 4 turns with one of 16; with several budgets in
    the run, every table keyed by model shows a turn budget column and a row per budget, and says why."""
    from trajectory_builder import TrajectoryBuilder

    run = tmp_path / "run"
    TrajectoryBuilder(run, "short", "m/a", "gemm", index=0, config={"turns": 4}).turn(1, "PASSED", 1.0, True).stop()
    TrajectoryBuilder(run, "long", "m/a", "gemm", index=1, config={"turns": 16}).turn(1, "PASSED", 3.0, True).stop()
    md = write_report(run, tmp_path / "out").markdown.read_text()
    assert "| model | turn budget | gemm |" in md
    assert "| m/a | 4 | 1.000 (max 1.000; n=1) |" in md and "| m/a | 16 | 3.000 (max 3.000; n=1) |" in md
    assert "Rows are split by turn budget" in md
    assert "| model | turn budget | workload | n |" in md  # fast_p tables
    saved = json.loads((tmp_path / "out" / "score.json").read_text())
    assert [c["turn_budget"] for c in saved["model_workload"]] == [4, 16]
    from ptxbench.agent.report.plots import _name

    # the plots' legends and titles name each row's budget too
    assert [_name(c, True) for c in score_runs([run]).models] == ["m/a, 4 turns", "m/a, 16 turns"]


def test_a_run_of_one_turn_budget_keeps_its_tables_as_they_were(report):
    md = report[1].markdown.read_text()
    assert "turn budget" not in md and "Rows are split" not in md


def test_the_leaderboard_says_when_a_cell_pools_two_gpus_and_not_when_two_budgets_differ(tmp_path):
    """A (model, workload) cell pools GPUs: an H100's speedup over the library and an H200's sat in one mean without a
    word, as two flushes' did before their note. And since the cells split by turn budget, two budgets timed from
    different flushes (or GPUs) pool nothing, so they are no mixed cell."""
    from ptxbench.agent.report.tables import leaderboard
    from trajectory_builder import TrajectoryBuilder

    mixed = tmp_path / "mixed"
    for i, gpu in enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA H200")):
        TrajectoryBuilder(mixed, f"g{i}", "m", "gemm", gpu=gpu).turn(1, "PASSED", 1.1, True).stop()
    TrajectoryBuilder(mixed, "a0", "m", "attn").turn(1, "PASSED", 1.0, True).stop()
    note = leaderboard(score_runs([mixed])).note
    assert "m x gemm pool trajectories evaluated on different GPUs" in note and "attn" not in note
    assert "different GPUs" not in leaderboard(score_runs([build_sample_run(tmp_path / "sample")])).note
    budgets = tmp_path / "budgets"
    for i, (turns, flush, gpu) in enumerate(((4, "read", "NVIDIA H200"), (16, "write", "NVIDIA H100 80GB HBM3"))):
        TrajectoryBuilder(budgets, f"b{i}", "m", "gemm", gpu=gpu, config={"turns": turns, "l2_flush": flush}) \
            .turn(1, "PASSED", 1.1, True).stop()
    note = leaderboard(score_runs([budgets])).note
    assert "L2 flush, whose" not in note and "different GPUs" not in note


def test_a_trajectory_pages_timing_says_how_many_calls_waited_for_the_host():
    """'flags: host_stalls' read the same for one timed call of 300 as for 200: the page quotes the record's count,
    and a record written before the count existed still shows its flag."""
    from ptxbench.agent.report.trajectory_page import _timing

    stat = {"median_ms": 0.75, "ci_low_ms": 0.749, "ci_high_ms": 0.752, "n": 150}
    timing = {"candidate": stat, "baselines": {"cublas": stat}, "speedup": 1.0, "flags": ["host_stalls"]}
    assert "flags: host_stalls (12 timed calls)" in _timing({"timing": timing | {"host_stalls": 12}})
    assert "flags: host_stalls</p>" in _timing({"timing": timing})
