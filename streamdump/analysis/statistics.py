"""What a capture adds up to, from frames the conversation tracker linked: `stats`' numbers.

Service response times per command, response codes per command, publish-to-confirm
latency, messages and bytes per stream and direction, one summary per connection, and
the expert summary. `Statistics.add` takes frames one at a time and keeps only counters
and latency samples, so a capture of any length fits; `partial()` gives what it holds as
plain data that merges with other reads' (Spark's tasks), and `result()` the JSON `stats`
prints. Front ends draw it (views/stats.py draws the tables).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from streamdump.analysis.grouping import Grouping
from streamdump.analysis.rows import Rows
from streamdump.analysis.state import FACTS, ConnState, Diagnosis
from streamdump.analysis.tracker import MAX_DIAGNOSES, Tracker, summarise
from streamdump.spec.dissector import MessageRules, dissector_of
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame
from streamdump.wire.lifecycle import Life

# Keys the peers' properties use for who they are, in the order a summary shows them.
PEER_KEYS = ("product", "version", "platform", "connection_name")


class Samples:
    """Latencies in seconds, counted by their value in microseconds: exact, and small.

    Confirms of one Publish frame, confirmed together, share one latency, so a million
    messages make a few thousand distinct values. Should a capture make more than
    MAX_DISTINCT, values are kept to SIGNIFICANT digits from then on (percentiles within
    0.05%), which bounds memory for any capture length.
    """

    __slots__ = ("coarse", "counts", "total")

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.total = 0
        self.coarse = False

    def merge(self, other: Samples) -> None:
        """Add another's samples: the same as having added them here (coarse if either is)."""
        self.counts.update(other.counts)
        self.total += other.total
        if (other.coarse or len(self.counts) > MAX_DISTINCT) and not self.coarse:
            self.coarse = True
        if self.coarse:
            coarse: Counter[int] = Counter()
            for value, count in self.counts.items():
                coarse[_coarsen(value)] += count
            self.counts = coarse

    def add(self, seconds: float) -> None:
        micros = round(seconds * 1_000_000)
        self.counts[_coarsen(micros) if self.coarse else micros] += 1
        self.total += 1
        if len(self.counts) > MAX_DISTINCT and not self.coarse:
            self.coarse = True
            coarse: Counter[int] = Counter()
            for value, count in self.counts.items():
                coarse[_coarsen(value)] += count
            self.counts = coarse

    def __len__(self) -> int:
        return self.total

    def ordered_ms(self) -> list[tuple[float, int]]:
        return [(round(micros / 1000, 3), count) for micros, count in sorted(self.counts.items())]


MAX_DISTINCT = 100_000
SIGNIFICANT = 4


def _coarsen(micros: int) -> int:
    digits = len(str(abs(micros)))
    if digits <= SIGNIFICANT:
        return micros
    step = 10 ** (digits - SIGNIFICANT)
    return round(micros / step) * step


def latency(samples: Samples) -> dict[str, Any]:
    """Count, min, median, p95, p99 and max of samples in seconds, given in milliseconds."""
    ordered = samples.ordered_ms()
    if not ordered:
        return {"count": 0}
    total = len(samples)

    def rank(p: float) -> float:
        # Nearest rank: the smallest value with p% of the samples at or below it.
        wanted = max(1, math.ceil(p / 100 * total))
        seen = 0
        for value, count in ordered:
            seen += count
            if seen >= wanted:
                return value
        return ordered[-1][0]

    out = {
        "count": total,
        "min_ms": ordered[0][0],
        "median_ms": rank(50),
        "p95_ms": rank(95),
        "p99_ms": rank(99),
        "max_ms": ordered[-1][0],
    }
    if samples.coarse:
        out["approximate"] = True
    return out


class Volume(Struct):
    frames: int = 0
    messages: int = 0
    bytes: int = 0
    latency: Samples | None = None  # replies' request latency, where the protocol pairs them

    def merge(self, other: Volume) -> None:
        self.frames += other.frames
        self.messages += other.messages
        self.bytes += other.bytes
        if other.latency is not None:
            if self.latency is None:
                self.latency = Samples()
            self.latency.merge(other.latency)


