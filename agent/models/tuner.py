"""`builtin/tuner`: a search over a kernel template that chooses each point from what the last
evaluations said, and says why.

The template (GEMM workloads: workloads/solutions/gemm_template.py; the attention forward, mha_fwd:
attention_template.py; the attention backward, mha_bwd: attention_bwd_template.py, over its built versions) is any module with PARAM_SPACE, default_params(), render(params), validate(params[, shape]),
and, for `builtin/tuner:weak`, weak_params(); default_params / weak_params may take the workload (the attention
template's points carry the problem: head dim, causal, GQA, which are never searched); optionally TUNER_LEVERS,
TUNER_LINES, TUNER_ENERGY, TUNER_PRIORS and TUNER_WORDS (agent/models/tuner_rules.py). Every point is validated against the
workload (the GEMM's M, N, K; the attention workload itself). Each turn:

1. the base point: the last passing point when it is within noise of the best (a neutral move is kept,
   so a run does not stall on measurement noise), else the best one; before any pass, the start point. Turns are
   compared by the kernel's own median time when every passing turn has one (the library's time moves between
   evaluations), else by speedup;
2. the evidence: the base's own profile, else the latest profiled turn's (only the first pass and each
   new best may carry one); always the base's timing (roof share) and compile resources;
3. tuner_rules.rank: every buildable one-lever move, ranked by prior worth x evidence, a move that sets a value
   this run already measured slower, or whose point failed, ranked down (the lesson is said in its reasons); the first point not tried yet
   is submitted, with the evidence -> move reasoning in the reply (content and reasoning);
4. nothing left: the one-step neighbours of the best point, then random buildable points; when none is left the
   run ends (ModelExhausted: the trajectory stops as its turn limit would) rather than resubmit a tried kernel.
For workloads no template covers (or whose template point does not fit the workload) it submits the reference
solution, once: the next turn ends the run (ModelExhausted) rather than evaluate the same file again.
"""
from __future__ import annotations

import importlib
import inspect
import random
from types import ModuleType
from typing import Any, Callable, NamedTuple

from ptxbench.tools.results import MODEL_FAILURES

from .base import ModelExhausted, ModelReply, ModelRequest, TurnOutcome
from .evidence import Evidence
from .tuner_rules import (COMPOUNDS, Candidate, Lesson, bundle_lesson, bundles_of, canonical, completed, compound_lesson,
                          levers_of, rank)
from .tuner_space import Params, as_dict, is_valid, key, ordered

TEMPLATES = {"gemm": "ptxbench.workloads.solutions.gemm_template",
             "mha_fwd": "ptxbench.workloads.solutions.attention_template",
             "mha_bwd": "ptxbench.workloads.solutions.attention_bwd_template"}
RESOURCE_WORDS = ("shared memory", "smem", "register", "spill", "C7511", "too many resources", "out of resources")
# Statuses whose parameters the search moves from: PASSED, and COMPILED when no GPU can say more.
SEARCH_FROM = ("PASSED", "COMPILED")
NOISE = 0.01  # a move that costs less than this share of the best speedup is kept (timing noise: ~0.3-1%)
STARTS = ("default", "weak")


class Choice(NamedTuple):
    params: Params
    why: str
    move: tuple[str, str] | None
    analysis: str = ""


