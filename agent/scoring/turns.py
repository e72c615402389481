"""Per-turn and per-trajectory records, read from a trajectory's events alone.

A turn's verdict is its submission (the eval_result with submission=True); a turn without one takes
its status from turn_end (FORMAT_ERROR). Events for a turn number that was already
recorded replace it, so a trajectory retried from its last good turn after an infra failure scores
the retried turn; a turn whose infra failure came after its submission's evaluation (a Ctrl-C before the evaluate
step's checkpoint included), and which a retry or --resume went on from (reusing that evaluation), keeps the
evaluation. INFRA_ERROR turns (status, or an ErrorEvent with infra=True) are kept apart from
the model's own results. A COMPILED turn (compiled, never run on a GPU) is neither correct nor failed:
its correctness is unknown. Runs recorded before that status are read as new ones by agent/records/rundir.py.
A tools-mode turn that a token, cost or wall-time budget stopped between two of its replies, before the model
submitted (budget_cut_turn), is the harness's cut, not a turn of the model's: kept apart (TrajectoryScore.cut_turn),
as a pipeline run, whose budgets are checked between turns only, never has such a turn.
"""
from __future__ import annotations

import math
import re

from pydantic import BaseModel, Field

from ptxbench.tools.figure_text import figure
from ptxbench.tools.results import FORMAT_ERROR, LEGACY_L2_FLUSH

from ..records.events import INTERRUPTED
from ..records.rundir import TrajectoryRecord

INFRA = "INFRA_ERROR"
PASSED = "PASSED"
COMPILED = "COMPILED"
# The run's budgets that the model is not told it is spending as it goes (a tools-mode answer says the tool calls
# left, so a tool_budget stop mid-turn is the model's own: its turn stays a FORMAT_ERROR, as a turn whose calls ran
# out without a submit is)
BUDGET_STOPS = ("token_budget", "cost_budget", "time_budget")


class TurnScore(BaseModel):
    turn: int
    status: str = Field(description="EvalResult status, or FORMAT_ERROR (no kernel file), or INFRA_ERROR")
    correct: bool = False
    target_executed: bool | None = Field(None, description="every target family executed; None = not measured")
    speedup: float | None = None
    sol_pct: float | None = None
    set_aside: list[str] = Field(default_factory=list, description="recorded figures read as unmeasured (speedup or "
                                 "%SOL NaN, infinite, not positive or past what a timing can measure: measured_figure), "
                                 "as recorded ('speedup 1.00e+308')")
    l2_flush: str = Field("", description="the L2 flush its timing started from (read / write; write in records from "
                          "before the mode existed); '' when untimed")
    kernel_file: str = ""
    kernel_sha256: str = ""
    gpu_evaluated: bool = False
    reproduced: bool = Field(False, description="an infra failure that a retry of the same submission hit again the "
                                                "same way: the model's text crashes the harness, so it is scored")

    @property
    def infra(self) -> bool:
        return self.status == INFRA and not self.reproduced

    @property
    def compile_only(self) -> bool:
        """Compiled but never run: not correct, yet not a known failure either."""
        return self.status == COMPILED

    @property
    def failed(self) -> bool:
        return not self.correct and not self.compile_only and not self.infra