class Statistics(Struct):
    protocol: Protocol
    tracker: Tracker
    frames: int = 0
    srt: dict[str, Samples] = field(default_factory=lambda: defaultdict(Samples))
    codes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    confirm: dict[str, Samples] = field(default_factory=lambda: defaultdict(Samples))
    volume: dict[tuple[str, str], Volume] = field(default_factory=dict)
    commands: Counter[tuple[str, str]] = field(default_factory=Counter)
    rules: MessageRules | None = None
    grouping: Grouping | None = None  # stats --by: messages by a field's values
    # Frames and bytes counted per connection and side (client?), of the frames counted.
    sides: dict[tuple[int, bool], list[int]] = field(default_factory=dict)
    tls: dict[int, str] = field(default_factory=dict)  # connection -> its TLS layer, in words
    # stats -Y: a filter chose the frames counted. Then the packets of frames counted and of
    # frames passed over are marked (a byte per packet), so that only findings about frames
    # counted, or about no frame at all (a FIN), are told, for connections with frames counted.
    filtered: bool = False
    picked: bytearray = field(default_factory=bytearray)
    framed: bytearray = field(default_factory=bytearray)
    # What the frames counted say of themselves (the decoder's notes, which read shows on each
    # frame), counted as the findings past the listed ones are: in the expert summary.
    noted: dict[tuple[str, str, str, str, int], tuple[int, int]] = field(default_factory=dict)
    # The summaries of the connections that ended before the read did (retire), and under -Y
    # the numbers of those with frames counted.
    rows: Rows = field(default_factory=Rows)
    counted: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.rules is None:
            self.rules = dissector_of(self.protocol).messages(self.protocol)

    def add(self, frame: Frame, selected: bool = True) -> Volume | None:
        """Count a frame; selected False: a filter passed over it (only its packet is marked).
        What it returns is the messages the frame moves, for a timeline to count too."""
        if self.filtered:
            _mark(self.framed, frame.number)
            if not selected:
                return None
            _mark(self.picked, frame.number)
        side = self.sides.get((frame.conn, frame.from_client is not False))
        if side is None:
            side = self.sides[frame.conn, frame.from_client is not False] = [0, 0]
        side[0] += 1
        side[1] += len(frame.data)
        if frame.tls is not None and frame.conn not in self.tls:
            self.tls[frame.conn] = frame.tls.summary()
        self.frames += 1
        self.commands[frame.name, frame.kind] += 1
        links = frame.links or {}
        name = frame.name
        response_time = links.get("response_time")
        if isinstance(response_time, float | int):
            self.srt[name].add(float(response_time))
        status = self.protocol.conversation.status
        code = frame.fields.get(status) if status else None
        if frame.kind == "response" and isinstance(code, int):
            self.codes[name][self.tracker.code_name(frame, code)] += 1
        for note in frame.expert:
            if note.offset is not None or note.group == "malformed":  # the tracker's have no offset
                key = (note.severity, note.group, "frame", _note_summary(note.message), frame.conn)
                count, first = self.noted.get(key, (0, frame.number))
                self.noted[key] = (count + 1, min(first, frame.number))
        assert self.rules is not None
        for what, carried in self.rules.codes(frame):
            self.codes[what][carried] += 1
        waited = links.get("confirm_time")
        if isinstance(waited, list):
            samples = self.confirm[name]
            for w in waited:
                if w is not None:
                    samples.add(w)
        assert self.rules is not None
        moved = self.rules.volume(frame)
        if moved is not None:
            volume = self.volume.setdefault((moved.subject, moved.direction), Volume())
            volume.frames += 1
            volume.messages += moved.messages
            volume.bytes += moved.bytes
            if moved.latency is not None:
                if volume.latency is None:
                    volume.latency = Samples()
                volume.latency.add(moved.latency)
        if self.grouping is not None:
            self.grouping.add(frame)
        return moved

    def _counted(self, number: int) -> bool:
        return (number, True) in self.sides or (number, False) in self.sides or number in self.counted

    def retire(self, life: Life, conn: ConnState | None) -> None:
        """A connection ended before the read did: its summary is made now, and only that kept
        (written out past a few thousand), its counters let go."""
        number = life.conn
        if self.filtered:
            if not self._counted(number):
                return
            self.counted.add(number)
        if conn is None:
            conn = ConnState(number, life.protocol, life.client, life.server)
            server = self.tracker.spec.server
        else:
            server = self.tracker.server(conn)
        row = _connection(conn, life, server, self.sides)
        tls = self.tls.pop(number, None)  # its TLS layer goes with the row, not kept beside it
        if tls is not None:
            row["tls"] = tls
        self.rows.add(row)
        self.sides.pop((number, True), None)
        self.sides.pop((number, False), None)

    def _told(self, d: Diagnosis) -> bool:
        """Whether stats tell a finding: always, or under -Y when it is about a frame counted or
        about no frame (a connection's end) of a connection with frames counted."""
        if not self.filtered:
            return True
        if not self._counted(d.conn):
            return False
        return _marked(self.picked, d.number) or not _marked(self.framed, d.number)

    def _connections(self) -> Rows:
        """One summary per connection: those with frames, and those whose packets carried none
        (a refused connection, one closed before a byte); under -Y, those with frames counted.
        Those retired are summarised already."""
        tracker = self.tracker
        rows = {
            number: _connection(conn, tracker.lives.get(number), tracker.server(conn), self.sides)
            for number, conn in tracker.connections.items()
            if not self.filtered or self._counted(number)
        }
        for number, life in tracker.lives.items():
            if number not in rows and not self.filtered:
                bare = ConnState(number, life.protocol, life.client, life.server)
                rows[number] = _connection(bare, life, tracker.spec.server, self.sides)
        for number, row in rows.items():
            if number in self.tls:  # a decrypted connection's TLS layer (plaintext ones have no key)
                row["tls"] = self.tls[number]
        return self.rows.with_rows(rows[n] for n in sorted(rows))

    @property
    def subject(self) -> str:
        """What messages are addressed to (a stream, a topic): the volume table's key."""
        assert self.rules is not None
        return self.rules.subject

    # ------------------------------------------------------------------ result

    def result(self) -> dict[str, Any]:
        return self.partial().result()

    def partial(self) -> Partial:
        """What the statistics hold so far, as plain data that merges with other reads' (Spark's
        tasks each see some connections of a capture)."""
        return Partial(
            subject=self.subject,
            acked=self.tracker.confirms,
            frames=self.frames,
            commands=Counter(self.commands),
            srt=dict(self.srt),
            codes={name: Counter(counts) for name, counts in self.codes.items()},
            confirm=dict(self.confirm),
            volume=dict(self.volume),
            connections=self._connections(),
            diagnoses=[d for d in self.tracker.diagnoses if self._told(d)],
            untold={k: v for k, v in self.tracker.untold.items() if not self.filtered or self._counted(k[4])},
            noted=dict(self.noted),
            by_fields=self.grouping.fields if self.grouping is not None else (),
            by={key: list(count) for key, count in self.grouping.counts.items()} if self.grouping else {},
        )


