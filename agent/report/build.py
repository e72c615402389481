"""`write_report(run_dir, out_dir)`: score the run, then write summary.md, index.html (plots inlined as
base64 PNG, no network needed) and trajectories/<id>-<hash>.html (page_name), plus score.json for re-checking.

The run may come from someone else, and the default out folder is inside it: each file is written under a fresh
name and renamed into place (tools/atomic.atomic_write), so a link planted at a report file's name is replaced,
never written through, and an out folder (or its trajectories/) that is a link is refused."""
from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

import pydantic_core
from pydantic import BaseModel

from ptxbench.tools.atomic import atomic_write
from ptxbench.tools.figure_text import figure
from ptxbench.tools.redact import scrub_text

from ..records.rundir import UNREADABLE, read_manifest, run_name
from ..scoring import RunScore, score_trajectories
from ..scoring.run_score import first_set_aside, unique_records
from ..scoring.turns import MEASURABLE, score_trajectory
from .plots import all_plots
from .style import escape, page
from .tables import Recorded, all_tables, md_cell, md_text, uneven_workloads
from .trajectory_page import trajectory_html

E = escape


class ReportFiles(BaseModel):
    markdown: Path
    html: Path
    score_json: Path
    trajectories: list[Path]


class LinkedReportFolder(ValueError):
    """The report's out folder, or its trajectories/, is a symbolic link: the report would land wherever it points."""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


# A trajectory folder's name may be up to 255 bytes, but its page adds `-<hash>.html` and atomic_write's temporary
# name `.<page>.<8 random>.tmp` around that: the id's part is cut (it is ASCII after _safe) so both fit a file name.
_PAGE_ID_CHARS = 200


def page_name(trajectory_id: str) -> str:
    """The file name of a trajectory's page: its id made safe for a file name (at most _PAGE_ID_CHARS of it), plus a
    short hash of the whole id itself, since ids that differ only in characters _safe folds (model strings hold @ + :)
    or past the cut would share one page."""
    # surrogatepass: a folder name that is not UTF-8 reads as lone surrogates (surrogateescape), which .encode() refuses
    digest = hashlib.sha256(trajectory_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_safe(trajectory_id)[:_PAGE_ID_CHARS]}-{digest}.html"


def _overview(run_dir: Path, manifest: dict, score: RunScore) -> list[tuple[str, str]]:
    """(what, value) facts about the run; a value read from the run's records or manifest is Recorded."""
    facts = [("run", Recorded(run_dir)), ("models", Recorded(", ".join(score.model_names))),
             ("workloads", Recorded(", ".join(score.workload_names))),
             ("trajectories", f"{score.n_trajectories} ({score.n_infra_failed} infra-failed"
                              + (f", {score.n_unfinished} unfinished" if score.n_unfinished else "")
                              + ", left out of trajectory scores)"),
             ("infra turns", f"{score.n_infra_turns} (left out of model scores)"),
             ("correct turns with unknown target verdict", f"{score.n_target_unknown} (counted as not executed)")]
    if score.n_compile_only:
        facts.append(("COMPILED turns (not run on a GPU)",
                      f"{score.n_compile_only} (--no-gpu: compiled cleanly, correctness unknown, not counted as correct)"))
    if score.n_skipped_lines:
        damaged = [t.id for t in score.trajectories if t.skipped_lines]
        facts.append(("unreadable log lines", Recorded(f"{score.n_skipped_lines} left out of every score ({UNREADABLE}) "
                      f"in {len(damaged)} trajectories, first {damaged[0]}")))
    if score.n_figures_set_aside:  # a hand-edited or foreign record: out of every figure and plot, said here
        facts.append(("recorded speeds read as unmeasured", Recorded(
            f"{score.n_figures_set_aside} speedups or %SOL NaN, infinite, not positive or past {MEASURABLE:.0e} either "
            f"way (no timing measures that): left out of every figure and plot, their turns keeping their verdicts; "
            f"first {first_set_aside(score)}")))
    if score.n_unstarted:
        facts.append(("trajectory logs with no readable start", f"{score.n_unstarted} (empty, or their trajectory_start "
                      "line unreadable: left out of every score, model and workload unknown)"))
    config = manifest.get("config") or {}
    gpu = manifest.get("gpu") or {}
    gpu = gpu if isinstance(gpu, dict) else {"gpus": gpu}  # older manifests name the GPU in a string
    for key, value in (("created", manifest.get("created")), ("command", manifest.get("command")),
                       ("GPU", gpu.get("gpus")), ("driver", gpu.get("driver")),
                       ("git revision", (manifest.get("git") or {}).get("revision")), ("turns", config.get("turns")),
                       ("trajectories per cell", config.get("trajectories")), ("prompts", config.get("prompts")),
                       ("mode", config.get("mode")), ("backend", config.get("backend")), ("no GPU", config.get("no_gpu"))):
        if value not in (None, "", []):
            facts.append((key, Recorded(", ".join(map(str, value)) if isinstance(value, list) else value)))
    if resumes := manifest.get("resumed_under"):  # went on under other code than it began with (records/revision.py)
        facts.append(("resumed under other code", Recorded(", ".join(
            f"{str(r.get('revision') or 'unknown')[:12]}{' (uncommitted changes)' if r.get('dirty') else ''}"
            for r in resumes))))
    return facts


