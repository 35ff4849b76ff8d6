"""What Spark's Python workers run: scan a byte range, extract its TCP segments, decode connections.

Each function takes and yields Arrow record batches (mapInArrow), so no row crosses
between the JVM and Python one at a time. Decoding is the CLI's own: a pipeline Reader
per capture fed one connection's segments after another, in packet order, then the
conversation tracker and the statistics; what a task finds about its connections leaves
it as a picklable Partial for the driver to merge, since one task never sees a whole
capture. Nothing here needs Spark: tests drive these functions directly too.
"""

from __future__ import annotations

import contextlib
import pickle
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from streamdump.core.capture import CaptureError, Tally, read_segments, read_stream
from streamdump.core.conversation import Conversations
from streamdump.core.frame import Frame
from streamdump.core.packet import Segment, Skip, parse
from streamdump.core.pcapng import Section
from streamdump.core.pipeline import Dissection, Notice, Reader, ReadStats
from streamdump.core.splits import Split, SplitError, find_first, records, scan
from streamdump.spark.tables import Tables, batch, empty
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import default_registry
from streamdump.views.stats import Partial, Statistics

# Rows a task gathers before handing a batch on: large enough that Arrow's per-batch cost
# vanishes, small enough that a task's memory stays flat.
BATCH_ROWS = 8192

SEGMENTS = pa.schema(
    [
        ("capture", pa.int32()),
        ("flow", pa.int64()),  # the connection's 4-tuple, hashed: what decoding is partitioned by
        ("number", pa.int64()),
        ("ts", pa.float64()),
        ("src", pa.string()),
        ("dst", pa.string()),
        ("sport", pa.int32()),
        ("dport", pa.int32()),
        ("seq", pa.int64()),
        ("ack", pa.int64()),
        ("flags", pa.int32()),
        ("payload", pa.binary()),
        ("wire_len", pa.int64()),
        ("skip", pa.string()),  # a packet with no segment: why (counted for the read's notes)
    ]
)
# Flow of the rows that only count skipped packets: they sort before a capture's segments.
SKIPPED_FLOW = -1


@dataclass(frozen=True, slots=True)
class Settings:
    """Which protocols a run decodes, and on which ports: what a worker rebuilds its Dissection from."""

    protocols: tuple[str, ...]
    ports: tuple[tuple[int, str], ...] = ()
    guess: tuple[int, ...] = ()

    def dissection(self) -> tuple[dict[str, Decoder], Dissection]:
        registry = default_registry()
        decoders = {name: Decoder(registry.get(name)) for name in self.protocols}
        return decoders, Dissection(decoders.values(), dict(self.ports), self.guess)


@dataclass(frozen=True, slots=True)
class Work:
    """One range to extract: where its first record is, how many packets come before it, and
    (pcapng) the section it starts in. whole: read the file from its start with the CLI's reader."""

    split: Split
    first: int | None
    base: int
    section: Section | None = None
    whole: bool = False


@dataclass(frozen=True, slots=True)
class Capture:
    """A capture file as decoding tasks need to know it: packets in all and the last segment's time
    (what the end of a capture gives the connections still open then)."""

    index: int
    name: str
    packets: int
    last_ts: float


@dataclass(slots=True)
class Found:
    """What one task found about one capture, for the driver to merge with other tasks'."""

    counts: dict[str, int] = field(default_factory=dict)
    lossy: set[int] = field(default_factory=set)
    closed: dict[int, tuple[int, float, str]] = field(default_factory=dict)
    skipped: Counter[Skip] = field(default_factory=Counter)
    first_skipped: dict[Skip, int] = field(default_factory=dict)
    opened: list[int] = field(default_factory=list)  # the packets that opened its connections
    partials: dict[str, Partial] = field(default_factory=dict)


COUNTED = ("segments_matched", "frames", "incomplete", "gaps", "gap_bytes", "skipped_bytes")


# ---------------------------------------------------------------------- files


def opener(path: str) -> BinaryIO:
    """A seekable binary file for a local path or any URI pyarrow's filesystems read."""
    if "://" not in path:
        return open(path, "rb")  # the caller closes it
    fs, inner = pafs.FileSystem.from_uri(path)
    return fs.open_input_file(inner)  # type: ignore[return-value]


def whole_segments(path: str, tally: Tally) -> Iterator[Segment]:
    """A file's segments read from its start by the CLI's reader (compressed, or damaged somewhere)."""
    if "://" not in path:
        yield from read_segments(path, tally)
        return
    with opener(path) as fh:
        yield from read_stream(fh, path, tally)


# ---------------------------------------------------------------------- scanning


