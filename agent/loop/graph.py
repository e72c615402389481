"""The agent loop as a LangGraph StateGraph. Nodes are named after the steps of a turn:

    check_limits -> query -> extract -> evaluate -> feedback -> check_limits ...   (pipeline)
    check_limits -> query -> run_tools -> check_limits -> query ... -> feedback    (tools: submit ends a turn)
    any stop rule, model error or infrastructure failure -> finish -> END

The state is checkpointed after every node, and query stores the model's reply in the state
before anything acts on it, so a resumed run never repeats a model call that completed. A node cut
short by a kill runs again on resume; run_tools and evaluate first take the answers its reply already
has in trajectory.jsonl, so no finished evaluation runs or is recorded twice.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from langgraph.graph import END, START, StateGraph

from ptxbench.tools.evaluator import EvalOptions, Evaluator
from ptxbench.tools.results import FORMAT_ERROR, EvalResult
from ptxbench.tools.solution.language import detect_language
from ptxbench.tools.solution.parse import MAX_REPLY_CHARS

from . import budget
from .context import LADDER, context_views
from .extract import extract_solution
from .feedback import cut_note, progress_text, render_eval, render_format_error
from .profile_policy import turn_options
from ..models.base import (Model, ModelError, ModelExhausted, ModelReply, ModelRequest, ModelUnavailable, OutOfTime,
                           TurnOutcome)
from ..models.evidence import evidence_from
from ..models.litellm_model import ContextExceeded
from ...tools.redact import MASKED, mask_strings, scrub, scrub_text
from .start_kernel import evaluate_start
from .state import AgentState, OptimizeConfig
from .toolset import Toolbox, parse_arguments
from ..records.rundir import read_events, sha256_text
from ..records.trajectory import TrajectoryLog


@dataclass
class Deps:
    config: OptimizeConfig
    model: Model
    evaluator: Evaluator
    log: TrajectoryLog
    options: EvalOptions
    resumed: bool = False  # set by run_trajectory: the first evaluating step looks for what it recorded before a kill
    resumed_into: str = ""  # set by run_trajectory: the node a resume runs first (the one a kill cut short)

    @cached_property
    def toolbox(self) -> Toolbox:
        return Toolbox(self.evaluator, self.config.workload, self.options)

    def turn_options(self, state, turn: int | None = None) -> EvalOptions:
        """The options of this turn's scored evaluation (the profile policy needs the best speedup so far; the
        evaluator names the turn when it reuses an identical binary's TIMEOUT, and orders its GPU queue by the turns
        left)."""
        options = turn_options(self.options, self.config.profile, state.get("best_speedup"), state.get("best_kernel_ms"))
        turn = state.get("turn") if turn is None else turn
        # turns_left orders the GPU queue on a machine with several GPUs (tools/gpu/priority.py); nothing else
        left = max(0, self.config.turns - turn) if isinstance(turn, int) else None
        return options.model_copy(update={"turn": turn, "turns_left": left})


def timed(fn: Callable[[AgentState], dict]) -> Callable[[AgentState], dict]:
    """Adds the node's wall time to the state's elapsed_s (kept across resumes)."""
    def node(state: AgentState) -> dict:
        start = time.monotonic()
        update = fn(state) or {}
        update["elapsed_s"] = state.get("elapsed_s", 0.0) + (time.monotonic() - start)
        return update
    return node


def state_eval(state) -> EvalResult | None:
    """The turn's evaluation from the graph state (a dict in checkpoints written before it was typed)."""
    value = state.get("eval")
    if value is None or isinstance(value, EvalResult):
        return value
    return EvalResult.model_validate(value)


def _progress(config: OptimizeConfig, state: AgentState, result: EvalResult | None = None) -> str:
    left = config.turns - len(state.get("done_turns", [])) - 1
    return progress_text(state.get("best_speedup"), state.get("best_kernel_ms"), result, left)


def _outcome_message(result: EvalResult | None, format_error: str) -> str:
    if result is None:
        return format_error
    compile_errors = [e.message for e in (result.compile.errors if result.compile else [])][:3]
    # what the message already says is not said again: the summary context shows 200 characters of this
    extra = [x for x in dict.fromkeys([*compile_errors, *result.plan_errors[:3], result.runtime_error])
             if x and x not in result.message]
    return " ".join([result.message, *extra]).strip()


