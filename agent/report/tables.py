"""The report's tables, built once from a RunScore and rendered as Markdown or HTML."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..scoring import P_VALUES, WITHIN_TURNS, CellScore, Estimate, RunScore
from ..scoring.cells import p_key
from ..scoring.repair import order_classes
from ..scoring.stats import MIN_BOOTSTRAP
from ptxbench.tools.figure_text import figure
from ptxbench.tools.visible import bidi_escaped

from .style import escape

# Said under the repair tables: what their intervals draw (scoring/repair.py).
CLUSTER_NOTE = ("; 95% intervals drawn over trajectories, those of one repair-track task together (they share its "
                "broken kernel: repeats of a task are no independent evidence)")
# Shown only for runs with COMPILED turns, so reports of GPU runs read as before.
UNKNOWN_NOTE = "; a next turn that is COMPILED (never run, verdict unknown) is left out"


_LINE_BREAKS = re.compile(r"[\r\n]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# `_` stays: CommonMark reads no emphasis inside a word (gemm_bf16_m8192 stays as it is), and emphasis elsewhere adds
# nothing a record could use; links, images, HTML, code spans and cell borders are what must not come from a record.
_MARKUP = re.compile(r"([\\\[\]()!<>*`|])")
# GitHub's Markdown also links bare text: a URL (`https://...`, `ftp://...`) and `www.` (GFM autolinks). An escaped `:`
# or `.` reads the same and links nothing. (A bare e-mail address is still linked, as mailto:; escapes cannot stop it.)
_AUTOLINK = re.compile(r":(?=//)|(?<=www)\.", re.IGNORECASE)


def md_cell(text: object) -> str:
    """Text from a run's records, fit for one Markdown table cell or line: line breaks become spaces (a record must
    not end a table row or start a block), control characters go, and every character Markdown reads as a link,
    image, HTML tag, emphasis, code span or cell border is escaped, as is what GitHub would link bare (_AUTOLINK); the
    bidirectional controls are shown as escapes (tools/visible.py)."""
    one_line = bidi_escaped(_CONTROL.sub("", _LINE_BREAKS.sub(" ", str(text))))
    return _AUTOLINK.sub(r"\\\g<0>", _MARKUP.sub(r"\\\1", one_line))


class Recorded(str):
    """A table cell or header read from a run's records (a model, workload, prompt, GPU or status name): escaped in
    Markdown by md_cell. The table's own words and numbers are written as they are, so `[CI]` stays readable."""


def md_text(text: str) -> str:
    """Text for a Markdown line or table cell: md_cell for Recorded text; the table's own text only with `|` escaped."""
    return md_cell(text) if isinstance(text, Recorded) else text.replace("|", "\\|")


class Note(str):
    """A table's note that quotes the records: the text of its pieces joined (as HTML shows it, escaped), while
    markdown() writes each Recorded piece through md_cell, the table's own words as they are."""

    def __new__(cls, pieces: list[str]):
        note = super().__new__(cls, "".join(pieces))
        note.pieces = list(pieces)
        return note

    def markdown(self) -> str:
        return "".join(md_cell(p) if isinstance(p, Recorded) else p for p in self.pieces)


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""  # the table's own words; a Note where it quotes the records

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note.markdown() if isinstance(self.note, Note) else self.note, ""]
        lines.append("| " + " | ".join(map(md_text, self.headers)) + " |")
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += ["| " + " | ".join(map(md_text, row)) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in self.rows)
        note = f"<p class='note'>{escape(self.note)}</p>" if self.note else ""
        return f"<h3>{escape(self.title)}</h3>{note}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# Said wherever a run's trajectories ran under more than one turn budget: the tables then show each budget's rows apart.
BUDGET_NOTE = (" Rows are split by turn budget (the turn budget column, --turns): a trajectory given 4 turns and one given 16 "
               "ran different trials, so their figures are neither pooled nor to be compared as like.")


def budget_text(budget: int | None) -> str:
    return "–" if budget is None else str(budget)


def split_by_budget(score: RunScore) -> bool:
    """Whether the tables show a turns column: the trajectories ran under more than one turn budget."""
    return len(score.turn_budgets) > 1


