"""The kbench command line: parse options, call one library function, report errors on one line.

One module per command group (run, problems, results); options that several commands take are declared once in
`options`, and `app.command` is the one boundary that turns a library error into an `[error]` line.
"""

from kbench.cli import run, profile, problems, results  # noqa: F401, I001 - importing a group registers its commands, in order
from kbench.cli.app import app, main

__all__ = ["app", "main"]
