"""Keys off disk: the value of the --api-key-env variable, named like no secret, echoed by the model in its
reply and in its kernel, appears in no file of the run folder (events, kernels, checkpoints)."""
from __future__ import annotations

from agent_helpers import GOOD_PTX, WORKLOAD, StubEvaluator

from ptxbench.agent.models.base import ModelReply
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig

KEY = "k3y-" + "Zq8" * 12


class EchoingModel:
    name = "echo/model"

    def query(self, request):
        kernel = GOOD_PTX.replace(".version", f"// {KEY}\n.version", 1)
        return ModelReply(content=f"My key is {KEY}.\n\n```ptx\n{kernel}```\n")


def test_an_echoed_key_reaches_no_file_of_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_KEY", KEY)
    config = OptimizeConfig(workload=WORKLOAD, model="openai/echo", api_key_env="LLM_KEY", max_turns=2, no_gpu=True)
    from ptxbench.agent.loop import optimize as optimize_module

    optimize_module.make_model(config)  # registers LLM_KEY as a secret, as a real run does
    optimize(config, run_dir=tmp_path / "run", evaluator=StubEvaluator([1.0, 1.0]), model=EchoingModel())
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert any(p.name.endswith(".ptx") for p in files) and any("checkpoints" in p.name for p in files)
    leaked = [p for p in files if KEY.encode() in p.read_bytes()]
    assert not leaked