def scan_split(fh: BinaryIO | None, split: Split, size: int, whole: bool) -> dict[str, Any]:
    """Scan one range (whole: the file, with the CLI's reader: its packets, last segment's time
    and the error that stops it)."""
    if not whole:
        assert fh is not None
        return {"scan": scan(fh, split, size, find_first(fh, split, size))}
    tally = Tally()
    last_ts = 0.0
    error = None
    try:
        for seg in whole_segments(split.path, tally):
            last_ts = seg.ts
    except CaptureError as exc:
        error = str(exc)
    return {"packets": tally.packets, "last_ts": last_ts, "error": error}


# ---------------------------------------------------------------------- extraction


def flow_of(seg: Segment) -> int:
    """The connection's 4-tuple as one number, the same from either side."""
    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
    low, high = (a, b) if a <= b else (b, a)
    return zlib.crc32(f"{low[0]}|{low[1]}|{high[0]}|{high[1]}".encode())


def extract(work: Work, opener: Any) -> Iterator[pa.RecordBatch]:
    """The TCP segments (and counts of packets without one) of one range, numbered as in the file."""
    split = work.split
    if work.whole:
        packets: _Numbered = _WholeFile(split.path)
    elif work.first is None:
        return
    else:
        packets = _parsed(opener(split.path), work)
    out = empty(SEGMENTS)
    for seg in packets:
        _segment_row(out, split.capture, seg)
        if len(out["number"]) >= BATCH_ROWS:
            yield batch(SEGMENTS, out)
            out = empty(SEGMENTS)
    for skip, count in packets.skipped.items():
        _skip_row(out, split.capture, skip, count, packets.first_skipped[skip])
    if out["number"]:
        yield batch(SEGMENTS, out)


class _Numbered:
    """Packets of a range as segments, numbered from the range's base; counts what is skipped."""

    def __init__(self, source: Iterator[tuple[float, int, bytes]], base: int) -> None:
        self.source = source
        self.base = base
        self.skipped: Counter[Skip] = Counter()
        self.first_skipped: dict[Skip, int] = {}

    def __iter__(self) -> Iterator[Segment]:
        number = self.base
        for ts, linktype, data in self.source:
            number += 1
            got = parse(linktype, data, number, ts)
            if isinstance(got, Skip):
                self.skipped[got] += 1
                self.first_skipped.setdefault(got, number)
                continue
            yield got


class _WholeFile(_Numbered):
    """A file read from its start by the CLI's own reader (compressed, or damaged somewhere)."""

    def __init__(self, path: str) -> None:
        super().__init__(iter(()), 0)
        self.path = path

    def __iter__(self) -> Iterator[Segment]:
        tally = Tally()
        with contextlib.suppress(CaptureError):  # the scan found the same error; the driver tells it
            yield from whole_segments(self.path, tally)
        self.skipped, self.first_skipped = tally.skipped, tally.first_skipped


def _parsed(fh: BinaryIO, work: Work) -> _Numbered:
    assert work.first is not None
    state = work.section
    section = Section(state.order, list(state.interfaces), state.started) if state is not None else None
    try:
        source = records(fh, work.split, work.first, section)
    except SplitError:
        source = iter(())
    return _Numbered(source, work.base)


def _segment_row(out: dict[str, list[Any]], capture: int, seg: Segment) -> None:
    out["capture"].append(capture)
    out["flow"].append(flow_of(seg))
    out["number"].append(seg.number)
    out["ts"].append(seg.ts)
    out["src"].append(seg.src)
    out["dst"].append(seg.dst)
    out["sport"].append(seg.sport)
    out["dport"].append(seg.dport)
    out["seq"].append(seg.seq)
    out["ack"].append(seg.ack)
    out["flags"].append(seg.flags)
    out["payload"].append(bytes(seg.payload))
    out["wire_len"].append(seg.wire_len)
    out["skip"].append(None)


def _skip_row(out: dict[str, list[Any]], capture: int, skip: Skip, count: int, first: int) -> None:
    for name in SEGMENTS.names:
        out[name].append(None)
    out["capture"][-1] = capture
    out["flow"][-1] = SKIPPED_FLOW
    out["number"][-1] = first
    out["flags"][-1] = count
    out["skip"][-1] = skip.name


# ---------------------------------------------------------------------- decoding


