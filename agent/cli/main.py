"""Entry point of the `ptxbench` command. Each command lives in its own module (cmd_*.py) and registers
on the shared app; heavy imports stay inside the command functions so `ptxbench --help` is fast."""
from importlib import import_module

from .application import app

# One module per command group; each imports `app` from .app and decorates its functions.
COMMAND_MODULES = [
    "cmd_workloads",
    "cmd_compile",
    "cmd_profile",
    "cmd_eval",
    "cmd_optimize",
    "cmd_export",
    "cmd_synth",
    "cmd_bench",
    "cmd_score",
    "cmd_report",
    "cmd_seal",
    "cmd_repairs",
    "cmd_cache",
]

for _name in COMMAND_MODULES:
    import_module(f"{__package__}.{_name}")

__all__ = ["app"]
