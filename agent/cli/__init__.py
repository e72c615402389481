"""The `ptxbench` command line: one module per command (cmd_*.py) on the typer app of
application.py, names checked up front by inputs.py. `app` is built on first use (main.py), so
importing `inputs` does not load every command; `main()` is the console script."""


def __getattr__(name: str):
    if name == "app":
        from .main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python


def main() -> None:
    """The command: Ctrl-C while its modules still load (typer, rich, the commands: a moment that a quick Ctrl-C after a
    typo meets) ends as it does once a command runs, exit status 130, not as the traceback of an import. A Python older
    than MIN_PYTHON, or one without ptxbench's dependencies (`python3 -m ptxbench.agent` from a source tree, the
    wheels' folder not on PYTHONPATH), is one line saying which and what to do, exit status 2."""
    import sys

    if sys.version_info < MIN_PYTHON:
        _fail_env(f"ptxbench needs Python {'.'.join(map(str, MIN_PYTHON))} or later, and {sys.executable} is "
                  f"{'.'.join(map(str, sys.version_info[:3]))}: run it with a newer python3")
    try:
        from .main import app
    except KeyboardInterrupt:
        sys.exit(130)
    except ModuleNotFoundError as exc:
        _missing_dependency(exc)
    try:
        app()
    except ModuleNotFoundError as exc:  # a dependency a command imports when it runs (langgraph, torch ...)
        _missing_dependency(exc)


def _missing_dependency(exc: ModuleNotFoundError) -> None:
    """One line for a third-party package this Python lacks; ptxbench's own modules keep their traceback (a bug)."""
    import sys

    top = (exc.name or "").split(".")[0]
    if not top or top == "ptxbench":
        raise exc
    extras = "all,gpu" if top in GPU_PACKAGES else "all"  # pyproject.toml's `gpu` extra is not in `all`
    _fail_env(f"the package {top!r} that ptxbench needs is not installed in this Python ({sys.executable}): install "
              f"ptxbench with its dependencies, `pip install -e '.[{extras}]'` in its repository (README.md, Set-up), or "
              "put the folder of their wheels on PYTHONPATH (docs/agent.md)")


# the modules of pyproject.toml's `gpu` extra (cupy-cuda13x, cuda-python, nvtx): a GPU machine's own
GPU_PACKAGES = ("cupy", "cuda", "nvtx")


def _fail_env(message: str) -> None:
    import sys

    sys.stderr.write(f"error: {message}\n")
    sys.exit(2)
