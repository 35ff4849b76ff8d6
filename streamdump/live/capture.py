"""The capturing process of `streamdump live`: libpcap (pcapy-ng) to a pcap stream on stdout.

It runs apart from the decoding process, so a slow view never keeps it from taking packets off
the kernel's ring: its main thread only takes packets and queues them, a second thread writes
them to stdout (and to --write's file). It stops on SIGINT or SIGTERM, after --count packets or
--duration seconds, flushes what it holds, and says on its stderr, as its last line, one JSON
object: what libpcap received and what the kernel dropped, or why it could not capture.

    python -m streamdump.live.capture IFACE BPF SNAPLEN COUNT DURATION [WRITE]
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import struct
import sys
import threading
import time
from collections import deque
from typing import BinaryIO

# The classic pcap file header: magic, version 2.4, zone, sigfigs, snaplen, link type.
_FILE_HEADER = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
# How long the loop waits for packets before it looks whether it should stop.
TIMEOUT_MS = 100
RING_BYTES = 64 << 20
BATCH = 4096
# next_batch's record of each packet: seconds, microseconds, offset in its bytes, captured length.
_META = struct.Struct("=IIII")


def file_header(snaplen: int, linktype: int) -> bytes:
    return _FILE_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)


class Writer(threading.Thread):
    """Writes queued records to the outputs; the capturing thread never waits for it."""

    def __init__(self, outputs: list[BinaryIO]) -> None:
        super().__init__(daemon=True)
        self.outputs = outputs
        self.queue: deque[bytes] = deque()
        self.more = threading.Event()
        self.done = False
        self.broken = False  # an output went away (the decoding process ended): stop

    def put(self, record: bytes) -> None:
        self.queue.append(record)
        self.more.set()

    def run(self) -> None:
        while True:
            self.more.wait(0.2)
            self.more.clear()
            while self.queue:
                chunk = [self.queue.popleft() for _ in range(min(len(self.queue), 512))]
                self._write(b"".join(chunk))
            if self.done and not self.queue:
                break
        for out in self.outputs:
            with contextlib.suppress(OSError):
                out.flush()

    def _write(self, data: bytes) -> None:
        for out in list(self.outputs):
            try:
                out.write(data)
                out.flush()
            except OSError:  # the decoding process is gone: capturing has no one to serve
                self.outputs.remove(out)
                self.broken = True


def main(argv: list[str]) -> int:
    interface, bpf, snaplen, count, duration = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    write = argv[5] if len(argv) > 5 else None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        import pcapy  # type: ignore[import-not-found]

        pc = pcapy.create(interface)
        pc.set_snaplen(snaplen)
        pc.set_promisc(0)
        pc.set_timeout(TIMEOUT_MS)
        pc.set_buffer_size(RING_BYTES)  # the kernel's ring: what absorbs a burst
        pc.activate()
        if bpf:
            pc.setfilter(bpf)
        # Non-blocking, woken by select: a quiet interface still lets the loop see a stop request.
        pc.setnonblock(1)
    except ImportError:
        return _said({"error": "pcapy-ng is not installed (pip install pcapy-ng)"})
    except Exception as exc:  # pcapy.PcapError and friends: libpcap's own words
        return _said({"error": str(exc) or type(exc).__name__, "privilege": _privilege(str(exc))})
    outputs: list[BinaryIO] = [sys.stdout.buffer]
    saved = None
    if write is not None:
        try:
            saved = open(write, "wb")  # noqa: SIM115 - the writer thread owns it
        except OSError as exc:
            return _said({"error": f"{write}: cannot write: {exc.strerror}", "whole": True})
        outputs.append(saved)
    writer = Writer(outputs)
    header = file_header(snaplen, pc.datalink())
    for out in outputs:
        out.write(header)
        out.flush()
    writer.start()
    taken = 0
    ends = time.monotonic() + duration if duration > 0 else None
    fd = pc.getfd()
    while not stop.is_set() and not writer.broken:
        if ends is not None and time.monotonic() >= ends:
            break
        select.select([fd], [], [], TIMEOUT_MS / 1000)
        # Many packets per call: the C-to-Python crossing is paid once per batch.
        data, meta = pc.next_batch(BATCH)
        for sec, usec, offset, caplen in _META.iter_unpack(meta):
            writer.put(_RECORD.pack(sec, usec, caplen, caplen) + data[offset : offset + caplen])
            taken += 1
            if count and taken >= count:
                stop.set()
                break
    received, dropped, ifdropped = pc.stats()
    writer.done = True
    writer.more.set()
    writer.join()
    if saved is not None:
        saved.close()
    return _said({"packets": taken, "received": received, "dropped": dropped, "ifdropped": ifdropped})


def _privilege(text: str) -> bool:
    lowered = text.lower()
    return "permission" in lowered or "not permitted" in lowered


def _said(result: dict[str, object]) -> int:
    sys.stderr.write(json.dumps(result) + "\n")
    sys.stderr.flush()
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
