"""Record the RabbitMQ Streams test captures that live in captures/.

This module owns the capture tooling and nothing else: it makes sure the broker's stream
plugin listens on 127.0.0.1:5552, wraps each scenario in a tcpdump recording (of `lo`,
or of `any` for the Linux cooked-mode files), drives a real rstream client (asyncio)
against the real broker, and finally converts session.pcap to session.pcapng. Some
recordings run with lo's MTU at 1500 and its offloads off, so that large frames span
many TCP segments; lo is always put back as it was. Two scenarios also write files beside
their capture: compression.sent.json (what was published, record by record) and chunks/
(Osiris chunks cut out of the broker's own segment files). The decoder under streamdump/ never
imports it; the captures it writes are test inputs for that decoder. bench/record_flood.py
imports it to record a large benchmark capture.

Usage (needs root for tcpdump, ip and ethtool):

    python captures/record.py [--scenario NAME ...] [--outdir DIR]
    python captures/record.py --restore-lo    # only undo a killed run's lo changes

Leftover streams from earlier runs are deleted by a separate connection *before* tcpdump
starts, so that cleanup traffic never appears in a capture.
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import contextlib
import fcntl
import gzip
import json
import logging
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import cramjam
import rstream
from rstream import AMQPMessage, OffsetType, Properties, schema
from rstream.client import Client
from rstream.compression import (
    CompressionHelper,
    CompressionType,
    ICompressionCodec,
    StreamCompressionCodecs,
)
from rstream.exceptions import AuthenticationFailure, StreamDoesNotExist

log = logging.getLogger("record")

HOST = "127.0.0.1"
PORT = 5552
VHOST = "/"
USERNAME = "guest"
PASSWORD = "guest"
WRONG_PASSWORD = "not-the-password"

SESSION_STREAM = "streamdump-demo"
OFFSETS_STREAM = "streamdump-offsets"
MISSING_STREAM = "streamdump-missing"
BULK_STREAM = "streamdump-bulk"
COMPRESSION_STREAM = "streamdump-compression"
TRACKING_STREAM = "streamdump-tracking"
# bench/record_flood.py's stream: listed here so an aborted flood (500k messages) does not
# stay on the broker until someone notices.
FLOOD_STREAM = "streamdump-flood"
ALL_STREAMS = (
    SESSION_STREAM,
    OFFSETS_STREAM,
    MISSING_STREAM,
    BULK_STREAM,
    COMPRESSION_STREAM,
    TRACKING_STREAM,
    FLOOD_STREAM,
)

PUBLISHER_REFERENCE = "streamdump-publisher"
CONSUMER_REFERENCE = "streamdump-consumer"

# Matches rstream's own default so the client's Tune answer looks like a stock client's.
FRAME_MAX = 1024 * 1024
HEARTBEAT = 60

PLUGIN_WAIT_S = 60.0
TCPDUMP_READY_WAIT_S = 10.0
# Lets the last FIN/ACK of the client's connection reach tcpdump before it is stopped.
TCPDUMP_TAIL_S = 0.5
DELIVERY_WAIT_S = 10.0
# Long enough for the broker to deliver a chunk it was going to deliver anyway; used to
# prove that nothing more arrives, e.g. for offset type "next".
QUIET_WAIT_S = 0.3

DEFAULT_OUTDIR = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- broker


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_stream_plugin() -> None:
    """Enable rabbitmq_stream when 5552 is closed; CI starts from a broker without it."""
    if port_open(HOST, PORT):
        return
    log.info("port %d closed: enabling rabbitmq_stream", PORT)
    # /usr/sbin is often missing from a non-login PATH (sudo, CI steps).
    plugins = shutil.which("rabbitmq-plugins") or "/usr/sbin/rabbitmq-plugins"
    subprocess.run([plugins, "enable", "rabbitmq_stream"], check=True)
    deadline = time.monotonic() + PLUGIN_WAIT_S
    while time.monotonic() < deadline:
        if port_open(HOST, PORT):
            return
        time.sleep(1.0)
    raise RuntimeError(f"{HOST}:{PORT} still closed {PLUGIN_WAIT_S:.0f} s after enabling the plugin")


class StreamClient(Client):
    """rstream's low-level Client, plus the Close frame its close() never sends.

    rstream 1.1.1's Client.close() stops the heartbeat task before BaseClient.close()
    checks `is_started` (which looks for that very task), so the Close/CloseResponse
    exchange is skipped and the connection just ends with a TCP FIN.
    """

    def __init__(self, connection_name: str) -> None:
        super().__init__(
            HOST,
            PORT,
            frame_max=FRAME_MAX,
            heartbeat=HEARTBEAT,
            connection_name=connection_name,
            # Without a handler rstream logs a traceback whenever the broker ends the
            # socket first, which it does after Close and after a failed authentication.
            connection_closed_handler=_ignore_close,
        )

    async def close(self) -> None:
        if self.is_started and self.is_connection_alive():
            await self.sync_request(
                schema.Close(self._corr_id_seq.next(), code=1, reason="OK"),
                resp_schema=schema.CloseResponse,
            )
        await super().close()
        # When the broker ended the socket first, rstream marks the connection broken and
        # never closes its StreamWriter, which leaks the transport (ResourceWarning).
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def _ignore_close(info: rstream.OnClosedErrorInfo) -> None:
    log.debug("connection closed by the broker: %s", info)


async def connect(connection_name: str) -> StreamClient:
    client = StreamClient(connection_name)
    await client.start()
    await client.authenticate(vhost=VHOST, username=USERNAME, password=PASSWORD)
    return client


async def delete_leftover_streams() -> None:
    client = await connect("streamdump-cleanup")
    try:
        for stream in ALL_STREAMS:
            with contextlib.suppress(StreamDoesNotExist):
                await client.delete_stream(stream)
                log.info("deleted leftover stream %s", stream)
    finally:
        await client.close()


# --------------------------------------------------------------------------- loopback MTU


# lo's defaults (MTU 65536, TSO/GSO on) let one send() reach tcpdump as a single segment of
# up to 64 KB, so nothing in a capture would ever span segments. With MTU 1500 and the
# offloads off the kernel cuts TCP into real 1448-byte segments (MSS 1460 minus the 12-byte
# timestamp option), as on an Ethernet link.
LOOPBACK = "lo"
WIRE_MTU = 1500
WIRE_MSS = 1448
# Short names as `ethtool -K` takes them; each switches off a family of features.
OFFLOADS_OFF = ("tso", "gso", "gro")
# The family lines `ethtool -k` prints for those, to check they really went off.
OFFLOAD_FAMILIES = ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload")
# /run is a tmpfs, emptied at boot, which is exactly when lo's settings are reset anyway.
# Changing lo needs root, so these need no fallback.
LO_LOCK = Path("/run/streamdump-record-lo.lock")
LO_SAVED = Path("/run/streamdump-record-lo.json")
IPV6_LO_MTU = Path(f"/proc/sys/net/ipv6/conf/{LOOPBACK}/mtu")
# These end the process without unwinding Python unless handled; while lo is changed they
# raise SystemExit instead, so the finally block that restores lo runs.
FATAL_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# Blocked while lo is being restored, so that a second Ctrl-C cannot leave it half done.
RESTORE_MASK = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass
class Feature:
    on: bool
    fixed: bool
    # False for a family line (e.g. tcp-segmentation-offload), whose value follows from the
    # indented lines under it; only leaves are set back one by one.
    leaf: bool


@dataclass
class LoopbackState:
    mtu: int
    ipv6_mtu: int | None
    features: dict[str, Feature]

    def to_json(self) -> str:
        features = {name: [f.on, f.fixed, f.leaf] for name, f in self.features.items()}
        return json.dumps(
            {"pid": os.getpid(), "mtu": self.mtu, "ipv6_mtu": self.ipv6_mtu, "features": features}
        )

    @classmethod
    def from_json(cls, text: str) -> LoopbackState:
        raw = json.loads(text)
        features = {name: Feature(*values) for name, values in raw["features"].items()}
        return cls(raw["mtu"], raw["ipv6_mtu"], features)

    def differences(self, other: LoopbackState) -> list[str]:
        diffs = []
        if self.mtu != other.mtu:
            diffs.append(f"mtu {other.mtu} (was {self.mtu})")
        if self.ipv6_mtu is not None and self.ipv6_mtu != other.ipv6_mtu:
            diffs.append(f"ipv6 mtu {other.ipv6_mtu} (was {self.ipv6_mtu})")
        for name, f in self.features.items():
            now = other.features.get(name)
            if not f.fixed and now is not None and now.on != f.on:
                diffs.append(f"{name} {'on' if now.on else 'off'} (was {'on' if f.on else 'off'})")
        return diffs


def _which_admin(name: str) -> str | None:
    # /usr/sbin and /sbin are often missing from a non-login PATH (sudo, CI steps).
    candidates = (shutil.which(name), f"/usr/sbin/{name}", f"/sbin/{name}")
    return next((p for p in candidates if p and os.access(p, os.X_OK)), None)


def admin_tool(name: str, package: str) -> str:
    """Path of `name`; installs `package` with apt-get when it is missing and we are root."""
    found = _which_admin(name)
    apt = shutil.which("apt-get")
    if found is None and apt and os.geteuid() == 0:
        log.info("%s is missing: apt-get install %s", name, package)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "-qq", package]
        if subprocess.run(install, env=env, check=False).returncode != 0:
            # A fresh container has no package lists yet: fetch them once and retry.
            subprocess.run([apt, "update", "-qq"], env=env, check=False)
            subprocess.run(install, env=env, check=False)
        found = _which_admin(name)
    if found is None:
        raise RuntimeError(
            f"{name} is missing and could not be installed; run `apt-get install {package}` as root. "
            f"It is needed to record with lo at MTU {WIRE_MTU} and offloads off."
        )
    return found


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _read_features(ethtool: str) -> dict[str, Feature]:
    features: dict[str, Feature] = {}
    family: str | None = None
    for line in _run([ethtool, "-k", LOOPBACK]).splitlines():
        m = re.match(r"^(\t?)([\w-]+): (on|off)(.*)$", line)
        if not m:
            continue
        indented, name, value, note = m.groups()
        if not indented:
            family = name
        elif family is not None:
            features[family].leaf = False
        features[name] = Feature(on=value == "on", fixed="[fixed]" in note, leaf=True)
    if not features:
        raise RuntimeError(f"`{ethtool} -k {LOOPBACK}` listed no features")
    return features


def read_loopback(ip: str, ethtool: str) -> LoopbackState:
    (link,) = json.loads(_run([ip, "-j", "link", "show", LOOPBACK]))
    ipv6_mtu = int(IPV6_LO_MTU.read_text()) if IPV6_LO_MTU.exists() else None
    return LoopbackState(mtu=int(link["mtu"]), ipv6_mtu=ipv6_mtu, features=_read_features(ethtool))


def _restore_loopback(ip: str, ethtool: str, saved: LoopbackState) -> None:
    now = read_loopback(ip, ethtool)
    if now.mtu != saved.mtu:
        _run([ip, "link", "set", "dev", LOOPBACK, "mtu", str(saved.mtu)])
    # The kernel follows the device MTU for IPv6 too; only a sysctl set by hand would differ.
    if saved.ipv6_mtu is not None and IPV6_LO_MTU.exists() and int(IPV6_LO_MTU.read_text()) != saved.ipv6_mtu:
        IPV6_LO_MTU.write_text(str(saved.ipv6_mtu))
    # Leaf by leaf, not `tso on`: that would also switch on sub-features that were off before.
    changes = [
        word
        for name, f in saved.features.items()
        if f.leaf and not f.fixed and name in now.features and now.features[name].on != f.on
        for word in (name, "on" if f.on else "off")
    ]
    if changes:
        _run([ethtool, "-K", LOOPBACK, *changes])
    left = saved.differences(read_loopback(ip, ethtool))
    if left:
        raise RuntimeError(
            f"{LOOPBACK} is NOT back as it was: {', '.join(left)}. The saved settings stay in {LO_SAVED}; "
            "retry with `python captures/record.py --restore-lo`."
        )
    log.info(
        "%s restored: mtu %d, %d offload feature(s) switched back", LOOPBACK, saved.mtu, len(changes) // 2
    )


@contextlib.contextmanager
def _loopback_lock() -> Iterator[None]:
    # Two recordings changing lo at once would restore each other's settings.
    fd = os.open(LO_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(
                f"another recording is changing {LOOPBACK} right now ({LO_LOCK} is locked)"
            ) from None
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    old = signal.pthread_sigmask(signal.SIG_BLOCK, RESTORE_MASK)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _fatal_signals_unwind() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def unwind(signum: int, _frame: FrameType | None) -> None:
        # SystemExit, not a custom exception: asyncio re-raises only SystemExit and
        # KeyboardInterrupt out of a task, anything else would die inside rstream's tasks.
        log.warning("%s: restoring %s before exiting", signal.Signals(signum).name, LOOPBACK)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, unwind) for sig in FATAL_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def restore_saved_loopback() -> bool:
    """Put lo back from the settings a killed run saved; False when there was nothing to do."""
    ip, ethtool = admin_tool("ip", "iproute2"), admin_tool("ethtool", "ethtool")
    with _loopback_lock():
        return _restore_saved(ip, ethtool)


def _restore_saved(ip: str, ethtool: str) -> bool:
    if not LO_SAVED.exists():
        return False
    log.warning("%s: an earlier run ended before restoring %s; restoring it now", LO_SAVED, LOOPBACK)
    with _signals_blocked():
        _restore_loopback(ip, ethtool, LoopbackState.from_json(LO_SAVED.read_text()))
        LO_SAVED.unlink()
    return True


@contextlib.contextmanager
def wire_mtu(mtu: int = WIRE_MTU) -> Iterator[None]:
    """Run the block with lo at `mtu` and TSO/GSO/GRO off, then put lo back as it was.

    Other services on this machine talk over lo, so the previous settings are restored on
    any exit: exceptions, Ctrl-C, SIGTERM and SIGHUP. They are also saved in /run first, so
    that after a SIGKILL the next run (or `record.py --restore-lo`) restores them.
    """
    if os.geteuid() != 0:
        raise RuntimeError(f"setting {LOOPBACK}'s MTU and offloads needs root")
    ip, ethtool = admin_tool("ip", "iproute2"), admin_tool("ethtool", "ethtool")
    with _loopback_lock():
        _restore_saved(ip, ethtool)
        saved = read_loopback(ip, ethtool)
        # Written before the first change, so there is no moment when lo is changed and
        # nothing on disk says how to undo it.
        LO_SAVED.write_text(saved.to_json())
        with _fatal_signals_unwind():
            try:
                _run([ethtool, "-K", LOOPBACK, *(w for name in OFFLOADS_OFF for w in (name, "off"))])
                _run([ip, "link", "set", "dev", LOOPBACK, "mtu", str(mtu)])
                changed = read_loopback(ip, ethtool)
                still_on = [name for name in OFFLOAD_FAMILIES if changed.features[name].on]
                if changed.mtu != mtu or still_on:
                    raise RuntimeError(f"{LOOPBACK}: mtu {changed.mtu}, still on: {still_on}")
                log.info("%s: mtu %d (was %d), %s off", LOOPBACK, mtu, saved.mtu, "/".join(OFFLOADS_OFF))
                yield
            finally:
                with _signals_blocked():
                    _restore_loopback(ip, ethtool, saved)
                    LO_SAVED.unlink()


# --------------------------------------------------------------------------- tcpdump


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
) -> Iterator[list[CaptureStats]]:
    """Capture port 5552 on `interface` into `out` for the duration of the block.

    `linktype` is passed as `-y` (e.g. LINUX_SLL for `any`), `buffer_kib` as `-B` (the
    kernel ring, which is what overflows when tcpdump falls behind). `packet_buffered`
    (`-U`) flushes the file after every packet; large captures go faster without it.
    Drops fail the recording unless `allow_drops`, for callers that report them instead.
    Yields a list that holds the capture statistics once the block has ended.
    """
    tcpdump_bin = shutil.which("tcpdump") or "/usr/bin/tcpdump"
    out.unlink(missing_ok=True)
    # --immediate-mode: without it libpcap's TPACKET_V3 ring hands packets over one block
    # at a time (1 s timeout) and SIGINT discards the unfinished block, which silently cut
    # the Close/FIN off every capture and left short scenarios empty.
    cmd = [tcpdump_bin, "-i", interface, *(["-U"] if packet_buffered else []), "--immediate-mode"]
    cmd += ["-y", linktype] if linktype else []
    cmd += ["-B", str(buffer_kib)] if buffer_kib else []
    cmd += ["-w", str(out), f"tcp port {PORT}"]
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
    if os.geteuid() == 0:
        st = out.parent.stat()
        os.chown(out, st.st_uid, st.st_gid)


# --------------------------------------------------------------------------- client helpers


def amqp_message(index: int, text: str) -> AMQPMessage:
    """Fixed AMQP 1.0 message; even indexes also carry properties and application properties."""
    body = f"{text} {index}".encode()
    if index % 2:
        return AMQPMessage(body=body)
    return AMQPMessage(
        body=body,
        properties=Properties(message_id=f"msg-{index}", content_type="text/plain"),
        application_properties={"index": index, "source": "streamdump"},
    )


class ConfirmTracker:
    """Collects PublishConfirm ids so the scenario can wait for specific publishing ids."""

    def __init__(self, client: Client, publisher_id: int) -> None:
        self._publisher_id = publisher_id
        self._confirmed: set[int] = set()
        self._errors: list[schema.PublishError] = []
        self._changed = asyncio.Event()
        client.add_handler(schema.PublishConfirm, self._on_confirm, name=f"confirm-{publisher_id}")
        client.add_handler(schema.PublishError, self._on_error, name=f"error-{publisher_id}")

    def _on_confirm(self, frame: schema.PublishConfirm) -> None:
        if frame.publisher_id == self._publisher_id:
            self._confirmed.update(frame.publishing_ids)
            self._changed.set()

    def _on_error(self, frame: schema.PublishError) -> None:
        # Raising here would only be logged by rstream's frame listener; wait() reports it.
        if frame.publisher_id == self._publisher_id:
            self._errors.append(frame)
            self._changed.set()

    async def wait(self, ids: set[int]) -> None:
        async def _until_all() -> None:
            while not ids <= self._confirmed and not self._errors:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_until_all(), DELIVERY_WAIT_S)
        except TimeoutError:
            raise RuntimeError(f"no confirm for {sorted(ids - self._confirmed)}") from None
        if self._errors:
            raise RuntimeError(f"broker rejected publish: {self._errors}")


async def publish(
    client: Client,
    tracker: ConfirmTracker,
    publisher_id: int,
    batch: list[tuple[int, AMQPMessage | bytes]],
) -> None:
    """Send one Publish frame holding `batch` and wait until every id in it is confirmed.

    A message given as bytes goes out as it is: a record that is not AMQP.
    """
    messages = [schema.Message(publishing_id=pid, filter_value=None, data=bytes(msg)) for pid, msg in batch]
    await client.publish(messages, publisher_id=publisher_id)
    await tracker.wait({pid for pid, _ in batch})


@dataclass
class Subscription:
    """One subscription on a low-level client: Deliver frames in, optional Credit out."""

    client: Client
    subscription_id: int
    credit_each_chunk: bool
    offsets: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    chunks: int = 0
    chunk_entries: list[int] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    async def start(
        self,
        stream: str,
        offset_spec: schema.OffsetSpec,
        initial_credit: int,
        properties: dict[str, str] | None = None,
    ) -> None:
        # rstream routes Deliver frames to a per-subscription queue keyed by int(name).
        name = str(self.subscription_id)
        self.client.add_handler(schema.Deliver, self._on_deliver, name=name)
        await self.client.run_queue_listener_task(self.subscription_id, self._on_deliver)
        await self.client.subscribe(
            stream,
            subscription_id=self.subscription_id,
            offset_spec=offset_spec,
            initial_credit=initial_credit,
            properties=properties,
        )

    async def _on_deliver(self, frame: schema.Deliver) -> None:
        # Every registered Deliver handler sees every chunk, whatever its subscription.
        if frame.subscription_id != self.subscription_id:
            return
        self.chunks += 1
        self.chunk_entries.append(frame.num_entries)
        for i, message in enumerate(frame.get_messages()):
            self.offsets.append(frame.chunk_first_offset + i)
            self.bodies.append(bytes(message))
        if self.credit_each_chunk:
            # Same policy as rstream's Consumer: one chunk consumed, one chunk of credit back.
            await self.client.credit(self.subscription_id, 1)
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        async def _until() -> None:
            while len(self.offsets) < count:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_until(), DELIVERY_WAIT_S)
        except TimeoutError:
            raise RuntimeError(
                f"subscription {self.subscription_id}: expected {count} messages, got {self.offsets}"
            ) from None
        # Anything past `count` would make the capture differ from run to run.
        await asyncio.sleep(QUIET_WAIT_S)
        if len(self.offsets) != count:
            raise RuntimeError(
                f"subscription {self.subscription_id}: expected {count} messages, got {self.offsets}"
            )

    async def stop(self) -> None:
        await self.client.unsubscribe(self.subscription_id)
        await self.client.stop_queue_listener_task(self.subscription_id)
        self.client.remove_handler(schema.Deliver, name=str(self.subscription_id))


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"scenario check failed: {what}")


# --------------------------------------------------------------------------- scenarios


async def scenario_session() -> None:
    """One connection doing the whole publish/consume life cycle of a stream."""
    publisher_id = 1
    subscription_id = 2
    client = await connect("streamdump-session")
    try:
        await client.create_stream(SESSION_STREAM, arguments={"max-length-bytes": 100_000_000})
        await client.declare_publisher(
            SESSION_STREAM, reference=PUBLISHER_REFERENCE, publisher_id=publisher_id
        )
        tracker = ConfirmTracker(client, publisher_id)
        sequence = await client.query_publisher_sequence(SESSION_STREAM, PUBLISHER_REFERENCE)
        expect(sequence == 0, f"fresh stream has publisher sequence 0, got {sequence}")

        # Publishing ids continue from the stored sequence, as rstream's Producer does.
        messages = [(sequence + 1 + i, amqp_message(i, "hello streamdump")) for i in range(10)]
        # Five single-message frames (send_wait style: each waits for its confirm, so each
        # becomes its own chunk), then one frame with five messages (one multi-entry chunk).
        for item in messages[:5]:
            await publish(client, tracker, publisher_id, [item])
        await publish(client, tracker, publisher_id, messages[5:])

        leader, replicas = await client.query_leader_and_replicas(SESSION_STREAM)
        log.info("metadata: leader %s:%d, %d replicas", leader.host, leader.port, len(replicas))

        sub = Subscription(client, subscription_id, credit_each_chunk=True)
        await sub.start(
            SESSION_STREAM,
            schema.OffsetSpec.from_params(OffsetType.FIRST, None),
            initial_credit=1,
            properties={"name": CONSUMER_REFERENCE},
        )
        await sub.wait_for(len(messages))
        expect(sub.offsets == list(range(10)), f"offsets 0..9 delivered, got {sub.offsets}")
        expect(sub.chunks == 6, f"5 single-message chunks + 1 five-message chunk, got {sub.chunks}")
        expect(sub.bodies == [bytes(m) for _, m in messages], "delivered bodies equal published bodies")

        last_offset = sub.offsets[-1]
        await client.store_offset(SESSION_STREAM, CONSUMER_REFERENCE, last_offset)
        # StoreOffset has no response; the broker applies it asynchronously.
        await asyncio.sleep(0.5)
        stored = await client.query_offset(SESSION_STREAM, CONSUMER_REFERENCE)
        expect(stored == last_offset, f"stored offset {last_offset}, queried {stored}")

        await sub.stop()
        await client.delete_publisher(publisher_id)
        await client.delete_stream(SESSION_STREAM)
    finally:
        await client.close()


async def scenario_subscribe_missing_stream() -> None:
    client = await connect("streamdump-missing")
    try:
        try:
            await client.subscribe(
                MISSING_STREAM,
                subscription_id=0,
                offset_spec=schema.OffsetSpec.from_params(OffsetType.FIRST, None),
                initial_credit=10,
            )
        except StreamDoesNotExist:
            log.info("subscribe to %s failed as expected (0x02)", MISSING_STREAM)
        else:
            raise RuntimeError(f"subscribe to {MISSING_STREAM} unexpectedly succeeded")
    finally:
        await client.close()


async def scenario_offset_specs() -> None:
    """Subscribe once per OffsetType (1..5) to one stream, unsubscribing after each."""
    publisher_id = 0
    client = await connect("streamdump-offsets")
    try:
        await client.create_stream(OFFSETS_STREAM)
        # No reference: the other publisher flavour (deduplication off) next to session's.
        await client.declare_publisher(OFFSETS_STREAM, reference=None, publisher_id=publisher_id)
        tracker = ConfirmTracker(client, publisher_id)

        # One message per frame and per confirm, so offset n is chunk n and counts below
        # do not depend on how the broker batches.
        for i in range(5):
            await publish(client, tracker, publisher_id, [(i, amqp_message(i, "offset spec"))])
        # Gap on both sides of the timestamp so chunk timestamps (ms) cannot tie with it.
        await asyncio.sleep(0.05)
        timestamp_ms = time.time_ns() // 1_000_000
        await asyncio.sleep(0.05)
        for i in range(5, 8):
            await publish(client, tracker, publisher_id, [(i, amqp_message(i, "offset spec"))])

        spec = schema.OffsetSpec.from_params

        first = Subscription(client, 1, credit_each_chunk=False)
        await first.start(OFFSETS_STREAM, spec(OffsetType.FIRST, None), initial_credit=10)
        await first.wait_for(8)
        expect(first.offsets == list(range(8)), f"first: {first.offsets}")
        await first.stop()

        last = Subscription(client, 2, credit_each_chunk=False)
        await last.start(OFFSETS_STREAM, spec(OffsetType.LAST, None), initial_credit=10)
        await last.wait_for(1)
        expect(last.offsets == [7], f"last: {last.offsets}")
        await last.stop()

        # "next" delivers nothing that already exists, so publish one more message while
        # subscribed to show what it does deliver.
        nxt = Subscription(client, 3, credit_each_chunk=False)
        await nxt.start(OFFSETS_STREAM, spec(OffsetType.NEXT, None), initial_credit=10)
        await asyncio.sleep(QUIET_WAIT_S)
        expect(nxt.offsets == [], f"next before publishing: {nxt.offsets}")
        await publish(client, tracker, publisher_id, [(8, amqp_message(8, "offset spec"))])
        await nxt.wait_for(1)
        expect(nxt.offsets == [8], f"next: {nxt.offsets}")
        await nxt.stop()

        by_offset = Subscription(client, 4, credit_each_chunk=False)
        await by_offset.start(OFFSETS_STREAM, spec(OffsetType.OFFSET, 3), initial_credit=10)
        await by_offset.wait_for(6)
        expect(by_offset.offsets == list(range(3, 9)), f"offset 3: {by_offset.offsets}")
        await by_offset.stop()

        by_time = Subscription(client, 5, credit_each_chunk=False)
        await by_time.start(OFFSETS_STREAM, spec(OffsetType.TIMESTAMP, timestamp_ms), initial_credit=10)
        await by_time.wait_for(4)
        expect(by_time.offsets == list(range(5, 9)), f"timestamp: {by_time.offsets}")
        await by_time.stop()

        await client.delete_publisher(publisher_id)
        await client.delete_stream(OFFSETS_STREAM)
    finally:
        await client.close()


# Body sizes for `bulk`, cycled: mostly small with a few large ones up to 4 KB, so that
# Publish/Deliver frames are tens of KB while the whole file stays around 300 KB.
BULK_SIZES = (
    *(100, 4096, 100, 110, 120, 130, 140, 150, 170, 190),
    *(210, 230, 1448, 260, 290, 320, 360, 400, 450, 500),
)
BULK_MESSAGES = 300
BULK_BATCH = 50


def bulk_body(index: int) -> bytes:
    """`bulk NNN size S ` then letters that shift with the index, S bytes in all."""
    size = BULK_SIZES[index % len(BULK_SIZES)]
    head = f"bulk {index:03d} size {size} ".encode()
    # A filler that differs per message makes a wrongly spliced reassembly visible.
    filler = bytes(0x61 + (index + k) % 26 for k in range(size - len(head)))
    return head + filler


async def scenario_bulk() -> None:
    """Large Publish and Deliver frames; recorded at MTU 1500 so each spans many segments."""
    publisher_id = 0
    subscription_id = 1
    client = await connect("streamdump-bulk")
    try:
        await client.create_stream(BULK_STREAM)
        await client.declare_publisher(BULK_STREAM, reference=None, publisher_id=publisher_id)
        tracker = ConfirmTracker(client, publisher_id)

        messages = [(i, AMQPMessage(body=bulk_body(i))) for i in range(BULK_MESSAGES)]
        # Waiting for each batch's confirm keeps the batches apart. The broker still cuts a
        # 50-message batch into chunks of its own choosing (mostly 32 + 18, once 20 + 30),
        # so the chunk layout is logged, not checked.
        for start in range(0, BULK_MESSAGES, BULK_BATCH):
            await publish(client, tracker, publisher_id, messages[start : start + BULK_BATCH])

        sub = Subscription(client, subscription_id, credit_each_chunk=False)
        # Credit is counted in chunks; one per message is enough whatever the chunk layout,
        # so no Credit frames are needed and the broker sends the Deliver frames back to back.
        await sub.start(
            BULK_STREAM, schema.OffsetSpec.from_params(OffsetType.FIRST, None), initial_credit=BULK_MESSAGES
        )
        await sub.wait_for(BULK_MESSAGES)
        expect(sub.offsets == list(range(BULK_MESSAGES)), f"offsets 0..299 delivered, got {sub.offsets}")
        log.info("bulk chunk layout: %s", sub.chunk_entries)
        expect(sub.bodies == [bytes(m) for _, m in messages], "delivered bodies equal published bodies")
        for i, body in enumerate(sub.bodies):
            expect(body.endswith(bulk_body(i)), f"message {i} carries bulk body {i}")

        await sub.stop()
        await client.delete_publisher(publisher_id)
        await client.delete_stream(BULK_STREAM)
    finally:
        await client.close()


async def scenario_auth_failure() -> None:
    client = StreamClient("streamdump-auth-failure")
    await client.start()
    try:
        await client.authenticate(vhost=VHOST, username=USERNAME, password=WRONG_PASSWORD)
    except AuthenticationFailure:
        log.info("authentication failed as expected (0x08)")
    else:
        raise RuntimeError("authentication with a wrong password unexpectedly succeeded")
    finally:
        await client.close()


# --------------------------------------------------------------------------- compression

# Files a scenario writes besides its capture, by path relative to the output directory.
Outputs = dict[str, bytes]

SNAPPY_STREAM_ID = bytes.fromhex("ff060000734e61507059")  # snappy framing format's first chunk
LZ4_FRAME_MAGIC = bytes.fromhex("04224d18")
ZSTD_MAGIC = bytes.fromhex("28b52ffd")
GZIP_MAGIC = bytes.fromhex("1f8b")


def lz4_block_size_prefixed(run: bytes) -> bytes:
    """python-lz4's `lz4.block.compress` default: u32 little-endian uncompressed size, then the block."""
    return len(run).to_bytes(4, "little") + bytes(cramjam.lz4.compress_block(run, store_size=False))


