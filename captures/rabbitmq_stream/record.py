"""Record the RabbitMQ Streams test captures that live in captures/rabbitmq_stream/.

This is the entry point of the capture tooling: the table RECORDINGS (per output file:
scenario, tcpdump interface, link type, ring size, lo MTU, checks), `record()` for one file,
and the command line. It makes sure the broker's stream plugin listens on 127.0.0.1:5552,
wraps each scenario in a tcpdump recording (of `lo`, or of `any` for the Linux cooked-mode
files), drives a real rstream client (asyncio; a raw struct-built one for the refusal
scenarios) against the real broker, and finally converts
session.pcap to session.pcapng. Some recordings run with lo's MTU at 1500 and its offloads
off, so that large frames span many TCP segments; lo is always put back as it was. Two
scenarios also write files beside their capture: compression.sent.json (what was published,
record by record) and chunks/ (Osiris chunks cut out of the broker's own segment files).
The decoder under streamdump/ never imports it; the captures it writes are test inputs for
that decoder. bench/record_flood.py imports it to record a large benchmark capture.

The work is done by the modules beside it:

    broker.py                the broker: address, stream names, plugin check, client, cleanup
    loopback.py              lo's MTU and offloads, always restored (wire_mtu)
    tcpdump_tools.py         the tcpdump wrapper and the machine-wide recording lock
    system_tools.py          finding and running admin programs, handing files to their owner
    scenario_tools.py        generic scenario plumbing: publisher, confirms, subscriptions
    scenarios_simple.py      session, subscribe_missing_stream, offset_specs, bulk, auth_failure
    scenario_compression.py  compression: codec variants, compression.sent.json, its check
    scenario_tracking.py     tracking: segment files, chunks/ fixtures, its check
    scenarios_endings.py     client_crash (runs crashing_client.py), reset_mid_frame
    scenarios_v4.py          v2_frames, filtering_v4, super_stream_v4 (RabbitMQ 4.0; v4_client.py)
    rabbitmq4                RabbitMQ 4.0 in a Debian 13 chroot, stream port 5562
    scenarios_refusals.py    wrong_vhost, unknown_command, unsupported_version, deleted_stream,
                             credit_exhausted, heartbeat_timeout, frame_too_large
    raw_client.py            a struct-built client for frames rstream cannot send
    osiris_chunks.py         Osiris chunk, entry and tracking-entry bytes, parsed on their own
    pcap_checks.py           reading a finished capture back; the pcapng copy

Usage (needs root for tcpdump, ip and ethtool):

    python captures/rabbitmq_stream/record.py [--scenario NAME ...] [--outdir DIR]
    python captures/rabbitmq_stream/record.py --restore-lo    # only undo a killed run's lo changes

Leftover streams from earlier runs are deleted by a separate connection *before* tcpdump
starts, so that cleanup traffic never appears in a capture.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import rstream
from broker import (
    FLOOD_STREAM,
    FRAME_MAX,
    HOST,
    PORT,
    V4_PORT,
    connect,
    delete_leftover_streams,
    ensure_stream_plugin,
)
from loopback import LO_SAVED, LOOPBACK, WIRE_MSS, WIRE_MTU, restore_saved_loopback, wire_mtu
from pcap_checks import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    CaptureSummary,
    check_capture,
    rewrite_port,
    write_pcapng,
)
from scenario_compression import scenario_compression, verify_compression
from scenario_tools import Outputs, write_outputs
from scenario_tracking import scenario_tracking, verify_tracking
from scenarios_endings import (
    scenario_client_crash,
    scenario_reset_mid_frame,
    verify_client_crash,
    verify_reset_mid_frame,
)
from scenarios_refusals import (
    scenario_credit_exhausted,
    scenario_deleted_stream,
    scenario_frame_too_large,
    scenario_heartbeat_timeout,
    scenario_unknown_command,
    scenario_unsupported_version,
    scenario_wrong_vhost,
    verify_heartbeat_timeout,
    verify_keys,
)
from scenarios_simple import (
    scenario_auth_failure,
    scenario_bulk,
    scenario_offset_specs,
    scenario_session,
    scenario_subscribe_missing_stream,
)
from scenarios_v4 import scenario_filtering_v4, scenario_super_stream_v4, scenario_v2_frames
from system_tools import run
from tcpdump_tools import recording_lock, tcpdump

# What other code takes from `record` (bench/record_flood.py), beside what is defined here.
__all__ = [
    "DEFAULT_OUTDIR",
    "FLOOD_STREAM",
    "FRAME_MAX",
    "RECORDINGS",
    "WIRE_MTU",
    "connect",
    "delete_leftover_streams",
    "ensure_stream_plugin",
    "main",
    "record",
    "recording_lock",
    "tcpdump",
    "wire_mtu",
]

log = logging.getLogger("record")

DEFAULT_OUTDIR = Path(__file__).resolve().parent
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
    # The broker's stream port: 5552 (3.10), or V4_PORT for RabbitMQ 4.0 (./rabbitmq4), whose
    # captures then get 5552 written over it, so that they read like the others.
    port: int = PORT


RECORDINGS: dict[str, Recording] = {
    "session": Recording(scenario_session),
    "subscribe_missing_stream": Recording(scenario_subscribe_missing_stream),
    "offset_specs": Recording(scenario_offset_specs),
    "auth_failure": Recording(scenario_auth_failure),
    "bulk": Recording(scenario_bulk, mtu=WIRE_MTU),
    # Debian 12's tcpdump 4.99.3 / libpcap 1.10.3 writes LINUX_SLL2 for `-i any` by
    # default; the v1 cooked header needs an explicit -y.
    "session_any": Recording(scenario_session, interface="any", linktype=LINKTYPE_LINUX_SLL2),
    "session_sll": Recording(
        scenario_session, interface="any", linktype_name="LINUX_SLL", linktype=LINKTYPE_LINUX_SLL
    ),
    "compression": Recording(scenario_compression, verify=verify_compression),
    "tracking": Recording(scenario_tracking, verify=verify_tracking),
    # The broker refusing or punishing a client; raw_client.py, not rstream.
    "wrong_vhost": Recording(scenario_wrong_vhost, verify=verify_keys("wrong_vhost")),
    "unknown_command": Recording(scenario_unknown_command, verify=verify_keys("unknown_command")),
    "unsupported_version": Recording(scenario_unsupported_version, verify=verify_keys("unsupported_version")),
    "deleted_stream": Recording(scenario_deleted_stream, verify=verify_keys("deleted_stream")),
    "credit_exhausted": Recording(scenario_credit_exhausted, verify=verify_keys("credit_exhausted")),
    "heartbeat_timeout": Recording(scenario_heartbeat_timeout, verify=verify_heartbeat_timeout),
    "frame_too_large": Recording(scenario_frame_too_large, verify=verify_keys("frame_too_large")),
    # Connections that end without Close: a real rstream application crashing in its message
    # handler (rstream's Producer and Consumer open five connections), and a raw client reset
    # in the middle of a Publish frame.
    "client_crash": Recording(scenario_client_crash, connections=5, verify=verify_client_crash),
    "reset_mid_frame": Recording(scenario_reset_mid_frame, verify=verify_reset_mid_frame),
    # RabbitMQ 4.0 (./rabbitmq4): version-2 frames, filtering, StreamStats (a raw client), and
    # real rstream applications using filtering (six connections) and a super stream with a
    # single active consumer (nine).
    "v2_frames": Recording(scenario_v2_frames, port=V4_PORT),
    "filtering_v4": Recording(scenario_filtering_v4, port=V4_PORT, connections=6),
    "super_stream_v4": Recording(scenario_super_stream_v4, port=V4_PORT, connections=9),
}


def record(name: str, outdir: Path) -> CaptureSummary:
    """Record `name` into outdir and check the file; the caller holds recording_lock()."""
    recording = RECORDINGS[name]
    out = outdir / f"{name}.pcap"
    if recording.port != PORT:
        run([str(Path(__file__).resolve().parent / "rabbitmq4"), "start"])
    asyncio.run(delete_leftover_streams(recording.port))
    with contextlib.ExitStack() as stack:
        # Entered before tcpdump, left after it: lo is back only once tcpdump has stopped.
        if recording.mtu is not None:
            stack.enter_context(wire_mtu(recording.mtu))
        stats = stack.enter_context(
            tcpdump(
                out, recording.interface, recording.linktype_name, recording.buffer_kib, port=recording.port
            )
        )
        outputs = asyncio.run(recording.scenario()) or {}
    # Written even if a check below fails, so that they always describe the capture beside them.
    write_outputs(outdir, outputs)
    if recording.port != PORT:
        rewrite_port(out, recording.port, PORT)
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
