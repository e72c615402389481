"""One HTML page per trajectory, to read it turn by turn: the kernel as a diff against the previous turn,
the verdict, the feedback the model saw, timings and the target-instruction verdicts."""
from __future__ import annotations

import difflib
from collections import defaultdict

from ..records.rundir import TrajectoryRecord
from ..scoring import TrajectoryScore
from ptxbench.tools.figure_text import figure
from ptxbench.tools.results import flag_label
from .style import escape, page

E = escape
# difflib's matcher grows about as the cube of the line count on kernels of repeated short lines (8,000 lines took 7 s,
# a 400 KB kernel of them hours); the project's longest kernel has about 700 lines. Past this many lines a side, the
# kernel is shown whole instead of as a diff.
MAX_DIFF_LINES = 3000


def _diff(previous: str, current: str, name: str) -> str:
    # counted as difflib gets them: splitlines() also breaks at a form feed, \x1c-\x1e, \x85, \u2028...
    old_lines, new_lines = previous.splitlines(), current.splitlines()
    too_long = max(len(old_lines), len(new_lines)) > MAX_DIFF_LINES
    if not previous or too_long:
        lines = [f"+{line}" for line in new_lines]
        header = f"{name} shown whole (over {MAX_DIFF_LINES} lines: no diff)" if previous else f"new file {name}"
    else:
        lines = list(difflib.unified_diff(old_lines, new_lines, "previous", name, lineterm="", n=3))[2:]
        header = f"diff against the previous turn's kernel ({name})"
        if not lines:
            return f"<p class='note'>kernel unchanged from the previous turn ({E(name)})</p>"
    css = {"+": "add", "-": "del", "@": "hunk"}
    body = "".join(f"<span class='{css.get(line[:1], 'ctx')}'>{E(line)}</span>" for line in lines)
    # The first kernel is long and unchanged context for what follows: folded; later turns' diffs open.
    fold = "" if not previous else " open"
    return f"<details{fold}><summary>{E(header)}, {len(new_lines)} lines</summary><pre class='diff'>{body}</pre></details>"


def _timing(result: dict) -> str:
    timing = result.get("timing")
    if not timing:
        return ""
    rows = [("candidate", timing["candidate"])] + list((timing.get("baselines") or {}).items())
    # the record's figures as written (a hand-edited 1e308 or Infinity short and named: figure_text)
    body = "".join(f"<tr><td>{E(name)}</td><td>{figure(t['median_ms'], 4)}</td><td>{figure(t['ci_low_ms'], 4)} – "
                   f"{figure(t['ci_high_ms'], 4)}</td><td>{t['n']}</td></tr>" for name, t in rows)
    extra = []
    for key, label in (("speedup", "speedup"), ("tflops", "TFLOP/s"), ("sol_pct", "%SOL")):
        if timing.get(key) is not None:
            extra.append(f"{label} {figure(timing[key])}")
    if timing.get("flags"):
        extra.append("flags: " + ", ".join(flag_label(f, timing.get("host_stalls"), timing.get("invalid_pairs")) for f in timing["flags"]))
    return (f"<table><thead><tr><th>timing</th><th>median ms</th><th>95% CI</th><th>n</th></tr></thead><tbody>{body}</tbody>"
            f"</table><p>{E(' · '.join(extra))}</p>")


def _targets(result: dict) -> str:
    static, runtime = result.get("targets_static") or {}, result.get("targets_runtime") or {}
    families = sorted(set(static) | set(runtime))
    if not families:
        return "<p class='note'>target instructions: not measured</p>"
    rows = ""
    for fam in families:
        s, r = static.get(fam) or {}, runtime.get(fam) or {}
        rows += (f"<tr><td>{E(fam)}</td><td>{'yes' if s.get('in_sass') else ('no' if s else '–')} ({s.get('sass_count', '–')})</td>"
                 f"<td class='v-{E(r.get('verdict', 'none'))}'>{E(r.get('verdict', '–'))}</td>"
                 f"<td>{E(str(r.get('executed_warp_insts', '–')))}</td><td>{E(r.get('reason', ''))}</td></tr>")
    return ("<table><thead><tr><th>target</th><th>in SASS (count)</th><th>runtime verdict</th><th>executed warp insts</th>"
            f"<th>reason</th></tr></thead><tbody>{rows}</tbody></table>")


def _log(result: dict) -> str:
    compile_ = result.get("compile") or {}
    text = "\n".join(filter(None, [
        "\n".join(f"line {e.get('line')}: {e.get('message')}" for e in compile_.get("errors") or []),
        "\n".join(result.get("plan_errors") or []), result.get("runtime_error", ""),
        "\n".join(f"{f.get('tool')}: {f.get('message')}" for f in result.get("sanitizer") or []),
    ]))
    return f"<details><summary>errors and log</summary><pre>{E(text)}</pre></details>" if text else ""


