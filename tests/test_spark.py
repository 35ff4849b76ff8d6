"""The Spark pipeline gives the CLI's answers: frames, links, messages and stats, capture by capture.

One embedded Spark run (local[2]) reads every committed capture at once, plus a damaged
copy, in ranges small enough that the larger files are split mid-record; a second run
splits pcap and pcapng files into ranges of a few KiB. Each capture's rows are compared
with what `streamdump read` and `streamdump stats` print for it. Spark and Java are
needed: the tests skip without them on a laptop and fail in CI.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streamdump.analysis.session import Options
from streamdump.cli import app
from tests.conftest import CAPTURE_ROOT, ROOT, need

CAPTURE_FILES = sorted(str(p.relative_to(ROOT)) for p in CAPTURE_ROOT.rglob("*.pcap*"))
# The TLS captures' key logs, given to every run on both sides: the TLS captures decode through
# Spark's tasks as through the CLI (without them, neither decodes a frame of them).
KEYLOGS = sorted(str(p.relative_to(ROOT)) for p in (CAPTURE_ROOT / "tls").glob("*.keys"))
SMALL_SPLITS = [
    "captures/rabbitmq_stream/bulk.pcap",
    "captures/rabbitmq_stream/session.pcapng",
    "captures/rabbitmq_stream/pathological/session.pcapng_sections.pcapng",
    "captures/rabbitmq_stream/pathological/session.pcap_be_nsec.pcap",
    "captures/nats/jetstream.pcap",
]
runner = CliRunner()


def pipeline_ready() -> None:
    from streamdump import spark

    lacking = spark.missing()
    need(lacking is None, lacking or "")


class Run:
    def __init__(self, out: Path, outcome: Any) -> None:
        import pyarrow.parquet as pq

        self.out = out
        self.outcome = outcome
        self.tables = {t: pq.read_table(out / t).to_pylist() for t in ("frames", "messages", "expert")}
        self.stats = json.loads((out / "stats.json").read_text())

    def rows(self, table: str, capture: str) -> list[dict[str, Any]]:
        return [r for r in self.tables[table] if r["capture"] == capture]


def spark_run(spark: Any, inputs: list[str], out: Path, split_bytes: int) -> Run:
    from streamdump.spark.job import find_inputs, run, write_stats

    outcome = run(
        spark, find_inputs(inputs), str(out), Options(keylogs=tuple(map(Path, KEYLOGS))), 4, split_bytes
    )
    write_stats(outcome)
    return Run(out, outcome)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pipeline_ready()
    from streamdump import spark

    here = tmp_path_factory.mktemp("spark")
    # A copy cut inside its fifth record: the CLI decodes what precedes the cut, then fails.
    data = (ROOT / "captures/rabbitmq_stream/session.pcap").read_bytes()
    damaged = here / "damaged.pcap"
    damaged.write_bytes(data[: len(data) // 3])
    session = spark.session("local[2]", "2g", 4, False)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        folder = spark_run(session, ["captures", str(damaged)], here / "all", 64 << 10)
        small = spark_run(session, SMALL_SPLITS, here / "small", 2048)
    finally:
        os.chdir(cwd)
        session.stop()
    return {"all": folder, "small": small, "damaged": str(damaged)}


def cli_answers(capture: str) -> dict[str, Any]:
    keys = [arg for keylog in KEYLOGS for arg in ("--tls-keylog", keylog)]
    read = runner.invoke(app, ["read", capture, "-T", "jsonl", *keys])
    frames = [json.loads(line) for line in read.stdout.splitlines() if line.startswith("{")]
    messages = runner.invoke(app, ["read", capture, "--messages", *keys]).stdout
    stats = runner.invoke(app, ["stats", capture, "-T", "json", *keys]).stdout
    # The capture's own error (not the conversation's findings, which are errors too).
    error = re.findall(rf"^streamdump: error: ({re.escape(capture)}: .*)$", read.stderr, re.M)
    return {
        "frames": Counter(_frame(d, d["links"]) for d in frames),
        "messages": len([line for line in messages.splitlines() if line.strip()]),
        "stats": json.loads(stats) if stats.strip() else None,
        "error": error[0] if error else None,
    }


def spark_answers(run: Run, capture: str) -> dict[str, Any]:
    errors = [e for e in run.outcome.errors if e.startswith(capture)]
    return {
        "frames": Counter(
            _frame(r, json.loads(r["links"]) if r["links"] else {}) for r in run.rows("frames", capture)
        ),
        "messages": len(run.rows("messages", capture)),
        "stats": run.stats.get(capture),
        "error": errors[0] if errors else None,
    }


def _frame(row: dict[str, Any], links: dict[str, Any]) -> tuple[Any, ...]:
    key = row["key"]
    return (
        row["frame"],
        row["connection"],
        row["protocol"],
        row["command"],
        row["kind"],
        None if key is None else str(key),
        row["size"],
        json.dumps(links, sort_keys=True),
    )


@pytest.mark.parametrize("capture", CAPTURE_FILES)
def test_every_committed_capture_gives_the_cli_answers(
    runs: dict[str, Any], capture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    spark_side = spark_answers(runs["all"], capture)
    cli_side = cli_answers(capture)
    assert spark_side["frames"] == cli_side["frames"]
    assert sum(spark_side["frames"].values()) > 0 or cli_side["error"] is not None or "nats" in capture
    assert spark_side["messages"] == cli_side["messages"]
    assert spark_side["stats"] == cli_side["stats"]
    assert spark_side["error"] == cli_side["error"]


@pytest.mark.parametrize("capture", SMALL_SPLITS)
def test_ranges_of_a_few_kib_give_the_cli_answers(
    runs: dict[str, Any], capture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert spark_answers(runs["small"], capture) == cli_answers(capture)


def test_connection_numbers_come_from_the_scan_or_are_renumbered_after(runs: dict[str, Any]) -> None:
    """The scan foresees each connection's number from the packet that opens it; where it cannot
    (a pcapng range that starts in a later section, a protocol found by its magic on another
    port), the tables are renumbered, and the answers above are still the CLI's."""
    assert runs["small"].outcome.renumbered == [
        "captures/rabbitmq_stream/pathological/session.pcapng_sections.pcapng"
    ]
    assert runs["all"].outcome.renumbered == [
        "captures/eventmesh/legacy.pcap",
        "captures/tls/nats_tls.pcap",  # NATS on 4443, a port of no protocol: known once decrypted
    ]


