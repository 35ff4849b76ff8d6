"""What a capture does over time: the series a report draws, in buckets of time.

Time is cut into buckets of a width taken from a ladder (a millisecond, doubled as often as
needed): a bucket starts at a multiple of its width, so two reads of parts of a capture (Spark's
tasks) bucket alike and merge exactly. Whenever a series would span more than MAX_BUCKETS, the
width doubles and neighbours merge: a capture of any length ends with at most MAX_BUCKETS
buckets, each holding a few numbers per key.

Three kinds of series, each by a key (a stream, a command, a publisher):
- counts: messages and bytes moved (throughput);
- latencies: seconds, kept as counts in bins 2% apart, so percentiles over time (p50, p95,
  p99) cost a few bins per bucket and merge by adding;
- gauges: a value as last seen in each bucket (credit left, an offset).

Keys past MAX_KEYS in one series are counted under "(others)", whatever a capture holds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

if TYPE_CHECKING:
    from streamdump.spec.dissector import MessageRules, Volume
    from streamdump.wire.frame import Frame

# The narrowest bucket, in seconds, and how many buckets a series may span.
BASE_WIDTH = 0.001
MAX_BUCKETS = 600
# Keys one series tells apart; more are counted together.
MAX_KEYS = 40
OTHERS = "(others)"
# The kinds of series, as result() names them.
SERIES = ("counts", "latencies", "gauges")
# Latency bins: each 2% wider than the one before, from a microsecond.
_RATIO = 1.02
_LOG_RATIO = math.log(_RATIO)
_FLOOR = 1e-6


def _bin(seconds: float) -> int:
    return 0 if seconds <= _FLOOR else int(math.log(seconds / _FLOOR) / _LOG_RATIO) + 1


def _seconds(index: int) -> float:
    """A bin's middle, in seconds: what a percentile falling in it is told as."""
    return 0.0 if index == 0 else _FLOOR * _RATIO ** (index - 0.5)


def percentile(bins: Mapping[int, int], p: float) -> float | None:
    """The p-th percentile (nearest rank) of latencies kept as bin counts, in seconds."""
    total = sum(bins.values())
    if not total:
        return None
    wanted = max(1, math.ceil(p / 100 * total))
    seen = 0
    for index in sorted(bins):
        seen += bins[index]
        if seen >= wanted:
            return _seconds(index)
    return None


class Timeline(Struct):
    """Series over time, fed observation by observation, in any order of time."""

    level: int = 0  # the bucket width is BASE_WIDTH * 2**level
    low: int | None = None  # the first and last bucket any series holds
    high: int | None = None
    counts: dict[str, dict[str, dict[int, list[int]]]] = field(default_factory=dict)
    latencies: dict[str, dict[str, dict[int, dict[int, int]]]] = field(default_factory=dict)
    gauges: dict[str, dict[str, dict[int, tuple[float, float]]]] = field(default_factory=dict)

    @property
    def width(self) -> float:
        return BASE_WIDTH * (1 << self.level)

    def _at(self, ts: float) -> int:
        index = math.floor(ts / self.width)
        low = index if self.low is None else min(self.low, index)
        high = index if self.high is None else max(self.high, index)
        while high - low + 1 > MAX_BUCKETS:
            self._coarser()
            index, low, high = index >> 1, low >> 1, high >> 1
        self.low, self.high = low, high
        return index

    def _coarser(self) -> None:
        """Double the width: each bucket joins its neighbour."""
        self.level += 1
        for series in self.counts.values():
            for key, buckets in series.items():
                merged: dict[int, list[int]] = {}
                for index, (messages, size) in buckets.items():
                    found = merged.setdefault(index >> 1, [0, 0])
                    found[0] += messages
                    found[1] += size
                series[key] = merged
        for series in self.latencies.values():
            for key, buckets in series.items():
                joined: dict[int, dict[int, int]] = {}
                for index, bins in buckets.items():
                    into = joined.setdefault(index >> 1, {})
                    for b, n in bins.items():
                        into[b] = into.get(b, 0) + n
                series[key] = joined
        for series in self.gauges.values():
            for key, buckets in series.items():
                later: dict[int, tuple[float, float]] = {}
                for index, seen in buckets.items():
                    if index >> 1 not in later or seen[0] >= later[index >> 1][0]:
                        later[index >> 1] = seen
                series[key] = later
        if self.low is not None and self.high is not None:
            self.low, self.high = self.low >> 1, self.high >> 1

    @staticmethod
    def _key(series: dict[str, Any], key: str) -> str:
        return key if key in series or len(series) < MAX_KEYS else OTHERS

    def count(self, name: str, key: str, ts: float, messages: int, size: int) -> None:
        index = self._at(ts)
        series = self.counts.setdefault(name, {})
        found = series.setdefault(self._key(series, key), {}).setdefault(index, [0, 0])
        found[0] += messages
        found[1] += size

    def latency(self, name: str, key: str, ts: float, seconds: Iterable[float]) -> None:
        index = self._at(ts)
        series = self.latencies.setdefault(name, {})
        bins = series.setdefault(self._key(series, key), {}).setdefault(index, {})
        # A confirm's items were mostly published together: bin each distinct latency once.
        for value, times in Counter(seconds).items():
            b = _bin(value)
            bins[b] = bins.get(b, 0) + times

    def gauge(self, name: str, key: str, ts: float, value: float) -> None:
        index = self._at(ts)
        series = self.gauges.setdefault(name, {})
        buckets = series.setdefault(self._key(series, key), {})
        seen = buckets.get(index)
        if seen is None or ts >= seen[0]:
            buckets[index] = (ts, value)

    def merge(self, other: Timeline) -> None:
        """Add another's series: the same as having fed this one its observations too (its
        latencies' bins and its gauges' latest values, bucket by bucket)."""
        while self.level < other.level:
            self._coarser()
        other = _copy(other)
        while other.level < self.level:
            other._coarser()
        for name, series in other.counts.items():
            for key, buckets in series.items():
                for index, (messages, size) in buckets.items():
                    self.count(name, key, (index + 0.5) * other.width, messages, size)
        for name, series in other.latencies.items():
            for key, buckets in series.items():
                for index, bins in buckets.items():
                    at = self._at((index + 0.5) * other.width)
                    mine = self.latencies.setdefault(name, {})
                    into = mine.setdefault(self._key(mine, key), {}).setdefault(at, {})
                    for b, n in bins.items():
                        into[b] = into.get(b, 0) + n
        for name, series in other.gauges.items():
            for key, buckets in series.items():
                for ts, value in buckets.values():
                    self.gauge(name, key, ts, value)

    def result(self) -> dict[str, Any]:
        """The series as plain data: one value per bucket from the first to the last (None where a
        bucket saw nothing), latencies as p50, p95 and p99 in milliseconds and their counts."""
        if self.low is None or self.high is None:
            return {"start": None, "width_s": self.width, "buckets": 0} | {
                s: {} for s in (*SERIES, "histograms")
            }
        low, span = self.low, self.high - self.low + 1

        def spread(buckets: Mapping[int, Any], make: Any) -> list[Any]:
            out = [None] * span
            for index, value in buckets.items():
                out[index - low] = make(value)
            return out

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 3)

        return {
            "start": low * self.width,
            "width_s": self.width,
            "buckets": span,
            "counts": {
                name: {
                    key: {
                        "messages": spread(buckets, lambda v: v[0]),
                        "bytes": spread(buckets, lambda v: v[1]),
                    }
                    for key, buckets in sorted(series.items())
                }
                for name, series in sorted(self.counts.items())
            },
            "latencies": {
                name: {
                    key: {
                        "count": spread(buckets, lambda b: sum(b.values())),
                        **{
                            f"p{p}_ms": spread(buckets, lambda b, p=p: ms(percentile(b, p)))
                            for p in (50, 95, 99)
                        },
                    }
                    for key, buckets in sorted(series.items())
                }
                for name, series in sorted(self.latencies.items())
            },
            "gauges": {
                name: {key: spread(buckets, lambda v: v[1]) for key, buckets in sorted(series.items())}
                for name, series in sorted(self.gauges.items())
            },
            # Each latency key's values over the whole capture: [milliseconds, count] per bin.
            "histograms": {
                name: {key: _histogram(buckets.values()) for key, buckets in sorted(series.items())}
                for name, series in sorted(self.latencies.items())
            },
        }


