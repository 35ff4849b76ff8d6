"""Record the RabbitMQ Streams test captures that live in captures/.

This module owns the capture tooling and nothing else: it makes sure the broker's stream
plugin listens on 127.0.0.1:5552, wraps each scenario in a tcpdump recording (of `lo`,
or of `any` for the Linux cooked-mode files), drives a real rstream client (asyncio)
against the real broker, and finally converts session.pcap to session.pcapng. Some
recordings run with lo's MTU at 1500 and its offloads off, so that large frames span
many TCP segments; lo is always put back as it was. The decoder under streamdump/ never
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
import contextlib
import fcntl
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
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import rstream
from rstream import AMQPMessage, OffsetType, Properties, schema
from rstream.client import Client
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
# bench/record_flood.py's stream: listed here so an aborted flood (500k messages) does not
# stay on the broker until someone notices.
FLOOD_STREAM = "streamdump-flood"
ALL_STREAMS = (SESSION_STREAM, OFFSETS_STREAM, MISSING_STREAM, BULK_STREAM, FLOOD_STREAM)

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
    batch: list[tuple[int, AMQPMessage]],
) -> None:
    """Send one Publish frame holding `batch` and wait until every id in it is confirmed."""
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


# pcap link types (DLT_*) as written in the file header.
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
BIG_RING_KIB = 65536


@dataclass(frozen=True)
class Recording:
    """One output file `<name>.pcap`: which scenario, and how tcpdump and lo are set up."""

    scenario: Callable[[], Awaitable[None]]
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
        asyncio.run(recording.scenario())
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
