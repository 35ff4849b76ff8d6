"""The progress bar of long reads: when it shows, what it says, and that it changes nothing."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console

from streamdump.views.progress import DELAY_S, ReadProgress, wanted


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bar(clock: FakeClock, position: list[int]) -> tuple[ReadProgress, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    return ReadProgress(1_000_000, lambda: position[0], console, clock=clock), out


def test_no_bar_for_a_quick_read() -> None:
    clock, position = FakeClock(), [0]
    progress, out = bar(clock, position)
    items = []
    for n in progress.follow(range(1000)):
        clock.now += (DELAY_S * 0.9) / 1000
        position[0] += 1000
        items.append(n)
    assert items == list(range(1000))
    assert out.getvalue() == ""


def test_a_slow_read_shows_bytes_read_and_goes_away() -> None:
    clock, position = FakeClock(), [0]
    progress, out = bar(clock, position)
    seen = []
    for n in progress.follow(range(1000)):
        clock.now += 2 * DELAY_S / 1000
        position[0] = (n + 1) * 1000
        if n == 700:
            progress.tick()
            progress.bar.refresh()  # type: ignore[union-attr]
            seen.append(out.getvalue())
    assert progress.bar is None  # stopped at the end
    assert "reading" in seen[0] and "0.7/1.0 MB" in seen[0]


def test_the_bar_only_goes_where_it_cannot_mix_with_frames(tmp_path: Path) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    with (tmp_path / "out.jsonl").open("w") as file, open(os.devnull, "w") as null:
        read_fd, write_fd = os.pipe()
        with os.fdopen(write_fd, "w") as pipe:
            assert wanted(file, Tty(), frames_on_stdout=True)  # frames into a file
            assert wanted(null, Tty(), frames_on_stdout=True)
            assert not wanted(pipe, Tty(), frames_on_stdout=True)  # maybe a pager showing them
            assert not wanted(Tty(), Tty(), frames_on_stdout=True)  # frames on the terminal
            assert wanted(Tty(), Tty(), frames_on_stdout=False)  # stats: printed at the end
            assert not wanted(file, file, frames_on_stdout=False)  # stderr is not a terminal
        os.close(read_fd)
