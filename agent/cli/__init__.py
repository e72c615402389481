"""The `ptxbench` command line: one module per command (cmd_*.py) on the typer app of
application.py, names checked up front by inputs.py. `app` is built on first use (main.py), so
importing `inputs` does not load every command; `main()` is the console script."""


def __getattr__(name: str):
    if name == "app":
        from .main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The command: Ctrl-C while its modules still load (typer, rich, the commands: a moment that a quick Ctrl-C after a
    typo meets) ends as it does once a command runs, exit status 130, not as the traceback of an import."""
    import sys

    try:
        from .main import app
    except KeyboardInterrupt:
        sys.exit(130)
    app()
