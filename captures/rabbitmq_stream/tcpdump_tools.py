"""tcpdump around a recording, and the machine-wide lock that keeps recordings apart.

`tcpdump()` captures port 5552 on an interface for the duration of a block: it waits for
tcpdump's "listening on" line before the client may connect, stops it with SIGINT after a
short tail, reads its closing statistics and fails on dropped packets. `recording_lock()`
is held by every process that records (record.py, bench/record_flood.py), since tcpdump on
port 5552 sees every client of the broker.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker import PORT
from loopback import LOOPBACK
from system_tools import find_program, give_to_dir_owner

log = logging.getLogger("record")

TCPDUMP_READY_WAIT_S = 10.0
# Lets the last FIN/ACK of the client's connection reach tcpdump before it is stopped.
TCPDUMP_TAIL_S = 0.5


# tcpdump on port 5552 sees every client of the broker, so two recordings at once (say
# tests/test_live.py and a re-recording) would each capture the other's connections.
RECORDING_LOCK = Path("/run" if os.access("/run", os.W_OK) else "/tmp") / "streamdump-record.lock"
RECORDING_LOCK_WAIT_S = 600.0


@contextlib.contextmanager
def recording_lock(wait_s: float = RECORDING_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the machine-wide recording lock for the block, waiting up to `wait_s` for it."""
    fd = os.open(RECORDING_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"pid {holder} has held {RECORDING_LOCK} for over {wait_s:.0f} s"
                    ) from None
                if not waited:
                    log.info("waiting for another recording (pid %s, %s)", holder, RECORDING_LOCK)
                    waited = True
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


@dataclass
class CaptureStats:
    """tcpdump's closing report; -1 where it printed no such line."""

    captured: int
    received: int
    dropped: int  # by the kernel: the capture ring overflowed
    dropped_by_interface: int = 0


def _read_stderr_until(proc: subprocess.Popen[bytes], pattern: str, timeout: float) -> str:
    """Read tcpdump's stderr until `pattern` shows up; stdout/stderr are unbuffered pipes."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while pattern.encode() not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                raise RuntimeError(f"tcpdump did not report {pattern!r}: {seen.decode(errors='replace')}")
            if sel.select(remaining):
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    continue
                seen += chunk
    return seen.decode(errors="replace")


@contextlib.contextmanager
def tcpdump(
    out: Path,
    interface: str = LOOPBACK,
    linktype: str | None = None,
    buffer_kib: int | None = None,
    packet_buffered: bool = True,
    allow_drops: bool = False,
    port: int = PORT,
    whole_packets: bool = False,
) -> Iterator[list[CaptureStats]]:
    """Capture TCP `port` (the broker's 5552) on `interface` into `out` for the duration of the block.

    `linktype` is passed as `-y` (e.g. LINUX_SLL for `any`), `buffer_kib` as `-B` (the
    kernel ring, which is what overflows when tcpdump falls behind). `packet_buffered`
    (`-U`) flushes the file after every packet; large captures go faster without it.
    Drops fail the recording unless `allow_drops`, for callers that report them instead.
    `whole_packets` passes `-s 0` (no snap length) for recordings of another protocol's port.
    Yields a list that holds the capture statistics once the block has ended.
    """
    tcpdump_bin = find_program("tcpdump") or "/usr/bin/tcpdump"
    out.unlink(missing_ok=True)
    # --immediate-mode: without it libpcap's TPACKET_V3 ring hands packets over one block
    # at a time (1 s timeout) and SIGINT discards the unfinished block, which silently cut
    # the Close/FIN off every capture and left short scenarios empty.
    cmd = [tcpdump_bin, "-i", interface, *(["-s", "0"] if whole_packets else [])]
    cmd += [*(["-U"] if packet_buffered else []), "--immediate-mode"]
    cmd += ["-y", linktype] if linktype else []
    cmd += ["-B", str(buffer_kib)] if buffer_kib else []
    cmd += ["-w", str(out), f"tcp port {port}"]
    log.info("starting: %s", " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stats: list[CaptureStats] = []
    try:
        # The client must not connect before the BPF filter is attached, or the handshake
        # would be missing from the capture.
        _read_stderr_until(proc, "listening on", TCPDUMP_READY_WAIT_S)
        yield stats
        time.sleep(TCPDUMP_TAIL_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    text = err.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"tcpdump exited with {proc.returncode}: {text}")
    found = re.finditer(
        r"(\d+) packets? (captured|received by filter|dropped by kernel|dropped by interface)", text
    )
    counts = {m[2]: int(m[1]) for m in found}
    stats.append(
        CaptureStats(
            counts.get("captured", -1),
            counts.get("received by filter", -1),
            counts.get("dropped by kernel", -1),
            counts.get("dropped by interface", 0),
        )
    )
    if not allow_drops and (stats[0].dropped != 0 or stats[0].dropped_by_interface != 0):
        raise RuntimeError(f"tcpdump dropped packets: {text}")
    # Debian's tcpdump drops root and chowns the file to "tcpdump"; hand it back to whoever
    # owns the output directory so developers can overwrite it without root.
    give_to_dir_owner(out)