def _turn_html(turn: int, events: list, record: TrajectoryRecord, previous: str, status: str) -> tuple[str, str]:
    parts, kernel = [], previous
    for ev in events:
        if ev.type == "model_call":
            usage = ev.usage or {}
            parts.append(f"<p class='note'>model call: {usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} "
                         f"completion tokens, {ev.latency_s:.1f} s{', $%.4f' % ev.cost_usd if ev.cost_usd else ''}</p>")
        elif ev.type == "tool_call":
            parts.append(f"<p class='note'>tool call <code>{E(ev.name)}</code> {E(str(ev.arguments)[:300])}</p>")
        elif ev.type == "eval_result":
            result = ev.result.model_dump(mode="json")  # the page renders the record as written
            source = record.kernel(ev.kernel_file) or ""  # none readable inside the trajectory folder: shown empty
            label = "submission" if ev.submission else "test (not scored)"
            parts.append(f"<h4>{label}: <span class='s-{E(result.get('status', ''))}'>{E(result.get('status', ''))}</span></h4>")
            parts.append(_diff(kernel, source, ev.kernel_file))
            if result.get("message"):
                parts.append(f"<p>{E(result['message'])}</p>")
            parts.append(_timing(result) + _targets(result))
            if result.get("seconds"):
                parts.append("<p class='note'>phases: " + E(", ".join(f"{k} {v:.2f} s" for k, v in result["seconds"].items())) + "</p>")
            parts.append(_log(result))
            parts.append(f"<details open><summary>feedback the model saw</summary><pre>{E(ev.feedback)}</pre></details>")
            kernel = source or kernel
        elif ev.type == "context_trimmed":  # what the model saw from here on is smaller than the whole conversation
            why = "the provider refused the larger one" if ev.reason == "window_exceeded" else "the model's window would not hold it"
            parts.append(f"<p class='note'>conversation trimmed to the <code>{E(ev.view)}</code> view ({why}): "
                         f"{ev.messages_before} messages, {ev.chars_before:,} characters, sent as {ev.messages_after}, "
                         f"{ev.chars_after:,}</p>")
        elif ev.type == "error":
            parts.append(f"<p class='err'>{'infra ' if ev.infra else ''}error in {E(ev.where)}: {E(ev.message)}</p>")
        elif ev.type == "turn_end":
            parts.append(f"<p class='note'>turn end: {E(ev.status)}, {ev.tokens} tokens, {ev.elapsed_s:.1f} s</p>")
        elif ev.type == "stop":
            parts.append(f"<p class='note'>stop: {E(ev.reason)} {E(ev.detail)}</p>")
    title = f"Turn {turn}" if turn else "Before the first turn"
    head = f"<h3 id='turn-{turn}'>{title} <span class='s-{E(status)}'>{E(status)}</span></h3>"
    return "<section class='turn'>" + head + "".join(parts) + "</section>", kernel


def trajectory_html(record: TrajectoryRecord, traj: TrajectoryScore) -> str:
    by_turn: dict[int, list] = defaultdict(list)
    current = 0
    for ev in record.events:
        if ev.type == "trajectory_start":
            continue
        # Events without a turn (a final stop) belong to the turn before them.
        current = ev.turn or current
        by_turn[current].append(ev)
    status = {t.turn: t.status for t in traj.turns}
    if traj.cut_turn is not None:  # closed FORMAT_ERROR in the log, but the run's budget cut it: not the model's turn
        status[traj.cut_turn] = "cut by the run's budget (not scored)"
    summary = (f"<p><b>{E(traj.model)}</b> on <b>{E(traj.workload)}</b> · prompt {E(traj.prompt)} · {E(traj.mode)} · "
               f"index {traj.index} · {E(traj.gpu or 'no GPU')}"
               + (f" · L2 flush {E(traj.l2_flush)}" if traj.gpu and traj.l2_flush else "")
               + f" · stop: {'unfinished (left out of trajectory scores)' if traj.unfinished else E(traj.stop_reason or 'none recorded')}</p>"
               f"<p>best speedup {figure(traj.best_speedup) if traj.best_speedup is not None else '–'} · first correct turn "
               f"{traj.first_correct_turn or '–'} · first target-executed correct turn {traj.first_target_correct_turn or '–'}</p>")
    nav = " ".join(f"<a href='#turn-{t.turn}' class='s-{E(t.status)}'>{t.turn}: {E(t.status)}</a>" for t in traj.turns)
    sections, kernel = [], ""
    for turn in sorted(by_turn):
        html_text, kernel = _turn_html(turn, by_turn[turn], record, kernel, status.get(turn, "–"))
        sections.append(html_text)
    body = f"<p><a href='../index.html'>← report</a></p><h1>{E(traj.id)}</h1>{summary}<p class='nav'>{nav}</p>" + "".join(sections)
    return page(f"trajectory {traj.id}", body)
