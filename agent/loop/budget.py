"""Stop rules, checked before every model call: turns, target speedup, tokens, cost, wall time, tool calls."""
from __future__ import annotations

from pydantic import BaseModel

from .state import AgentState, OptimizeConfig


class StopDecision(BaseModel):
    reason: str
    detail: str


def check_limits(config: OptimizeConfig, state: AgentState) -> StopDecision | None:
    """The first stop rule that fires for the state after a completed step, or None to go on."""
    best = state.get("best_speedup")
    target = config.target()
    if target is not None and best is not None and best >= target:
        return StopDecision(reason="target_speedup", detail=f"best speedup {best:.3f} >= target {target}")
    done = len(state.get("done_turns", []))
    if done >= config.turns:
        return StopDecision(reason="turn_limit", detail=f"{done} of {config.turns} turns done")
    tokens = state.get("tokens", 0)
    if config.max_tokens is not None and tokens >= config.max_tokens:
        return StopDecision(reason="token_budget", detail=f"{tokens} tokens used, budget {config.max_tokens}")
    cost = state.get("cost_usd", 0.0)
    if config.max_cost_usd is not None and cost >= config.max_cost_usd:
        return StopDecision(reason="cost_budget", detail=f"${cost:.4f} spent, budget ${config.max_cost_usd}")
    if config.max_cost_usd is not None and state.get("cost_unknown"):  # else it would run on as if it cost nothing
        return StopDecision(reason="cost_budget", detail=f"{config.model} has no known price (litellm's table), so the "
                            f"cost budget ${config.max_cost_usd} cannot be counted; a token budget (--max-tokens) can")
    elapsed = state.get("elapsed_s", 0.0)
    if config.max_wall_s is not None and elapsed >= config.max_wall_s:
        return StopDecision(reason="time_budget", detail=f"{elapsed:.1f} s used, budget {config.max_wall_s} s")
    if config.mode == "tools" and state.get("tool_calls", 0) >= config.max_tool_calls:
        return StopDecision(reason="tool_budget", detail=f"{state['tool_calls']} tool calls, budget {config.max_tool_calls}")
    return None
