"""The tools of `tools` mode: typed methods whose JSON schemas come from their signatures and docstrings.

Every tool takes the whole solution file as `source` and calls the evaluator with the options its
name promises; expected failures (a compile error, a wrong result) come back as text for the model.
`submit` is the scored one: it ends the turn.
"""
from __future__ import annotations

import inspect
import json
import math
from types import UnionType
from typing import Any, Callable, Union, get_args, get_origin, get_type_hints

from ptxbench.tools.evaluator import EvalOptions, Evaluator
from ptxbench.tools.results import EvalResult
from ptxbench.tools.sanitize import TOOLS as SANITIZER_TOOLS
from ptxbench.tools.textcap import short_name

from ..models.base import utf8_safe
from .feedback import render_eval
from .profile_policy import TOOL_REASON

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list[str]: "array"}


def _doc_parts(fn: Callable) -> tuple[str, dict[str, str]]:
    """The description (before 'Args:') and the per-argument lines of a docstring."""
    doc = inspect.getdoc(fn) or ""
    head, _, args = doc.partition("Args:")
    described = {}
    for line in args.splitlines():
        name, sep, text = line.strip().partition(":")
        if sep:
            described[name.strip()] = text.strip()
    return " ".join(head.split()), described


def tool_schema(fn: Callable) -> dict[str, Any]:
    """An OpenAI function-calling schema from a typed function and its docstring."""
    description, arg_docs = _doc_parts(fn)
    hints = get_type_hints(fn)
    props: dict[str, Any] = {}
    required = []
    for name, param in inspect.signature(fn).parameters.items():
        if name == "self":
            continue
        kind = hints.get(name, str)
        options = [a for a in get_args(kind) if a is not type(None)] if get_origin(kind) in (Union, UnionType) else []
        kind = options[0] if len(options) == 1 else kind  # Optional[X] -> X
        prop: dict[str, Any] = {"type": _JSON_TYPES.get(kind, "string"), "description": arg_docs.get(name, "")}
        if kind == list[str]:
            prop["items"] = {"type": "string"}
        props[name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "function", "function": {"name": fn.__name__, "description": description,
                                             "parameters": {"type": "object", "properties": props, "required": required}}}