def _histogram(buckets: Iterable[Mapping[int, int]]) -> list[list[float]]:
    total: dict[int, int] = {}
    for bins in buckets:
        for b, n in bins.items():
            total[b] = total.get(b, 0) + n
    return [[round(_seconds(b) * 1000, 4), n] for b, n in sorted(total.items())]


def _copy(timeline: Timeline) -> Timeline:
    def each(series: dict[str, dict[str, dict[int, Any]]], copy: Any) -> dict[str, dict[str, dict[int, Any]]]:
        return {n: {k: {i: copy(v) for i, v in b.items()} for k, b in s.items()} for n, s in series.items()}

    return Timeline(
        timeline.level,
        timeline.low,
        timeline.high,
        each(timeline.counts, list),
        each(timeline.latencies, dict),
        each(timeline.gauges, tuple),
    )


def observe(timeline: Timeline, frame: Frame, rules: MessageRules, moved: Volume | None) -> None:
    """What one frame adds to a capture's series: the messages it moves (per subject and
    direction), the latency of the request it answers (per command, and per subject where the
    protocol gives one), the confirm latency of the items it confirms (per sender), and the
    gauges its protocol reads off it (credit left, offsets). `moved` is what rules.volume()
    says of the frame (the statistics have asked it already)."""
    ts = frame.ts
    if moved is not None:
        subject = f"{moved.subject} ({moved.direction})"
        timeline.count("messages", subject, ts, moved.messages, moved.bytes)
        if moved.latency is not None:
            timeline.latency("requests by subject", moved.subject, ts, (moved.latency,))
    links = frame.links
    if links:
        waited = links.get("response_time")
        if isinstance(waited, float | int):
            timeline.latency("requests", frame.name, ts, (float(waited),))
        confirmed = links.get("confirm_time")
        if isinstance(confirmed, list):
            timeline.latency("confirms", _sender(frame, rules), ts, (w for w in confirmed if w is not None))
    for name, key, value in rules.gauges(frame):
        timeline.gauge(name, key, ts, value)


def _sender(frame: Frame, rules: MessageRules) -> str:
    """Who sent the items a frame confirms: its subject (the stream) and the session that sent
    them, by the packet that opened it (a packet's number is the capture's, whoever reads it)."""
    links = frame.links or {}
    subject = links.get(rules.subject) or "?"
    opened = links.get("opened_in")
    return f"{subject} · opened at packet {opened}" if opened is not None else f"{subject}"