def markdown_summary(run_dir: Path, manifest: dict, score: RunScore) -> str:
    """summary.md; every text that comes from the run (names, ids, statuses, manifest facts) goes through md_cell."""
    lines = [f"# ptxbench report: {md_cell(run_name(run_dir))}", ""]
    lines += [f"- **{k}**: {md_text(v)}" for k, v in _overview(run_dir, manifest, score)]
    lines += ["", "Open index.html next to this file for the plots and a page per trajectory.", ""]
    lines += [t.markdown() for t in all_tables(score)]
    lines += ["### Trajectories", "", "| trajectory | model | workload | prompt | turns | statuses | best speedup |", "|---|---|---|---|---|---|---|"]
    for t in score.trajectories:
        statuses = " ".join(x.status for x in t.turns)
        best = figure(t.best_speedup) if t.best_speedup is not None else "–"
        names = " | ".join(md_cell(text) for text in (t.model, t.workload, t.prompt))
        lines.append(f"| [{md_cell(t.id)}](trajectories/{page_name(t.id)}) | {names} | {len(t.turns)} | {md_cell(statuses)} | {best} |")
    return "\n".join(lines) + "\n"


def _plots_html(score: RunScore) -> str:
    if importlib.util.find_spec("matplotlib") is None:  # an optional extra: the report is written without plots
        return "<p class='note'>No plots: matplotlib is not installed (pip install 'ptxbench[bench]').</p>"
    return "".join(f"<figure><figcaption>{E(name)}</figcaption><img alt='{E(name)}' src='data:image/png;base64,{png}'></figure>"
                   for name, png in all_plots(score).items() if png)


def index_html(run_dir: Path, manifest: dict, score: RunScore) -> str:
    facts = "".join(f"<tr><th>{E(k)}</th><td>{E(v)}</td></tr>" for k, v in _overview(run_dir, manifest, score))
    tables = all_tables(score)
    plots = _plots_html(score)
    # the curves per model are over each model's own workloads: said where those differ (tables.uneven_workloads)
    uneven = f"<p class='note'>{E(''.join(pieces))}</p>" if (pieces := uneven_workloads(score)) else ""
    rows = ""
    for t in score.trajectories:
        chips = " ".join(f"<span class='s-{E(x.status)}'>{x.turn}:{E(x.status)}</span>" for x in t.turns)
        best = figure(t.best_speedup) if t.best_speedup is not None else "–"
        rows += (f"<tr><td><a href='trajectories/{E(page_name(t.id))}'>{E(t.id)}</a></td><td>{E(t.model)}</td><td>{E(t.workload)}</td>"
                 f"<td>{E(t.prompt)}</td><td>{chips}</td><td>{best}</td><td>{E(t.stop_reason)}</td></tr>")
    body = (f"<h1>ptxbench report: {E(run_name(run_dir))}</h1><table>{facts}</table>"
            f"<h2>Leaderboard</h2>{tables[0].html()}{tables[1].html()}"
            f"<h2>Plots</h2>{uneven}<div class='plots'>{plots}</div>"
            f"<h2>fast_p</h2>{''.join(t.html() for t in tables[2:6])}"
            f"<h2>Success and speedup</h2>{tables[6].html()}"
            f"<h2>Repair</h2>{tables[7].html()}{tables[8].html()}"
            f"<h2>Cells</h2>{tables[9].html()}"
            "<h2>Trajectories</h2><table><thead><tr><th>trajectory</th><th>model</th><th>workload</th><th>prompt</th>"
            f"<th>turns</th><th>best speedup</th><th>stop</th></tr></thead><tbody>{rows}</tbody></table>")
    return page(f"ptxbench report: {run_name(run_dir)}", body)


