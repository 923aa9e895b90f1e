"""API keys for `nmt serve --api-keys FILE`: one key a line (blank lines and lines starting with
# are skipped), read at start and again on SIGHUP. A key is compared in constant time and never
written anywhere: not in a message, a log line or a metric."""

from __future__ import annotations

import hmac
import logging
import threading
from pathlib import Path

from nmt_cli.errors import InputError

log = logging.getLogger("nmt_cli.serving")


class ApiKeys:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._keys = self._read()

    def __len__(self) -> int:
        return len(self._keys)

    def allows(self, key: str | None) -> bool:
        if not key:
            return False
        given = key.encode("utf-8", "surrogatepass")
        with self._lock:
            keys = self._keys
        # Every key compared, so that the time taken says nothing about which one came close.
        return sum(hmac.compare_digest(given, k) for k in keys) > 0

    def reload(self) -> None:
        """Read the file again (SIGHUP); if it cannot be read, the keys in use stay."""
        try:
            keys = self._read()
        except InputError as err:
            log.warning(f"{err}; keeping the {len(self)} keys in use")
            return
        with self._lock:
            self._keys = keys
        log.info(f"--api-keys {self.path}: {len(keys)} keys loaded")

    def _read(self) -> list[bytes]:
        try:
            text = self.path.read_text(encoding="utf-8-sig")  # an editor's BOM is not part of a key
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            raise InputError(f"--api-keys {self.path}: cannot read it ({reason})") from None
        keys = [line.strip() for line in text.splitlines()]
        keys = [key for key in keys if key and not key.startswith("#")]
        if not keys:
            raise InputError(f"--api-keys {self.path}: holds no key; write one key a line")
        return [key.encode("utf-8") for key in keys]