class Partial(Struct):
    """The statistics of some connections of a capture: counters, latency histograms, one
    summary per connection and the findings. Partials of disjoint connections merge into
    what one read of them all gives; `result()` is the JSON `stats` prints."""

    subject: str
    frames: int = 0
    commands: Counter[tuple[str, str]] = field(default_factory=Counter)
    srt: dict[str, Samples] = field(default_factory=dict)
    codes: dict[str, Counter[str]] = field(default_factory=dict)
    confirm: dict[str, Samples] = field(default_factory=dict)
    volume: dict[tuple[str, str], Volume] = field(default_factory=dict)
    connections: Rows = field(default_factory=Rows)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    untold: dict[tuple[str, str, str, str, int], tuple[int, int]] = field(default_factory=dict)
    # The frames' own notes, counted (Statistics.noted).
    noted: dict[tuple[str, str, str, str, int], tuple[int, int]] = field(default_factory=dict)
    # stats --by: the fields asked for, and messages and bytes by (field, subject, direction, value).
    by_fields: tuple[str, ...] = ()
    by: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    # The command whose items are confirmed one by one, as the confirm latency table is titled.
    acked: str | None = None

    def merge(self, other: Partial) -> None:
        self.frames += other.frames
        self.acked = self.acked or other.acked
        self.by_fields = self.by_fields or other.by_fields
        for key, (messages, size) in other.by.items():
            count = self.by.setdefault(key, [0, 0])
            count[0] += messages
            count[1] += size
        self.commands.update(other.commands)
        for mine, theirs in ((self.srt, other.srt), (self.confirm, other.confirm)):
            for name, samples in theirs.items():
                mine.setdefault(name, Samples()).merge(samples)
        for name, counts in other.codes.items():
            self.codes.setdefault(name, Counter()).update(counts)
        for key, volume in other.volume.items():
            self.volume.setdefault(key, Volume()).merge(volume)
        merged = self.connections.with_rows(())
        merged.extend(other.connections)  # written out past a few thousand, as they come
        self.connections = merged
        # Findings past the cap stay counted, never listed: which are listed is the cap's to say.
        listed = sorted([*self.diagnoses, *other.diagnoses], key=finding_order)
        self.diagnoses = listed[:MAX_DIAGNOSES]
        untold = dict(self.untold)
        for key, (count, first) in other.untold.items():
            before, earliest = untold.get(key, (0, first))
            untold[key] = (before + count, min(earliest, first))
        for d in listed[MAX_DIAGNOSES:]:
            key = (d.severity, d.group, d.kind, d.summary, d.conn)
            before, earliest = untold.get(key, (0, d.number))
            untold[key] = (before + 1, min(earliest, d.number))
        self.untold = untold
        for key, (count, first) in other.noted.items():
            before, earliest = self.noted.get(key, (0, first))
            self.noted[key] = (before + count, min(earliest, first))

    def renumber(self, numbers: Mapping[int, int]) -> None:
        """Give connections the numbers a read of the whole capture gives them."""
        renumbered = Rows()
        for conn in self.connections:
            conn["connection"] = numbers.get(conn["connection"], conn["connection"])
            renumbered.add(conn)
        self.connections = renumbered
        self.diagnoses = [replace(d, conn=numbers.get(d.conn, d.conn)) for d in self.diagnoses]
        self.untold = {(*key[:4], numbers.get(key[4], key[4])): value for key, value in self.untold.items()}
        self.noted = {(*key[:4], numbers.get(key[4], key[4])): value for key, value in self.noted.items()}

    def result(self, stream: bool = False) -> dict[str, Any]:
        """stream: the connections as an iterator, read once (a read of a million connections
        writes them out one by one); else a list."""
        diagnoses = sorted(self.diagnoses, key=finding_order)
        severities: dict[int, Counter[str]] = defaultdict(Counter)
        for d in diagnoses:
            severities[d.conn][d.severity] += 1
        for (severity, _group, _kind, _summary, conn), (count, _first) in [
            *self.untold.items(),
            *self.noted.items(),
        ]:
            severities[conn][severity] += count
        return {
            "frames": self.frames,
            "commands": [
                {"command": command, "kind": kind, "frames": count}
                for (command, kind), count in sorted(self.commands.items())
            ],
            "response_times": [
                {"command": command} | latency(samples) for command, samples in sorted(self.srt.items())
            ],
            "response_codes": [
                {"command": command, "code": code, "count": count}
                for command, counts in sorted(self.codes.items())
                for code, count in sorted(counts.items())
            ],
            "confirm_latency": [
                {"command": command} | latency(samples) for command, samples in sorted(self.confirm.items())
            ],
            f"{self.subject}s": [
                {
                    self.subject: stream,
                    "direction": direction,
                    "frames": v.frames,
                    "messages": v.messages,
                    "bytes": v.bytes,
                }
                | ({"latency": latency(v.latency)} if v.latency is not None else {})
                for (stream, direction), v in sorted(self.volume.items())
            ],
            "connections": _listed(
                (
                    # .get: a defaultdict's [] would add a counter per connection (a million of them)
                    conn | {"expert": dict(sorted(severities.get(conn["connection"], {}).items()))}
                    for conn in self.connections
                ),
                stream,
            ),
            "expert": summarise(diagnoses, {**self.untold, **self.noted}),
            "diagnoses": [d.as_dict() for d in diagnoses],
            # Findings past the listed ones: in the expert summary's counts, not listed one by one.
            "diagnoses_not_listed": sum(count for count, _first in self.untold.values()),
        } | (
            {
                "messages_by": [
                    {
                        "field": name,
                        self.subject: subject,
                        "direction": direction,
                        "value": value,
                        "messages": n,
                        "bytes": size,
                    }
                    for (name, subject, direction, value), (n, size) in sorted(
                        self.by.items(),
                        key=lambda i: (self.by_fields.index(i[0][0]), *i[0][1:3], -i[1][0], i[0][3]),
                    )
                ]
            }
            if self.by_fields
            else {}
        )