class TunerModel:
    name = "builtin/tuner"
    start = "default"

    def __init__(self, workload_id: str, template: ModuleType | str | None = None, seed: int = 0,
                 start: str | None = None):
        self.workload_id = workload_id
        self.seed = seed
        self.start = start or self.start
        if self.start not in STARTS:
            raise ValueError(f"unknown tuner start {self.start!r}: expected one of {', '.join(STARTS)}")
        self.template = self._load_template(template)
        self.shape = self._shape()
        if self.template is not None and not self._fits():
            self.template = None  # the template cannot build this workload: the reference solution

    def _fits(self) -> bool:
        try:
            return self._valid(as_dict(self._call("default_params")))
        except (KeyError, ValueError, TypeError):  # e.g. a head dim the template has no default for
            return False

    def _workload(self):
        from ptxbench.workloads.registry import get_workload

        return get_workload(self.workload_id)

    def _shape(self) -> Any:
        """What validate() checks a point against: the GEMM's (M, N, K), else the workload itself."""
        workload = self._workload()
        symbols = workload.symbols
        if all(k in symbols for k in "MNK"):
            return tuple(int(symbols[k]) for k in ("M", "N", "K"))
        return workload if workload.op in TEMPLATES else None

    def _load_template(self, template: ModuleType | str | None) -> ModuleType | None:
        if isinstance(template, ModuleType):
            return template
        op = self._workload().op
        if template is None and op not in TEMPLATES:
            return None  # no template covers this operation
        return importlib.import_module(template or TEMPLATES[op])

    def _call(self, name: str):
        """default_params / weak_params, given the workload where they take one (the attention template's do)."""
        fn = getattr(self.template, name)
        return fn(self._workload()) if inspect.signature(fn).parameters else fn()

    def query(self, request: ModelRequest) -> ModelReply:
        from .builtin import fenced, reference_source

        if self.template is None:
            done = next((h for h in request.history if h.tags.get("reference") and h.status != "INFRA_ERROR"), None)
            if done is not None:  # the one point there is was evaluated: resubmitting it would measure it again
                raise ModelExhausted(f"{self.name}: no tunable template for {self.workload_id}; the reference solution "
                                     f"was evaluated at turn {done.turn} ({done.status}) and there is nothing else to try")
            source = reference_source(self.workload_id)
            return ModelReply(content=fenced(source, "No tunable template for this workload: the reference solution."),
                              tags={"reference": True})
        choice = self.next_params(request.history)
        source = self.template.render(choice.params)
        note = f"Tuner, turn {request.turn}: {choice.why}\nparams = {key(choice.params)}"
        return ModelReply(content=fenced(source, note), reasoning_content=choice.analysis or choice.why,
                          tags={"params": choice.params, "move": list(choice.move) if choice.move else None})

    # -- search ---------------------------------------------------------------------------------
    def _valid(self, params: Params) -> bool:
        return is_valid(self.template, params, self.shape)

    def start_params(self) -> tuple[Params, str]:
        if self.start == "weak":
            return as_dict(self._call("weak_params")), ("start from the template's deliberately weak point "
                                                       "(weak_params()), so the run shows the climb")
        return as_dict(self._call("default_params")), "start from the template's default parameters"

    def next_params(self, history: list[TurnOutcome]) -> Choice:
        """The next point to try, why (evidence -> move), and the move (role, kind) that made it."""
        tried = [h for h in history if "params" in h.tags]
        start, start_why = self.start_params()
        if not tried:
            return Choice(start, start_why, None)
        seen = {key(h.tags["params"]) for h in tried}
        pace = _pace(tried)
        base, base_why = _base(tried, pace)
        params = dict(base.tags["params"]) if base is not None else start
        ev, ev_why = _evidence(tried, base)
        last = tried[-1]
        shrink = last.status not in SEARCH_FROM and any(
            w.lower() in " ".join([last.message, *(last.evidence.problems if last.evidence else [])]).lower()
            for w in RESOURCE_WORDS)
        own = base.evidence if base is not None else None
        headroom = own.headroom_pct if own is not None else None
        lost = _lessons(tried, levers_of(self.template), pace, bundles_of(self.template))
        measured = next((h.tags["params"] for h in reversed(tried) if ev is not None and h.evidence is ev), None)
        ranked = rank(self.template, params, ev, self._valid, headroom=headroom, shrink=shrink, lost=lost,
                      measured=measured)
        fresh = [c for c in ranked if key(c.params) not in seen]
        if fresh:
            pick = fresh[0]
            return Choice(pick.params, _why(pick, base_why, ev_why, self.template), (pick.role, pick.kind),
                          _analysis(base_why, ev_why, fresh[:4]))
        return self._fallback(params, seen, base_why)

    def _fallback(self, params: Params, seen: set[str], base_why: str) -> Choice:
        """Every lever move was tried: one-step neighbours of the base, then random buildable points."""
        full = completed(self.template, params)  # the options a dump leaves out, at their defaults
        for name, values in self.template.PARAM_SPACE.items():
            vals = ordered(list(values))
            if full.get(name) not in vals:
                continue
            i = vals.index(full[name])
            for j in (i + 1, i - 1):
                point = canonical(self.template, {**params, name: vals[j]}, params) if 0 <= j < len(vals) else None
                if point is not None and key(point) not in seen and self._valid(point):
                    return Choice(point, f"{base_why}; every lever move was tried: neighbour {name} {full[name]} -> "
                                         f"{vals[j]}", (name, "step"))
        rng = random.Random(self.seed + len(seen))
        for _ in range(500):
            point = canonical(self.template, {**params, **{n: rng.choice(list(v)) for n, v in
                                                           self.template.PARAM_SPACE.items()}}, params)
            if key(point) not in seen and self._valid(point):
                return Choice(point, "neighbourhood exhausted: a random buildable point", None)
        raise ModelExhausted(f"{self.name}: every lever move and one-step neighbour of the base was tried and random draws found no untried "
                             f"buildable point ({len(seen)} points tried): the search ends here instead of resubmitting a "
                             f"kernel it has already evaluated")


