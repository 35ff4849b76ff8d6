"""How views write a frame's time, as tshark's -t does: relative to the capture's first packet
(the default, Wireshark's), absolute, with the date, as UTC, since the epoch, or since the frame
shown before."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from enum import StrEnum


class TimeFormat(StrEnum):
    """tshark's -t formats."""

    r = "r"  # seconds since the capture's first packet
    a = "a"  # local time of day
    ad = "ad"  # local date and time
    d = "d"  # seconds since the frame shown before
    dd = "dd"  # the same (tshark's "delta displayed")
    e = "e"  # seconds since the epoch
    u = "u"  # UTC time of day
    ud = "ud"  # UTC date and time


# tshark's words for each, as --help shows them.
DESCRIBED = {
    "r": "seconds since the capture's first packet (default)",
    "a": "local time of day",
    "ad": "local date and time",
    "d": "seconds since the frame shown before",
    "dd": "the same as d",
    "e": "seconds since the epoch",
    "u": "UTC time of day",
    "ud": "UTC date and time",
}


class Clock:
    """Writes frames' times in one format, counting from t0 (the capture's first packet).

    t0 may be a callable, asked when the first frame is written (the session knows the
    capture's first packet by then, even when a filter hid its frames); without one, times
    count from the first frame written.
    """

    def __init__(
        self, fmt: TimeFormat = TimeFormat.r, t0: float | Callable[[], float | None] | None = None
    ) -> None:
        self.fmt = fmt
        self.t0 = t0
        self.zero: float | None = None
        self.previous: float | None = None

    def start(self, ts: float) -> float:
        if self.zero is None:
            zero = self.t0() if callable(self.t0) else self.t0
            self.zero = ts if zero is None else zero
        return self.zero

    def relative(self, ts: float) -> float:
        return ts - self.start(ts)

    def text(self, ts: float) -> str:
        """The time column of a frame at ts (frames are asked for in the order they are shown)."""
        fmt = self.fmt
        if fmt is TimeFormat.r:
            zero = self.zero
            return f"{ts - (zero if zero is not None else self.start(ts)):>11.6f}"
        if fmt in (TimeFormat.d, TimeFormat.dd):
            self.start(ts)
            before, self.previous = self.previous, ts
            return f"{(ts - before if before is not None else 0.0):>11.6f}"
        if fmt is TimeFormat.e:
            return f"{ts:.6f}"
        utc = fmt in (TimeFormat.u, TimeFormat.ud)
        try:
            when = dt.datetime.fromtimestamp(ts, tz=dt.UTC if utc else None)
        except (OverflowError, OSError, ValueError):
            return f"{ts:.6f}"
        dated = fmt in (TimeFormat.ad, TimeFormat.ud)
        return when.strftime("%Y-%m-%d %H:%M:%S.%f" if dated else "%H:%M:%S.%f")
