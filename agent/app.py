"""The typer application that every command module registers on (see agent/cli.py)."""
import typer

app = typer.Typer(
    name="ptxbench",
    help="Write, evaluate and benchmark architecture-specific PTX kernels with LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # A callback keeps `ptxbench <command>` a command group even while only one command is registered.
    pass
