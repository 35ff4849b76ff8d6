"""The pathological captures in captures/rabbitmq_stream/pathological, checked against their manifest.

Each file was made from a real recording by captures/rabbitmq_stream/make_pathologies.py, which
wrote down exactly which bytes it removed, which copies it forged and where the
capture starts. For every file: every frame of the source whose bytes are all
present decodes to the same bytes, nothing else decodes as a complete frame, every
missing byte range is reported as a gap at its exact sequence numbers, and frames
cut by a gap are handed on as incomplete with the bytes present (plus the whole
messages found after the gap, identical to the source's).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import CAPTURES, merged

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.wire.frame import Frame

PATHOLOGICAL = CAPTURES / "pathological"
MANIFEST: list[dict[str, Any]] = json.loads((PATHOLOGICAL / "manifest.json").read_text())
TCP_PATHOLOGIES = {"mss1448", "reordered", "duplicated", "overlap_conflict", "dropped", "midstream"}
TCP_PATHOLOGIES |= {"keepalive_zwp", "snaplen", "ipfrag"}


@dataclass(frozen=True)
class Truth:
    direction: str  # "src->dst"
    seq: int
    data: bytes

    @property
    def end(self) -> int:
        return self.seq + len(self.data)


def read(path: Path, decoder: Decoder) -> tuple[list[Frame], ReadStats]:
    stats = ReadStats()
    return list(read_frames(path, decoder, [5552], stats)), stats


def direction(frame: Frame) -> str:
    return f"{frame.src}->{frame.dst}"


@cache
def truth(source: str) -> tuple[Truth, ...]:
    from streamdump.spec.registry import default_registry

    frames, stats = read(CAPTURES / source, Decoder(default_registry().get("rabbitmq_stream")))
    assert stats.gaps == 0 and stats.incomplete == 0
    return tuple(Truth(direction(f), f.seq, f.data) for f in frames)  # type: ignore[arg-type]


def by_direction(items: list[Truth]) -> dict[str, list[Truth]]:
    out: dict[str, list[Truth]] = {}
    for t in items:
        out.setdefault(t.direction, []).append(t)
    return out


def entries(kind: str) -> list[dict[str, Any]]:
    tcp = [e for e in MANIFEST if e["pathology"] in TCP_PATHOLOGIES]
    return tcp if kind == "tcp" else [e for e in MANIFEST if e not in tcp]


def test_manifest_covers_every_pathology() -> None:
    # Pinned here, not imported from the generator: dropping a pathology there must fail here.
    link = {"vlan", "sll", "sll2", "null_le", "loop", "rawip", "ipv6", "pcap_be_nsec", "gz", "zst"}
    link |= {"pcapng_multi", "pcapng_sections"}
    assert {e["pathology"] for e in entries("tcp")} == TCP_PATHOLOGIES
    assert {e["pathology"] for e in entries("link")} >= link
    assert {e["source"] for e in MANIFEST} >= {"session.pcap", "bulk.pcap"}


@pytest.mark.parametrize("entry", entries("tcp"), ids=lambda e: e["file"])
def test_tcp_pathology(entry: dict[str, Any], decoder: Decoder) -> None:
    frames, stats = read(PATHOLOGICAL / entry["file"], decoder)
    source = truth(entry["source"])
    missing = [(f"{m['src']}->{m['dst']}", m["start"], m["end"]) for m in entry["missing"]]
    first_seq: dict[str, int] = entry["first_seq"]

    def present(t: Truth) -> bool:
        if t.direction in first_seq and t.seq < first_seq[t.direction]:
            return False
        return not any(d == t.direction and s < t.end and t.seq < e for d, s, e in missing)

    expected = [t for t in source if present(t)]
    got = [Truth(direction(f), f.seq, f.data) for f in frames if f.incomplete is None]  # type: ignore[arg-type]
    assert by_direction(got) == by_direction(expected)

    reported = [(f"{n.src}->{n.dst}", n.start, n.start + n.length) for n in stats.notices if n.kind == "gap"]
    assert merged(reported) == merged(missing)  # type: ignore[arg-type]

    for frame in frames:
        if frame.incomplete is None:
            continue
        # An incomplete frame starts where its source frame starts; one whose start a gap took
        # (no bytes of its own) starts inside it.
        (whole,) = [t for t in source if t.direction == direction(frame) and t.seq <= frame.seq < t.end]
        assert not present(whole) and whole.data.startswith(frame.data)
        assert frame.data or frame.incomplete == "start lost in a gap"
        _check_recovered_messages(frame, whole, decoder)

    conflicts = [n for n in stats.notices if n.kind == "conflict"]
    assert len(conflicts) == len(entry["conflicts"])
    for notice, forged in zip(conflicts, entry["conflicts"], strict=True):
        assert notice.number == forged["packet"]
        assert forged["start"] <= notice.start < notice.start + notice.length <= forged["end"]  # type: ignore[operator]

    allowed = {"gap", "skipped", "midstream", "conflict", "fragments"}
    assert {n.kind for n in stats.notices} <= allowed
    assert ("fragments" in {n.kind for n in stats.notices}) == bool(entry["fragments"])


def _check_recovered_messages(frame: Frame, whole: Truth, decoder: Decoder) -> None:
    """Messages an incomplete Publish holds must be exactly the source's, where complete."""
    if frame.command != "Publish":
        return
    original = {m["publishing_id"]: m for m in decoder.decode(whole.data).fields["messages"]}
    for message in frame.fields.get("messages", []):
        if "entry" in message:  # whole, not cut short by a gap
            assert original[message["publishing_id"]] == message


