"""The extract step: take the solution file out of a model reply (tools/solution/parse.py does the slicing).

Replies are untrusted text: this only slices strings; the evaluator parses and checks the file. A reply
that hands in no kernel file (none found, or a block in another language such as ```python) is a
FORMAT_ERROR turn whose message says what was wrong and what to send; in tools mode it speaks of `submit`.
"""
from __future__ import annotations

from pydantic import BaseModel

from ptxbench.tools.solution.parse import FENCE_LANGUAGES, PLAN_START, THINK_END, THINK_START, _blocks
from ptxbench.tools.solution.parse import extract_solution as _extract
from ptxbench.tools.textcap import short_name

PIPELINE_HINT = ("Send the whole kernel file, with its /* ptxbench ... */ plan, in one ```ptx or ```cuda "
                 "fenced block.")
TOOLS_HINT = "Hand in the whole kernel file, with its /* ptxbench ... */ plan, by calling the submit tool."
# A fence's tag is the model's text, of any length: the feedback quoting it stays in the history, sent with every
# later call (a tag of 900,000 characters doubled each request's size)
TAG_CHARS = 40
WARNING_CHARS = 300


class Extracted(BaseModel):
    source: str = ""
    language: str = ""
    error: str = ""  # why no solution could be taken from the reply ("" when one was)
    warnings: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.error


def _foreign_block(reply: str, source: str) -> str:
    """The tag of the block the solution was taken from when it is not a kernel language and holds no plan."""
    for tag, body, _ in _blocks(reply):
        if body == source and tag and tag not in FENCE_LANGUAGES and not PLAN_START.search(body):
            return tag
    return ""


def _no_answer(reasoning: str, tool_calls: int, tools: bool) -> str:
    """Why a reply with no text holds no kernel file, when it is not plain emptiness: the model thought but never
    answered (out of output tokens, mostly), or called tools a pipeline run does not offer. "The reply is empty" told
    it that nothing had come back."""
    if reasoning.strip():
        return (f"The reply held only reasoning ({len(reasoning)} characters) and no answer: the kernel file must be in "
                f"the answer, after the reasoning.")
    if tool_calls and not tools:
        return f"The reply made {tool_calls} tool call(s), but this run offers no tools."
    return ""


def unclosed_thinking(reply: str) -> bool:
    """Text that opens a <think> block and never closes it: reasoning sent inline (a server without a reasoning parser)
    and cut before its answer, mostly at the output token limit. Nothing in it is an answer, as parse.py takes nothing
    before a </think>: a draft there was evaluated as the submission, where the same reply through a server that parses
    reasoning out is a reply of only reasoning."""
    text = (reply or "").lstrip()
    return text.startswith(THINK_START) and THINK_END not in text


def extract_solution(reply: str, tools: bool = False, reasoning: str | None = None, tool_calls: int = 0) -> Extracted:
    """The kernel file in the reply's text; `reasoning` and `tool_calls` (the reply's) name what an empty text held, and
    a pipeline reply's tool calls, which are dropped unrun, are named beside its text's verdict: a model that wrote
    "let me compile it first" and called a tool heard only that no code block was found, and called tools again."""
    found = _from_text(reply, tools, reasoning, tool_calls)
    if not tool_calls or tools or not (reply or "").strip():  # an empty text's verdict names them already
        return found
    note = f"The reply's {tool_calls} tool call(s) were not run: this run offers no tools."
    if found.error:
        return found.model_copy(update={"error": f"{found.error} {note}"})
    return found.model_copy(update={"warnings": [*found.warnings, note]})


def _from_text(reply: str, tools: bool, reasoning: str | None, tool_calls: int) -> Extracted:
    hint = TOOLS_HINT if tools else PIPELINE_HINT
    if not (reply or "").strip() and (why := _no_answer(reasoning or "", tool_calls, tools)):
        return Extracted(error=f"{why} {hint}")
    if unclosed_thinking(reply):
        return Extracted(error=f"The reply held only reasoning ({len(reply)} characters in a {THINK_START} block that "
                               f"never closed) and no answer: the kernel file must be in the answer, after {THINK_END}. "
                               f"{hint}")
    found = _extract(reply)
    if isinstance(found, list):
        issues = "; ".join(str(issue) for issue in found)
        if not tools:  # the slicer's messages say how to send the file in a reply
            return Extracted(error=f"{issues.capitalize()}. Follow the solution format.")
        # its advice is about fenced blocks: in tools mode the way in is submit
        return Extracted(error=f"{issues.split(':', 1)[0].split(';', 1)[0].capitalize()}. {hint}")
    if not found.language and (tag := _foreign_block(reply, found.source)):
        return Extracted(error=f"The ```{short_name(tag, TAG_CHARS)} block is not a kernel file (a kernel file is PTX or CUDA with its "
                               f"plan). {hint}")
    return Extracted(source=found.source, language=found.language or "cuda",
                     warnings=[short_name(w, WARNING_CHARS) for w in found.warnings])  # they quote tags too