# A reply kept in the conversation is sent again, and recorded again, with every later model call: one of 30 MB
# grew a run folder by hundreds of MB in three turns. A reply past the reply limit is a FORMAT_ERROR whatever its
# length (its model_call event records it once); the history keeps no more of it than the limit.
MAX_HISTORY_REPLY_CHARS = MAX_REPLY_CHARS


def history_copy(content: str) -> str:
    cut = len(content) - MAX_HISTORY_REPLY_CHARS
    return content[:MAX_HISTORY_REPLY_CHARS] + f"\n[... {cut} more characters of this reply are left out of the history]"


def history_arguments(arguments: str) -> str:
    """A tool call's arguments as the history sends them back: always a JSON object, since litellm's converters for
    Anthropic and Gemini parse each one (malformed, the model's mistake the tools answered, failed every later
    request: a 400, or for Gemini a 500 retried into an outage); arguments past the limit (over twice the longest
    solution file the evaluator takes) or no JSON object become a note; an object encoded twice is sent once."""
    if len(arguments) > MAX_HISTORY_REPLY_CHARS:
        return json.dumps({"left_out": f"{len(arguments)} characters of arguments are left out of the history"})
    try:
        value = parse_arguments(arguments)
    except ValueError:
        return json.dumps({"left_out": f"{len(arguments)} characters of arguments that are no JSON object"})
    return arguments if arguments.lstrip().startswith("{") else json.dumps(value, ensure_ascii=False)


# A tool name every provider takes in the history: OpenAI's (messages[i].tool_calls[j].function.name) and Bedrock's
# pattern [A-Za-z0-9_-]{1,64}, starting as Gemini's function names must (a letter or an underscore)
_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def history_name(name: str) -> str:
    """A tool call's name as the history sends it back: a name the model made up ('functions.submit', 'submit tool',
    '') is answered as an unknown tool, but sent back as written it failed every later request (a 400 from OpenAI and
    Bedrock, the trajectory's end as the model's error). Characters outside the pattern become '_'."""
    if _TOOL_NAME.fullmatch(name):
        return name
    name = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    return (name if name[:1].isalpha() or name[:1] == "_" else "_" + name)[:64]


