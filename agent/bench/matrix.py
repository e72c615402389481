"""A benchmark's configuration and its expansion into trajectories (model x workload x prompt x index).

The resolved BenchConfig is stored in the run's manifest, so `--resume` rebuilds the same matrix.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
from pydantic import BaseModel, Field

from ..loop.profile_policy import ProfilePolicy
from ..loop.state import Mode, OptimizeConfig
from ..records.events import MAX_TURNS
from ..records.rundir import sha256_text


class BenchConfig(BaseModel):
    models: list[str] = Field(description="model strings (litellm names, builtin/..., replay/...)")
    workloads: list[str]
    prompts: list[str] = Field(default_factory=lambda: ["knowledge"], description="prompt variants")
    trajectories: int = Field(12, ge=1, description="trajectories per (model, workload, prompt) cell")
    turns: int = Field(8, ge=1, le=MAX_TURNS)
    mode: Mode = "pipeline"
    arch: str = DEFAULT_ARCH
    target_speedup: float | None = Field(None, ge=0, description="stop a trajectory early at this speedup (None: run all turns)")
    no_gpu: bool = False
    api_base: str | None = None
    backend: str = Field("local", description="local | ray")
    ray_address: str | None = None
    gpus: int | None = Field(None, ge=1, description="GPU workers (ray: actors); None = every visible GPU")
    ray_placement_wait_s: float = Field(600.0, gt=0, description="ray: seconds an evaluation waits for a running actor "
                                        "(none placed: a lost node, GPUs held elsewhere) before it is INFRA_ERROR")
    parallel: int = Field(16, ge=1, description="trajectories in flight at once")
    provider_limits: dict[str, int] = Field(default_factory=dict, description="provider -> model calls in flight (default 8)")
    model_timeout_s: float | None = Field(None, gt=0, description="seconds one model call may take before it is retried "
                                          "as a timeout (OptimizeConfig.model_timeout_s of every trajectory; a resume "
                                          "may change it); None: an `optimize` entry's, else OptimizeConfig's")
    infra_retries: int = Field(2, ge=0, description="times an infra-failed trajectory is retried from its last good step")
    seed: int | None = None
    profile: ProfilePolicy = Field("auto", description="Nsight Compute policy of every trajectory (agent/loop/profile_policy.py)")
    optimize: dict = Field(default_factory=dict, description="other OptimizeConfig fields, applied to every trajectory")
    track: str = Field("optimize", description="optimize | repair (the repair suite's tasks, each from its broken kernel)")
    suite: str | None = Field(None, description="repair track: the suite folder (None: workloads/repairs)")
    no_gpu_judged_only: bool = Field(True, description="repair track with no_gpu: only the tasks whose recorded verdict "
                                     "needs no GPU (COMPILE_ERROR, PLAN_ERROR); False: every task (runs recorded before)")
    builtin_trajectories: int | None = Field(None, ge=1, description="repair track: trajectories per cell of a builtin/ "
                                             "model, which answers the same input the same way (None: `trajectories`)")


def model_timeout(config) -> dict:
    """The bench's model_timeout_s for each trajectory's config, or nothing when it sets none: then the `optimize`
    entry (how a bench gave one before --model-timeout, recorded runs too) or OptimizeConfig's default holds."""
    return {"model_timeout_s": config.model_timeout_s} if config.model_timeout_s is not None else {}


def expand(config: BenchConfig) -> list[OptimizeConfig]:
    """Every trajectory of the matrix, index-major so the first trajectory of every cell runs first."""
    if config.track == "repair":
        from ..repairs.track import expand_repair

        return _distinct(expand_repair(config))
    out = []
    for index in range(config.trajectories):
        for model in config.models:
            for workload in config.workloads:
                for prompt in config.prompts:
                    seed = None if config.seed is None else config.seed + index
                    out.append(OptimizeConfig(
                        **{**config.optimize, "workload": workload, "model": model, "prompt": prompt, "index": index,
                           "turns": config.turns, "mode": config.mode, "arch": config.arch, "no_gpu": config.no_gpu,
                           "api_base": config.api_base, "target_speedup": config.target_speedup if config.target_speedup is not None else 0,  # 0: all turns
                           "seed": seed, "profile": config.optimize.get("profile", config.profile),
                           **model_timeout(config)}))
    return _distinct(out)


def check_startable(config: BenchConfig) -> None:
    """ValueError for a model no trajectory of the matrix can run: builtin/unchanged resubmits the kernel a trajectory
    starts from, which the optimize track gives none of (unless its `optimize` table names a start_from)."""
    if config.track != "repair" and "builtin/unchanged" in config.models and not config.optimize.get("start_from"):
        raise ValueError("builtin/unchanged resubmits the kernel a trajectory starts from, and the optimize track starts "
                         "from none: run it with --track repair")


def _own_slugs(configs: list[OptimizeConfig]) -> list[OptimizeConfig]:
    """Distinct models whose ids' model part is the same (cut at 48 characters: fireworks_ai/accounts/fireworks/models/
    deepseek-v3 and -r1), or the same but for case (Org/M and org/m: one folder on a case-insensitive disk, macOS's
    default), each get the cut string with a hash of the whole one; every other model keeps the part it always had,
    so a run recorded before goes on under its ids."""
    models: dict[str, set[str]] = {}
    for c in configs:
        models.setdefault(c.model_slug().casefold(), set()).add(c.model)
    clash = {m for same in models.values() if len(same) > 1 for m in same}
    return [c.model_copy(update={"slug": f"{c.model_slug()[:39]}-{sha256_text(c.model)[:8]}"}) if c.model in clash
            else c for c in configs]


def _distinct(configs: list[OptimizeConfig]) -> list[OptimizeConfig]:
    """The matrix, refused when two trajectories share an id (one folder, one checkpoint thread: run twice, counted
    twice); on both tracks."""
    configs = _own_slugs(configs)
    ids = [c.trajectory_id().casefold() for c in configs]
    if len(set(ids)) != len(ids):
        raise ValueError("two trajectories of the matrix share an id: repeated models, workloads or prompts?")
    return configs


def provider(model: str) -> str:
    """The provider a model string calls (its concurrency limit is shared): 'openai/gpt-5' -> 'openai'."""
    return model.split("/", 1)[0] if "/" in model else model