@dataclass(frozen=True)
class Variant:
    """One way of compressing a sub-batch body, as some client does it."""

    name: str
    # The compression code in the entry type byte (rstream's CompressionType value).
    code: int
    decompress: Callable[[bytes], bytes]
    # None: rstream's own codec for this code (none, gzip) compresses.
    compress: Callable[[bytes], bytes] | None
    # How the compressed body starts; empty for the variant its code falls back to.
    magic: bytes
    records: int


VARIANTS = (
    Variant("none", 0, bytes, None, b"", 3),
    Variant("gzip", 1, gzip.decompress, None, GZIP_MAGIC, 4),
    # The Java and Go clients' snappy: the framing format, starting with the stream identifier.
    Variant(
        "snappy-framed",
        2,
        lambda b: bytes(cramjam.snappy.decompress(b)),
        lambda b: bytes(cramjam.snappy.compress(b)),
        SNAPPY_STREAM_ID,
        5,
    ),
    # python-snappy's snappy.compress: one raw block, starting with the varint length.
    Variant(
        "snappy-raw",
        2,
        lambda b: bytes(cramjam.snappy.decompress_raw(b)),
        lambda b: bytes(cramjam.snappy.compress_raw(b)),
        b"",
        6,
    ),
    # The Java and Go clients' lz4: the frame format.
    Variant(
        "lz4-frame",
        3,
        lambda b: bytes(cramjam.lz4.decompress(b)),
        lambda b: bytes(cramjam.lz4.compress(b)),
        LZ4_FRAME_MAGIC,
        7,
    ),
    # cramjam reads the size prefix the same way python-lz4 writes it.
    Variant(
        "lz4-block-size-prefixed",
        3,
        lambda b: bytes(cramjam.lz4.decompress_block(b)),
        lz4_block_size_prefixed,
        b"",
        4,
    ),
    Variant(
        "zstd",
        4,
        lambda b: bytes(cramjam.zstd.decompress(b)),
        lambda b: bytes(cramjam.zstd.compress(b)),
        ZSTD_MAGIC,
        5,
    ),
)