@pytest.mark.parametrize("entry", entries("link"), ids=lambda e: e["file"])
def test_link_and_file_variant_decodes_like_its_source(entry: dict[str, Any], decoder: Decoder) -> None:
    frames, stats = read(PATHOLOGICAL / entry["file"], decoder)
    source = truth(entry["source"])
    assert [(f.seq, f.data) for f in frames] == [(t.seq, t.data) for t in source]
    assert stats.notices == [] and stats.gaps == 0


def test_a_lost_segment_inside_a_publish_keeps_the_whole_messages_after_it(decoder: Decoder) -> None:
    (entry,) = [e for e in MANIFEST if e["file"] == "bulk.dropped.pcap"]
    frames, _ = read(PATHOLOGICAL / entry["file"], decoder)
    cut = [f for f in frames if f.incomplete is not None and f.command == "Publish"]
    assert cut, "bulk.dropped.pcap should cut a Publish frame"
    recovered = sum("recovered from the" in e.message for f in cut for e in f.expert)
    assert recovered >= 1


def test_committed_files_are_what_the_generator_makes(tmp_path: Path) -> None:
    sys.path.insert(0, str(CAPTURES))
    try:
        import make_pathologies
    finally:
        sys.path.remove(str(CAPTURES))
    make_pathologies.regenerate(PATHOLOGICAL / "manifest.json", CAPTURES, tmp_path)
    for entry in MANIFEST:
        assert (tmp_path / entry["file"]).read_bytes() == (PATHOLOGICAL / entry["file"]).read_bytes(), entry[
            "file"
        ]


@pytest.mark.parametrize("command", ["stats", "follow"])
@pytest.mark.parametrize("entry", entries("tcp"), ids=lambda e: e["file"])
def test_conversation_views_survive_lossy_captures(entry: dict[str, Any], command: str) -> None:
    """Losses become notes ("the capture lost bytes"), never warnings the client did not earn."""
    from typer.testing import CliRunner

    from streamdump.cli import app

    args = [command, str(PATHOLOGICAL / entry["file"])] + (["-T", "json"] if command == "stats" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and result.exception is None, result.stderr
    if command == "stats":
        lost = {d["kind"] for d in json.loads(result.stdout)["diagnoses"] if d["severity"] != "note"}
        assert lost <= {"heartbeat", "credit_exhausted"}, lost
