"""lo's MTU and offloads: record with real 1448-byte TCP segments, and always put lo back.

`wire_mtu()` sets lo to MTU 1500 with TSO/GSO/GRO off for the duration of a block (why:
see the comment above LOOPBACK), saves the previous settings in /run first, and restores
them on any exit (exceptions, Ctrl-C, SIGTERM, SIGHUP); `restore_saved_loopback()` undoes
a run that was killed with SIGKILL (`record.py --restore-lo`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from system_tools import find_program, run

log = logging.getLogger("record")

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


def admin_tool(name: str, package: str) -> str:
    """Path of `name`; installs `package` with apt-get when it is missing and we are root."""
    found = find_program(name)
    apt = shutil.which("apt-get")
    if found is None and apt and os.geteuid() == 0:
        log.info("%s is missing: apt-get install %s", name, package)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "-qq", package]
        if subprocess.run(install, env=env, check=False).returncode != 0:
            # A fresh container has no package lists yet: fetch them once and retry.
            subprocess.run([apt, "update", "-qq"], env=env, check=False)
            subprocess.run(install, env=env, check=False)
        found = find_program(name)
    if found is None:
        raise RuntimeError(
            f"{name} is missing and could not be installed; run `apt-get install {package}` as root. "
            f"It is needed to record with lo at MTU {WIRE_MTU} and offloads off."
        )
    return found


def _read_features(ethtool: str) -> dict[str, Feature]:
    features: dict[str, Feature] = {}
    family: str | None = None
    for line in run([ethtool, "-k", LOOPBACK]).splitlines():
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
    (link,) = json.loads(run([ip, "-j", "link", "show", LOOPBACK]))
    ipv6_mtu = int(IPV6_LO_MTU.read_text()) if IPV6_LO_MTU.exists() else None
    return LoopbackState(mtu=int(link["mtu"]), ipv6_mtu=ipv6_mtu, features=_read_features(ethtool))


def _restore_loopback(ip: str, ethtool: str, saved: LoopbackState) -> None:
    now = read_loopback(ip, ethtool)
    if now.mtu != saved.mtu:
        run([ip, "link", "set", "dev", LOOPBACK, "mtu", str(saved.mtu)])
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
        run([ethtool, "-K", LOOPBACK, *changes])
    left = saved.differences(read_loopback(ip, ethtool))
    if left:
        raise RuntimeError(
            f"{LOOPBACK} is NOT back as it was: {', '.join(left)}. The saved settings stay in {LO_SAVED}; "
            "retry with `python captures/rabbitmq_stream/record.py --restore-lo`."
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
                run([ethtool, "-K", LOOPBACK, *(w for name in OFFLOADS_OFF for w in (name, "off"))])
                run([ip, "link", "set", "dev", LOOPBACK, "mtu", str(mtu)])
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