def variant_of(code: int, body: bytes) -> Variant:
    """The variant of compression `code` that produced `body`, told by its first bytes."""
    same = [v for v in VARIANTS if v.code == code]
    for variant in same:
        if variant.magic and body.startswith(variant.magic):
            return variant
    fallback = [v for v in same if not v.magic]
    if not fallback:
        raise ValueError(f"compression {code}: body starts {body[:10].hex()}, no known variant")
    return fallback[0]


def sub_batch_run(records: Sequence[bytes]) -> bytes:
    """A sub-batch's uncompressed body: [u32 size][record] per record."""
    return b"".join(len(r).to_bytes(4, "big") + r for r in records)


class VariantCodec(ICompressionCodec):
    """rstream codec that compresses with one variant and uncompresses any variant of its code.

    rstream holds one codec per compression code, and the two snappy and two lz4 variants
    share a code, so the consumer side recognises the variant by the body's first bytes.
    """

    def __init__(self, variant: Variant) -> None:
        assert variant.compress is not None
        self.variant = variant
        self.run = b""
        self.body = b""
        self.count = 0

    def compress(self, messages: Sequence[Any]) -> None:
        assert self.variant.compress is not None
        self.run = sub_batch_run([bytes(m) for m in messages])
        self.body = self.variant.compress(self.run)
        self.count = len(messages)

    def uncompress(self, compressed_data: bytes, uncompressed_data_size: int) -> bytes:
        run = variant_of(self.variant.code, compressed_data).decompress(compressed_data)
        if len(run) != uncompressed_data_size:
            raise ValueError(f"uncompressed {len(run)} bytes, the entry says {uncompressed_data_size}")
        return run

    def compressed_size(self) -> int:
        return len(self.body)

    def uncompressed_size(self) -> int:
        return len(self.run)

    def messages_count(self) -> int:
        return self.count

    def compression_type(self) -> int:
        return self.variant.code

    def data(self) -> bytes:
        return self.body


