"""The API keys file of `nmt serve --api-keys`."""

from __future__ import annotations

from pathlib import Path

from nmt_cli.serving.keys import ApiKeys


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_bytes("\ufefffirst-key\r\n# a comment\n\nsecond-key\n".encode())  # as Notepad saves it
    keys = ApiKeys(path)
    assert len(keys) == 2
    assert keys.allows("first-key") and keys.allows("second-key")
    assert not keys.allows("\ufefffirst-key") and not keys.allows("# a comment") and not keys.allows("")
