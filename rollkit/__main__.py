"""`python -m rollkit`: the `rollkit` command line (see rollkit.runs.cli)."""

from .runs.cli import main

main()