# Fixed instants (ms since the epoch), so that the record bytes are the same in every run.
CREATION_MS = 1_795_000_000_000
EXPIRY_MS = CREATION_MS + 86_400_000
APP_TIMESTAMP = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
MESSAGE_UUID = uuid.UUID("6f1c2a52-8d3e-4b7a-9c10-5e2f7d4a8b91")
FILLER_TEXT = "the quick brown fox jumps over the lazy dog"


def compression_simple_messages() -> list[AMQPMessage | bytes]:
    """The plain entries: AMQP messages with every kind of section content, then two raw ones."""
    return [
        AMQPMessage(
            body=b'{"order": 1, "item": "widget", "qty": 3}',
            properties=Properties(
                message_id="cmp-1",
                user_id=b"guest",
                to="/queues/orders",
                subject="order.created",
                reply_to="/queues/replies",
                correlation_id=b"\x00\x01corr",
                content_type="application/json",
                content_encoding="utf-8",
                absolute_expiry_time=EXPIRY_MS,
                creation_time=CREATION_MS,
                group_id="orders",
                group_sequence=7,
                reply_to_group_id="replies",
            ),
            application_properties={
                "str": "streamdump",
                "int": 42,
                "negative": -7,
                "long": 2**40,
                "true": True,
                "false": False,
                "double": 2.5,
                "binary": b"\x00\xff\x10",
                "null": None,
                "timestamp": APP_TIMESTAMP,
            },
        ),
        AMQPMessage(
            body="grüße, 世界".encode(),
            properties=Properties(
                message_id=MESSAGE_UUID,
                correlation_id=123456789,
                content_type="text/plain; charset=utf-8",
                creation_time=CREATION_MS + 1000,
            ),
            application_properties={"lang": "de+zh", "retries": 0},
        ),
        # No properties section, and a body that is not text.
        AMQPMessage(body=bytes(range(40)), application_properties={"kind": "binary", "size": 40}),
        # No application-properties section.
        AMQPMessage(
            body=b"properties only", properties=Properties(message_id=b"\x01\x02\x03\x04", subject="x")
        ),
        b"raw bytes, not an AMQP message",
        b"\xde\xad\xbe\xef\x00\x01\x02\x7f\x80\xfe\xff\r\n\t\x1b",
    ]


