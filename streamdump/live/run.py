"""Starting and ending the capturing process of `streamdump live` (capture.py), and what it said."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

# Whole packets: a frame is never cut by the capture.
SNAPLEN = 262_144


def bpf(ports: Iterable[int]) -> str:
    """The kernel filter for the servers' ports: the kernel drops everything else."""
    return " or ".join(f"tcp port {port}" for port in sorted(set(ports)))


@dataclass
class Outcome:
    """What the capturing process said when it ended."""

    packets: int = 0
    received: int = 0
    dropped: int = 0
    ifdropped: int = 0
    error: str | None = None
    privilege: bool = False
    whole: bool = False  # the error says all there is to say (not libpcap's words)


class Capture:
    """The capturing process: its pcap stream on .stream, its outcome once it has ended."""

    def __init__(
        self, interface: str, ports: Iterable[int], count: int, duration: float, write: str | None
    ) -> None:
        argv = [sys.executable, "-m", "streamdump.live.capture", interface, bpf(ports), str(SNAPLEN)]
        argv += [str(count), str(duration)] + ([write] if write else [])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.stream: IO[bytes] = self.proc.stdout

    def opened(self) -> bool:
        """Wait until the capture is open: the process writes its pcap header once libpcap
        captures with the filter set, and ends without one when it cannot. What is waited for
        stays in the stream (peeked, not read)."""
        peek = getattr(self.stream, "peek", None)
        return bool(peek(1)) if peek is not None else True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT: it flushes what it holds and says what it took

    def outcome(self) -> Outcome:
        self.stop()
        _, err = self.proc.communicate(timeout=30)
        lines = err.decode(errors="replace").strip().splitlines()
        said: dict[str, Any] = {}
        if lines:
            try:
                said = json.loads(lines[-1])
            except ValueError:
                said = {"error": lines[-1]}
        if not said and self.proc.returncode:
            said = {"error": f"the capturing process ended with status {self.proc.returncode}"}
        return Outcome(**{k: v for k, v in said.items() if k in Outcome.__dataclass_fields__})