class Toolbox:
    """Bound to one trajectory's evaluator, workload and base options."""

    NAMES = ("compile", "test", "benchmark", "profile", "sanitize", "sass", "submit")

    def __init__(self, evaluator: Evaluator, workload_id: str, options: EvalOptions):
        self.evaluator = evaluator
        self.workload_id = workload_id
        self.options = options
        self.submit_options = options  # the scored evaluation's: the loop sets them per turn (profile policy)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool_schema(getattr(self, name)) for name in self.NAMES]

    def _run(self, source: str, **changes: Any) -> EvalResult:
        # model_copy does not validate: `changes` use the options' own values ("none", not False)
        return self.evaluator.evaluate(self.workload_id, source, self.options.model_copy(update=changes))

    def _text(self, result: EvalResult, turn: int) -> str:
        return render_eval(result, turn, self.options.no_gpu)

    # -- the tools (their docstrings are what the model reads) -----------------------------------
    def compile(self, source: str) -> EvalResult:
        """Assemble a solution file: errors with line numbers, registers, spills, shared memory and whether the target instructions are in the SASS. Does not run it.

        Args:
            source: the whole solution file (code and its ptxbench plan block)
        """
        return self._run(source, no_gpu=True, time=False, profile="none", profile_on_pass="none")

    def test(self, source: str) -> EvalResult:
        """Compile and run a solution against the reference on fresh random inputs (correctness only, no timing).

        Args:
            source: the whole solution file
        """
        return self._run(source, time=False, profile="none", profile_on_pass="none")

    def benchmark(self, source: str) -> EvalResult:
        """Compile, check correctness and time the solution against the library baseline (speedup).

        Args:
            source: the whole solution file
        """
        return self._run(source, time=True, profile="none", profile_on_pass="none")

    def profile(self, source: str) -> EvalResult:
        """Everything benchmark does plus an Nsight Compute profile: executed target instructions, stalls, memory and occupancy findings.

        Args:
            source: the whole solution file
        """
        return self._run(source, time=True, profile="full", profile_reason=TOOL_REASON)

    def sanitize(self, source: str, tools: list[str] | None = None) -> EvalResult:
        """Run the solution under compute-sanitizer to find out-of-bounds accesses, races and barrier misuse.

        Args:
            source: the whole solution file
            tools: sanitizer tools among memcheck, racecheck, synccheck, initcheck (default memcheck)
        """
        return self._run(source, time=False, profile="none", profile_on_pass="none", sanitize=list(tools or ["memcheck"]))

    def sass(self, source: str) -> EvalResult:
        """Compile the solution and list the SASS opcode histogram of each kernel (e.g. HGMMA, UTMALDG counts).

        Args:
            source: the whole solution file
        """
        return self._run(source, no_gpu=True, time=False, profile="none", profile_on_pass="none")

    def submit(self, source: str) -> EvalResult:
        """Submit your solution for scoring: the full evaluation (correctness, timing, target instructions). Ends the turn.

        Args:
            source: the whole solution file
        """
        return self.evaluator.evaluate(self.workload_id, source, self.submit_options)

    def call(self, name: str, arguments: dict[str, Any]) -> EvalResult:
        return getattr(self, name)(**self.checked(name, arguments))

    def checked(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the model's call to tool `name`; KeyError or ValueError when the call is malformed
        (the model's error, answered as such). Checked apart from the run: an error out of the evaluator is the
        harness's, never the model's call."""
        if name not in self.NAMES:
            raise KeyError(f"unknown tool {name!r}; tools: {', '.join(self.NAMES)}")
        if not isinstance(arguments.get("source"), str) or not arguments["source"].strip():
            raise ValueError(f"{name} needs `source`: the whole solution file as a string")
        tools = arguments.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
            raise ValueError(f"{name}: `tools` must be a list of names such as [\"memcheck\"]")
        if name == "sanitize" and tools:
            # each name is one compute-sanitizer run holding a GPU: a name repeated 1000 times was 1000 runs
            unknown = [t for t in tools if t not in SANITIZER_TOOLS]
            if unknown:
                raise ValueError(f"sanitize: unknown tools {[t[:40] for t in unknown[:4]]}; known: {', '.join(SANITIZER_TOOLS)}")
            arguments = {**arguments, "tools": list(dict.fromkeys(tools))}
        return {k: v for k, v in arguments.items() if k in inspect.signature(getattr(self, name)).parameters}

    def result_text(self, name: str, result: EvalResult, turn: int) -> str:
        text = self._text(result, turn)
        if name == "sass" and result.compile is not None:
            text += "\nSASS opcodes per kernel:\n" + sass_histogram(list(result.compile.kernels.values()))
        return text


SASS_KERNELS = 16  # kernels the sass tool lists: a file may define 256, and the answer stays in the history


def sass_histogram(kernels: list) -> str:
    """The 40 commonest opcodes of each kernel, as JSON; kernel names cut as feedback cuts them (the model names its
    kernels at any length, and the answer is sent again with every later call), the kernels past SASS_KERNELS counted."""
    hist: dict[str, dict[str, int]] = {}
    for k in kernels[:SASS_KERNELS]:
        key = short_name(k.name)
        key = key if key not in hist else f"{key} (#{len(hist) + 1})"  # two names alike up to the cut stay apart
        hist[key] = dict(sorted(k.sass_opcodes.items(), key=lambda kv: -kv[1])[:40])
    more = f"\n(and {len(kernels) - SASS_KERNELS} more kernels)" if len(kernels) > SASS_KERNELS else ""
    return json.dumps(hist, indent=1) + more


MAX_ARGUMENT_DEPTH = 32  # the tools take strings and lists of names; the record's writers recurse once per level


def nesting_depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (walked without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, depth)
            todo += [(x, depth + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return deepest


def _no_json_number(text: str) -> float:
    raise ValueError(f"{text[:40]} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _no_json_number(text)


def _loads(text: str) -> Any:
    """json.loads without NaN, Infinity and overflowing numbers such as 1e999: Python takes them, JSON has none, and
    the record writes each as null, so a resumed run found the call unlike its record and ran it again."""
    return json.loads(text, parse_constant=_no_json_number, parse_float=_finite)


def parse_arguments(raw: str | dict | None) -> dict[str, Any]:
    """Tool-call arguments from the model (a JSON string); anything else becomes an error for the model. Nesting
    past MAX_ARGUMENT_DEPTH is refused here: parsed, it would fail the trajectory's writer (pydantic stops at about
    255 levels, the key masking recurses), and the turn would be lost as the harness's failure."""
    try:
        value = _loads(json.dumps(raw)) if isinstance(raw, dict) else _loads(raw or "{}")
        if isinstance(value, str) and value.lstrip().startswith("{"):  # the object encoded twice (some tool parsers)
            value = _loads(value)
    except RecursionError:  # json recurses once per nesting level
        raise ValueError("tool arguments are nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("tool arguments must be a JSON object")
    if nesting_depth(value) > MAX_ARGUMENT_DEPTH:
        raise ValueError(f"tool arguments are nested too deeply (more than {MAX_ARGUMENT_DEPTH} levels)")
    # "\ud800" is valid JSON but no UTF-8: every string made writable, as ModelReply does for the reply's text
    text = json.dumps(value, ensure_ascii=False)
    safe = utf8_safe(text)
    return value if safe is text else json.loads(safe)  # parsed again only when a string had to be repaired