def _speedup_cell(cell: CellScore | None, target: bool) -> str:
    """A leaderboard cell: the mean best speedup, its interval, the single best and the trajectories it rests on (a
    figure from 2 trajectories read as one from 12); '–' where the model never ran the workload, and where it did but
    every trajectory was left out, how many (an empty cell read as a workload never run)."""
    if cell is None:
        return "–"
    if not cell.n_trajectories:
        return f"– (0 scored, {cell.n_infra_failed + cell.n_unfinished} left out)"
    est = cell.best_target_speedup if target else cell.best_speedup
    best = "" if target or cell.best_speedup_max is None else f"max {figure(cell.best_speedup_max)}; "
    return f"{est.fmt(3)} ({best}n={cell.n_trajectories})"


def _mixed_cells(score: RunScore, attr: str) -> list[tuple[str, str]]:
    """The (model, workload) cells of the leaderboard (each of one turn budget) whose scored trajectories differ in
    `attr` ('' counted as no value: a trajectory never evaluated on a GPU has no GPU)."""
    seen: dict[tuple, set[str]] = {}
    for t in score.trajectories:
        if not t.left_out:
            values = seen.setdefault((t.model, t.workload, t.turn_budget), set())
            if getattr(t, attr):
                values.add(getattr(t, attr))
    return sorted({key[:2] for key, values in seen.items() if len(values) > 1})


def mixed_flush_cells(score: RunScore) -> list[tuple[str, str]]:
    """The (model, workload) cells whose trajectories were timed from more than one L2 flush."""
    return _mixed_cells(score, "l2_flush")


def mixed_gpu_cells(score: RunScore) -> list[tuple[str, str]]:
    """The (model, workload) cells whose trajectories were evaluated on more than one GPU."""
    return _mixed_cells(score, "gpu")


def _naming(cells: list[tuple[str, str]], what: str) -> list[str]:
    """Note pieces naming up to three cells, then `what`; model and workload names are the records' text: Recorded, so
    summary.md writes them through md_cell."""
    parts: list[str] = []
    for i, (m, w) in enumerate(cells[:3]):
        parts += [", " if i else " ", Recorded(m), " x ", Recorded(w)]
    return parts + [(f" and {len(cells) - 3} more" if len(cells) > 3 else "") + what]


def uneven_workloads(score: RunScore) -> list[str]:
    """Note pieces naming the model rows that lack some of the run's workloads, and what that means for the figures
    pooled over a model's workloads ([] when every row covers them all): a model scored on the easy workload alone
    reads better than one scored on both, and nothing else said its curve covered less."""
    every = score.workload_names
    short = [(row, [w for w in every if w not in row.workloads_scored]) for row in score.models]
    short = [(row, missing) for row, missing in short if missing]
    if not short:
        return []
    split = split_by_budget(score)
    parts: list[str] = ["The model rows cover different workloads ("]
    for i, (row, missing) in enumerate(short[:3]):
        parts += ["; " if i else "", Recorded(row.model), f" ({budget_text(row.turn_budget)} turns)" * split,
                  ": none scored on ", Recorded(", ".join(missing))]
    parts.append((f" and {len(short) - 3} more" if len(short) > 3 else "") + "): a figure over a model's workloads "
                 "(the plots' curves, the repair tables) is over its own, so they do not compare as like; compare "
                 "workload by workload in the leaderboard and fast_p tables.")
    return parts


