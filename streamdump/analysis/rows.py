"""Rows of a table too long to hold: one summary per connection of a read of any size.

Rows are dicts of JSON values, added in any order and read back in the order of one integer
key (a connection's number). Past RUN rows, those held are sorted and written to a temporary
file as JSON lines (a sorted run), so memory holds at most RUN rows whatever the count; reading
merges the runs. A view of the rows so far with a few more (`with_rows`) shares the written
runs, and pickling (a Spark task's rows, for its driver) carries every row.
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import IO, Any

# Rows held in memory before they are sorted and written out as a run.
RUN = 8192
# Bytes read from a run at once: reading holds about this much per run (a million rows make
# some 120 runs), whatever the count.
CHUNK = 8 << 10


class Rows:
    """Rows read back in the order of `key`; len() is how many were added."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), key: str = "connection") -> None:
        self.key = key
        self.held: list[dict[str, Any]] = []
        self.file: IO[bytes] | None = None
        self.runs: list[tuple[int, int]] = []  # (start, end) of each sorted run in the file
        self.count = 0
        for row in rows:
            self.add(row)

    def add(self, row: dict[str, Any]) -> None:
        self.held.append(row)
        self.count += 1
        if len(self.held) >= RUN:
            self._spill()

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.add(row)

    def _spill(self) -> None:
        if self.file is None:
            self.file = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the rows)
        self.held.sort(key=itemgetter(self.key))
        data = "".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n" for row in self.held)
        start = self.file.seek(0, os.SEEK_END)
        self.file.write(data.encode())
        self.file.flush()
        self.runs.append((start, self.file.tell()))
        self.held = []

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        held = sorted(self.held, key=itemgetter(self.key))
        if not self.runs:
            return iter(held)
        return heapq.merge(*(self._run(*run) for run in self.runs), held, key=itemgetter(self.key))

    def _run(self, start: int, end: int) -> Iterator[dict[str, Any]]:
        assert self.file is not None
        fd = self.file.fileno()
        pos, rest = start, b""
        while pos < end:
            chunk = os.pread(fd, min(CHUNK, end - pos), pos)
            if not chunk:
                break
            pos += len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield json.loads(line)

    def with_rows(self, rows: Iterable[dict[str, Any]]) -> Rows:
        """These rows and some more, without copying the ones written out (they are shared)."""
        other = Rows(key=self.key)
        other.file, other.runs, other.count = self.file, list(self.runs), self.count
        other.held = list(self.held)
        for row in rows:
            other.held.append(row)
            other.count += 1
        return other

    def __getstate__(self) -> dict[str, Any]:
        return {"key": self.key, "rows": list(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["rows"], state["key"])  # type: ignore[misc]