class WeakTunerModel(TunerModel):
    """`builtin/tuner:weak`: the same search from the template's weak_params()."""

    name = "builtin/tuner:weak"
    start = "weak"


def _speed(h: TurnOutcome) -> float:
    return h.speedup if h.speedup is not None else 0.0


def _pace(tried: list[TurnOutcome]) -> Callable[[TurnOutcome], float]:
    """How turns are compared (larger is faster): by the kernel's own median time when every passing turn has one,
    else by speedup. The library's time moves between evaluations of one workload (cuDNN 4.5-8% on the H200,
    bench/results/timing_integrity.md) while a kernel's repeats within about 1.5%, so the ratio would carry the
    library's drift into the comparison; all turns of a run time the same workload."""
    timed = [h for h in tried if h.status in SEARCH_FROM and h.speedup is not None]
    if timed and all(h.evidence is not None and h.evidence.kernel_ms for h in timed):
        return lambda h: 1.0 / h.evidence.kernel_ms if h.evidence is not None and h.evidence.kernel_ms else 0.0
    return _speed


def _base(tried: list[TurnOutcome], pace: Callable[[TurnOutcome], float]) -> tuple[TurnOutcome | None, str]:
    """The turn whose point the next move starts from (turns compared by `pace`), and a sentence saying why that one."""
    passing = [h for h in tried if h.status in SEARCH_FROM]
    if not passing:
        last = tried[-1]
        return None, f"no point has passed yet (turn {last.turn}: {last.status})"
    last = tried[-1]
    if all(h.speedup is None for h in passing):  # nothing timed (--no-gpu: COMPILED only): no best to speak of
        walk = passing[-1]
        if last is walk:
            return walk, f"turn {walk.turn} {walk.status.lower()} (not timed: no speed to compare), so the walk goes on from it"
        return walk, (f"turn {last.turn} ({last.status}) failed: back to turn {walk.turn}, the last point that "
                      f"{walk.status.lower()} (not timed)")
    best = max(passing, key=pace)
    if last is best:
        return best, f"turn {best.turn} is the best so far ({_fmt(best)})"
    if last.status in SEARCH_FROM and last.speedup is None:
        return last, (f"turn {last.turn} ({last.status}, not timed) is kept: no timing says it is slower than the best "
                      f"(turn {best.turn}, {_fmt(best)})")
    if last.status in SEARCH_FROM and pace(last) >= pace(best) * (1 - NOISE):
        return last, f"turn {last.turn} ({_fmt(last)}) is within noise of the best (turn {best.turn}, {_fmt(best)}): kept"
    if last.status in SEARCH_FROM:
        return best, f"turn {last.turn} ({_fmt(last)}) did not pay: back to turn {best.turn} ({_fmt(best)})"
    if last.status == "TIMING_SUSPECT":  # correct when checked, timed faster than the device can go: not a speed
        return best, (f"turn {last.turn} was timed faster than the GPU can go (TIMING_SUSPECT), so its time is not "
                      f"trusted: back to turn {best.turn} ({_fmt(best)})")
    return best, f"turn {last.turn} failed ({last.status}): back to turn {best.turn} ({_fmt(best)})"