def sub_batch_messages(variant: Variant) -> list[AMQPMessage]:
    """`variant.records` messages with distinct, compressible bodies; even ones carry properties."""
    messages = []
    for k in range(variant.records):
        body = f"{variant.name} record {k}: {FILLER_TEXT} {FILLER_TEXT}".encode()
        if k % 2:
            messages.append(AMQPMessage(body=body))
        else:
            messages.append(
                AMQPMessage(
                    body=body,
                    properties=Properties(message_id=f"{variant.name}-{k}", content_type="text/plain"),
                    application_properties={"variant": variant.name, "index": k},
                )
            )
    return messages


# The AMQP 1.0 type rstream 1.1.1 encodes each properties field as. message_id and
# correlation_id depend on the value: see _ID_TYPES.
PROPERTY_TYPES = {
    "user_id": "binary",
    "to": "string",
    "subject": "string",
    "reply_to": "string",
    "content_type": "symbol",
    "content_encoding": "symbol",
    "absolute_expiry_time": "timestamp",
    "creation_time": "timestamp",
    "group_id": "string",
    "group_sequence": "uint",
    "reply_to_group_id": "string",
}
_ID_TYPES: dict[type, str] = {str: "string", bytes: "binary", uuid.UUID: "uuid", int: "ulong"}
INT32 = range(-(2**31), 2**31)


def amqp_value_type(value: object) -> str:
    """The AMQP 1.0 type rstream 1.1.1 encodes an application property value as."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int" if value in INT32 else "long"
    types = {str: "string", bytes: "binary", float: "double", datetime: "timestamp", uuid.UUID: "uuid"}
    return types[type(value)]


def json_value(value: object) -> object:
    """JSON-safe form: bytes as hex, UUIDs as text, timestamps as int ms since the epoch."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return calendar.timegm(value.utctimetuple()) * 1000 + value.microsecond // 1000
    return value


def record_json(message: AMQPMessage | bytes) -> dict[str, Any]:
    """One record of the sidecar: its exact bytes and, for AMQP, what was given to rstream."""
    if isinstance(message, bytes):
        return {"offset": None, "bytes": message.hex(), "amqp": False}
    given = message.properties._asdict() if message.properties else {}
    properties = {name: value for name, value in given.items() if value is not None}
    app = message.application_properties or {}
    return {
        "offset": None,
        "bytes": bytes(message).hex(),
        "amqp": True,
        "body": bytes(message.body).hex(),
        "properties": {name: json_value(value) for name, value in properties.items()},
        "property_types": {
            name: _ID_TYPES[type(value)] if name in ("message_id", "correlation_id") else PROPERTY_TYPES[name]
            for name, value in properties.items()
        },
        "application_properties": {name: json_value(value) for name, value in app.items()},
        "application_property_types": {name: amqp_value_type(value) for name, value in app.items()},
    }


