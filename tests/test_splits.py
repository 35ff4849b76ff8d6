"""Capture files read in byte ranges (the Spark pipeline's splits) give every packet once, as one read does.

No Spark here: the ranges are planned, scanned and chained by the driver's own code, and
each range is read by the tasks' code, on every committed capture and at range sizes
that cut records anywhere.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest

from tests.conftest import CAPTURE_ROOT, need

try:
    from streamdump.spark.job import Input, _chain
    from streamdump.spark.tasks import _parsed
except ImportError:  # pyarrow, of the spark extra
    _chain = None  # type: ignore[assignment]

from streamdump.wire.capture import Tally, read_segments
from streamdump.wire.splits import Layout, find_first, layout_of, plan, scan

SPLITTABLE = sorted(
    path
    for path in CAPTURE_ROOT.rglob("*.pcap*")
    if (layout := layout_of(path.read_bytes()[:24])) is not None and layout.kind != "whole"
)


def split_read(path: Path, split_bytes: int) -> tuple[list, int, float]:
    need(_chain is not None, "pyarrow (pip install 'streamdump[spark]')")
    size = path.stat().st_size
    layout = layout_of(path.read_bytes()[:24])
    assert layout is not None
    splits = plan(0, str(path), size, layout, split_bytes)
    with path.open("rb") as fh:
        scans = [(s, scan(fh, s, size, find_first(fh, s, size))) for s in splits]
    chained = _chain(Input(0, str(path), size, layout), scans)
    assert chained is not None, "a clean capture was found damaged"
    works, capture, _ = chained
    segments = []
    for work in works:
        if work.first is not None:
            with path.open("rb") as fh:
                segments += list(_parsed(fh, work))
    return segments, capture.packets, capture.last_ts


@pytest.mark.parametrize("split_bytes", [1021, 65536])
@pytest.mark.parametrize("path", SPLITTABLE, ids=lambda p: str(p.relative_to(CAPTURE_ROOT)))
def test_ranges_give_every_packet_once_as_a_whole_read_does(path: Path, split_bytes: int) -> None:
    tally = Tally()
    whole = list(read_segments(path, tally))
    segments, packets, last_ts = split_read(path, split_bytes)
    assert segments == whole
    assert packets == tally.packets
    assert last_ts == (whole[-1].ts if whole else 0.0)


def test_a_range_that_starts_inside_a_record_begins_at_the_next_record() -> None:
    path = CAPTURE_ROOT / "rabbitmq_stream/bulk.pcap"
    data = path.read_bytes()
    layout = layout_of(data[:24])
    assert layout is not None and layout.kind == "pcap"
    starts, at = [], 24
    while at < len(data):
        starts.append(at)
        at += 16 + struct.unpack_from("<I", data, at + 8)[0]
    big = next(s for s, e in itertools.pairwise(starts) if e - s > 1000)
    end = starts[starts.index(big) + 1]
    with path.open("rb") as fh:
        for start in (big + 1, big + 17, (big + end) // 2, end - 1):
            split = plan(0, str(path), len(data), layout, 1 << 30)[0]
            split = type(split)(0, str(path), 1, start, len(data), layout)
            assert find_first(fh, split, len(data)) == end


def test_a_wrong_guess_is_corrected_by_where_the_range_before_stopped(tmp_path: Path) -> None:
    """A packet whose payload is itself a pcap stream fools the guess; the chain of walks does not."""
    need(_chain is not None, "pyarrow (pip install 'streamdump[spark]')")
    inner = b"".join(struct.pack("<IIII", 1_700_000_000, n, 20, 20) + bytes(20) for n in range(40))
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    records = []
    for n, payload in enumerate((b"x" * 100, inner, b"y" * 100)):
        records.append(struct.pack("<IIII", 1_700_000_000, n, len(payload), len(payload)) + payload)
    path = tmp_path / "nested.pcap"
    path.write_bytes(header + b"".join(records))
    size = path.stat().st_size
    layout = layout_of(path.read_bytes()[:24])
    assert layout == Layout("pcap", "<", False, 1, 262144)
    # The second range starts inside the nested stream: its guess lands on a nested record.
    second_start = 24 + len(records[0]) + 16 + 100
    splits = plan(0, str(path), size, layout, second_start)
    with path.open("rb") as fh:
        scans = [(s, scan(fh, s, size, find_first(fh, s, size))) for s in splits]
        assert scans[1][1].first != 24 + len(records[0]) + len(records[1])  # fooled
    chained = _chain(Input(0, str(path), size, layout), scans)
    assert chained is not None
    works, capture, _ = chained
    assert capture.packets == 3
    assert works[1].first == 24 + len(records[0]) + len(records[1])


def test_a_damaged_file_is_not_split(tmp_path: Path) -> None:
    need(_chain is not None, "pyarrow (pip install 'streamdump[spark]')")
    path = CAPTURE_ROOT / "rabbitmq_stream/session.pcap"
    data = bytearray(path.read_bytes())
    layout = layout_of(bytes(data[:24]))
    assert layout is not None
    first_caplen = struct.unpack_from("<I", data, 24 + 8)[0]
    second = 24 + 16 + first_caplen
    struct.pack_into("<I", data, second + 8, 0x7FFFFFF0)  # the second record claims 2 GiB
    damaged = tmp_path / "damaged.pcap"
    damaged.write_bytes(bytes(data))
    splits = plan(0, str(damaged), len(data), layout, 4096)
    with damaged.open("rb") as fh:
        scans = [(s, scan(fh, s, len(data), find_first(fh, s, len(data)))) for s in splits]
    assert _chain(Input(0, str(damaged), len(data), layout), scans) is None
