"""One markdown table per builtin/tuner run: what each turn's reply cited, the move it made, and what the GPU said.

    python3 bench/climb_table.py docs/examples/tuner-climb-mha_fwd_d128/run1 [run2 ...]

Reads each run folder's trajectory log (the replies and evaluation results as recorded, live or sealed); the move
is the difference between the `params = {...}` lines of consecutive replies (of the turn the reply went back to, when
the tuner returned to an earlier best), so it shows what was submitted, not what the reply said; an option a dump
leaves out at its default reads "name (default) -> value".
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def _params(reply: str) -> dict | None:
    m = re.search(r"^params = (\{.*\})$", reply, re.M)
    return json.loads(m.group(1)) if m else None


def _evidence(reply: str) -> str:
    first = reply.split("\n", 1)[0]
    m = re.search(r"Evidence \([^)]*(?:\([^)]*\))?[^)]*\): (.*?) -> ", first)
    if m:
        return m.group(1)
    if "every lever move was tried" in first:  # no evidence left to follow: the tuner takes a neighbouring point
        return "every lever move tried: a neighbour"
    return "weak_params() (start)" if "weak" in first else "default_params() (start)"


def _base_turn(reply: str, turn: int) -> int:
    """The turn whose params this one changed: the best so far it names, else the previous turn."""
    first = reply.split("\n", 1)[0]
    for pattern in (r"turn (\d+) \([\d.]+x\) is within noise of the best \(turn \d+, [\d.]+x\): kept",
                    r"back to turn (\d+)", r"turn (\d+) is the best so far"):
        m = re.search(pattern, first)
        if m:
            return int(m.group(1))
    return turn - 1


def _move(base: dict, params: dict) -> str:
    """What `params` changed from `base`. A template's options are left out of a dump at their defaults, so a name in
    one of the two only is an option moved off (or back to) its default."""
    changed = [f"{k} {base[k]} -> {v}" for k, v in params.items() if k in base and base[k] != v]
    changed += [f"{k} (default) -> {v}" for k, v in params.items() if k not in base]
    changed += [f"{k} {v} -> (default)" for k, v in base.items() if k not in params]
    return ", ".join(changed)


def rows(run: Path) -> list[dict]:
    from ptxbench.agent.records.rundir import read_events, trajectory_folders, trajectory_log

    replies, results = {}, {}
    for e in read_events(trajectory_log(trajectory_folders(run)[0])):
        if e.type == "model_call":
            replies[e.turn] = e.response["content"]
        elif e.type == "eval_result":
            results[e.turn] = e.result
    out, params = [], {}
    for turn in sorted(replies):
        reply, r = replies[turn], results.get(turn)
        params[turn] = _params(reply) or {}
        base = params.get(_base_turn(reply, turn), {}) if turn > 1 else {}
        move = _move(base, params[turn]) if turn > 1 else ", ".join(f"{k}={v}" for k, v in params[turn].items())
        t = r.timing if r is not None else None
        lib = t.baselines.get(t.primary_baseline) if t is not None and t.primary_baseline else None
        ci = t.speedup_ci if t is not None else None
        out.append({"turn": turn, "evidence": _evidence(reply), "move": move, "status": r.status if r else "-",
                    "speedup": f"{t.speedup:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if t and t.speedup and ci else "-",
                    "ours_ms": f"{t.candidate.median_ms:.4f}" if t else "-",
                    "lib_ms": f"{lib.median_ms:.4f}" if lib else "-",
                    "profile": (r.profile_level if r else None) or "-"})
    return out


def table(run: Path, library: str) -> str:
    head = (f"| turn | evidence the reply cites | move (params changed) | status | speedup [95% CI] | ours ms | {library} ms "
            "| profile |\n|---|---|---|---|---|---|---|---|\n")
    return head + "".join(f"| {r['turn']} | {r['evidence']} | {r['move']} | {r['status']} | {r['speedup']} | "
                          f"{r['ours_ms']} | {r['lib_ms']} | {r['profile']} |\n" for r in rows(run))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--library", default="library", help="the column name of the library's time (cuBLAS, cuDNN)")
    args = ap.parse_args()
    for run in args.runs:
        print(f"### {run.name}\n\n{table(run, args.library)}")


if __name__ == "__main__":
    main()