def _lessons(tried: list[TurnOutcome], levers: dict[str, tuple[str, Any]],
             pace: Callable[[TurnOutcome], float],
             bundles: dict[str, dict[str, Any]] | None = None) -> dict[tuple[str, Any], str]:
    """(parameter, value) -> a sentence, for each move of this run that ran slower than the best before it (beyond
    noise) or whose point failed: what the move set and what it measured, so the ranking stops re-proposing it on the
    same evidence (a failed move from another base: the same values would likely fail again). A
    bundle's move is kept under bundle_lesson(role): the loss is the whole bundle's, not any one of its values'."""
    out: dict[tuple[str, Any], str] = {}
    best: TurnOutcome | None = None
    bundles = bundles or {}
    for h in tried:
        move = h.tags.get("move")
        known = bool(move) and (move[0] in levers or move[0] in bundles
                                or all(r in levers for r in COMPOUNDS.get(move[0], ("",))))
        slower = (best is not None and h.status in SEARCH_FROM and h.speedup is not None
                  and pace(h) < pace(best) * (1 - NOISE))
        # a move whose point failed (did not build, timed out, wrong output): its values are suspect from any base;
        # not TIMING_SUSPECT (correct, only its time untrusted) nor INFRA_ERROR (the harness's failure, not the point's)
        failed = h.status in MODEL_FAILURES and h.status != "TIMING_SUSPECT"
        if known and (slower or failed):
            measured = (f"failed at turn {h.turn} ({h.status})" if failed else
                        f"measured slower at turn {h.turn} ({_fmt(h)} against turn {best.turn}'s {_fmt(best)})")
            if move[0] in levers:
                name = levers[move[0]][0]
                value = h.tags["params"].get(name)
                out[(name, value)] = Lesson(f"{name} -> {value} {measured}", failed)
            elif move[0] in bundles:  # the loss is the whole bundle's, not any one of its values'
                values = ", ".join(f"{n}={v}" for n, v in bundles[move[0]].items())
                out[bundle_lesson(move[0])] = Lesson(f"{move[0]} ({values}) {measured}", failed)
            else:  # a compound's (the bigger tile): the values it set together
                together = {levers[r][0]: h.tags["params"].get(levers[r][0]) for r in COMPOUNDS[move[0]]}
                values = ", ".join(f"{n} -> {v}" for n, v in together.items())
                out[compound_lesson(move[0], together)] = Lesson(f"{values} {measured}", failed)
        if h.status in SEARCH_FROM and h.speedup is not None and (best is None or pace(h) > pace(best)):
            best = h
    return out


def _evidence(tried: list[TurnOutcome], base: TurnOutcome | None) -> tuple[Evidence | None, str]:
    """The profile to reason from: the base's own, else the latest profiled turn's (then it says so)."""
    if base is not None and base.evidence is not None and base.evidence.profiled:
        return base.evidence, f"turn {base.turn}'s profile"
    for h in reversed(tried):
        if h.evidence is not None and h.evidence.profiled and h.status in SEARCH_FROM:
            return h.evidence, f"turn {h.turn}'s profile (turn {base.turn if base else '-'} was not profiled)"
    return None, "no profile yet: ranked by what each move was worth before any evidence (the template's priors)"


def _fmt(h: TurnOutcome) -> str:
    return f"{h.speedup:.3f}x" if h.speedup is not None else h.status


def _why(pick: Candidate, base_why: str, ev_why: str, template: ModuleType | None = None) -> str:
    from .tuner_rules import words_of

    because = "; ".join(pick.reasons) if pick.reasons else "nothing in it points elsewhere, so the move worth most leads"
    words = words_of(template).get(pick.role, pick.role)
    what = words(pick.params) if callable(words) else words  # a template may word a move by the value it sets
    if pick.kind == "down" and not callable(words):  # the role's words say what its upward move does
        what = f"the opposite of {what}"
    return f"{base_why}. Evidence ({ev_why}): {because} -> {pick.label}: {what}."


def _analysis(base_why: str, ev_why: str, ranked: list[Candidate]) -> str:
    lines = [f"Base: {base_why}.", f"Evidence from {ev_why}.", "Moves ranked (score = prior worth x (1 + evidence)):"]
    lines += [f"- {c.label}: {c.score:.4f}" + (f" ({'; '.join(c.reasons)})" if c.reasons else "") for c in ranked]
    return "\n".join(lines)