def test_a_damaged_file_gives_what_precedes_the_damage_and_the_cli_error(runs: dict[str, Any]) -> None:
    damaged = runs["damaged"]
    spark_side = spark_answers(runs["all"], damaged)
    cli_side = cli_answers(damaged)
    assert cli_side["error"] is not None and "cut short" in cli_side["error"]
    assert spark_side == cli_side
    assert sum(spark_side["frames"].values()) > 0


def test_tables_open_in_pandas_and_pyarrow_with_the_documented_columns(runs: dict[str, Any]) -> None:
    import pandas as pd
    import pyarrow.parquet as pq

    from streamdump.spark.tables import EXCHANGE_COLUMNS, Tables
    from streamdump.spec.registry import default_registry

    readme = (ROOT / "docs" / "spark.md").read_text()
    section = readme[readme.index("## The tables") :]
    tables = Tables(default_registry().protocols.values())
    out: Path = runs["all"].out
    for name in ("frames", "messages", "exchanges", "expert", "gaps"):
        frame = pd.read_parquet(out / name)
        columns = list(pq.read_table(out / name).schema.names)
        assert list(frame.columns) == columns
        expected = (
            list(tables.schemas[name].names)
            if name != "exchanges"
            else [*EXCHANGE_COLUMNS, "code", "correlation_id", "opaque", "response_code", "seq"]
        )
        assert columns == expected
        for column in columns:
            assert f"`{column}`" in section, f"docs/spark.md does not document {name}.{column}"
        assert len(frame) == runs["all"].outcome.rows[name]
    assert runs["all"].outcome.rows["frames"] > 3000


def test_exchanges_pair_each_response_with_its_request(runs: dict[str, Any]) -> None:
    import pyarrow.parquet as pq

    out: Path = runs["all"].out
    frames = pq.read_table(out / "frames").to_pylist()
    requests = {(r["capture"], r["connection"], r["frame"]) for r in frames}
    answered = [r for r in frames if r["request_in"] is not None]
    exchanges = pq.read_table(out / "exchanges").to_pylist()
    assert len(exchanges) == len(answered) > 500
    for row in exchanges:
        assert (row["capture"], row["connection"], row["request_in"]) in requests
        assert row["request_in"] <= row["frame"]
        if row["response_time"] is None:
            # Linked to a request it does not answer first: a NATS pull's later messages and
            # heartbeats (the pull's latency is its first message's).
            assert row["protocol"] == "nats" and row["command"] in ("Message", "HeadersMessage"), row
        else:
            assert row["response_time"] >= 0
    assert any(row["response_time"] is None for row in exchanges)


