"""The report's figures (matplotlib, Agg backend), each returned as a base64 PNG for inline <img> tags."""
from __future__ import annotations

import base64
import io
import re

import numpy as np

from ptxbench.tools.visible import bidi_escaped

from ..scoring import P_VALUES, CellScore, RunScore, is_fast
from ..scoring.cells import balance_weights
from ..scoring.repair import order_classes
from .tables import split_by_budget

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
# Past len(COLORS) models the colours come round again: the ninth model's line looked like the first's. Each round of
# colours takes the next dash (fast_p curves) and marker (the by-turn lines, whose dash says correct or target).
DASHES = ["-", "--", "-.", ":"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _dash(i: int) -> str:
    return DASHES[i // len(COLORS) % len(DASHES)]


def _marker(i: int) -> str:
    return MARKERS[i // len(COLORS) % len(MARKERS)]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# A record's name is cut to this many characters in a figure: a legend or title is as wide as its text, and a
# 2M-character model name made a figure wider than Agg's 2^23 pixels (a ValueError; gigabytes of canvas well before).
_LABEL_CHARS = 60
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain(text: str) -> str:
    """Text from a run's records as matplotlib shows it literally, at most _LABEL_CHARS of it: a pair of `$` would
    start mathtext, and a name such as `m/$\\foo{$` would stop the report with a parse error; a lone surrogate (a
    record's JSON escape "\\ud800"), which the font code refuses with a TypeError, is shown as its escape. So are the
    control characters and bidirectional controls: no font has them, and matplotlib's warning about each missing glyph
    quoted it raw on the terminal of `ptxbench report` (an ESC, a BEL, an RLO acted on it)."""
    if len(text) > _LABEL_CHARS:
        text = text[:_LABEL_CHARS - 1] + "…"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = bidi_escaped(_CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text))
    return text.replace("$", r"\$")


def _name(cell: CellScore, split: bool) -> str:
    """A model's row as a figure names it: with its turn budget where the run has several (tables.split_by_budget)."""
    k = cell.turn_budget
    budget = "" if not split else f", {k} turn{'s' * (k != 1)}" if k else ", turns unrecorded"
    return _plain(cell.model) + budget


def _legend(ax, size: int) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty run has nothing to label
        ax.legend(fontsize=size)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def fast_p_curves(score: RunScore) -> str:
    """fast_p and target-fast_p over trajectories as continuous curves in p, one colour per model (its workloads
    weighing alike), and per turn budget where the run has several (never pooled: score.models' rows)."""
    plt = _plt()
    trajs = [t for t in score.trajectories if not t.left_out]  # as the score's figures over trajectories
    top = max([t.best_speedup or 0 for t in trajs] + [1.3]) * 1.05
    grid = np.linspace(0, top, 200)
    split = split_by_budget(score)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, target in zip(axes, (False, True)):
        for i, row in enumerate(score.models):
            mine = [t for t in trajs if t.model == row.model and t.turn_budget == row.turn_budget]
            if not mine:
                continue
            # each workload weighs alike, as in the model's row of the score (cells.balance_weights)
            weights = balance_weights(mine, "workload")[0]
            share = [np.average([any(is_fast(x, p, target) for x in t.scored_turns) for t in mine], weights=weights) for p in grid]
            marks = [np.average([any(is_fast(x, p, target) for x in t.scored_turns) for t in mine], weights=weights) for p in P_VALUES]
            # the workloads its curve covers, where a row lacks some: a curve of the easy workload alone reads better
            covered = len(row.workloads_scored)  # mine's workloads: the row's kept trajectories
            of = f", {covered} of {len(score.workload_names)} workloads" if covered < len(score.workload_names) else ""
            ax.plot(grid, share, color=_color(i), ls=_dash(i), label=f"{_name(row, split)} (n={len(mine)}{of})")
            ax.plot(P_VALUES, marks, _marker(i), color=_color(i), markersize=4)
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("speedup threshold p (vs. library)")
        ax.set_title("target-fast_p over trajectories" if target else "fast_p over trajectories")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of trajectories")
    _legend(axes[0], 8)
    return _png(fig)


def _by_turn_lines(ax, score: RunScore, key: str, style: str = "-", suffix: str = "") -> None:
    split = split_by_budget(score)
    for i, cell in enumerate(score.models):
        ys = cell.by_turn.get(key, [])
        xs = [k + 1 for k, y in enumerate(ys) if y is not None]
        ax.plot(xs, [y for y in ys if y is not None], style, marker=_marker(i), markersize=3,
                color=_color(i), label=f"{_name(cell, split)}{suffix}")


def _turn_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("turn")


def speedup_by_turn(score: RunScore) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    _by_turn_lines(ax, score, "best_so_far")
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    _turn_axis(ax)
    ax.set_ylabel("mean best speedup so far")
    ax.set_title("Speedup by turn (0 until a first correct turn)")
    ax.grid(alpha=0.3)
    _legend(ax, 8)
    return _png(fig)


def correct_vs_target_by_turn(score: RunScore) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    _by_turn_lines(ax, score, "correct", "-", " correct")
    _by_turn_lines(ax, score, "target_correct", "--", " correct + target executed")
    _turn_axis(ax)
    ax.set_ylabel("share of trajectories at that turn")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Correct vs. target executed, by turn")
    ax.grid(alpha=0.3)
    _legend(ax, 7)
    return _png(fig)


def repair_heatmaps(score: RunScore) -> str:
    """One transition matrix per model: P(class at t+1 | class at t), with counts."""
    plt = _plt()
    cells = [c for c in score.models if c.repair.transitions]
    if not cells:
        return ""
    fig, axes = plt.subplots(1, len(cells), figsize=(5.2 * len(cells), 4.6), squeeze=False)
    names = order_classes({c for cell in cells for c in cell.repair.classes})  # one axis order for every model
    split = split_by_budget(score)
    for ax, cell in zip(axes[0], cells):
        r = cell.repair
        mat = np.array([[r.next_class.get(a, {}).get(b, 0.0) for b in names] for a in names])
        ax.imshow(mat, cmap="Blues", vmin=0, vmax=1)
        short = [_plain(n.replace("INCORRECT_", "INC_").replace("_ERROR", "_ERR").replace("NO_SUBMISSION", "NO_SUB"))
                 for n in names]
        ax.set_xticks(range(len(names)), short, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(names)), short, fontsize=7)
        for i, a in enumerate(names):
            for j, b in enumerate(names):
                count = r.transitions.get(a, {}).get(b, 0)
                if count:
                    ax.text(j, i, f"{mat[i, j]:.2f}\n({count})", ha="center", va="center", fontsize=6,
                            color="white" if mat[i, j] > 0.6 else "black")
        ax.set_xlabel("class at turn t+1")
        ax.set_ylabel("class at turn t")
        ax.set_title(f"{_name(cell, split)}: repair transitions", fontsize=9)
    fig.tight_layout()
    return _png(fig)


def all_plots(score: RunScore) -> dict[str, str]:
    return {
        "fast_p curves per model": fast_p_curves(score),
        "speedup by turn": speedup_by_turn(score),
        "correct vs. target executed by turn": correct_vs_target_by_turn(score),
        "repair transition heatmap": repair_heatmaps(score),
    }
