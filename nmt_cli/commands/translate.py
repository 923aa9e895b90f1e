"""`nmt translate`: not built yet."""

from nmt_cli.errors import InputError


def run(**_options: object) -> None:
    raise InputError("nmt translate is not built yet")
