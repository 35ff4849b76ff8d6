"""The progress bar of long reads: bytes of the capture read so far, and time left.

It goes to stderr, appears only once a read has taken longer than a second, and only
where it cannot mix with frames on the screen: for views that print at the end (stats,
follow), or when the frames go to a file. A terminal or a pipe (say, into less) showing
frames as they come gets no bar. It disappears when the read ends.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TextIO, TypeVar

if TYPE_CHECKING:  # the bar's parts load when a bar is shown: most reads end before one is
    from rich.console import Console
    from rich.progress import Progress

T = TypeVar("T")

DELAY_S = 1.0  # reads quicker than this never show a bar
CHECK_EVERY = 64  # items between looks at the clock


def wanted(stdout: TextIO, stderr: TextIO, *, frames_on_stdout: bool) -> bool:
    """Whether a bar may be drawn: stderr is a terminal, and stdout is not showing frames live."""
    if not _is_terminal(stderr):
        return False
    if not frames_on_stdout:
        return True
    if _is_terminal(stdout):
        return False
    try:
        mode = os.fstat(stdout.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    # A file (or /dev/null) holds the frames for later; a pipe may be a pager showing them now.
    return stat.S_ISREG(mode) or stat.S_ISCHR(mode)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ReadProgress:
    """Follows how far a read has come through its file, drawing a bar once it is slow."""

    def __init__(
        self,
        total: int,
        position: Callable[[], int],
        console: Console,
        clock: Callable[[], float] = time.monotonic,
        label: str = "reading",
    ) -> None:
        self.total = total
        self.position = position
        self.console = console
        self.clock = clock
        self.label = label
        self.started = clock()
        self.bar: Progress | None = None
        self.task = 0

    def follow(self, items: Iterable[T]) -> Iterator[T]:
        """The items, unchanged; the bar advances as they go by."""
        try:
            for n, item in enumerate(items):
                if n % CHECK_EVERY == 0:
                    self.tick()
                yield item
        finally:
            self.close()

    def tick(self) -> None:
        if self.bar is None:
            if self.clock() - self.started < DELAY_S:
                return
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.task = self.bar.add_task(self.label, total=self.total)
            self.bar.start()
        self.bar.update(self.task, completed=min(self.position(), self.total))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