def _out_folders(out_dir: Path) -> None:
    """Make out_dir and out_dir/trajectories, refusing either when it is a symbolic link (LinkedReportFolder)."""
    for folder in (out_dir, out_dir / "trajectories"):
        if folder.is_symlink():
            raise LinkedReportFolder(f"{folder} is a symbolic link: a report is written only into a real folder "
                                     "(remove the link, or name another folder with --out)")
        folder.mkdir(parents=True, exist_ok=True)


# Record text may hold lone surrogates, which UTF-8 cannot write: a JSON escape such as "\ud800" in someone else's
# records reads as one, and so does a trajectory folder name that is not UTF-8. Each is written as its escape.
# Keys are masked again, as the export masks them (tools/redact.py): a run recorded before a key was set, by another
# version, or by hand, holds what this machine's environment now keeps secret. Not inside the plots' base64, where a
# key's shape (AIza...) can occur by chance: a record's text cannot write `src='` (escape() writes ' as &#x27;).
_PLOT_DATA = re.compile(r"(src='data:image/png;base64,[A-Za-z0-9+/=]*')")


def _write(path: Path, text: str) -> Path:
    parts = _PLOT_DATA.split(text)  # odd places: the plots
    text = "".join(part if i % 2 else scrub_text(part) for i, part in enumerate(parts))
    return atomic_write(path, text.encode("utf-8", "backslashreplace"))


def _escaped(value):
    """A model_dump with every lone surrogate in its text (keys included) turned into its escape, as _write does."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value


def _json(model: BaseModel) -> str:
    """model_dump_json(indent=1), byte for byte, for a model whose text may hold lone surrogates (it refuses them); a
    NaN or infinity (a manifest's, as recorded) is null there, as in model_dump_json, not `NaN`, which no strict JSON
    reader (jq, JSON.parse) takes."""
    return pydantic_core.to_json(_escaped(model.model_dump()), indent=1, inf_nan_mode="null").decode("utf-8")


def write_report(run_dir: Path, out_dir: Path | None = None) -> ReportFiles:
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir else run_dir / "report"
    # unique_records, as `score` reads runs: a trajectory folder copied inside the run (one trajectory_start twice) is
    # DuplicateTrajectory before any folder or file is made, not counted twice in the pages and then refused by the
    # repair page. The records are read once for the scores and again, one at a time, for the pages: a record holds
    # every model call's conversation, and a run's records all at once took 670 MB for 300 trajectories.
    trajs, repairs, unstarted = [], False, []
    for _, record in unique_records([run_dir], unstarted):
        trajs.append(score_trajectory(record, run=run_name(run_dir)))
        repairs = repairs or bool((record.start.config or {}).get("repair_task"))  # a repair page to write
    _out_folders(out_dir)
    score = score_trajectories(trajs)
    score.n_unstarted = len(unstarted)
    score.runs = [str(run_dir)]
    manifest = read_manifest(run_dir)
    score.manifests = {str(run_dir): manifest}
    files = ReportFiles(markdown=out_dir / "summary.md", html=out_dir / "index.html", score_json=out_dir / "score.json", trajectories=[])
    _write(files.markdown, markdown_summary(run_dir, manifest, score))
    _write(files.html, index_html(run_dir, manifest, score))
    _write(files.score_json, _json(score))
    from ..scoring.repair_track import repair_markdown, score_repair_runs

    repair = score_repair_runs([run_dir]) if repairs else None  # (its own pass over the records, only when needed)
    if repair is not None and repair.trajectories:  # the repair page beside the leaderboard
        _write(out_dir / "repair.md", repair_markdown(repair))
        _write(out_dir / "repair.json", _json(repair))
    for (_, record), traj in zip(unique_records([run_dir]), trajs, strict=True):
        if record.id != traj.id:  # the run changed while the report was written: no page under another's name
            raise RuntimeError(f"{run_dir} changed while its report was written ({record.id} read where {traj.id} was)")
        path = _write(out_dir / "trajectories" / page_name(traj.id), trajectory_html(record, traj))
        files.trajectories.append(path)
    return files
