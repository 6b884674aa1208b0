"""`python -m kbench` runs the command-line interface."""

from kbench.cli import main

main()
