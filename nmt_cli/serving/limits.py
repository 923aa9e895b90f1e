"""The bounds of `nmt serve` (its --max-* and timeout options), checked once at start."""

from __future__ import annotations

from dataclasses import dataclass

from nmt_cli.errors import InputError
from nmt_cli.ranges import SETTINGS, Allowed, Range, check_each

# The values each option may take, declared as the decode settings' are (`ranges`).
BOUNDS: dict[str, Allowed] = {
    "max_batch_tokens": SETTINGS["batch_tokens"],  # each request's batch_tokens
    "max_wait_ms": Range(float, 0, 60_000),
    "max_queue": Range(int, 1, 10_000_000),
    "max_input_chars": Range(int, 1, 10_000_000),
    "max_lines": Range(int, 1, 1_000_000),
    "max_html_tags": Range(int, 1, 100_000_000),
    "request_timeout": Range(float, 0.1, 3600),
    "max_client_connections": Range(int, 1, 1_000_000),
}


@dataclass(frozen=True)
class ServeLimits:
    """How requests are batched and bounded (the --max-* options of `nmt serve`)."""

    max_batch_tokens: int = 4096
    """Source tokens gathered into one decode call (also its batch_tokens, as in nmt translate)."""
    max_wait_ms: float = 5.0
    """How long the oldest waiting request waits for others to join its batch."""
    max_queue: int = 1024
    """Lines waiting to be decoded (not counting the batch being decoded); beyond, 503."""
    max_input_chars: int = 2000
    """Longest line a request may send, in characters."""
    max_lines: int = 256
    """Most lines in one request."""
    request_timeout: float = 10.0
    """Seconds a client has to send a whole request (headers and body) once it connected or
    began it; then the connection is closed (408 where nothing of the request was answered). A
    client that reads nothing of its answers for as long is dropped too."""
    max_client_connections: int = 32
    """Open connections one client address may hold; beyond, a new one gets 429 and is closed."""
    max_html_tags: int = 32_768
    """Most HTML tags (each `<` counts) in one request of format html; beyond, 413. Parsing and
    rebuilding cost in proportion to the tags: this bounds what one request costs, and leaves
    room for a web page (500 KB of HTML with a tag every 16 characters)."""

    def validate(self) -> None:
        """Raises SettingError for a value out of its bounds, InputError for a rule between two."""
        check_each(BOUNDS, self)
        if self.max_lines > self.max_queue:
            raise InputError(
                f"--max-lines {self.max_lines} is larger than --max-queue {self.max_queue}: "
                "such a request could never be queued"
            )

    @property
    def max_connections(self) -> int:
        """Open connections the server holds (a backstop: each may hold a body in memory); every
        queued or decoding request has a line, so more than twice --max-queue is never needed."""
        return 2 * self.max_queue + 64

    @property
    def max_tags_read(self) -> int:
        """HTML tags being parsed or rebuilt, and waiting to be (`serving.text_lane`): one
        request's worth at work and another waiting; beyond, 503."""
        return 2 * self.max_html_tags

    @property
    def max_body_bytes(self) -> int:
        # JSON may spell a character as a 12-byte surrogate-pair escape ("\ud83d\ude00").
        return self.max_lines * (12 * self.max_input_chars + 8) + 1024
