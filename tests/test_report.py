"""`streamdump report`: one HTML file, offline and printable, from captures or a Spark run.

The series over time are exact and merge as one read would make them (a hypothesis property);
the page holds what the issue lists, nothing it would fetch, no raw control character from the
wire; headless Chromium renders it without a console error and the screenshot is not blank.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CAPTURE_ROOT, ROOT, need
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamdump.analysis.session import CaptureFile, Options
from streamdump.analysis.timeline import MAX_BUCKETS, Timeline, percentile

CAPTURES = [
    CAPTURE_ROOT / "rabbitmq_stream" / "tracking.pcap",
    CAPTURE_ROOT / "rabbitmq_stream" / "credit_exhausted.pcap",
    CAPTURE_ROOT / "nats" / "natsjs_store.pcap",
]


def streamdump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, text=True, cwd=ROOT, check=False
    )


# ---------------------------------------------------------------- the series


observations = st.lists(
    st.tuples(
        st.sampled_from(["count", "latency", "gauge"]),
        st.sampled_from(["a", "b", "c"]),
        st.floats(1_700_000_000, 1_700_000_000 + 3600, allow_nan=False),
        st.floats(0.0, 5.0, allow_nan=False),
    ),
    max_size=60,
)


def _feed(timeline: Timeline, seen: list[tuple[str, str, float, float]]) -> Timeline:
    for kind, key, ts, value in seen:
        if kind == "count":
            timeline.count("messages", key, ts, 1, int(value * 100))
        elif kind == "latency":
            timeline.latency("requests", key, ts, (value,))
        else:
            timeline.gauge("credit", key, ts, value)
    return timeline


@given(observations, st.integers(0, 60))
# One part spans exactly MAX_BUCKETS; the other's bucket makes the merge coarser half way, after
# which the rest of the part's buckets were placed at twice their time.
@example(
    [
        ("count", "a", 1_700_000_000.0, 0.0),
        ("count", "a", 1_700_002_456.0, 0.0),
        ("count", "a", 1_700_000_003.0, 0.0),
    ],
    1,
)
@settings(max_examples=60, deadline=None)
def test_two_parts_merged_are_the_whole_read(seen: list, cut: int) -> None:
    """Spark's tasks each see some of a capture: their series merged are what one read makes."""
    whole = _feed(Timeline(), seen)
    first, second = _feed(Timeline(), seen[:cut]), _feed(Timeline(), seen[cut:])
    first.merge(second)
    if len({ts for _, _, ts, _ in seen}) != len(seen):
        return  # two gauges at one instant: either is the latest
    assert first.result() == whole.result()


def test_any_span_stays_within_its_buckets_and_counts_stay_whole() -> None:
    timeline = Timeline()
    for second in range(0, 86_400, 7):  # a day, a message every 7 s
        timeline.count("messages", "s", 1_700_000_000 + second, 1, 10)
    result = timeline.result()
    assert result["buckets"] <= MAX_BUCKETS
    assert sum(v or 0 for v in result["counts"]["messages"]["s"]["messages"]) == len(range(0, 86_400, 7))


def test_percentiles_are_within_the_bins_precision() -> None:
    values = [i / 1000 for i in range(1, 1001)]  # 1 ms to 1 s
    bins: dict[int, int] = {}
    timeline = Timeline()
    timeline.latency("r", "k", 1.0, values)
    ((_, bins),) = timeline.latencies["r"]["k"].items()
    for p, exact in ((50, 0.5), (95, 0.95), (99, 0.99)):
        found = percentile(bins, p)
        assert found is not None and abs(found - exact) / exact < 0.03


def test_a_capture_s_series_are_what_its_frames_say() -> None:
    session = Options().prepare().session(statistics=True, timeline=True)
    frames = list(session.frames(CaptureFile(CAPTURE_ROOT / "rabbitmq_stream" / "credit_exhausted.pcap")))
    result = session.timeline.result()  # type: ignore[union-attr]
    delivered = [f for f in frames if f.command == "Deliver"]
    ((key, credit),) = result["gauges"]["credit left"].items()
    assert key.startswith("streamdump-credit · opened at packet ")
    # The credit each delivery left, as the last seen in its bucket.
    assert [v for v in credit if v is not None][-1] == delivered[-1].links["credit_left"]
    confirms = sum(len(f.links.get("confirm_time") or []) for f in frames if f.links)
    histogram = next(iter(result["histograms"]["confirms"].values()))
    assert sum(n for _, n in histogram) == confirms > 0


