"""`python -m nmt_cli` runs the command line."""

from nmt_cli.cli import main

main()