def leaderboard(score: RunScore, target: bool = False) -> Table:
    workloads = score.workload_names
    title = "Leaderboard: best speedup over the library" + (", target instructions executed" if target else "")
    note = ("Mean over trajectories of each trajectory's best correct speedup (0 when it never got one), "
            "[bootstrap 95% CI]" + ("" if target else ", and the single best") + "; PTXBench's layout. n: the trajectories scored (infra-failed and "
            f"unfinished ones left out); no interval from fewer than {MIN_BOOTSTRAP}, or where they all agree.")
    if score.n_compile_only:
        note += (f" {score.n_compile_only} turns were only compiled (COMPILED, --no-gpu): never run on a GPU, so "
                 "correctness and speed are unknown and they count 0 here; evaluate on a GPU for speedups.")
    if score.n_unfinished:  # said where `ptxbench score` prints it too, not only in the report's overview
        note += (f" {score.n_unfinished} trajector{'y is' if score.n_unfinished == 1 else 'ies are'} unfinished (no stop "
                 "recorded: killed, or still running; resume the run) and left out of every figure over trajectories, "
                 "as infra-failed ones are.")
    if score.n_unstarted:
        note += (f" {score.n_unstarted} trajectory log{' has' if score.n_unstarted == 1 else 's have'} no readable "
                 "trajectory_start (empty, or that line unreadable): left out of every figure, model and workload "
                 "unknown.")
    split = split_by_budget(score)
    parts = [note + BUDGET_NOTE * split]
    if mixed := mixed_flush_cells(score):
        parts += _naming(mixed, " pool trajectories timed from a read and from a written L2 flush, whose speedups do "
                                "not compare (docs/timing-integrity.md): the cells by prompt and GPU keep them apart.")
    if mixed := mixed_gpu_cells(score):  # a speedup over the library is one GPU's: another GPU's is another measure
        parts += _naming(mixed, " pool trajectories evaluated on different GPUs, whose speedups over the library "
                                "are each their own GPU's: the cells by prompt and GPU keep them apart.")
    table = Table(title, _heads(split, *map(Recorded, workloads)), note=Note(parts))
    for row_cell in score.models:  # a row per model, and per turn budget where there are several
        row = _label(row_cell, split, workload=False)
        row += [_speedup_cell(score.cell(row_cell.model, wl, row_cell.turn_budget), target) for wl in workloads]
        table.rows.append(row)
    return table


def _label(cell: CellScore, split: bool = False, workload: bool = True) -> list[str]:
    """The row's name: its model (and workload), and its turn budget where the tables split by budget."""
    return [Recorded(cell.model), *[budget_text(cell.turn_budget)] * split, *[Recorded(cell.workload)] * workload]


def _heads(split: bool, *rest: str) -> list[str]:
    return ["model", *["turn budget"] * split, *rest]


def fast_p_table(cells: list[CellScore], over: str, target: bool, split: bool = False) -> Table:
    name = "target-fast_p" if target else "fast_p"
    attr = f"{'target_' if target else ''}fast_p_{over}"
    table = Table(f"{name} over {over}", _heads(split, "workload", "n", *[f"p={p_key(p)}" for p in P_VALUES]),
                  note="share correct AND speedup > p" + (" AND target instructions executed" if target else "")
                  + (", [Wilson 95% CI]" if over == "trajectories" else
                     f", [95% CI: bootstrap over trajectories; Wilson over trajectories where that gives none: fewer than "
                     f"{MIN_BOOTSTRAP} trajectories, or every resample agrees]"))
    for cell in cells:
        ests = getattr(cell, attr)
        n = cell.n_turns if over == "turns" else cell.n_trajectories
        table.rows.append(_label(cell, split) + [str(n)] + [ests[p_key(p)].fmt(0, pct=True) for p in P_VALUES])
    return table


def success_table(cells: list[CellScore], split: bool = False) -> Table:
    headers = _heads(split, "workload", *[f"correct ≤{k}" for k in WITHIN_TURNS], *[f"target ≤{k}" for k in WITHIN_TURNS],
                     "geomean speedup", "turns to 1st correct", "best %SOL")
    table = Table("Success within k turns and speedups", headers,
                  note="share of trajectories with a correct (and target-executed) turn by turn k (– where they were given "
                       "fewer than k turns); geometric mean of the best "
                       "speedups of the trajectories that got one (those with no correct timed turn are left out, not "
                       "counted as 0: read it beside correct ≤k); turns to 1st correct and best %SOL over those that got one")
    def within(c: CellScore, shares: dict[str, Estimate], k: int) -> str:
        # given fewer than k turns, its share within them is no figure of what it does within k (a row of 4 turns read
        # its 'correct ≤8' beside a row of 16 turns', as if both had been given 8)
        return "–" if c.turn_budget is not None and k > c.turn_budget else shares[str(k)].fmt(0, pct=True)
    for c in cells:
        table.rows.append(_label(c, split) + [within(c, c.success_within, k) for k in WITHIN_TURNS]
                          + [within(c, c.target_success_within, k) for k in WITHIN_TURNS]
                          + [c.geomean_speedup.fmt(3), c.turns_to_first_correct.fmt(2), c.mean_best_sol_pct.fmt(1)])
    return table


