"""The agent's configuration and the graph state.

OptimizeConfig is everything that defines a trajectory (stored in the manifest and in the
trajectory_start event, so a run can be rebuilt). AgentState is what LangGraph checkpoints after
every node: plain JSON-able values only, so a killed run resumes from the SQLite checkpoint.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import operator
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, Field, field_validator

from ptxbench.tools.results import DEFAULT_L2_FLUSH, MAX_TRIALS, EvalResult, L2FlushMode

from .profile_policy import ProfilePolicy
from ..records.events import MAX_TURNS

Mode = Literal["pipeline", "tools"]
ContextPolicy = Literal["full", "last", "summary"]


class OptimizeConfig(BaseModel):
    workload: str
    model: str = "builtin/tuner"
    api_base: str | None = Field(None, description="OpenAI-compatible endpoint (vLLM, ollama, ...)")
    api_key_env: str | None = Field(None, description="environment variable holding the key, if not the provider's usual one")
    mode: Mode = "pipeline"
    prompt: str = Field("knowledge", description="prompt variant: basic | knowledge | expert")
    context: ContextPolicy = "full"
    arch: str = DEFAULT_ARCH
    turns: int = Field(8, ge=1, le=MAX_TURNS, description="turn limit: scored submissions (pipeline: model replies)")
    target_speedup: float | None = Field(None, ge=0, description="stop once a passing kernel reaches this speedup; None: "
                                         "the workload's default target (workloads/targets.py); 0: never stop early")

    def target(self) -> float | None:
        """The speedup that ends the run early (None: never), and that the task text states as the goal."""
        if self.target_speedup is None:
            from ptxbench.workloads.registry import get_workload
            from ptxbench.workloads.targets import default_target

            return default_target(get_workload(self.workload), self.arch).speedup
        return self.target_speedup or None
    # budgets above 0: a budget of 0 ran no turn and ended as a finished run (None is no budget)
    max_tokens: int | None = Field(None, gt=0, description="total token budget of the trajectory")
    max_cost_usd: float | None = Field(None, gt=0)
    max_wall_s: float | None = Field(None, gt=0)
    max_tool_calls: int = Field(40, ge=1, description="tools mode: tool calls in the whole trajectory")
    max_tool_calls_per_turn: int = Field(12, ge=1, description="tools mode: tool calls of one turn, its submit among them")
    temperature: float | None = Field(None, ge=0)
    max_output_tokens: int | None = Field(None, gt=0, description="max_tokens of each model call")
    model_timeout_s: float = Field(600.0, gt=0, description="seconds one model call may take before it is a timeout "
                                   "(retried like a rate limit, up to retry_attempts calls)")
    retry_attempts: int = Field(6, ge=1, description="model call attempts, the first one included")
    retry_wait_s: float = Field(2.0, ge=0)
    trials: int | None = Field(None, ge=1, le=MAX_TRIALS, description="correctness trials per evaluation (None: the "
                               "workload's; at most MAX_TRIALS, each a fresh input set held on the GPU)")
    no_gpu: bool = Field(False, description="evaluate up to compile + SASS only")
    profile: ProfilePolicy = Field("auto", description="Nsight Compute policy (agent/loop/profile_policy.py): auto = the "
                                   "target verdict on every pass, the full per-line profile on the first pass and each "
                                   "new best; full = the full profile on every submission; verdict = never unasked")
    seed: int | None = None
    l2_flush: L2FlushMode = Field(DEFAULT_L2_FLUSH, description="how each timed call finds L2 cold (EvalOptions.l2_flush); "
                                  "a config saved before the mode existed resumes with its legacy write")
    index: int = Field(0, description="trajectory number within its (model, workload, prompt) cell")
    start_from: str | None = Field(None, description="a solution file evaluated as turn 0 and shown in the first prompt")
    repair_task: str | None = Field(None, description="the repair-suite task this trajectory runs (bench --track repair)")
    repair_held_out: bool = Field(False, description="its suite holds the task out of training data (the task's own mark "
                                  "or the suite's held-out classes): export puts it in the test split")
    slug: str | None = Field(None, exclude=True, description="the model's part of the trajectory id, when the cut model "
                             "string would repeat another model's (bench/matrix.py); None: the cut string. Not recorded")

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_bool(cls, v):  # older configs: true = profile every submission, false = the default
        return ("full" if v else "auto") if isinstance(v, bool) else v

    @field_validator("slug")
    @classmethod
    def _one_folder_name(cls, v):  # a folder's name inside trajectories/, whoever gave it (a bench's optimize table)
        if v is not None and (v in ("", ".", "..") or len(v) > 48 or any(c in v for c in "/\\\0")):
            raise ValueError(f"slug {v!r:.60} is not one folder name of at most 48 characters")
        return v

    def model_slug(self) -> str:
        """The model string as a folder-name part (run folders and trajectory ids use the same one)."""
        return self.slug or self.model.replace("/", "-").replace(":", "-")[:48]

    def trajectory_id(self) -> str:
        if self.repair_task:  # several repair tasks share a workload
            return f"{self.repair_task}__{self.model_slug()}__{self.prompt}__{self.index:02d}"
        return f"{self.workload}__{self.model_slug()}__{self.prompt}__{self.index:02d}"


class AgentState(TypedDict, total=False):
    system: str
    task: str
    turn: int                        # the turn in progress, 1-based
    # completed turns: {"turn", "messages", "outcome"} (outcome: TurnOutcome JSON). Nodes return only the new
    # turn (the reducer appends), so the checkpoint's write log holds each turn once, not the whole list again.
    done_turns: Annotated[list[dict[str, Any]], operator.add]
    current: list[dict[str, Any]]     # messages of the turn in progress (assistant replies, tool results)
    reply: dict[str, Any] | None      # the last ModelReply, stored before anything acts on it
    submission: dict[str, Any] | None  # {"source", "language", "kernel_file"} of the turn
    format_error: str                # why the reply held no usable solution
    eval: EvalResult | None           # the turn's evaluation
    feedback: str                    # the text shown to the model about the turn
    model_calls: int
    tool_calls: int                  # in the whole trajectory
    turn_tool_calls: int             # in the turn in progress
    tokens: int
    cost_usd: float
    cost_unknown: bool                # a model call came back with no price: a cost budget cannot be counted
    elapsed_s: float                 # wall time spent in nodes, summed (survives resume)
    best_speedup: float | None
    best_turn: int
    best_kernel_ms: float | None      # the shortest passing kernel time (the profile policy's new best)
    stop: dict[str, str] | None       # {"reason", "detail"} once a stop rule fired
    start: dict[str, Any] | None      # the --start-from kernel: {"source", "language", "path"}, + "status" once evaluated
    context_view: str                 # the smallest context view sent so far (context.py's ladder; absent: the policy's)


def initial_state(system: str, task: str) -> AgentState:
    return AgentState(system=system, task=task, turn=1, done_turns=[], current=[], reply=None, submission=None,
                      format_error="", eval=None, feedback="", model_calls=0, tool_calls=0, turn_tool_calls=0,
                      tokens=0, cost_usd=0.0, elapsed_s=0.0, best_speedup=None, best_turn=0, best_kernel_ms=None,
                      stop=None)