async def scenario_compression() -> Outputs:
    """Plain entries, then one sub-batch entry per compression variant, consumed from the first offset."""
    publisher_id = 1
    subscription_id = 2
    # The codec registry is process-wide; put rstream's own codecs back afterwards.
    saved_codecs = dict(StreamCompressionCodecs.available_compress_codecs)
    publishes: list[dict[str, Any]] = []
    client = await connect("streamdump-compression")
    try:
        await client.create_stream(COMPRESSION_STREAM)
        await client.declare_publisher(COMPRESSION_STREAM, reference=None, publisher_id=publisher_id)
        tracker = ConfirmTracker(client, publisher_id)

        publishing_id = 0
        # One message per Publish frame, each confirmed before the next: one chunk each.
        for message in compression_simple_messages():
            publishing_id += 1
            await publish(client, tracker, publisher_id, [(publishing_id, message)])
            publishes.append(
                {"publishing_id": publishing_id, "kind": "simple", "records": [record_json(message)]}
            )

        for variant in VARIANTS:
            ctype = CompressionType(variant.code)
            if variant.compress is not None:
                # One codec per code, so register this variant's just before its batch.
                StreamCompressionCodecs.register_codec(ctype, VariantCodec(variant))
            messages = sub_batch_messages(variant)
            codec = CompressionHelper.compress(messages, ctype)
            run = sub_batch_run([bytes(m) for m in messages])
            body = codec.data()
            expect(codec.uncompressed_size() == len(run), f"{variant.name}: uncompressed size")
            expect(codec.compressed_size() == len(body), f"{variant.name}: compressed size")
            expect(variant.decompress(body) == run, f"{variant.name}: body decompresses to the records")
            expect(
                variant_of(variant.code, body) is variant, f"{variant.name}: recognised by its first bytes"
            )
            if variant.name == "lz4-block-size-prefixed":
                expect(body[:4] == len(run).to_bytes(4, "little"), "lz4 block starts with its LE size")
            # As rstream's Producer.send_sub_entry: one publishing id per record, and the
            # entry carries the last one.
            publishing_id += len(messages)
            await client.send_frame(
                schema.PublishSubBatching(
                    publisher_id=publisher_id,
                    number_of_root_messages=1,
                    publishing_id=publishing_id,
                    compress_type=0x80 | variant.code << 4,
                    subbatching_message_count=len(messages),
                    uncompressed_data_size=len(run),
                    compressed_data_size=len(body),
                    messages=body,
                )
            )
            await tracker.wait({publishing_id})
            publishes.append(
                {
                    "publishing_id": publishing_id,
                    "kind": "sub_batch",
                    "compression": variant.code,
                    "variant": variant.name,
                    "entry_type": 0x80 | variant.code << 4,
                    "uncompressed_size": len(run),
                    "compressed_size": len(body),
                    "compressed_data": body.hex(),
                    "records": [record_json(m) for m in messages],
                }
            )

        records = [r for p in publishes for r in p["records"]]
        sub = Subscription(client, subscription_id, credit_each_chunk=False)
        # One chunk per Publish frame; credit for all of them, so no Credit frames.
        await sub.start(
            COMPRESSION_STREAM,
            schema.OffsetSpec.from_params(OffsetType.FIRST, None),
            initial_credit=len(publishes),
        )
        await sub.wait_for(len(records))
        expect(sub.offsets == list(range(len(records))), f"offsets 0..{len(records) - 1}, got {sub.offsets}")
        expect(sub.chunk_entries == [1] * len(publishes), f"one entry per chunk, got {sub.chunk_entries}")
        expect(sub.bodies == [bytes.fromhex(r["bytes"]) for r in records], "delivered records equal sent")
        for record_, offset in zip(records, sub.offsets, strict=True):
            record_["offset"] = offset

        await sub.stop()
        await client.delete_publisher(publisher_id)
        await client.delete_stream(COMPRESSION_STREAM)
    finally:
        StreamCompressionCodecs.available_compress_codecs.clear()
        StreamCompressionCodecs.available_compress_codecs.update(saved_codecs)
        await client.close()

    sidecar = {
        "scenario": "compression",
        "rstream": rstream.__version__,
        "connection_name": "streamdump-compression",
        "stream": COMPRESSION_STREAM,
        "publisher_id": publisher_id,
        "publisher_reference": None,
        "subscription_id": subscription_id,
        # rstream's low-level Deliver gives the chunk's first offset only; a record's offset is
        # that plus its index among the chunk's records (what rstream's Consumer reports too).
        "offsets": "chunk_first_offset + index of the record in the chunk",
        "publishes": publishes,
    }
    return {"compression.sent.json": (json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n").encode()}


# --------------------------------------------------------------------------- tracking

TRACKING_PUBLISHER_REFERENCE = "streamdump-tracker"
TRACKING_CONSUMER_REFERENCE = "streamdump-tracking-consumer"
# Segment size limit for `streamdump-tracking`: the first segment passes it with the second
# tracking delta (511 bytes then), so the next write opens a second segment, and osiris
# starts every new segment with a tracking snapshot chunk.
TRACKING_SEGMENT_BYTES = 500
# (segment file, [(chunk type, chunk id), ...]) the scenario must leave on disk.
TRACKING_LAYOUT = [
    ("00000000000000000000.segment", [(0, 0), (0, 3), (1, 4), (0, 5), (1, 6)]),
    ("00000000000000000007.segment", [(2, 7), (0, 8), (0, 11)]),
]
# Offsets of the user records: 4, 6 and 7 are the tracking chunks, which take one offset each.
TRACKING_USER_OFFSETS = [0, 1, 2, 3, 5, 8, 9, 10, 11]

RABBITMQ_MNESIA = Path("/var/lib/rabbitmq/mnesia")
SEGMENT_MAGIC = b"OSIL"
INDEX_MAGIC = b"OSII"
# "OSIL"/"OSII" then a u32 version (1).
FILE_HEADER_LEN = 8
CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB3x")
CHUNK_HEADER_LEN = CHUNK_HEADER.size  # 48
CHUNK_MAGIC_VERSION = 0x50
# Index record: chunk id u64, timestamp i64, epoch u64, segment file position u32, chunk type u8.
INDEX_RECORD = struct.Struct(">QqQIB")
CHUNK_FIXTURES = {0: "user_with_trailer.bin", 1: "tracking_delta.bin", 2: "tracking_snapshot.bin"}


@dataclass(frozen=True)
class StoredChunk:
    """One chunk as osiris stores it in a segment file."""

    segment: str
    position: int
    magic_version: int
    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    epoch: int
    chunk_id: int
    data_crc: int
    data_length: int
    trailer_length: int
    bloom_size: int
    raw: bytes  # header, data, trailer, bloom

    @property
    def data(self) -> bytes:
        return self.raw[CHUNK_HEADER_LEN : CHUNK_HEADER_LEN + self.data_length]

    @property
    def trailer(self) -> bytes:
        start = CHUNK_HEADER_LEN + self.data_length
        return self.raw[start : start + self.trailer_length]

    def layout(self) -> dict[str, int]:
        return {
            "position": self.position,
            "chunk_type": self.chunk_type,
            "chunk_id": self.chunk_id,
            "num_entries": self.num_entries,
            "num_records": self.num_records,
            "data_length": self.data_length,
            "trailer_length": self.trailer_length,
            "bloom_size": self.bloom_size,
        }


def read_segment(path: Path) -> list[StoredChunk]:
    """Every chunk of a segment file, with its data CRC checked."""
    content = path.read_bytes()
    expect(content[:4] == SEGMENT_MAGIC, f"{path.name} starts with {content[:8].hex()}")
    expect(
        content[FILE_HEADER_LEN] == CHUNK_MAGIC_VERSION, f"{path.name}: first chunk right after the header"
    )
    chunks = []
    pos = FILE_HEADER_LEN
    while pos < len(content):
        fields = CHUNK_HEADER.unpack_from(content, pos)
        data_length, trailer_length, bloom_size = fields[-3:]
        end = pos + CHUNK_HEADER_LEN + data_length + trailer_length + bloom_size
        expect(end <= len(content), f"{path.name}: chunk at {pos} runs past the end of the file")
        chunk = StoredChunk(path.name, pos, *fields, raw=content[pos:end])
        expect(zlib.crc32(chunk.data) == chunk.data_crc, f"{path.name}: data CRC of chunk {chunk.chunk_id}")
        chunks.append(chunk)
        pos = end
    return chunks


def read_index(path: Path) -> list[tuple[int, int, int, int, int]]:
    content = path.read_bytes()
    expect(content[:4] == INDEX_MAGIC, f"{path.name} starts with {content[:8].hex()}")
    body = content[FILE_HEADER_LEN:]
    expect(len(body) % INDEX_RECORD.size == 0, f"{path.name}: {len(body)} bytes of index records")
    return [INDEX_RECORD.unpack_from(body, i) for i in range(0, len(body), INDEX_RECORD.size)]


def tracking_entries(payload: bytes, snapshot: bool) -> list[dict[str, Any]]:
    """[type u8][id size u8][id][u64 value]...; in a snapshot a producer sequence (type 0) has two u64."""
    entries = []
    pos = 0
    while pos < len(payload):
        kind, size = payload[pos], payload[pos + 1]
        entry: dict[str, Any] = {"type": kind, "id": payload[pos + 2 : pos + 2 + size].decode()}
        pos += 2 + size
        if snapshot and kind == 0:
            entry["chunk_id"], entry["sequence"] = struct.unpack_from(">QQ", payload, pos)
            pos += 16
        else:
            (entry["value"],) = struct.unpack_from(">Q", payload, pos)
            pos += 8
        entries.append(entry)
    expect(pos == len(payload), f"tracking entries end at {pos} of {len(payload)} bytes")
    return entries


def osiris_data_dirs() -> list[Path]:
    """Where the broker keeps its streams: <mnesia dir>/stream, else what osiris says."""
    found = sorted(RABBITMQ_MNESIA.glob("*/stream"))
    if found:
        return found
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    out = _run([ctl, "eval", "application:get_env(osiris, data_dir)."])
    m = re.search(r'\{ok,"(.*)"\}', out)
    if not m:
        raise RuntimeError(f"cannot find the broker's stream data directory (rabbitmqctl said {out!r})")
    return [Path(m[1])]


def stream_directory(stream: str) -> Path:
    """The newest directory of `stream`: osiris names it <vhost>_<stream>_<creation time>."""
    pattern = re.compile(rf"_{re.escape(stream)}_(\d+)$")
    found = [
        (int(m[1]), path)
        for root in osiris_data_dirs()
        for path in root.iterdir()
        if (m := pattern.search(path.name))
    ]
    if not found:
        raise RuntimeError(
            f"no data directory for {stream} in {osiris_data_dirs()}; try find / -name '*.segment'"
        )
    return max(found)[1]


def tracking_fixtures(stream_dir: Path) -> Outputs:
    """Copy the stream's files aside, check their layout, and cut one chunk per type out of them."""
    with tempfile.TemporaryDirectory(prefix="streamdump-segments-") as tmp:
        copies = []
        for path in sorted(stream_dir.iterdir()):
            if path.suffix in (".segment", ".index"):
                copies.append(Path(shutil.copy2(path, tmp)))
        log.info("copied %s from %s", [p.name for p in copies], stream_dir)
        segments = {p.name: read_segment(p) for p in copies if p.suffix == ".segment"}
        indexes = {p.name: read_index(p) for p in copies if p.suffix == ".index"}
        header = (Path(tmp) / TRACKING_LAYOUT[0][0]).read_bytes()[:FILE_HEADER_LEN]

    layout = [
        (name, [(c.chunk_type, c.chunk_id) for c in in_segment]) for name, in_segment in segments.items()
    ]
    expect(layout == TRACKING_LAYOUT, f"segment layout {layout}")
    for name, in_segment in segments.items():
        records = indexes[name.replace(".segment", ".index")]
        expect(
            records == [(c.chunk_id, c.timestamp, c.epoch, c.position, c.chunk_type) for c in in_segment],
            f"{name}: index records match the chunks",
        )
    stored = [c for in_segment in segments.values() for c in in_segment]
    expect(all(c.magic_version == 0x50 and c.bloom_size == 0 for c in stored), "magic 0x50, no bloom")

    outputs: Outputs = {}
    fixtures = []
    for chunk_type, file_name in CHUNK_FIXTURES.items():
        # The first chunk of each type; for user chunks, the first with a trailer.
        chunk = next(c for c in stored if c.chunk_type == chunk_type and (chunk_type or c.trailer_length))
        info: dict[str, Any] = {
            "file": file_name,
            "segment": chunk.segment,
            "size": len(chunk.raw),
            "parts": {
                "header": CHUNK_HEADER_LEN,
                "data": chunk.data_length,
                "trailer": chunk.trailer_length,
                "bloom": chunk.bloom_size,
            },
            "header": {
                "magic_version": chunk.magic_version,
                "chunk_type": chunk.chunk_type,
                "num_entries": chunk.num_entries,
                "num_records": chunk.num_records,
                "timestamp": chunk.timestamp,
                "epoch": chunk.epoch,
                "chunk_id": chunk.chunk_id,
                "data_crc": chunk.data_crc,
                "data_length": chunk.data_length,
                "trailer_length": chunk.trailer_length,
                "bloom_size": chunk.bloom_size,
            },
            "position": chunk.position,
        }
        if chunk_type:
            # Tracking data is one simple entry: u32 size, then the tracking entries.
            (size,) = struct.unpack_from(">I", chunk.data)
            expect(chunk.num_entries == 1 and size + 4 == chunk.data_length, "tracking data is one entry")
            info["tracking"] = tracking_entries(chunk.data[4:], snapshot=chunk_type == 2)
        else:
            info["records"] = [r.body.hex() for r in chunk_entries(chunk.data, chunk.num_entries)]
        info["trailer_tracking"] = tracking_entries(chunk.trailer, snapshot=False)
        fixtures.append(info)
        outputs[f"chunks/{file_name}"] = chunk.raw
    manifest = {
        "stream": TRACKING_STREAM,
        "broker": "RabbitMQ 3.10.8, osiris 1.3.1",
        "segment_file_header": header.hex(),
        "segments": [
            {"file": name, "chunks": [c.layout() for c in in_segment]}
            for name, in_segment in segments.items()
        ],
        "fixtures": fixtures,
    }
    outputs["chunks/manifest.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    return outputs


async def scenario_tracking() -> Outputs:
    """A named producer and stored consumer offsets, so that osiris writes tracking chunks."""
    publisher_id = 0
    subscription_id = 1
    client = await connect("streamdump-tracking")
    try:
        await client.create_stream(
            TRACKING_STREAM, arguments={"stream-max-segment-size-bytes": TRACKING_SEGMENT_BYTES}
        )
        await client.declare_publisher(
            TRACKING_STREAM, reference=TRACKING_PUBLISHER_REFERENCE, publisher_id=publisher_id
        )
        tracker = ConfirmTracker(client, publisher_id)
        sequence = await client.query_publisher_sequence(TRACKING_STREAM, TRACKING_PUBLISHER_REFERENCE)
        expect(sequence == 0, f"fresh stream has publisher sequence 0, got {sequence}")

        def batch(*ids: int) -> list[tuple[int, AMQPMessage | bytes]]:
            return [(i, AMQPMessage(body=f"tracking {i}".encode())) for i in ids]

        async def store(offset: int) -> None:
            await client.store_offset(TRACKING_STREAM, TRACKING_CONSUMER_REFERENCE, offset)
            # No response; give the broker time to write the tracking chunk before the next one.
            await asyncio.sleep(QUIET_WAIT_S)

        await publish(client, tracker, publisher_id, batch(1, 2, 3))  # chunk 0, offsets 0..2
        await publish(client, tracker, publisher_id, batch(4))  # chunk 3
        await store(2)  # tracking delta, chunk 4
        await publish(client, tracker, publisher_id, batch(5))  # chunk 5
        await store(5)  # tracking delta, chunk 6; the segment is now full
        # Three messages, so that the snapshot's sequence (8) differs from its chunk id (7).
        await publish(client, tracker, publisher_id, batch(6, 7, 8))  # snapshot chunk 7, then chunk 8
        await publish(client, tracker, publisher_id, batch(9))  # chunk 11

        stored = await client.query_offset(TRACKING_STREAM, TRACKING_CONSUMER_REFERENCE)
        expect(stored == 5, f"stored offset 5, queried {stored}")
        sequence = await client.query_publisher_sequence(TRACKING_STREAM, TRACKING_PUBLISHER_REFERENCE)
        expect(sequence == 9, f"publisher sequence 9, queried {sequence}")

        sub = Subscription(client, subscription_id, credit_each_chunk=False)
        # rstream's Deliver parser rejects chunk types other than 0, so a tracking chunk sent
        # to the consumer would stop the client's reader and end in a timeout here.
        await sub.start(
            TRACKING_STREAM, schema.OffsetSpec.from_params(OffsetType.FIRST, None), initial_credit=20
        )
        await sub.wait_for(len(TRACKING_USER_OFFSETS))
        expect(
            sub.offsets == TRACKING_USER_OFFSETS, f"user offsets {TRACKING_USER_OFFSETS}, got {sub.offsets}"
        )
        expect(sub.chunk_entries == [3, 1, 1, 3, 1], f"user chunks only, got {sub.chunk_entries}")
        await sub.stop()

        # The files must be read before Delete removes them.
        outputs = tracking_fixtures(stream_directory(TRACKING_STREAM))

        await client.delete_publisher(publisher_id)
        await client.delete_stream(TRACKING_STREAM)
    finally:
        await client.close()
    return outputs


# --------------------------------------------------------------------------- frames in a capture

KEY_PUBLISH = 0x0002
KEY_DELIVER = 0x0008


@dataclass(frozen=True)
class Entry:
    """One data entry of a Publish message or of a chunk: a simple record or a sub-batch."""

    code: int | None  # compression code of a sub-batch, None for a simple entry
    records: int
    uncompressed_size: int
    body: bytes  # the record, or the sub-batch's compressed body


def read_entry(buf: bytes, pos: int) -> tuple[Entry, int]:
    if buf[pos] & 0x80 == 0:
        (size,) = struct.unpack_from(">I", buf, pos)
        return Entry(None, 1, size, buf[pos + 4 : pos + 4 + size]), pos + 4 + size
    kind, count, plain, size = struct.unpack_from(">BHII", buf, pos)
    start = pos + 11
    return Entry((kind >> 4) & 0x07, count, plain, buf[start : start + size]), start + size


def chunk_entries(data: bytes, count: int) -> list[Entry]:
    entries = []
    pos = 0
    for _ in range(count):
        entry, pos = read_entry(data, pos)
        entries.append(entry)
    expect(pos == len(data), f"entries end at {pos} of {len(data)} bytes")
    return entries


def capture_frames(pcap: Path) -> tuple[list[bytes], list[bytes]]:
    """Stream-protocol frames of a one-connection Ethernet capture: (client→server, server→client).

    Each frame is given without its u32 size: key, version, then the body.
    """
    import dpkt

    data: dict[bool, bytearray] = {True: bytearray(), False: bytearray()}
    next_seq: dict[bool, int] = {}
    with pcap.open("rb") as fh:
        for _ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            to_server = tcp.dport == PORT
            if tcp.flags & dpkt.tcp.TH_SYN:
                next_seq[to_server] = tcp.seq + 1
                continue
            payload = bytes(tcp.data)
            if not payload:
                continue
            # Bytes already seen (a retransmission) are skipped; a gap fails the check.
            skip = (next_seq[to_server] - tcp.seq) % 2**32
            if skip >= 2**31:
                raise RuntimeError(f"{pcap}: bytes missing before seq {tcp.seq}")
            data[to_server] += payload[skip:]
            next_seq[to_server] = max(next_seq[to_server], tcp.seq + len(payload)) % 2**32
    frames: tuple[list[bytes], list[bytes]] = ([], [])
    for to_server, out in ((True, frames[0]), (False, frames[1])):
        buf, pos = bytes(data[to_server]), 0
        while pos < len(buf):
            (size,) = struct.unpack_from(">I", buf, pos)
            out.append(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
        expect(pos == len(buf), f"{pcap}: the last frame is cut short")
    return frames


def frame_key(frame: bytes) -> int:
    return struct.unpack_from(">H", frame)[0]


def publish_entries(frame: bytes) -> list[tuple[int, Entry]]:
    """(publishing id, entry) of each message of a version-1 Publish frame."""
    (count,) = struct.unpack_from(">i", frame, 5)
    pos = 9
    entries = []
    for _ in range(count):
        (publishing_id,) = struct.unpack_from(">Q", frame, pos)
        entry, pos = read_entry(frame, pos + 8)
        entries.append((publishing_id, entry))
    expect(pos == len(frame), "Publish frame ends after its messages")
    return entries


def deliver_chunk(frame: bytes) -> tuple[StoredChunk, list[Entry]]:
    """The chunk of a version-1 Deliver frame; it must end right after the data."""
    fields = CHUNK_HEADER.unpack_from(frame, 5)
    chunk = StoredChunk("deliver", 0, *fields, raw=frame[5:])
    expect(len(frame) == 5 + CHUNK_HEADER_LEN + chunk.data_length, "Deliver ends right after the chunk data")
    expect(zlib.crc32(chunk.data) == chunk.data_crc, f"data CRC of chunk {chunk.chunk_id}")
    return chunk, chunk_entries(chunk.data, chunk.num_entries) if chunk.chunk_type == 0 else []


def verify_compression(pcap: Path, outputs: Outputs) -> None:
    """The capture's Publish and Deliver frames carry exactly what the sidecar says."""
    sent = json.loads(outputs["compression.sent.json"])
    to_server, to_client = capture_frames(pcap)
    published = [e for f in to_server if frame_key(f) == KEY_PUBLISH for e in publish_entries(f)]
    expect(len(published) == len(sent["publishes"]), f"{len(published)} Publish entries")
    for (publishing_id, entry), item in zip(published, sent["publishes"], strict=True):
        expect(publishing_id == item["publishing_id"], f"publishing id {publishing_id}")
        if item["kind"] == "simple":
            expect(entry.code is None and entry.body.hex() == item["records"][0]["bytes"], f"{publishing_id}")
        else:
            expect(
                entry.code == item["compression"]
                and entry.records == len(item["records"])
                and entry.uncompressed_size == item["uncompressed_size"]
                and entry.body.hex() == item["compressed_data"],
                f"sub-batch {publishing_id} ({item['variant']})",
            )
    delivered = [deliver_chunk(f) for f in to_client if frame_key(f) == KEY_DELIVER]
    expect(all(c.chunk_type == 0 for c, _ in delivered), "user chunks only")
    expect([e for _, entries in delivered for e in entries] == [e for _, e in published], "Deliver = Publish")
    first_offsets = [item["records"][0]["offset"] for item in sent["publishes"]]
    expect([c.chunk_id for c, _ in delivered] == first_offsets, "chunk ids = the sidecar's offsets")
    codes = [e.code for _, entries in delivered for e in entries if e.code is not None]
    expect(sorted(codes) == [0, 1, 2, 2, 3, 3, 4], f"sub-batch codes delivered: {codes}")
    log.info("%s: %d Deliver frames, sub-batch compression codes %s", pcap, len(delivered), codes)


def verify_tracking(pcap: Path, outputs: Outputs) -> None:
    """Deliver frames carry the user chunks only, never the tracking chunks on disk."""
    manifest = json.loads(outputs["chunks/manifest.json"])
    stored = [c for segment in manifest["segments"] for c in segment["chunks"]]
    _, to_client = capture_frames(pcap)
    delivered = [deliver_chunk(f)[0] for f in to_client if frame_key(f) == KEY_DELIVER]
    seen = [(c.chunk_type, c.chunk_id, c.trailer_length) for c in delivered]
    user = [(c["chunk_type"], c["chunk_id"], c["trailer_length"]) for c in stored if c["chunk_type"] == 0]
    expect(seen == user, f"Deliver (type, chunk id, trailer length) {seen}, user chunks on disk {user}")
    log.info("%s: Deliver chunks (type, id, trailer length) %s; tracking chunks not sent", pcap, seen)


# pcap link types (DLT_*) as written in the file header.
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
BIG_RING_KIB = 65536


@dataclass(frozen=True)
class Recording:
    """One output file `<name>.pcap`: which scenario, and how tcpdump and lo are set up."""

    # Returns the files it wants written next to the capture (sidecars, fixtures), if any.
    scenario: Callable[[], Awaitable[Outputs | None]]
    interface: str = LOOPBACK
    # tcpdump -y; None keeps the interface's default.
    linktype_name: str | None = None
    # What the file header must say; a different tcpdump/libpcap default fails the recording.
    linktype: int = LINKTYPE_ETHERNET
    # lo's MTU (offloads off) during the recording; None leaves lo alone.
    mtu: int | None = None
    # tcpdump -B (KiB). With the default 2 MiB ring, `-i any --immediate-mode` reported 10-34
    # of 48 packets "dropped by kernel" in a 3-connection probe on this machine (`any` also
    # sees lo's outgoing copy of every packet); with -B 65536 it dropped none. `lo` alone
    # dropped 6 of 56 packets of `session` on a machine busy with another job, so every
    # recording gets the big ring.
    buffer_kib: int | None = BIG_RING_KIB
    # TCP connections the scenario opens; more in the file means some other client used
    # the broker during the recording, and the file must not be used.
    connections: int = 1
    # Checks the finished capture against the scenario's outputs; fails loudly.
    verify: Callable[[Path, Outputs], None] | None = None


RECORDINGS: dict[str, Recording] = {
    "session": Recording(scenario_session),
    "subscribe_missing_stream": Recording(scenario_subscribe_missing_stream),
    "offset_specs": Recording(scenario_offset_specs),
    "auth_failure": Recording(scenario_auth_failure),
    "bulk": Recording(scenario_bulk, mtu=WIRE_MTU, buffer_kib=BIG_RING_KIB),
    # Debian 12's tcpdump 4.99.3 / libpcap 1.10.3 writes LINUX_SLL2 for `-i any` by
    # default; the v1 cooked header needs an explicit -y.
    "session_any": Recording(
        scenario_session, interface="any", linktype=LINKTYPE_LINUX_SLL2, buffer_kib=BIG_RING_KIB
    ),
    "session_sll": Recording(
        scenario_session,
        interface="any",
        linktype_name="LINUX_SLL",
        linktype=LINKTYPE_LINUX_SLL,
        buffer_kib=BIG_RING_KIB,
    ),
    "compression": Recording(scenario_compression, verify=verify_compression),
    "tracking": Recording(scenario_tracking, verify=verify_tracking),
}


# --------------------------------------------------------------------------- pcapng


def _raw_packets(path: Path) -> list[tuple[int, int, bytes]]:
    """(timestamp in µs, wire length, bytes) of every packet, pcap or pcapng alike."""
    from scapy.utils import RawPcapReader

    packets: list[tuple[int, int, bytes]] = []
    with RawPcapReader(str(path)) as reader:  # picks the pcapng reader by itself
        for data, meta in reader:
            if hasattr(meta, "tshigh"):
                ticks = (meta.tshigh << 32) | meta.tslow
                micros = ticks * 1_000_000 // meta.tsresol
            else:
                micros = meta.sec * 1_000_000 + meta.usec
            packets.append((micros, meta.wirelen, bytes(data)))
    return packets


def pcap_linktype(path: Path) -> int:
    """Link type from a classic pcap file header (either byte order)."""
    with path.open("rb") as fh:
        header = fh.read(24)
    order = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    return struct.unpack(order + "IHHiIII", header)[6]


@dataclass
class CaptureSummary:
    packets: int
    connections: int
    linktype: int
    # TCP payload bytes: the largest segment, and how many segments had exactly WIRE_MSS.
    max_payload: int
    mss_segments: int
    syn_mss: list[int]


def check_capture(pcap: Path) -> CaptureSummary:
    """Summarise `pcap`; fail unless every connection is whole.

    Whole means its SYN and a FIN or RST are in the file: a capture cut short at either
    end is useless as a decoder test even when tcpdump itself reported no error.
    """
    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap

    packets = rdpcap(str(pcap))
    opened: set[int] = set()
    closed: set[int] = set()
    max_payload = mss_segments = 0
    syn_mss: list[int] = []
    for pkt in packets:
        if TCP not in pkt:
            continue
        tcp = pkt[TCP]
        client_port = tcp.dport if tcp.sport == PORT else tcp.sport
        if tcp.flags.S:
            syn_mss += [value for kind, value in tcp.options if kind == "MSS"]
            if not tcp.flags.A:
                opened.add(client_port)
        if tcp.flags.F or tcp.flags.R:
            closed.add(client_port)
        # From the IP total length, not len(tcp.payload), which would count link padding.
        payload = pkt[IP].len - pkt[IP].ihl * 4 - tcp.dataofs * 4
        max_payload = max(max_payload, payload)
        mss_segments += payload == WIRE_MSS
    if not opened or opened != closed:
        raise RuntimeError(f"{pcap}: connections opened {sorted(opened)}, closed {sorted(closed)}")
    return CaptureSummary(len(packets), len(opened), pcap_linktype(pcap), max_payload, mss_segments, syn_mss)


def write_pcapng(pcap: Path, pcapng: Path) -> int:
    """Copy every packet of `pcap` into `pcapng`, keeping bytes and timestamps exact."""
    # Importing the layer registers Ether for link type 1; without it scapy reads raw
    # packets and the pcapng writer cannot tell which link type to declare.
    from scapy.layers.l2 import Ether  # noqa: F401
    from scapy.utils import PcapNgWriter, rdpcap

    packets = rdpcap(str(pcap))
    pcapng.unlink(missing_ok=True)
    with PcapNgWriter(str(pcapng)) as writer:
        # write_packet() skips the header logic of write(); the first packet tells scapy
        # which link type the interface block must declare.
        writer.write_header(packets[0])
        for pkt in packets:
            # Passing the EDecimal time through avoids scapy's float conversion, which can
            # shift a timestamp by one microsecond.
            writer.write_packet(pkt, sec=pkt.time, wirelen=pkt.wirelen)
    # Compare raw file contents, not re-dissected scapy packets, so that a scapy rebuild
    # quirk cannot hide a difference.
    if _raw_packets(pcapng) != _raw_packets(pcap):
        raise RuntimeError(f"{pcapng} does not hold the same packets as {pcap}")
    if os.geteuid() == 0:
        st = pcapng.parent.stat()
        os.chown(pcapng, st.st_uid, st.st_gid)
    return len(packets)


# --------------------------------------------------------------------------- main


def write_outputs(outdir: Path, outputs: Outputs) -> None:
    """Write a scenario's extra files, owned like the captures by the output directory's owner."""
    st = outdir.stat()
    for name, content in outputs.items():
        path = outdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if os.geteuid() == 0:
            for owned in (path, *path.relative_to(outdir).parents[:-1]):
                os.chown(outdir / owned, st.st_uid, st.st_gid)
        log.info("%s: %d bytes", path, len(content))


def record(name: str, outdir: Path) -> CaptureSummary:
    """Record `name` into outdir and check the file; the caller holds recording_lock()."""
    recording = RECORDINGS[name]
    out = outdir / f"{name}.pcap"
    asyncio.run(delete_leftover_streams())
    with contextlib.ExitStack() as stack:
        # Entered before tcpdump, left after it: lo is back only once tcpdump has stopped.
        if recording.mtu is not None:
            stack.enter_context(wire_mtu(recording.mtu))
        stats = stack.enter_context(
            tcpdump(out, recording.interface, recording.linktype_name, recording.buffer_kib)
        )
        outputs = asyncio.run(recording.scenario()) or {}
    # Written even if a check below fails, so that they always describe the capture beside them.
    write_outputs(outdir, outputs)
    summary = check_capture(out)
    if summary.packets != stats[0].captured:
        raise RuntimeError(
            f"{out}: tcpdump reported {stats[0].captured} packets, file holds {summary.packets}"
        )
    if summary.connections != recording.connections:
        raise RuntimeError(
            f"{out}: {summary.connections} TCP connections, expected {recording.connections}; "
            f"another client used {HOST}:{PORT} during the recording"
        )
    if summary.linktype != recording.linktype:
        raise RuntimeError(f"{out}: link type {summary.linktype}, expected {recording.linktype}")
    # Proves the kernel really cut the stream at the MSS: with TSO/GSO still on, tcpdump
    # would see segments far larger than the MTU even at MTU 1500.
    if recording.mtu is not None and (summary.mss_segments == 0 or summary.max_payload != WIRE_MSS):
        raise RuntimeError(
            f"{out}: expected full {WIRE_MSS}-byte segments and none larger, got "
            f"{summary.mss_segments} full segments, largest {summary.max_payload}"
        )
    if recording.verify is not None:
        recording.verify(out, outputs)
    log.info(
        "%s: %d packets, %d TCP connection(s), link type %d, largest segment %d B, SYN MSS %s",
        out,
        summary.packets,
        summary.connections,
        summary.linktype,
        summary.max_payload,
        sorted(set(summary.syn_mss)),
    )
    return summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(RECORDINGS),
        help="recording to make, written as NAME.pcap (repeatable; default: all)",
    )
    parser.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where the captures go")
    parser.add_argument(
        "--restore-lo",
        action="store_true",
        help=f"only put lo back from {LO_SAVED}, left by a run that was killed (SIGKILL)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    if args.restore_lo:
        if not restore_saved_loopback():
            log.info("nothing to restore: %s does not exist", LO_SAVED)
        return 0
    names: list[str] = args.scenario or list(RECORDINGS)
    outdir: Path = args.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    log.info("rstream %s, outdir %s", rstream.__version__, outdir)

    # Held for the whole run: even the plugin check's connection to 5552 would show up in
    # a capture that another process is recording at that moment.
    with recording_lock():
        ensure_stream_plugin()
        for name in names:
            record(name, outdir)
    if "session" in names:
        count = write_pcapng(outdir / "session.pcap", outdir / "session.pcapng")
        log.info("%s: %d packets", outdir / "session.pcapng", count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