class TrajectoryScore(BaseModel):
    id: str
    run: str = ""
    model: str = ""
    workload: str = ""
    prompt: str = ""
    gpu: str = ""
    l2_flush: str = Field("", description="the L2 flush its evaluations started from (read / write; write for runs "
                          "recorded before the mode existed): speedups of the two modes do not pool")
    mode: str = ""
    turn_budget: int | None = Field(None, description="the turn limit it ran under (its trajectory_start's config "
                                    "'turns', which a --resume cannot change); None where none is recorded")
    index: int = 0
    repair_task: str = Field("", description="the repair-track task it ran (its config's repair_task; '' outside that "
                             "track): its trajectories share one broken kernel, so the repair statistics draw them "
                             "together")
    started: float = Field(0.0, description="its trajectory_start's time: tells apart trajectories of one id in two "
                                            "runs saved under one folder name")
    stop_reason: str = Field("", description="the last stop event's reason; empty while unfinished")
    turns: list[TurnScore] = Field(default_factory=list, description="every recorded turn, infra ones included, by turn number")
    start: TurnScore | None = Field(None, description="turn 0: the --start-from kernel's verdict (not the model's, so not in turns)")
    cut_turn: int | None = Field(None, description="the tools-mode turn a token, cost or wall-time budget stopped "
                                 "before the model could submit (budget_cut_turn): the harness's cut, not in turns, "
                                 "as a pipeline run, checked between turns, never has one")
    skipped_lines: int = Field(0, description="lines of its log that are no readable event (a line cut by a kill, not "
                               "UTF-8, not JSON, of another version), left out: its scores lack whatever they held")

    @property
    def scored_turns(self) -> list[TurnScore]:
        return [t for t in self.turns if not t.infra]

    infra_failed: bool = Field(False, description="ended on an infra failure that no retry repaired: left out of trajectory-level scores")
    unfinished: bool = Field(False, description="no stop recorded after its last step (killed, or still running: "
                             "resumable), infra failures apart: left out of trajectory-level scores, since its missing "
                             "turns are no failures of the model")

    @property
    def left_out(self) -> bool:
        """Left out of the figures over trajectories (infra-failed or unfinished); its turns still count over turns."""
        return self.infra_failed or self.unfinished

    @property
    def first_correct_turn(self) -> int | None:
        return next((t.turn for t in self.scored_turns if t.correct), None)

    @property
    def first_target_correct_turn(self) -> int | None:
        return next((t.turn for t in self.scored_turns if t.correct and t.target_executed), None)

    @property
    def best_speedup(self) -> float | None:
        """Best speedup among correct turns; None when no correct turn has a timing."""
        return _max(t.speedup for t in self.scored_turns if t.correct)

    @property
    def best_target_speedup(self) -> float | None:
        return _max(t.speedup for t in self.scored_turns if t.correct and t.target_executed)

    @property
    def best_sol_pct(self) -> float | None:
        return _max(t.sol_pct for t in self.scored_turns if t.correct)