def history_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply's tool calls as the history keeps them (history_arguments, history_name), so providers take the
    message back; the log keeps them as the model wrote them."""
    kept = []
    for call in calls:
        arguments, name = call["function"]["arguments"], call["function"]["name"]
        sent, sent_name = history_arguments(arguments), history_name(name)
        if sent is not arguments or sent_name is not name:
            call = {**call, "function": {**call["function"], "arguments": sent, "name": sent_name}}
        kept.append(call)
    return kept


def fresh_call_ids(reply: ModelReply, earlier: list[dict[str, Any]]) -> ModelReply:
    """The reply with a new id on each tool call whose id an earlier message of the conversation already holds: a
    server that numbers its calls per reply ("call_0") sends ids again, and Anthropic refuses a request whose tool_use
    ids repeat (a 400 on every later call, the trajectory's end). ModelReply keeps the ids of one reply apart."""
    used = {c.get("id") for m in earlier for c in m.get("tool_calls") or [] if isinstance(c, dict)}
    if not any(c["id"] in used for c in reply.tool_calls):
        return reply
    calls = [{**c, "id": f"call_{uuid.uuid4().hex[:24]}"} if c["id"] in used else c for c in reply.tool_calls]
    return reply.model_copy(update={"tool_calls": calls})


@dataclass
class RecordedCall:
    """One tool call of the reply as trajectory.jsonl holds it: its tool_call, and the eval_result and tool_result
    written after it, when they were."""
    call: Any
    eval: Any = None
    result: Any = None

    def answer(self) -> tuple[bool, str] | None:
        """(ok, content) the model was given, or was about to be (a kill between eval_result and tool_result);
        None for a call still in flight."""
        if self.result is not None:
            return self.result.ok, self.result.content
        return (True, self.eval.feedback) if self.eval is not None else None


def recorded_calls(events: list) -> list[RecordedCall]:
    """The reply's tool calls recorded before a kill, in order, up to its first infrastructure failure (that one and
    the calls after it, answered Not run, are what a retry runs again)."""
    calls: list[RecordedCall] = []
    for event in events:
        if event.type == "tool_call":
            calls.append(RecordedCall(event))
        elif event.type == "eval_result" and calls:
            if event.result.status == "INFRA_ERROR":
                return calls[:-1]
            calls[-1].eval = event
        elif event.type == "tool_result" and calls:
            if event.ok and event.name == "submit" and calls[-1].eval is None:
                return calls[:-1]  # a submission without its recorded result has nothing to be scored on
            calls[-1].result = event
    return calls


def before_interruption(events: list) -> list:
    """The log as the node a kill cut short left it: without the error events run_trajectory wrote after the kill (a
    Ctrl-C, the bench stopping, a crash: where="graph"), which otherwise hid the node's own last events from it."""
    end = len(events)
    while end and events[end - 1].type == "error" and events[end - 1].where == "graph":
        end -= 1
    return events[:end]


class Steps:
    def __init__(self, deps: Deps):
        self.d = deps
        self.cfg = deps.config

    def _recorded(self, turn: int) -> list:
        """On resume, the events this turn's reply left after its model_call: the node cut short by the kill wrote
        them before its checkpoint, and they are reused, not run (GPU time) and recorded again. Only the first
        evaluating step after a resume reads the log: a later one's events are all written after its checkpoint."""
        if not self.d.resumed:
            return []
        self.d.resumed = False
        events = read_events(self.d.log.writer.path) if self.d.log.writer.path.exists() else []
        last = max((i for i, e in enumerate(events) if e.type == "model_call"), default=None)
        if last is None or events[last].turn != turn:
            return []
        return [e for e in events[last + 1:] if e.turn == turn]

    def entering(self, name: str) -> Callable[[AgentState], dict]:
        def node(state: AgentState) -> dict:
            self.rerun, self.d.resumed_into = self.d.resumed_into == name, ""
            return getattr(self, name)(state)
        return node

    def _logged_last(self, kind: str, turn: int, **fields: Any) -> bool:
        """Whether this node, run again on resume, logged `kind` for `turn` (with `fields`) as the log's last event
        before the kill cut off its checkpoint: then it is not logged twice (a second turn_end or stop)."""
        if not getattr(self, "rerun", False) or not self.d.log.writer.path.exists():
            return False
        last = (before_interruption(read_events(self.d.log.writer.path)) or [None])[-1]
        return (last is not None and last.type == kind and last.turn == turn
                and all(getattr(last, k) == v for k, v in fields.items()))

    def start(self, state: AgentState) -> dict:
        return evaluate_start(state, self.d, rerun=self.rerun)

    def check_limits(self, state: AgentState) -> dict:
        decision = budget.check_limits(self.cfg, state)
        return {"stop": decision.model_dump()} if decision else {}

    def _recorded_reply(self, turn: int, messages: list[dict]) -> tuple[ModelReply, list] | None:
        """On resume into `query`: the reply this very request got before a kill cut off the node's checkpoint (the
        log's last model_call, of this turn, with these messages as recorded, nothing but its own notes after it),
        with the events after it; else None. Taken instead of asking again: a paid model was billed twice."""
        if not getattr(self, "rerun", False) or not self.d.log.writer.path.exists():
            return None
        events = before_interruption(read_events(self.d.log.writer.path))
        last = max((i for i, e in enumerate(events) if e.type == "model_call"), default=None)
        if last is None:
            return None
        call, after = events[last], events[last + 1:]
        if call.turn != turn or any(e.type != "error" or e.where != "query" for e in after):
            return None
        if json.dumps(scrub(messages), sort_keys=True, default=str) != json.dumps(call.messages, sort_keys=True, default=str):
            return None  # another request (its context changed): the recorded answer is not this one's
        r = call.response
        if MASKED in json.dumps(r):
            # the record masks key shapes the reply held, which its kernel may hold as code: taken from the log, the
            # kernel compiled would not be the one the model wrote (asked again instead)
            return None
        return ModelReply(content=r.get("content") or "", reasoning_content=r.get("reasoning_content"),
                          tool_calls=r.get("tool_calls") or [], usage=call.usage, cost_usd=call.cost_usd,
                          latency_s=call.latency_s, attempts=call.attempts, finish_reason=r.get("finish_reason"),
                          tags=r.get("tags") or {}), after

    def query(self, state: AgentState) -> dict:
        views = _views_from(context_views(state, self.cfg.context), state.get("context_view"))
        tools = self.d.toolbox.schemas() if self.cfg.mode == "tools" else None
        request = ModelRequest(messages=views[0][1], turn=state["turn"], call_index=state["model_calls"], tools=tools,
                               history=[TurnOutcome(**t["outcome"]) for t in state["done_turns"]],
                               start_source=(state.get("start") or {}).get("source", ""),
                               time_left_s=None if self.cfg.max_wall_s is None
                               else self.cfg.max_wall_s - state.get("elapsed_s", 0.0))
        # on resume, the reply to whichever view was sent before the kill
        level, recorded = next(((i, r) for i, (_, m) in enumerate(views)
                                if (r := self._recorded_reply(state["turn"], m)) is not None), (0, None))
        if recorded is None:
            level = self._predicted_fit(state, views, tools)
        while True:
            name, messages = views[level]
            try:
                # masked before it enters the state: checkpoints, events and kernel files never hold a key of this
                # machine it echoes (exact values only: a key's shape is also kernel code, compiled as written)
                reply = recorded[0] if recorded else ModelReply.model_validate(mask_strings(
                    self.d.model.query(request.model_copy(update={"messages": messages})).model_dump(), shapes=False))
                self.d.resumed = False  # a new reply (or one recorded, with nothing after it): no later step to reuse
                break
            except ContextExceeded as exc:  # sent again smaller, down the ladder, before it ends the run
                if level + 1 >= len(views):
                    # what helps, said before the provider's words: the stop line keeps 500 characters
                    return self._query_failed(state, ModelError(
                        f"the conversation outgrew {exc.what} even as small as the loop trims it (older turns left "
                        "out, older tool exchanges cut to stubs; a model with a larger window, a shorter prompt or "
                        f"fewer tool calls a turn help; --context last starts small): {exc.said}"))
                self._log_trim(state, views[level], views[level + 1], "window_exceeded", str(exc))
                level += 1
            except ModelError as exc:
                return self._query_failed(state, exc)
        name, messages = views[level]
        update: dict[str, Any] = {"context_view": name} if name != state.get("context_view", self.cfg.context) else {}
        # renamed before it is recorded: a resumed run reads the same ids back, and its recorded tool calls match
        reply = fresh_call_ids(reply, [m for t in state["done_turns"] for m in t["messages"]] + state["current"])
        if recorded is None:  # a recorded reply is in the log already, with the notes below
            self.d.log.model_call(state["turn"], self.d.model.name, messages, reply)
        if self.cfg.mode == "tools" and len(reply.tool_calls) > self.cfg.max_tool_calls_per_turn:
            # no reply can use more calls than a turn has: the rest are dropped from the conversation (where each
            # would need an answer) and named once, not answered one event at a time
            kept = self.cfg.max_tool_calls_per_turn
            if recorded is None or not recorded[1]:
                self.d.log.error(state["turn"], "query", f"the reply made {len(reply.tool_calls)} tool calls; the "
                                                         f"first {kept} (a turn's limit) were kept, the rest ignored")
            reply = reply.model_copy(update={"tool_calls": reply.tool_calls[:kept]})
        usage = reply.usage
        tokens = usage.get("total_tokens") or usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        message = reply.assistant_message(with_reasoning=getattr(self.d.model, "passes_reasoning_back", False))
        for text in ("content", "reasoning_content"):
            if len(message.get(text) or "") > MAX_HISTORY_REPLY_CHARS:
                message[text] = history_copy(message[text])
        if message.get("tool_calls"):  # a tool call's arguments are sent again with every later call too
            message["tool_calls"] = history_calls(message["tool_calls"])
        if self.cfg.mode == "pipeline":  # no tools were offered: stray tool calls get no answers, so drop them
            message.pop("tool_calls", None)
        # no price known (None) counts $0, which a cost budget must not take for free; built-ins cost nothing
        unpriced = reply.cost_usd is None and not self.cfg.model.startswith("builtin/")
        return {**update, "reply": reply.model_dump(), "current": state["current"] + [message],
                "model_calls": state["model_calls"] + 1, "tokens": state["tokens"] + tokens,
                "cost_usd": state["cost_usd"] + (reply.cost_usd or 0.0),
                "cost_unknown": state.get("cost_unknown", False) or unpriced}

    def _query_failed(self, state: AgentState, exc: ModelError) -> dict:
        if isinstance(exc, ModelExhausted):
            return {"stop": {"reason": "turn_limit", "detail": str(exc)}}
        if isinstance(exc, OutOfTime):  # the budget's stop, as check_limits would have made it at the next step
            return {"stop": {"reason": "time_budget", "detail": scrub_text(str(exc))[:500]}}
        if isinstance(exc, ModelUnavailable):  # an outage: left out of the scores, and bench asks again from this step
            self.d.log.error(state["turn"], "query", str(exc), infra=True)
            return {"stop": {"reason": "infra_error", "detail": scrub_text(str(exc))[:500]}}
        # the first call holds nothing the model wrote (a server without tool calling, a parameter it refuses, a
        # builtin model without this workload): the set-up's failure, left out of the scores like an outage
        setup = state["model_calls"] == 0
        self.d.log.error(state["turn"], "query", str(exc), infra=setup)
        return {"stop": {"reason": "infra_error" if setup else "error", "detail": scrub_text(str(exc))[:500]}}

    def _predicted_fit(self, state: AgentState, views: list, tools: list | None) -> int:
        """The first view a model that knows its window (LiteLLMModel.fits) expects to fit, each step down recorded;
        the smallest when none does (the provider then has the last word), the first for a model that cannot tell."""
        fits = getattr(self.d.model, "fits", None)
        level = 0
        while fits is not None and level + 1 < len(views) and fits(views[level][1], tools) is False:
            self._log_trim(state, views[level], views[level + 1], "window_estimate")
            level += 1
        return level

    def _log_trim(self, state: AgentState, larger: tuple, smaller: tuple, reason: str, detail: str = "") -> None:
        size = lambda messages: len(json.dumps(messages, ensure_ascii=False, default=str))  # noqa: E731
        self.d.log.context_trimmed(  # written, masked and shown to listeners as every event is
            state["turn"], view=smaller[0], policy=self.cfg.context, reason=reason, detail=scrub_text(detail)[:500],
            messages_before=len(larger[1]), messages_after=len(smaller[1]), chars_before=size(larger[1]),
            chars_after=size(smaller[1]))

    def extract(self, state: AgentState) -> dict:
        reply = state["reply"]
        found = extract_solution(reply["content"], tools=self.cfg.mode == "tools", reasoning=reply.get("reasoning_content"),
                                 tool_calls=len(reply.get("tool_calls") or []))
        cut = cut_note(reply)
        if not found.ok:
            return {"submission": None, "eval": None, "format_error": f"{found.error} {cut}".strip()}
        return {"submission": {"source": found.source, "language": found.language,
                               "warnings": found.warnings + ([cut] if cut else [])},
                "format_error": ""}

    def evaluate(self, state: AgentState) -> dict:
        sub, turn = state["submission"], state["turn"]
        sha = sha256_text(sub["source"])
        done = next((e for e in self._recorded(turn) if e.type == "eval_result" and e.submission
                     and e.kernel_sha256 == sha and e.result.status != "INFRA_ERROR"), None)
        kernel_file = self.d.log.save_kernel(turn, sub["language"], sub["source"])
        if done is not None:  # evaluated and recorded before a kill: the recorded result and feedback stand
            result, feedback = done.result, done.feedback
        else:
            result = self.d.evaluator.evaluate(self.cfg.workload, sub["source"], self.d.turn_options(state))
            feedback = render_eval(result, turn, self.cfg.no_gpu, _progress(self.cfg, state, result))
            if sub.get("warnings"):
                feedback += "About your reply:\n" + "\n".join(f"- {w}" for w in sub["warnings"]) + "\n"
            self.d.log.eval_result(turn, result, feedback, kernel_file, sub["source"], sub["language"])
        update: dict[str, Any] = {"eval": result, "feedback": feedback,
                                  "submission": {**sub, "kernel_file": kernel_file}}
        if result.status == "INFRA_ERROR":
            self.d.log.error(turn, "evaluate", result.message or result.runtime_error or "infrastructure error", infra=True)
            update["stop"] = {"reason": "infra_error", "detail": (result.message or result.runtime_error)[:500]}
        return update

    def run_tools(self, state: AgentState) -> dict:
        turn, box = state["turn"], self.d.toolbox
        box.submit_options = self.d.turn_options(state)
        # the tools' evaluations queue for a GPU as the turn's own (the trajectory waits on them too)
        box.options = box.options.model_copy(update={"turns_left": box.submit_options.turns_left})
        used, in_turn = state["tool_calls"], state["turn_tool_calls"]
        messages, update, started, late_submit = [], {}, time.monotonic(), False
        recorded = recorded_calls(self._recorded(turn))  # [] unless resumed into this node
        for index, call in enumerate(state["reply"]["tool_calls"]):
            name, call_id = call["function"]["name"], call.get("id", "")
            ok, content, args = True, "", {}
            try:
                args = parse_arguments(call["function"].get("arguments"))
            except ValueError as exc:
                ok, content = False, f"Error: the arguments are not a JSON object ({exc}). {cut_note(state['reply'])}".strip()
            # the same call, in the same place of the same reply (the log holds the arguments masked); after the
            # first that differs, nothing recorded is taken
            rec = recorded[index] if index < len(recorded) else None
            if rec is not None and (rec.call.call_id, rec.call.name, rec.call.arguments) != (call_id, name, scrub(args)):
                rec, recorded = None, []
            answer = rec.answer() if rec is not None else None
            if rec is None:  # a recorded call that was in flight at the kill keeps its tool_call
                self.d.log.tool_call(turn, call_id, name, args)
            if answer is not None:  # answered before the kill: that answer, not a second run (GPU time) and record
                ok, content = answer
                if ok and name == "submit":
                    update.update(submission={"source": args["source"], "language": rec.eval.language,
                                              "kernel_file": rec.eval.kernel_file},
                                  eval=rec.eval.result.model_dump(mode="json"), feedback=rec.eval.feedback, format_error="")
            elif ok and "stop" in update:  # the evaluator failed on the harness's side: the turn is retried, not scored
                ok, content = False, "Not run: an evaluation before it in this reply failed on the harness's side."
            elif ok and "submission" in update:
                ok, content = False, "Ignored: you already submitted in this reply."
            elif ok and in_turn >= self.cfg.max_tool_calls_per_turn:
                ok, content = False, "Ignored: this turn's tool calls are used up."
                late_submit = late_submit or name == "submit"
            elif ok and used >= self.cfg.max_tool_calls:  # check_limits runs between replies: one reply could overrun it
                ok, content = False, "Ignored: the trajectory's tool calls are used up."
            elif ok and name != "submit" and self._out_of_time(state, started):
                # so is the wall-time budget: twelve profiles in one reply overran it by many minutes. A submit still
                # runs, as a pipeline reply's one evaluation does: the turn is scored, not lost
                ok, content = False, f"Not run: the trajectory's wall-time budget ({self.cfg.max_wall_s:g} s) is used up."
            elif ok:
                content, ok = self._one_tool(turn, in_turn, name, args, box, update, state)
            used, in_turn = used + 1, in_turn + 1
            if rec is None or rec.result is None:
                if not (ok and name == "submit"):  # a submission's answer is the turn's feedback, and the turn ends
                    content = f"{content.rstrip()}\n\n{self._calls_left(used, in_turn)}\n"
                self.d.log.tool_result(turn, call_id, name, content, ok)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        update.update(current=state["current"] + messages, tool_calls=used, turn_tool_calls=in_turn)
        if "submission" not in update and in_turn >= self.cfg.max_tool_calls_per_turn:
            limit = self.cfg.max_tool_calls_per_turn
            why = (f"Your submit came after this turn's {limit} tool calls (the submit among them) were used up, so it "
                   "was not run." if late_submit else f"You used this turn's {limit} tool calls without calling submit.")
            update["format_error"] = f"{why} Submit a solution with the submit tool."
        return update

    def _calls_left(self, used: int, in_turn: int) -> str:
        """The tool budgets left, said with each answer: the prompt says only that calls are budgeted, and a model that
        could not count them spent the run's in three turns (the trajectory ends there) or a turn's without a submit.
        The submit counts among the turn's: "1 left before you must submit" read as one more call and then the submit,
        which was then ignored and the turn lost."""
        turn_left = max(0, min(self.cfg.max_tool_calls_per_turn - in_turn, self.cfg.max_tool_calls - used))
        return (f"Tool calls left: {turn_left} in this turn, your submit among them; "
                f"{max(0, self.cfg.max_tool_calls - used)} in the whole run.")

    def _out_of_time(self, state: AgentState, started: float) -> bool:
        """Whether the wall-time budget is spent, this node's time so far counted (timed adds it only at its end)."""
        budget = self.cfg.max_wall_s
        return budget is not None and state.get("elapsed_s", 0.0) + (time.monotonic() - started) >= budget

    def _one_tool(self, turn: int, index: int, name: str, args: dict, box: Toolbox, update: dict,
                  state: AgentState) -> tuple[str, bool]:
        try:
            kwargs = box.checked(name, args)
        except (KeyError, ValueError, TypeError) as exc:  # the model's call was malformed: its answer, not a crash
            said = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # str(KeyError) is a quoted repr
            return f"Error: {said}", False
        result = getattr(box, name)(**kwargs)  # a failure here is the harness's: it ends the run, --resume retries
        source = args["source"]
        language = detect_language(source)
        kernel_file = self.d.log.save_kernel(turn, language, source, tag=f"{index + 1:02d}_{name}")
        text = box.result_text(name, result, turn)
        if name == "submit":  # the turn's feedback: how it stands against the best before it, and the turns left
            text = f"{text.rstrip()}\n\n{_progress(self.cfg, state, result)}\n"
        self.d.log.eval_result(turn, result, text, kernel_file, source, language,
                               submission=name == "submit")
        if name == "submit":
            update.update(submission={"source": source, "language": language, "kernel_file": kernel_file},
                          eval=result.model_dump(mode="json"), feedback=text, format_error="")
        if result.status == "INFRA_ERROR":
            self.d.log.error(turn, name, result.message or "infrastructure error", infra=True)
            update["stop"] = {"reason": "infra_error", "detail": result.message[:500]}
        return text, result.status != "INFRA_ERROR"

    def feedback(self, state: AgentState) -> dict:
        """End of a turn: show the feedback, record the outcome, move on to the next turn."""
        turn, current = state["turn"], list(state["current"])
        result = state_eval(state)
        if result is None:
            status = FORMAT_ERROR  # no kernel file handed in: one word in tables, feedback and docs
            text = render_format_error(state["format_error"], turn, self.cfg.no_gpu, _progress(self.cfg, state))
        else:
            status, text = result.status, state["feedback"]
        if not current or current[-1]["role"] != "tool" or result is None:
            current.append({"role": "user", "content": text})
        speedup = result.speedup if result is not None and result.passed else None
        best, best_turn = state.get("best_speedup"), state.get("best_turn", 0)
        if speedup is not None and (best is None or speedup > best):
            best, best_turn = speedup, turn
        # the profile policy's best: the shortest time of a passing, timed kernel. A trajectory resumed from a
        # checkpoint written before this field stays on the speedup rule (its earlier turns' times are not there).
        best_ms = state.get("best_kernel_ms")
        kernel_ms = result.kernel_ms if result is not None and result.passed else None
        resumed_old = "best_kernel_ms" not in state and state.get("best_speedup") is not None
        if kernel_ms is not None and not resumed_old:
            best_ms = kernel_ms if best_ms is None else min(best_ms, kernel_ms)
        outcome = TurnOutcome(turn=turn, status=status, speedup=speedup,
                              message=_outcome_message(result, state.get("format_error", "")),
                              source=(state.get("submission") or {}).get("source", ""),
                              evidence=evidence_from(result) if result is not None else None,
                              tags=ModelReply.model_validate(state["reply"]).tags if state.get("reply") else {})
        if not self._logged_last("turn_end", turn, status=status):
            self.d.log.turn_end(turn, status, speedup, state["tokens"], state["cost_usd"], state["elapsed_s"])
        return {"done_turns": [{"turn": turn, "messages": current, "outcome": outcome.model_dump()}],  # appended
                "current": [], "turn": turn + 1, "reply": None, "submission": None, "eval": None, "format_error": "",
                "feedback": "", "turn_tool_calls": 0, "best_speedup": best, "best_turn": best_turn,
                "best_kernel_ms": best_ms}

    def after_query(self, state: AgentState) -> str:
        if state.get("stop"):
            return "finish"
        return "run_tools" if self.cfg.mode == "tools" and state["reply"]["tool_calls"] else "extract"

    def finish(self, state: AgentState) -> dict:
        stop = state["stop"] or {"reason": "error", "detail": "stopped without a reason"}
        stopped = self._logged_last("stop", len(state["done_turns"]), reason=stop["reason"])  # before a kill
        # a turn cut short (budgets, an infrastructure failure): close it. It is not among the done turns, so the stop
        # below counts one turn fewer: scoring reads a FORMAT_ERROR turn so closed under a token, cost or time budget as
        # the harness's cut, not the model's failure (scoring/turns.py budget_cut_turn)
        if state.get("current") and not stopped:
            result = state_eval(state)
            status = result.status if result is not None else FORMAT_ERROR
            if not self._logged_last("turn_end", state["turn"], status=status):
                self.d.log.turn_end(state["turn"], status, None, state["tokens"], state["cost_usd"], state["elapsed_s"])
        if not stopped:
            self.d.log.stop(len(state["done_turns"]), stop["reason"], stop.get("detail", ""))
        return {}




def _views_from(views: list[tuple[str, list]], smallest_sent: str | None) -> list[tuple[str, list]]:
    """The views from the smallest one already sent on (a window outgrown once stays outgrown: each later call would
    spend a refused request finding it again); all of them before any trimming."""
    rank = LADDER.index(smallest_sent) if smallest_sent in LADDER else 0
    kept = [v for v in views if LADDER.index(v[0]) >= rank]
    return kept or views[-1:]


def _after_tools(state: AgentState) -> str:
    if state.get("stop"):
        return "finish"
    return "feedback" if state.get("submission") or state.get("format_error") else "check_limits"


def build_graph(deps: Deps, checkpointer=None):
    steps = Steps(deps)
    graph = StateGraph(AgentState)
    for name in ("start", "check_limits", "query", "extract", "evaluate", "run_tools", "feedback", "finish"):
        graph.add_node(name, timed(steps.entering(name)))
    graph.add_edge(START, "start")  # a --start-from kernel is evaluated as turn 0; otherwise a no-op
    graph.add_conditional_edges("start", lambda s: "finish" if s.get("stop") else "check_limits", ["finish", "check_limits"])
    graph.add_conditional_edges("check_limits", lambda s: "finish" if s.get("stop") else "query", ["finish", "query"])
    graph.add_conditional_edges("query", steps.after_query, ["finish", "run_tools", "extract"])
    graph.add_conditional_edges("extract", lambda s: "evaluate" if s.get("submission") else "feedback", ["evaluate", "feedback"])
    graph.add_conditional_edges("evaluate", lambda s: "finish" if s.get("stop") else "feedback", ["finish", "feedback"])
    graph.add_conditional_edges("run_tools", _after_tools, ["finish", "feedback", "check_limits"])
    graph.add_edge("feedback", "check_limits")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=checkpointer)
