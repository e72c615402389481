"""Model strings -> Model objects, importing lazily (litellm only when an LLM is asked for).

    builtin/reference        the workload's reference solution (checks the set-up)
    builtin/tuner            feedback-guided search over the GEMM and attention templates (the default; no key)
    builtin/tuner:weak       the same search from the template's deliberately weak point (shows the climb)
    builtin/unchanged        resubmits the --start-from kernel untouched (the repair track's floor)
    replay/<path>            the model messages of a recorded trajectory, in order
    anything else            a litellm model string, e.g. openai/gpt-5, anthropic/claude-opus-4-1,
                             hosted_vllm/Qwen/Qwen3-32B with --api-base http://host:8000/v1
"""
from __future__ import annotations

from typing import Any

from .base import Model

BUILTINS = {
    "builtin/reference": "ptxbench.agent.models.builtin:ReferenceModel",
    "builtin/tuner": "ptxbench.agent.models.tuner:TunerModel",
    "builtin/tuner:weak": "ptxbench.agent.models.tuner:WeakTunerModel",
    "builtin/unchanged": "ptxbench.agent.models.builtin:UnchangedModel",
}


def model_names() -> list[str]:
    return [*BUILTINS, "replay/<trajectory.jsonl | run dir>", "<any litellm model string>"]


def _import(path: str):
    import importlib

    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


def load_model(name: str, workload_id: str, api_base: str | None = None, **options: Any) -> Model:
    """Build the model `name` for one workload. Unknown `builtin/...` names list the valid ones."""
    if name.startswith("builtin/"):
        if name not in BUILTINS:
            raise ValueError(f"unknown built-in model {name!r}; valid names: {', '.join(model_names())}")
        return _import(BUILTINS[name])(workload_id)
    if name.startswith("replay/"):
        from .replay import ReplayModel

        return ReplayModel(name.removeprefix("replay/"), workload=workload_id)
    from .litellm_model import LiteLLMModel

    return LiteLLMModel(name, api_base=api_base, **options)
