"""The typer application that every command module registers on (see agent/cli/main.py).

Every error a user can cause ends as one line on stderr and an exit status, never a traceback:
2 for a usage error (a bad option, an unknown name: agent/inputs.BadInput), 1 for a run that
failed (agent/inputs.RunFailed). Click's own usage errors are folded into the same one line.
The commands that read run folders (`@reads_runs`: score, report, export, seal) also end in one line, exit
status 1, when a damaged or odd run raises while it is read.
"""
import functools
import sys
import zlib
from pathlib import Path

import typer
from typer.core import TyperGroup

try:  # typer >= 0.29 carries its own copy of click
    from typer._click import ClickException
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:
    from click import ClickException, UsageError
    from click.exceptions import NoArgsIsHelpError

from .inputs import BadInput, RunFailed
from .terminal import terminal_text

# What reading a damaged or odd run folder raises: a file that is not what its name says (OSError, gzip.BadGzipFile
# among them), bytes that are not UTF-8 or JSON, a recorded value of the wrong type (ValueError: UnicodeDecodeError,
# json's errors, pydantic's ValidationError, rundir.DamagedRecord), JSON nested past the parser's depth, a gzip stream
# cut short or corrupt.
READ_ERRORS = (OSError, ValueError, RecursionError, EOFError, zlib.error)


def _fail(message: str, status: int) -> None:
    typer.echo(f"error: {terminal_text(' '.join(message.split()))}", err=True)
    sys.exit(status)


def _what(exc: BaseException) -> str:
    from pydantic import ValidationError

    from ..records.rundir import validation_line

    if isinstance(exc, ValidationError):
        return validation_line(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def read_failure(exc: BaseException, runs: list[Path]) -> str:
    """`<path>: <what>` for an error met while reading runs: the file the error names (rundir.DamagedRecord says it
    itself, an OSError carries it), else the run folders read."""
    from ..records.rundir import DamagedRecord

    if isinstance(exc, DamagedRecord):
        return str(exc)
    where = getattr(exc, "filename", None) or ", ".join(map(str, runs))
    return f"{where}: {_what(exc)}"


def reads_runs(command):
    """For a command that reads run folders (its `runs` or `run` argument): READ_ERRORS raised while it runs end as
    RunFailed, one line naming the file or run. Only on such commands: elsewhere these exceptions are bugs and keep
    their tracebacks."""

    @functools.wraps(command)
    def checked(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (BadInput, RunFailed):
            raise
        except BrokenPipeError:  # stdout closed (`| head`): click's quiet exit, not a damaged run
            raise
        except READ_ERRORS as exc:
            runs = kwargs.get("runs") or [kwargs.get("run")]
            raise RunFailed(read_failure(exc, runs)) from None

    return checked


def _usage_line(exc: ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None and isinstance(exc, UsageError) else ""
    return exc.format_message().rstrip(".") + hint


class OneLineErrors(TyperGroup):
    """Runs the command outside click's standalone mode so that every error can be printed as one line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # `ptxbench` alone: the help text, as before
            exc.show()
            sys.exit(exc.exit_code)
        except ClickException as exc:
            _fail(_usage_line(exc), exc.exit_code)
        except typer.Abort:
            _fail("aborted", 1)
        except BadInput as exc:
            _fail(str(exc), 2)
        except RunFailed as exc:
            _fail(str(exc), 1)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="ptxbench",
    help="Write, evaluate and benchmark architecture-specific PTX kernels with LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
    context_settings={"help_option_names": ["-h", "--help"]},  # -h was an unknown option
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"ptxbench {version('ptxbench')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("ptxbench (not installed: no version recorded)")
        raise typer.Exit()


@app.callback()
def _root(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                            help="print the installed version and exit")) -> None:
    # A callback keeps `ptxbench <command>` a command group even while only one command is registered.
    pass
