"""`nmt train`: not built yet."""

from nmt_cli.errors import InputError


def run(**_options: object) -> None:
    raise InputError("nmt train is not built yet")