class Decoding:
    """One task's decoding of the connections it was given, capture by capture."""

    def __init__(self, settings: Settings, captures: dict[int, Capture]) -> None:
        self.decoders, self.dissection = settings.dissection()
        self.captures = captures
        self.tables = Tables(d.protocol for d in self.decoders.values())
        self.rules = {
            name: dissector_of(d.protocol).messages(d.protocol) for name, d in self.decoders.items()
        }
        self.union = union_schema(self.tables)
        self.out = {name: empty(schema) for name, schema in self.tables.schemas.items()}
        self.rows = 0

    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: _Current | None = None
        flow: int | None = None
        for segments in batches:
            columns = {name: segments.column(name).to_pylist() for name in SEGMENTS.names}
            for i in range(segments.num_rows):
                capture = columns["capture"][i]
                if current is None or current.capture.index != capture:
                    if current is not None:
                        yield from self._finish(current)
                    current, flow = _Current(self, self.captures[capture]), None
                if columns["skip"][i] is not None:
                    skip = Skip[columns["skip"][i]]
                    current.found.skipped[skip] += columns["flags"][i]
                    first = current.found.first_skipped.get(skip, columns["number"][i])
                    current.found.first_skipped[skip] = min(first, columns["number"][i])
                    continue
                if flow is not None and columns["flow"][i] != flow:
                    # The previous connection has no more segments: end it now, as the capture's
                    # end would, so a task's memory holds one connection at a time.
                    self._frames(current, current.end())
                flow = columns["flow"][i]
                seg = Segment(
                    columns["number"][i],
                    columns["ts"][i],
                    columns["src"][i],
                    columns["dst"][i],
                    columns["sport"][i],
                    columns["dport"][i],
                    columns["seq"][i],
                    columns["ack"][i],
                    columns["flags"][i],
                    columns["payload"][i],
                    columns["wire_len"][i],
                )
                current.stats.packets = seg.number
                self._frames(current, current.reader.feed(seg))
                if self.rows >= BATCH_ROWS:
                    yield from self._flush()
        if current is not None:
            yield from self._finish(current)
        yield from self._flush()

    def _frames(self, current: _Current, frames: Iterable[Frame]) -> None:
        tables, out, name = self.tables, self.out, current.capture.name
        for frame in frames:
            current.tracker.feed(frame)
            current.statistics[frame.protocol].add(frame)
            tables.frame_row(out["frames"], name, frame)
            tables.expert_rows(out["expert"], name, frame)
            rules = self.rules[frame.protocol]
            if rules.carries(frame):
                self.decoders[frame.protocol].expand(frame)
                for row in rules.rows(frame):
                    tables.message_row(out["messages"], name, frame, row)
            self.rows += 1
        for notice in current.stats.notices:
            tables.gap_row(out["gaps"], name, notice)
        current.stats.notices.clear()

    def _finish(self, current: _Current) -> Iterator[pa.RecordBatch]:
        self._frames(current, current.end())
        found = current.found
        stats = current.stats
        found.counts = {name: getattr(stats, name) for name in COUNTED}
        found.lossy, found.closed = set(stats.lossy), dict(stats.closed)
        current.tracker.finish(stats.lossy, stats.closed)
        found.partials = {name: s.partial() for name, s in current.statistics.items()}
        self.out["found"] = {"capture": [current.capture.name], "blob": [pickle.dumps(found)]}
        yield from self._flush()

    def _flush(self) -> Iterator[pa.RecordBatch]:
        for table, columns in self.out.items():
            first = next(iter(columns.values()))
            if not first:
                continue
            yield union_batch(self.union, table, columns)
        self.out = {name: empty(schema) for name, schema in self.tables.schemas.items()}
        self.rows = 0


class _Current:
    """The capture a task is decoding now: its reader, tracker and statistics."""

    def __init__(self, decoding: Decoding, capture: Capture) -> None:
        self.capture = capture
        self.stats = ReadStats()
        self.found = Found()
        self.reader = Reader(decoding.dissection, None, self.stats, numbering=self._opened)
        self.tracker = Conversations(d.protocol for d in decoding.decoders.values())
        self.statistics = {
            name: Statistics(d.protocol, self.tracker.trackers[name]) for name, d in decoding.decoders.items()
        }

    def _opened(self) -> int:
        self.found.opened.append(self.stats.packets)
        return self.stats.packets

    def end(self) -> list[Frame]:
        """Flush the connections still open as the capture's end does (its last packet and time)."""
        self.stats.packets = self.capture.packets
        self.reader.ts = self.capture.last_ts
        return list(self.reader.finish())


def union_schema(tables: Tables) -> pa.Schema:
    """One schema for every table's rows (a `table` column says whose), as staged between jobs."""
    fields: dict[str, pa.DataType] = {"table": pa.string()}
    for schema in tables.schemas.values():
        for f in schema:
            if fields.setdefault(f.name, f.type) != f.type:
                raise ValueError(f"column {f.name} has two types: {fields[f.name]} and {f.type}")
    fields["blob"] = pa.binary()
    return pa.schema(list(fields.items()))


def union_batch(union: pa.Schema, table: str, columns: dict[str, list[Any]]) -> pa.RecordBatch:
    rows = len(next(iter(columns.values())))
    arrays = []
    for f in union:
        if f.name == "table":
            arrays.append(pa.array([table] * rows, pa.string()))
        elif f.name in columns:
            arrays.append(pa.array(columns[f.name], f.type))
        else:
            arrays.append(pa.nulls(rows, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=union)


def notices_of(found: Found) -> list[Notice]:
    """The notes a whole read adds at its end, about packets with no segment."""
    from streamdump.core.pipeline import report_skips

    stats = ReadStats()
    stats.skipped, stats.first_skipped = found.skipped, found.first_skipped
    report_skips(stats)
    return stats.notices
