"""The trackers of every protocol a read decodes, seen as one: one time zero, all findings.

Each protocol's tracker keeps its own connections and findings (stats are per protocol);
here they are merged in capture order, so a read of one protocol is its tracker's alone.
What spans protocols and connections (the client hosts that ended several connections at
once) is found here, at the end of a whole read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from streamdump.analysis.endings import ended_together
from streamdump.analysis.state import ConnState, Diagnosis
from streamdump.analysis.tracker import Tracker, Untold, summarise
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame
from streamdump.wire.lifecycle import Life


class Conversations:
    """Every protocol's tracker, fed frames in capture order."""

    def __init__(self, protocols: Iterable[Protocol]) -> None:
        self.trackers = {protocol.name: Tracker(protocol) for protocol in protocols}
        self.first_ts: float | None = None
        # Connections retired whose client left without the protocol's close (told as findings):
        # their lives, for the hosts that ended several at once (no more than findings are listed).
        self.abrupt: dict[int, Life] = {}

    def feed(self, frame: Frame) -> None:
        if self.first_ts is None:
            self.first_ts = frame.ts
        self.trackers[frame.protocol].feed(frame)

    def retire(self, life: Life, lossy: bool = False) -> ConnState | None:
        """A connection ended before the read did: its tracker finds what its end shows and lets
        go of it (Tracker.retire); its state comes back for its summary."""
        tracker = self.trackers.get(life.protocol)
        if tracker is None:
            return None
        told = len(tracker.diagnoses)
        conn = tracker.retire(life, lossy)
        if len(tracker.diagnoses) > told and abruptly_left(tracker.diagnoses[told:]):
            self.abrupt[life.conn] = life
        return conn

    def first_pass(self) -> None:
        """The first of two passes: the rules keep what frames after a frame tell it."""
        for tracker in self.trackers.values():
            tracker.backlinks = True

    def awaits_later(self, frame: Frame) -> bool:
        return self.trackers[frame.protocol].awaits_later(frame)

    def later(self, frame: Frame) -> dict[str, Any] | None:
        return self.trackers[frame.protocol].later(frame)

    def finish(
        self, lossy: Collection[int] = (), lives: Mapping[int, Life] | None = None, whole: bool = True
    ) -> None:
        """whole: these are all the read's connections (a Spark task's are not: its driver tells
        what spans connections, the hosts that ended several at once)."""
        for tracker in self.trackers.values():
            tracker.finish(lossy, lives)
        if not whole:
            return
        every = {**self.abrupt, **(lives or {})}
        for conn, found in ended_together(every, abruptly_left(self.diagnoses)):
            tracker = self.trackers[every[conn].protocol]
            tracker.add_ending(conn, found)

    @property
    def diagnoses(self) -> list[Diagnosis]:
        lists = [t.diagnoses for t in self.trackers.values() if t.diagnoses]
        if len(lists) == 1:
            return lists[0]
        return sorted((d for found in lists for d in found), key=lambda d: d.number)

    @property
    def untold(self) -> Untold:
        return {key: value for t in self.trackers.values() for key, value in t.untold.items()}

    @property
    def connections(self) -> dict[int, ConnState]:
        merged = {n: c for t in self.trackers.values() for n, c in t.connections.items()}
        return dict(sorted(merged.items()))

    def summary(self) -> list[dict[str, Any]]:
        return summarise(self.diagnoses, self.untold)

    def code_name(self, frame: Frame, code: int) -> str:
        return self.trackers[frame.protocol].code_name(frame, code)


def abruptly_left(diagnoses: Iterable[Diagnosis]) -> set[int]:
    """The connections a client left without the protocol's close, by their findings."""
    return {d.conn for d in diagnoses if d.kind == "abrupt_close" and d.message.startswith("the client ")}
