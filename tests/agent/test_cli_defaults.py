"""Every default of `optimize` and `bench` is the config model's: the CLI writes none of its own."""
import inspect

import pytest

from ptxbench.agent.bench.matrix import BenchConfig
from ptxbench.agent.cli import cmd_bench, cmd_optimize
from ptxbench.agent.loop.state import OptimizeConfig

OPTIMIZE = {"max_cost": "max_cost_usd", "max_wall": "max_wall_s", "retry_wait": "retry_wait_s",
            "model_timeout": "model_timeout_s"}
CLI_ONLY = {"workload", "run_dir", "resume", "quiet", "restart_trajectory", "report", "suite", "provider_limit", "models",
            "workloads", "start_from"}


def _cli_defaults(command) -> dict:
    out = {}
    for name, p in inspect.signature(command).parameters.items():
        default = getattr(p.default, "default", p.default)
        out[name] = getattr(default, "value", default)
    return out


def _model_default(model, field: str):
    info = model.model_fields[field]
    return info.default_factory() if info.default_factory is not None else info.default


@pytest.mark.parametrize("command, model, rename", [(cmd_optimize.optimize, OptimizeConfig, OPTIMIZE),
                                                    (cmd_bench.bench, BenchConfig,
                                                     {"model_timeout": "model_timeout_s",
                                                      "ray_placement_wait": "ray_placement_wait_s"})])
def test_cli_defaults_are_the_config_defaults(command, model, rename):
    checked = 0
    for name, default in _cli_defaults(command).items():
        if name in CLI_ONLY:
            continue
        field = rename.get(name, name)
        assert field in model.model_fields, f"--{name} has no field in {model.__name__}"
        if default is None and _model_default(model, field) is not None:
            continue  # None: the CLI leaves the field to the model (or to the track) when the option is not given
        expected = _model_default(model, field)
        if isinstance(expected, list):
            default = default.split(",")
        assert default == expected, f"--{name} defaults to {default!r}, {model.__name__}.{field} to {expected!r}"
        checked += 1
    assert checked >= 8


def test_an_empty_runs_root_variable_is_the_default_runs_folder(tmp_path, monkeypatch):
    """PTXBENCH_RUNS set but empty put every run folder straight into the working directory."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_RUNS", "")
    result = CliRunner().invoke(app, ["optimize", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu", "--turns", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["runs"], sorted(p.name for p in tmp_path.iterdir())
