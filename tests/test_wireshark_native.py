"""The plugin as Wireshark's own dissectors behave: ports as a preference, Decode As, a filter
for "this connection", in tshark 4.0 and 4.4 with the plugin installed in the personal plugins
folder; the statistics `tshark -z <protocol>,stat` prints against `streamdump stats`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dpkt
import pytest

from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import default_registry
from tests.conftest import CAPTURE_ROOT, CAPTURES
from tests.test_wireshark import FLAVOURS, LUA_ERRORS, PLUGIN, related, tshark_run

# A RabbitMQ Streams capture on its usual port, 5552, and the same bytes moved to another.
CAPTURE = CAPTURES / "auth_failure.pcap"
MOVED_TO = 15552


def moved(path: Path, out: Path, old: int, new: int) -> Path:
    """The capture with every TCP port `old` made `new` (checksums left unset: tshark checks none)."""
    with path.open("rb") as source, out.open("wb") as sink:
        reader = dpkt.pcap.Reader(source)
        writer = dpkt.pcap.Writer(sink, linktype=reader.datalink())
        for ts, buf in reader:
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                tcp = ip.data
                tcp.sport = new if tcp.sport == old else tcp.sport
                tcp.dport = new if tcp.dport == old else tcp.dport
                tcp.sum = ip.sum = 0
                buf = bytes(eth)
            writer.writepkt(buf, ts)
    return out


def summary(flavour: str, capture: Path, tmp: Path, *extra: str) -> list[str]:
    """tshark's Info of every frame the plugin dissected (its Protocol column is RMQS)."""
    result = tshark_run(
        flavour,
        [PLUGIN, capture],
        lambda p: ["-r", p[-1], "-T", "fields", "-e", "_ws.col.Protocol", "-e", "_ws.col.Info", *extra],
        tmp,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = (result.stdout + result.stderr).lower()
    assert not any(marker in text for marker in LUA_ERRORS), result.stderr[-2000:]
    return [line.split("\t", 1)[1] for line in result.stdout.splitlines() if line.startswith("RMQS\t")]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_ports_preference_and_decode_as(flavour: str, tmp_path: Path) -> None:
    """On another port the protocol is found when its ports preference names that port, or when
    Decode As (-d) says so; a preference moved off the usual port takes the protocol off it."""
    usual = summary(flavour, CAPTURE, tmp_path)
    assert len(usual) > 5 and usual[0].startswith("PeerProperties request corr=1")
    elsewhere = moved(CAPTURE, tmp_path / "moved.pcap", 5552, MOVED_TO)
    assert summary(flavour, elsewhere, tmp_path) == []
    assert summary(flavour, elsewhere, tmp_path, "-o", f"rabbitmq_stream.ports:{MOVED_TO}") == usual
    assert summary(flavour, elsewhere, tmp_path, "-d", f"tcp.port=={MOVED_TO},rabbitmq_stream") == usual
    assert summary(flavour, CAPTURE, tmp_path, "-o", f"rabbitmq_stream.ports:{MOVED_TO}") == []


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("name", "capture"),
    [
        ("rabbitmq_stream", CAPTURE_ROOT / "rabbitmq_stream" / "client_crash.pcap"),
        ("nats", CAPTURE_ROOT / "nats" / "trouble.pcap"),
        ("rocketmq", CAPTURE_ROOT / "rocketmq" / "alions.pcap"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_this_connection_is_a_filter(flavour: str, name: str, capture: Path, tmp_path: Path) -> None:
    """Every frame names its connection as `streamdump stats` does (client → server), so "Apply as
    Filter" on it keeps that connection's frames: as many as stats counts for it."""
    stats = subprocess.run(
        [sys.executable, "-m", "streamdump", "stats", str(capture), "--format", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr
    counts = {
        f"{c['client']} \u2192 {c['server']}": c["client_frames"] + c["server_frames"]
        for c in json.loads(stats.stdout)["connections"]
    }
    assert len(counts) > 1
    fields = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", "-e", f"{name}.connection"]
    result = tshark_run(flavour, [PLUGIN, capture], lambda p: ["-r", p[-1], *fields], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = Counter(text for line in result.stdout.splitlines() if line for text in line.split("|"))
    # The same connections; as many frames each, but for a frame the connection's end cut short,
    # which streamdump reports incomplete and Wireshark's TCP never hands over.
    assert set(seen) == set(counts)
    assert all(counts[text] - 1 <= seen[text] <= counts[text] for text in counts)
    assert sum(counts.values()) - sum(seen.values()) <= 1
    first = next(iter(counts))
    kept = tshark_run(
        flavour, [PLUGIN, capture], lambda p: ["-r", p[-1], "-Y", f'{name}.connection == "{first}"'], tmp_path
    )
    assert kept.returncode == 0 and len(kept.stdout.splitlines()) > 0, kept.stderr[-2000:]


# Every protocol's shipped captures (its folder's, not the generated pathologies).
STAT_CAPTURES = [
    path
    for name in sorted(default_registry().protocols)
    for path in sorted((CAPTURE_ROOT / name).glob("*.pcap"))
]
LATENCY_KEYS = ("count", "min_ms", "median_ms", "p95_ms", "p99_ms", "max_ms")


def _z_tables(text: str) -> dict[str, dict[str, tuple[float, ...]]]:
    """The -z report's two tables: section -> command -> (count, min, median, p95, p99, max)."""
    tables: dict[str, dict[str, tuple[float, ...]]] = {}
    section = None
    for line in text.splitlines():
        if line.endswith("(ms):"):
            section = "response_times" if line.startswith("Request") else "confirm_latency"
            tables[section] = {}
        elif section and line.startswith("  ") and line.split()[0] != "Command":
            parts = line.split()
            tables[section][" ".join(parts[:-6])] = tuple(float(v) for v in parts[-6:])
        elif not line.strip():
            section = None
    return tables


def _z_volume(text: str) -> list[str]:
    """The -z report's messages per stream, topic or subject: its rows, as printed."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Messages per ")), None)
    if start is None:
        return []
    rows = []
    for line in lines[start + 2 :]:  # after the title and the column heads
        if not line.strip():
            break
        rows.append(line)
    return rows


def _volume_row(subject: str, direction: str, frames: int, messages: int, size: int) -> str:
    """A row as the plugin prints it (Lua pads by bytes, not characters)."""

    def left(text: str, width: int) -> str:
        return text + " " * max(0, width - len(text.encode("utf-8")))

    return f"  {left(subject, 40)} {left(direction, 14)} {frames:>8} {messages:>10} {size:>12}"


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("capture", STAT_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_z_statistics_equal_streamdump_stats(flavour: str, capture: Path, tmp_path: Path) -> None:
    """`tshark -z <protocol>,stat` gives the request latency per command, the publish-to-confirm
    latency, and the frames, messages and bytes per stream, topic or subject and direction that
    `streamdump stats --format json` gives, figure for figure."""
    stats = subprocess.run(
        [sys.executable, "-m", "streamdump", "stats", str(capture), "--format", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr
    ours = json.loads(stats.stdout)
    incomplete = subprocess.run(
        [sys.executable, "-m", "streamdump", "stats", str(capture), "-Y", "incomplete", "--format", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert incomplete.returncode == 0, incomplete.stderr
    cut_short = json.loads(incomplete.stdout)
    protocol = capture.parent.name
    names = related(protocol)
    # One protocol's figures, or each protocol's under "protocols" when the capture holds several.
    per_protocol = ours.get("protocols", {protocol: ours})
    zs = [arg for name in names for arg in ("-z", f"{name},stat")]
    zs += ["-o", "tcp.reassemble_out_of_order:TRUE"]  # as the cross-check reads them (some are out of order)
    result = tshark_run(flavour, [PLUGIN, capture], lambda p: ["-r", p[-1], "-q", *zs], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not any(marker in (result.stdout + result.stderr).lower() for marker in LUA_ERRORS)
    titles = {default_registry().protocols[name].title: name for name in names}
    reports: dict[str, str] = {}
    for report in result.stdout.split("=" * 100 + "\n"):
        head = report.split("\n", 1)[0]
        if head.endswith(" statistics (streamdump)"):
            reports[titles[head.removesuffix(" statistics (streamdump)")]] = report
    assert sorted(reports) == sorted(names)
    for name, figures in per_protocol.items():
        theirs = {"response_times": {}, "confirm_latency": {}} | _z_tables(reports[name])
        for section in ("response_times", "confirm_latency"):
            rows = figures.get(section, [])
            expected = {row["command"]: tuple(float(row[k]) for k in LATENCY_KEYS) for row in rows}
            assert theirs[section] == expected, f"{name} {section}"
        subject = dissector_of(default_registry().protocols[name]).messages.subject
        # But for frames the capture cut short (stats counts what their headers say; Wireshark's
        # TCP never hands them over): stats of those alone, taken off.
        cut = cut_short.get("protocols", {name: cut_short}).get(name, {}).get(f"{subject}s", [])
        short = Counter(
            {(r[subject], r["direction"], k): r[k] for r in cut for k in ("frames", "messages", "bytes")}
        )
        volume = [
            _volume_row(
                row[subject],
                row["direction"],
                *(row[k] - short[row[subject], row["direction"], k] for k in ("frames", "messages", "bytes")),
            )
            for row in figures[f"{subject}s"]
            if row["frames"] > short[row[subject], row["direction"], "frames"]
        ]
        assert _z_volume(reports[name]) == volume, f"{name} messages per {subject}"
    assert any(figures.get("response_times") for figures in per_protocol.values()) or protocol == "liftbridge"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_one_protocol_can_be_turned_off(flavour: str, tmp_path: Path) -> None:
    """Each protocol of the one plugin is its own Wireshark protocol: Enabled Protocols (here
    --disable-protocol) turns Liftbridge off and leaves NATS, which carries it, on."""
    capture = CAPTURE_ROOT / "liftbridge" / "session.pcap"

    def columns(*extra: str) -> Counter[str]:
        args = ["-T", "fields", "-e", "_ws.col.Protocol", *extra]
        result = tshark_run(flavour, [PLUGIN, capture], lambda p: ["-r", p[-1], *args], tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        return Counter(result.stdout.split())

    both = columns()
    assert both["Liftbridge"] > 0 and both["NATS"] > 0
    off = columns("--disable-protocol", "liftbridge")
    assert off["Liftbridge"] == 0 and off["NATS"] == both["NATS"] + both["Liftbridge"]
    assert columns("--disable-protocol", "nats")["NATS"] == 0


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("name", "capture"),
    [
        ("rabbitmq_stream", CAPTURE_ROOT / "rabbitmq_stream" / "client_crash.pcap"),
        ("nats", CAPTURE_ROOT / "nats" / "pubsub.pcap"),
        ("rocketmq", CAPTURE_ROOT / "rocketmq" / "alions.pcap"),
        ("eventmesh", CAPTURE_ROOT / "eventmesh" / "session.pcap"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_this_stream_is_a_filter(flavour: str, name: str, capture: Path, tmp_path: Path) -> None:
    """Every frame that moves messages names their stream, topic or subject as `streamdump stats`
    counts them, so "Apply as Filter" on it keeps the frames stats counts for it."""
    stats = subprocess.run(
        [sys.executable, "-m", "streamdump", "stats", str(capture), "--format", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr
    subject = dissector_of(default_registry().protocols[name]).messages.subject
    counts: Counter[str] = Counter()
    for row in json.loads(stats.stdout)[f"{subject}s"]:
        counts[row[subject]] += row["frames"]
    assert counts
    field = f"{name}.volume.{subject}"
    fields = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", "-e", field]
    seen: Counter[str] = Counter()
    for wanted in counts:
        kept = ["-Y", f'{field} == "{wanted}"', *fields]
        result = tshark_run(flavour, [PLUGIN, capture], lambda p, kept=kept: ["-r", p[-1], *kept], tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        lines = result.stdout.splitlines()
        # The filter kept the packets with a frame of it, and only those.
        assert lines and all(wanted in line.split("|") for line in lines)
        texts = [text for line in lines for text in line.split("|")]
        seen[wanted] = texts.count(wanted)
    assert seen == counts
