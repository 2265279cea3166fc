"""`python -m rollkit`: the `rollkit` command line (see rollkit.cli)."""

from .cli import main

main()