def document(results: Mapping[str, Partial], stream: bool = False) -> dict[str, Any]:
    """What `stats --format json` prints: the one protocol the capture holds, else each that it
    holds by name (when it holds none, the first asked for, with its empty tables). stream: the
    connections as iterators (Partial.result)."""
    shown = [name for name, partial in results.items() if partial.connections] or list(results)[:1]
    if len(shown) == 1:
        return results[shown[0]].result(stream)
    return {"protocols": {name: results[name].result(stream) for name in shown}}


def _listed(rows: Iterator[dict[str, Any]], stream: bool) -> Iterator[dict[str, Any]] | list[dict[str, Any]]:
    return rows if stream else list(rows)


def finding_order(d: Diagnosis) -> tuple[int, int]:
    """Findings in the order of the packets they name, a connection's in the order found."""
    return (d.number, d.conn)


def _mark(marks: bytearray, number: int) -> None:
    if number >= len(marks):
        marks.extend(bytes(max(number + 1 - len(marks), len(marks))))  # doubles: few resizes
    marks[number] = 1


def _marked(marks: bytearray, number: int) -> bool:
    return number < len(marks) and marks[number] == 1


def _connection(
    conn: ConnState, life: Life | None, server_name: str, sides: Mapping[tuple[int, bool], list[int]]
) -> dict[str, Any]:
    client_frames, client_bytes = sides.get((conn.number, True), (0, 0))
    server_frames, server_bytes = sides.get((conn.number, False), (0, 0))
    last_ts = conn.last.ts if conn.last is not None else conn.first_ts
    start = life.first.ts if life is not None else conn.first_ts
    duration = life.duration if life is not None else (last_ts or 0.0) - (conn.first_ts or 0.0)
    return {
        "connection": conn.number,
        "client": str(conn.client) if conn.client else None,
        "server": str(conn.server) if conn.server else None,
        "start": start,
        "duration_s": round(duration, 6),
        "ended": life.as_dict(server_name) if life is not None else None,
        "client_frames": client_frames,
        "client_bytes": client_bytes,
        "server_frames": server_frames,
        "server_bytes": server_bytes,
        "client_properties": _peer(conn.client_side.properties),
        "server_properties": _peer(conn.server_side.properties),
        **{fact: conn.facts.get(fact) for fact in FACTS},
        "closed_by_server": conn.closed_by_server.number if conn.closed_by_server is not None else None,
    }


def _note_summary(message: str) -> str:
    """A frame note's words up to what tells one frame's from another's (the words after a
    colon), the field it is about kept ("route: JSON with unquoted object keys")."""
    head, colon, tail = message.partition(": ")
    if colon and " " not in head:
        return f"{head}: {tail.partition(': ')[0]}"
    return head


def _peer(properties: dict[str, Any] | None) -> dict[str, Any] | None:
    if properties is None:
        return None
    return {key: properties[key] for key in PEER_KEYS if key in properties}
