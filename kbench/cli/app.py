"""The Typer app, its one error boundary and the progress line every command shares."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from kbench import __version__
from kbench.errors import KbenchError

app = typer.Typer(
    name="kbench",
    help="Check that a hand-written kernel solution is correct, and time it against its PyTorch reference.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., None])


def fail(exc: KbenchError) -> typer.Exit:
    """A library error as one `[error]` line and its exit code."""
    typer.secho(f"[error] {exc}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=exc.exit_code)


def command(name: str) -> Callable[[F], F]:
    """Register a command whose library errors (KbenchError) end it with one `[error]` line: the one boundary."""

    def register(func: F) -> F:
        @functools.wraps(func)
        def bounded(*args, **kwargs):  # untyped: Typer reads the signature of `func`
            try:
                return func(*args, **kwargs)
            except KbenchError as exc:
                raise fail(exc) from None

        app.command(name)(bounded)
        return func

    return register


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the results."""
    typer.echo(message, err=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kbench {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[bool | None, typer.Option("--version", callback=_version, is_eager=True,
                                                 help="Print the version and exit.")] = None,
) -> None:
    """kbench: correctness and speed of ModelNew solutions against KernelBench-format problems."""


def main() -> None:
    """The console entry point: every error, Typer's own validation included, is one `[error]` line."""
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        typer.secho("[error] interrupted", err=True, fg=typer.colors.RED)
        sys.exit(130)
    except Exception as exc:  # Typer's (click's) usage errors: a message and an exit code
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if message is None or not isinstance(code, int):
            raise
        command_path = getattr(getattr(exc, "ctx", None), "command_path", "kbench")
        typer.secho(f"[error] {message()} (see `{command_path} --help`)", err=True, fg=typer.colors.RED)
        sys.exit(code)
    sys.exit(code if isinstance(code, int) else 0)