def test_charts_count_time_from_the_capture_s_first_packet(tmp_path: Path) -> None:
    """As `read` does: a capture whose first packets carry no frame still starts at its first."""
    import dpkt

    from streamdump.report import charts
    from streamdump.report.data import from_session

    source = CAPTURE_ROOT / "rabbitmq_stream" / "credit_exhausted.pcap"
    with source.open("rb") as fh:
        reader = dpkt.pcap.Reader(fh)
        packets = list(reader)
        linktype = reader.datalink()
    early = tmp_path / "early.pcap"
    with early.open("wb") as fh:
        writer = dpkt.pcap.Writer(fh, linktype=linktype)
        writer.writepkt(packets[0][1], packets[0][0] - 2.0)  # two seconds before: the same SYN again
        for ts, data in packets:
            writer.writepkt(data, ts)
    session = Options().prepare().session(statistics=True, timeline=True)
    frames = list(session.frames(CaptureFile(early)))
    timeline = from_session("early", session).timeline
    assert timeline["origin"] == pytest.approx(packets[0][0] - 2.0)
    first = frames[0].ts - timeline["origin"]
    starts = charts.times(timeline)
    assert starts[0] <= first < starts[0] + timeline["width_s"] and first > 2.0


# ---------------------------------------------------------------- the page


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from streamdump import report as reporting

    need(reporting.missing() is None, f"the report needs matplotlib: {reporting.missing()}")
    out = tmp_path_factory.mktemp("report")
    done = streamdump(
        "report", *map(str, CAPTURES), "-o", str(out / "report.html"), "--png", str(out / "png")
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("streamdump: wrote ")
    return out


def test_the_page_holds_every_part_the_issue_lists(report: Path) -> None:
    text = (report / "report.html").read_text(encoding="utf-8")
    for heading in (
        "Summary",
        "Throughput",
        "Publish latency",
        "Request latency",
        "Consumers",
        "Connections",
        "Findings",
    ):
        assert f">{heading}</h" in text, heading
    charts = (
        "Messages per second", "Bytes per second", "Publish to confirm latency",
        "Credit left per subscription", "Offsets delivered and stored", "Consumer lag", "Connection timeline",
    )  # fmt: skip
    for chart in charts:
        assert chart in text, chart
    # A finding with the filters that show it.
    assert "-Y &#x27;frame == " in text and "frame.number == " in text
    assert "rabbitmq_stream.expert." in text


def test_the_throughput_table_counts_what_stats_counts(tmp_path: Path) -> None:
    capture = CAPTURES[1]
    done = streamdump("report", str(capture), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    stats = json.loads(streamdump("stats", "--format", "json", str(capture)).stdout)
    assert stats["streams"]
    for row in stats["streams"]:
        cells = f'<td>{row["stream"]} ({row["direction"]})</td><td class="num">{row["messages"]:,}</td>'
        assert cells + f'<td class="num">{row["bytes"]:,}</td>' in text, row


def test_the_page_fetches_nothing(report: Path) -> None:
    text = (report / "report.html").read_text(encoding="utf-8")
    assert "<script" not in text and "<link" not in text and "<img" not in text
    assert not re.search(r"(src|href)\s*=\s*[\"']?https?:", text)
    assert "url(http" not in text and "@import" not in text


def test_each_chart_is_also_a_png(report: Path) -> None:
    pngs = sorted((report / "png").glob("*.png"))
    assert len(pngs) >= 10
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_a_report_of_the_same_captures_is_the_same_file(report: Path, tmp_path: Path) -> None:
    again = streamdump("report", *map(str, CAPTURES), "-o", str(tmp_path / "again.html"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again.html").read_bytes() == (report / "report.html").read_bytes()


def test_text_from_the_wire_reaches_the_page_escaped(tmp_path: Path) -> None:
    from test_safe_text import hostile_capture

    from streamdump.views.safe import UNSAFE

    path = hostile_capture("rabbitmq_stream", tmp_path)
    done = streamdump("report", str(path), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert not re.search(f"[{UNSAFE.replace(chr(10), '')}]", text.replace("\n", "")), (
        "a raw control character"
    )
    assert "\\x1b[2J\\u202e" in text  # the stream name, shown as the views show it


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        ([], 2, "give captures, or --from-spark FOLDER"),
        (["/nonexistent.pcap"], 1, "cannot open"),
        ([str(CAPTURES[0]), "--from-spark", "/tmp"], 2, "not both"),
        (["--from-spark", "/nonexistent"], 1, "no stats.json"),
    ],
)
def test_refusals_are_one_line(tmp_path: Path, args: list[str], status: int, said: str) -> None:
    done = streamdump("report", *args, "-o", str(tmp_path / "r.html"))
    assert done.returncode == status, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done.stderr


def test_a_capture_cut_short_is_reported_as_far_as_it_went(tmp_path: Path) -> None:
    """A capture cut mid-packet: the page is written from what was read and says where it stopped;
    the status says the capture was not whole."""
    whole = CAPTURES[1].read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    done = streamdump("report", str(cut), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("streamdump: error:"), done.stderr
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Not read to its end" in text
    frames = re.search(r"frames<b>([\d,]+)</b>", text)
    assert frames is not None and int(frames.group(1).replace(",", "")) > 0


def _browse(page: Path, tmp_path: Path) -> tuple[str, Path]:
    """Headless Chromium opens the page: its log (console messages, files loaded) and a screenshot."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    need(chromium is not None, "headless Chromium is not installed (apt-get install chromium)")
    assert chromium is not None
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=1",
         f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr, shot


def _told(log: str, page: Path) -> list[str]:
    """What the page said on the console, and any file it made the browser load besides itself."""
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    loads = [
        line for line in log.splitlines() if "FileURLLoader::Start" in line and page.as_uri() not in line
    ]
    return console + loads


def test_the_browser_check_sees_console_errors_and_loads(tmp_path: Path) -> None:
    """The check below can fail: a page with a script error and an image to load fails it."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>throw new Error("bad")</script><img src="x.png"></body></html>')
    log, _ = _browse(bad, tmp_path)
    told = _told(log, bad)
    assert any("Uncaught Error: bad" in line for line in told) and any("x.png" in line for line in told)


def test_chromium_renders_it_without_an_error_and_not_blank(report: Path, tmp_path: Path) -> None:
    page = report / "report.html"
    log, shot = _browse(page, tmp_path)
    assert not _told(log, page)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.std() > 0.05  # charts and text, not a blank page


# ---------------------------------------------------------------- from a Spark run


def test_a_spark_run_gives_the_same_report_data(tmp_path: Path) -> None:
    from streamdump import spark

    need(spark.missing() is None, f"Spark cannot run here: {spark.missing()}")
    from streamdump.report.data import from_session, from_spark
    from streamdump.spark.job import find_inputs, run, write_stats

    capture = CAPTURES[1]
    session = spark.session("local[2]", "1g", 4, False)
    try:
        outcome = run(session, find_inputs([str(capture)]), str(tmp_path / "out"), Options(), 4, 2048)
    finally:
        session.stop()
    write_stats(outcome)
    (theirs,) = from_spark(tmp_path / "out")
    local = Options().prepare().session(statistics=True, timeline=True)
    for _ in local.frames(CaptureFile(capture)):
        pass
    ours = from_session(str(capture), local)
    assert json.loads(json.dumps(theirs.timeline)) == json.loads(json.dumps(ours.timeline))
    assert theirs.stats["connections"] == ours.stats["connections"]
    done = streamdump("report", "--from-spark", str(tmp_path / "out"), "-o", str(tmp_path / "spark.html"))
    assert done.returncode == 0, done.stderr
    assert "Credit left per subscription" in (tmp_path / "spark.html").read_text(encoding="utf-8")
