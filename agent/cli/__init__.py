"""The `ptxbench` command line: one module per command (cmd_*.py) on the typer app of
application.py, names checked up front by inputs.py. `app` is built on first use (main.py), so
importing `inputs` does not load every command."""


def __getattr__(name: str):
    if name == "app":
        from .main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
