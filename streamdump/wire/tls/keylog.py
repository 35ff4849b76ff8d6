"""NSS key logs (SSLKEYLOGFILE), from files and pcapng Decryption Secrets Blocks.

A line is `LABEL <client random, 64 hex digits> <secret in hex>`; '#' starts a comment. The
secrets TLS 1.2 (CLIENT_RANDOM: the master secret) and TLS 1.3 (the handshake and first
application traffic secrets of each side) need are kept by client random. Other labels NSS
writes (exporter and early secrets, RSA pre-master lines) are valid but unused. A line that is
none of these is junk: counted, the first few kept for the note that says so, never fatal.
"""

from __future__ import annotations

import re
from pathlib import Path

from msgspec import Struct, field

USED = (
    "CLIENT_RANDOM",
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
)
UNUSED = ("CLIENT_EARLY_TRAFFIC_SECRET", "EARLY_EXPORTER_SECRET", "EXPORTER_SECRET", "RSA")
_LINE = re.compile(r"([A-Z_0-9]+) ([0-9a-fA-F]+) ([0-9a-fA-F]+)")
# Junk lines kept word for word, for the note (the rest are only counted).
JUNK_KEPT = 3
# The longest line read (a secret is at most 48 bytes: 96 digits); longer ones are junk.
MAX_LINE = 512


class KeyLogError(Exception):
    """A key log file that cannot be read at all (missing, a directory, unreadable)."""


class KeyLog(Struct):
    """Secrets by client random, from every key log given (files, then a capture's blocks)."""

    secrets: dict[bytes, dict[str, bytes]] = field(default_factory=dict)
    lines: int = 0  # lines with secrets read
    junk: int = 0
    junk_seen: list[str] = field(default_factory=list)  # "where: line N: text", the first few
    sources: list[str] = field(default_factory=list)
    # Files read, with how many of their bytes (whole lines): a client still running appends to its
    # key log, so a live capture reads on when a client random is not found.
    files: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.secrets) or bool(self.sources)

    def copy(self) -> KeyLog:
        """A key log a read may add a capture's secrets to, leaving this one as given."""
        return KeyLog(
            {k: dict(v) for k, v in self.secrets.items()},
            self.lines,
            self.junk,
            list(self.junk_seen),
            list(self.sources),
            dict(self.files),
        )

    def load(self, path: Path | str) -> None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KeyLogError(f"--tls-keylog {path}: {exc.strerror or exc}") from None
        whole = data.rfind(b"\n") + 1 if not data.endswith(b"\n") and b"\n" in data else len(data)
        self.files[str(path)] = whole
        self.add(data[:whole], str(path))

    def read_on(self) -> None:
        """Read what was appended to the key log files since (whole lines only)."""
        for path, done in self.files.items():
            try:
                with open(path, "rb") as fh:
                    fh.seek(done)
                    data = fh.read(1 << 24)
            except OSError:
                continue
            whole = data.rfind(b"\n") + 1
            if whole:
                self.files[path] = done + whole
                self.add(data[:whole], path, again=True)

    def add(self, data: bytes, where: str, again: bool = False) -> None:
        """Read the lines of one key log (a file's bytes, a block's secrets); again: more of one
        already read."""
        if not again:
            self.sources.append(where)
        for number, raw in enumerate(data.splitlines(), 1):
            text = raw.strip()
            if not text or text.startswith(b"#"):
                continue
            if len(text) <= MAX_LINE and self._line(text.decode("ascii", "replace")):
                continue
            self.junk += 1
            if len(self.junk_seen) < JUNK_KEPT:
                shown = raw[:60].decode("utf-8", "replace")
                self.junk_seen.append(f"{where}: line {number}: {shown!r}")

    def _line(self, text: str) -> bool:
        found = _LINE.fullmatch(text)
        if found is None:
            return False
        label, first, secret = found.groups()
        if label in UNUSED:
            return True
        if label not in USED or len(first) != 64 or len(secret) % 2 or not 32 <= len(secret) <= 96:
            return False
        self.secrets.setdefault(bytes.fromhex(first), {})[label] = bytes.fromhex(secret)
        self.lines += 1
        return True

    def get(self, client_random: bytes) -> dict[str, bytes]:
        found = self.secrets.get(client_random)
        if found is None and self.files:
            self.read_on()
            found = self.secrets.get(client_random)
        return found or {}

    def junk_note(self) -> str | None:
        if not self.junk:
            return None
        shown = "; ".join(self.junk_seen)
        more = f" (and {self.junk - len(self.junk_seen)} more)" if self.junk > len(self.junk_seen) else ""
        return f"TLS key log: {self.junk} line{'s' * (self.junk != 1)} not understood, ignored: {shown}{more}"