def test_the_conversation_findings_are_in_the_expert_table(runs: dict[str, Any]) -> None:
    capture = "captures/rabbitmq_stream/auth_failure.pcap"
    stats = runs["all"].stats[capture]
    found = [r for r in runs["all"].rows("expert", capture) if r["source"] == "conversation"]
    assert [(r["frame"], r["message"]) for r in found] == [
        (d["packet"], d["message"]) for d in stats["diagnoses"]
    ]
    assert found


def test_missing_pyspark_or_java_is_one_line_that_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    from streamdump import spark

    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert spark.missing() == "the Spark pipeline needs pyspark: pip install 'streamdump[spark]'"
    result = runner.invoke(app, ["spark", "captures", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == "streamdump: error: the Spark pipeline needs pyspark: pip install 'streamdump[spark]'"
    )
    monkeypatch.delitem(sys.modules, "pyspark")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    lacking = spark.missing()
    assert lacking is not None and "Java 17 or newer" in lacking and "apt-get install" in lacking


def test_bad_inputs_are_one_line_before_spark_starts(tmp_path: Path) -> None:
    pipeline_ready()
    missing = runner.invoke(app, ["spark", str(tmp_path / "nope.pcap"), "--out", str(tmp_path / "o")])
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"streamdump: error: {tmp_path / 'nope.pcap'}: no such file or folder"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no capture here")
    empty = runner.invoke(app, ["spark", str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert empty.exit_code == 1
    assert empty.stderr.strip() == f"streamdump: error: no capture files in {tmp_path / 'empty'}"
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    bogus = runner.invoke(
        app, ["spark", "captures/nats", "--out", str(tmp_path / "o"), "--master", "mesos://x"]
    )
    assert bogus.exit_code == 2
    assert bogus.stderr.strip().startswith("streamdump: error: --master mesos://x: Spark takes local")
    busy = runner.invoke(app, ["spark", "captures/nats", "--out", str(tmp_path / "busy")])
    assert busy.exit_code == 2
    assert "holds other files" in busy.stderr and "Traceback" not in busy.stderr


def test_connection_numbers_are_foreseen_as_a_reader_opens_connections() -> None:
    """The driver numbers connections from the scan's openings, ranges merged in file order, as
    the pipeline's Reader opens them: at a connection's first segment that can open it, and again
    at a client SYN of a new sequence (a reused port), not at a retransmitted SYN."""
    need(_has_pyarrow(), "pyarrow (pip install 'streamdump[spark]')")
    from streamdump.spark.job import _foreseen

    a = ("10.0.0.1", 40000, "10.0.0.2", 5552)
    b = ("10.0.0.3", 40001, "10.0.0.2", 5552)
    first_range = {a: (3, [(3, 1000), (5, 1000)], 10), b: (None, [], 0)}  # b: only pure ACKs here
    second_range = {a: (1, [(4, 2000)], 10), b: (2, [], 40)}  # packets counted within the range
    assert _foreseen([(0, first_range), (10, second_range)]) == {3: 1, 12: 2, 14: 3}


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def test_messages_carry_the_fields_the_registry_declares_inside_them(runs: dict[str, Any]) -> None:
    """The compression capture's messages, as its client sent them: AMQP properties as columns,
    application properties as a map of text, in the CLI's order of messages."""
    sent = json.loads((ROOT / "captures/rabbitmq_stream/compression.sent.json").read_text())
    records = [record for publish in sent["publishes"] for record in publish["records"]]
    rows = [
        r
        for r in runs["all"].rows("messages", "captures/rabbitmq_stream/compression.pcap")
        if r["command"] == "Publish"
    ]
    rows.sort(key=lambda r: (r["frame"], r["where"]))
    assert len(rows) == len(records)
    for row, record in zip(rows, records, strict=True):
        properties = record.get("properties") or {}
        assert row["message_id"] == (
            None if "message_id" not in properties else str(properties["message_id"])
        )
        assert row["content_type"] == properties.get("content_type")
        assert row["subject"] == properties.get("subject")
        assert row["creation_time"] == properties.get("creation_time")
        shown = dict(row["application_properties"] or [])
        expected = record.get("application_properties") or {}
        assert set(shown) == set(expected)
        assert all(shown[k] == (v if isinstance(v, str) else shown[k]) for k, v in expected.items())