def _noting_uneven(note: str, score: RunScore) -> Note:
    """A note of a table with a row per model, and uneven_workloads' warning after it where the rows' workloads differ."""
    uneven = uneven_workloads(score)
    return Note([note + ". " * bool(uneven), *uneven])


def repair_table(score: RunScore) -> Table:
    split = split_by_budget(score)
    table = Table("Repair behaviour", [*_heads(split), "repaired / open runs", "mean turns to repair", "regressions",
                                       "speedup gained per turn after 1st correct", "target executed but slower"],
                  note=_noting_uneven("a run is a streak of failing turns (open: still failing when its trajectory finished); regressions = PASSED then a failure (share of turns leaving PASSED)"
                                      + CLUSTER_NOTE + UNKNOWN_NOTE * bool(score.n_compile_only), score))
    for cell in score.models:
        r = cell.repair
        tt = r.turns_to_repair.get("all", Estimate())
        runs = f"{r.episodes_repaired} / {r.episodes_unrepaired}"
        if r.episodes_unverified:  # ended by a COMPILED turn: never run, so neither repaired nor open
            runs += f" (+{r.episodes_unverified} ended COMPILED, unverified)"
        if r.episodes_cut:  # its trajectory left out (an unrepaired infra failure, unfinished): not the model's
            runs += f" (+{r.episodes_cut} cut short by an infra failure or unfinished)"
        table.rows.append([*_label(cell, split, workload=False), runs, tt.fmt(2),
                           f"{r.regressions} ({r.regression_rate.fmt(0, pct=True)})", r.speedup_gain_per_turn.fmt(3),
                           f"{r.target_slower_count} ({r.target_slower.fmt(0, pct=True)})"])
    return table


def fix_table(score: RunScore) -> Table:
    classes = order_classes({c for cell in score.models for c in cell.repair.fix_probability})
    split = split_by_budget(score)
    table = Table("Next-turn fix probability by failure class", _heads(split, *map(Recorded, classes)),
                  note=_noting_uneven("P(the next turn is PASSED | this turn failed with the class), [95% CI] (n transitions)"
                                      + CLUSTER_NOTE + UNKNOWN_NOTE * bool(score.n_compile_only), score))
    for cell in score.models:
        fix = cell.repair.fix_probability
        table.rows.append(_label(cell, split, workload=False) + [f"{fix[c].fmt(0, pct=True)} (n={fix[c].denom:g})" if c in fix else "" for c in classes])
    return table


def cells_table(score: RunScore) -> Table:
    split = split_by_budget(score)
    table = Table("Cells by prompt and GPU", [*_heads(split, "workload", "prompt", "gpu", "L2 flush", "trajectories"),
                                              "turns", "best speedup", "fast_1 (traj.)",
                                              "target-fast_1 (traj.)", "infra-failed"])
    for c in score.cells:
        names = (c.workload, c.prompt, c.gpu or "–", c.l2_flush or "–")
        table.rows.append([*_label(c, split, workload=False), *map(Recorded, names), str(c.n_trajectories), str(c.n_turns),
                           c.best_speedup.fmt(3), c.fast_p_trajectories["1"].fmt(0, pct=True),
                           c.target_fast_p_trajectories["1"].fmt(0, pct=True), str(c.n_infra_failed)])
    return table


def all_tables(score: RunScore) -> list[Table]:
    cells, split = score.model_workload, split_by_budget(score)
    return [leaderboard(score), leaderboard(score, target=True), fast_p_table(cells, "trajectories", False, split),
            fast_p_table(cells, "trajectories", True, split), fast_p_table(cells, "turns", False, split),
            fast_p_table(cells, "turns", True, split), success_table(cells, split), repair_table(score), fix_table(score),
            cells_table(score)]
