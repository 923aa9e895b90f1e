"""The command line: the Typer app and the options several commands share."""