def _max(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


# No evaluation measures a ratio past this either way (a kernel of a microsecond against a library call of a quarter
# of an hour is 1e9): a PASSED turn's speedup beyond it is a hand-edited or foreign record, not a timing. Taken, 1e308
# overflowed every mean to inf (numpy's RuntimeWarning on the console) and topped the leaderboard.
MEASURABLE = 1e9


def measured_figure(value: float | None) -> float | None:
    """A recorded speedup or %SOL, None (unmeasured) unless a positive finite number within MEASURABLE of 1: an
    Infinity topped the leaderboard, a NaN made every mean NaN and a trajectory's best depend on the order of its
    turns, and 1e308 made every mean inf. The turn keeps its verdict (a PASSED turn is correct, with no speed)."""
    if value is None or not math.isfinite(value) or not 1 / MEASURABLE <= value <= MEASURABLE:
        return None
    return value


def _set_aside(timing) -> list[str]:
    """The recorded figures of `timing` that measured_figure reads as unmeasured, as recorded, for score and report to say."""
    return [f"{name} {figure(value)}" for name, value in (("speedup", timing.speedup), ("%SOL", timing.sol_pct))
            if value is not None and measured_figure(value) is None] if timing else []


def _turn_budget(config: dict) -> int | None:
    """The recorded turn limit (config 'turns'), None unless a whole number above 0 (a record by hand or of another
    version may hold anything there)."""
    turns = (config or {}).get("turns")
    return turns if isinstance(turns, int) and not isinstance(turns, bool) and turns > 0 else None


def _turn_from_eval(turn: int, event) -> TurnScore:
    result = event.result
    timing = result.timing
    return TurnScore(
        turn=turn,
        status=result.status,
        correct=result.status == PASSED,
        target_executed=result.target_executed,
        speedup=measured_figure(timing.speedup) if timing else None,
        sol_pct=measured_figure(timing.sol_pct) if timing else None,
        set_aside=_set_aside(timing),
        l2_flush=timing.l2_flush if timing else "",
        kernel_file=event.kernel_file,
        kernel_sha256=event.kernel_sha256,
        gpu_evaluated=result.gpu_evaluated,
    )


def evaluated_gpu(events) -> str:
    """The GPU that ran the trajectory's kernels, from the evaluations' fingerprints ('' when none ran on one)."""
    for event in events:
        if event.type == "eval_result" and event.result.gpu_evaluated:
            gpu = event.result.fingerprint.gpu
            if gpu:
                return gpu
    return ""


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


# What differs between two runs of one crash without changing its cause: addresses, long hashes, host paths, numbers
# (a process id, a size drawn from the evaluation's seed, a time). Compared without them, a kernel that crashes the
# harness with a message that varies each time cannot escape its score as bad luck twice.
_CRASH_NOISE = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b|(?:/[\w.\-]+)+|\d+(?:\.\d+)?")


def _crash(event) -> str:
    """What an infra error event says the harness raised ('' for an infra status): the first line of an exception
    logged with its traceback, or the exception line that ends a traceback the GPU worker sent back as its
    INFRA_ERROR message (tools/gpu/worker.py: a harness bug the kernel triggers there has no traceback field); its
    noise (_CRASH_NOISE) masked."""
    if event.traceback:
        line = _first_line(event.message)
    elif "Traceback (most recent call last):" in (event.message or ""):
        line = event.message.strip().splitlines()[-1].strip()
    else:
        return ""
    return _CRASH_NOISE.sub("#", line)


def _goes_on_after(events: list, index: int) -> bool:
    """Whether the events after the loop's error at `index` (where="graph": a Ctrl-C, SIGTERM, the bench stopping, a
    crash, logged by run_trajectory as its run gives up) are a retry or --resume going on from the step it cut short.
    They are, unless they are the failed attempt's own finish step: its turn_end closing the cut turn and its infra
    stop. A resume into a cut-short evaluate step takes the evaluation recorded before the interruption from the log
    and writes no new eval_result, so that evaluation is the turn's."""
    after = [e for e in events[index + 1:] if e.type != "error"][:2]
    return not (len(after) == 2 and after[0].type == "turn_end" and after[0].turn == events[index].turn
                and after[1].type == "stop" and after[1].reason == "infra_error")


def _stop_asked(event) -> bool:
    """An error that a stop asked for left (a Ctrl-C or SIGTERM, the bench stopping), not a failure: the trajectory it
    ends is unfinished, waiting for --resume, not infra-failed. A log written before the event said so has only the
    Ctrl-C's message to tell it by."""
    return event.type == "error" and (event.stop_asked or (event.where == "graph" and event.message.startswith(INTERRUPTED)))


def budget_cut_turn(events: list) -> int | None:
    """The turn a budget stop cut short before its submission, or None. The loop's finish step closes such a turn
    (a tools-mode turn stopped between two replies: check_limits runs after each) with a FORMAT_ERROR turn_end that is
    not among the done turns, so the stop that follows counts one turn fewer (its turn is len(done_turns)); a turn the
    model itself ended without a kernel (the feedback step) is among them, and its stop counts it. Read from the
    events alone, so runs recorded before this rule read the same way."""
    kept = [e for e in events if e.type != "error"]  # a kill's error between the two (finish re-run on resume)
    if len(kept) < 2:
        return None
    end, stop = kept[-2], kept[-1]
    if (stop.type == "stop" and stop.reason in BUDGET_STOPS and end.type == "turn_end" and end.turn > stop.turn
            and end.status == FORMAT_ERROR):
        return end.turn
    return None


def score_trajectory(record: TrajectoryRecord, run: str = "") -> TrajectoryScore:
    start = record.start
    turns: dict[int, TurnScore] = {}
    pending: dict[int, TurnScore] = {}  # a submission waiting for its turn_end
    infra_open: set[int] = set()  # turns whose attempt hit an infra failure and has not been retried yet
    stop_reason = ""
    infra_last = False  # the latest thing that happened was an infra failure (no progress since)
    # turn -> each harness crash it hit (_crash): an exception raised while handling the model's text (an error event
    # with a traceback, or the GPU worker's traceback in the message), not an infra status the evaluator reported (no
    # GPU, a lost worker)
    infra_seen: dict[int, list[str]] = {}
    # turn -> its submission's evaluation (not an INFRA_ERROR one) that an infra failure later in the turn (a step after
    # the evaluation: the feedback, a checkpoint) cut off. A retry goes on from that step with the recorded evaluation
    # (the graph reuses it, writing no new eval_result): once the trajectory goes on past the infra stop without a new
    # attempt at the turn, that evaluation is the turn's, not an INFRA turn that drops it from the score.
    evaluated: dict[int, TurnScore] = {}
    # an infra stop was recorded, or the loop's error that a retry or --resume goes on after (_goes_on_after): what
    # follows is a retry
    retried = False
    # turns whose turn_end was logged: an infra error of the same turn after it (a Ctrl-C, a kill or a failed checkpoint
    # write between the turn_end and the feedback step's checkpoint) cut the next step short, not this turn
    closed: set[int] = set()
    stopped = False  # a stop came after the trajectory's last step: it finished (a resume that went on reopens it)
    asked = False  # the latest thing that happened was a stop asked for (_stop_asked): it waits for --resume
    for index, event in enumerate(record.events):
        if event.type == "error":
            asked = asked or _stop_asked(event)
        else:
            asked = False
        if event.type == "stop":
            stopped = True
        elif event.type != "error":  # an error is logged before its stop, and after a kill (where none follows)
            stopped = False
        if event.type == "error" and event.where == "graph" and stopped and stop_reason != "infra_error":
            # the loop's interruption after the trajectory's own stop (a Ctrl-C before the finish step's checkpoint; its
            # resume logs nothing more): it ended as that stop says, no turn of it was cut short. (A re-evaluation's
            # infra error after the stop, where="reevaluate", does leave it out: a turn of it could not be evaluated.)
            continue
        if event.type == "error" and event.infra and event.turn > 0 and (crash := _crash(event)):
            infra_seen.setdefault(event.turn, []).append(crash)
        if event.type in ("model_call", "eval_result"):
            infra_open.discard(event.turn)  # a new attempt at the turn
            closed.discard(event.turn)
            evaluated.pop(event.turn, None)
            infra_last = False
        # progress after the infra stop (a new failure, or a second infra stop, is none; a new attempt at the turn
        # discarded its evaluation above)
        if retried and event.type != "error" and not (event.type == "stop" and event.reason == "infra_error"):
            for number in [n for n in evaluated if event.type != "model_call" or event.turn > n]:
                turns[number] = pending[number] = evaluated.pop(number)  # the retry's turn_end closes it, if it comes
                infra_open.discard(number)
        if event.type == "eval_result" and event.submission:
            pending[event.turn] = _turn_from_eval(event.turn, event)
        elif event.type == "turn_end":
            turn = pending.pop(event.turn, None) or TurnScore(turn=event.turn, status=event.status)
            if event.status == INFRA or event.turn in infra_open:
                # The turn_end that closes an infra-failed turn says nothing about the model.
                turn = TurnScore(turn=event.turn, status=INFRA, kernel_file=turn.kernel_file)
            turns[event.turn] = turn
            closed.add(event.turn)
        elif event.type == "error" and event.infra:
            cut = pending.pop(event.turn, None)
            # a new failure: what follows it until its stop is no retry; but the loop's error ends its process, so
            # what follows it is a retry or --resume at once (_goes_on_after)
            retried = event.where == "graph" and _goes_on_after(record.events, index)
            if cut is not None and cut.status != INFRA and event.turn > 0:
                evaluated[event.turn] = cut
            infra_last = True
            if event.turn > 0 and event.turn not in closed:
                turns[event.turn] = TurnScore(turn=event.turn, status=INFRA)
                infra_open.add(event.turn)
        elif event.type == "stop":
            stop_reason = event.reason
            infra_last = event.reason == "infra_error"
            retried = retried or infra_last
    # A submission whose turn_end never came (a kill or stop right after it) still counts.
    for number, turn in pending.items():
        turns.setdefault(number, turn)
    # Retried on the same submission and crashed again the same way: the model's text, not bad luck. Scored as the
    # model's failed turn, and the trajectory is not left out (else a model escapes a bad score by crashing the harness).
    reproduced = {t for t, msgs in infra_seen.items() if len(msgs) >= 2 and len(set(msgs)) == 1}
    for number in reproduced & set(turns):
        if turns[number].status == INFRA:
            turns[number] = turns[number].model_copy(update={"reproduced": True})
    # ended by an infra failure (a stop or not: a harness crash logs none, and the bench gives up after its retries);
    # a stop asked for ended nothing: the trajectory is unfinished until --resume goes on
    if asked:
        infra_last = False
    ended_on_infra = infra_last
    if infra_last and turns and max(turns) in reproduced:
        infra_last = False
    handed_in = turns.pop(0, None)  # a handed-in kernel (--start-from): kept apart from the model's turns
    budget_cut = budget_cut_turn(record.events)
    if budget_cut is not None and budget_cut in turns and turns[budget_cut].status == FORMAT_ERROR:
        del turns[budget_cut]  # the harness stopped it before the model could submit: no failure of the model's
    else:
        budget_cut = None
    return TrajectoryScore(
        id=record.id,
        run=run,
        model=start.model if start else "",
        workload=start.workload if start else "",
        prompt=start.prompt if start else "",
        gpu=(start.gpu if start else "") or evaluated_gpu(record.events),
        l2_flush=start.config.get("l2_flush", LEGACY_L2_FLUSH) if start else "",
        mode=start.mode if start else "",
        turn_budget=_turn_budget(start.config if start else {}),
        index=start.index if start else 0,
        repair_task=str((start.config or {}).get("repair_task") or "") if start else "",
        started=start.ts if start else 0.0,
        stop_reason=stop_reason,
        infra_failed=infra_last,
        unfinished=not stopped and not ended_on_infra,
        turns=[turns[k] for k in sorted(turns)],
        start=handed_in,
        cut_turn=budget_cut,
        skipped_lines=record.skipped_lines,
    )
