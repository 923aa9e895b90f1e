"""`nmt average`: not built yet."""

from nmt_cli.errors import InputError


def run(**_options: object) -> None:
    raise InputError("nmt average is not built yet")
