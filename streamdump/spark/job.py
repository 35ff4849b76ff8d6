"""The Spark pipeline's driver: captures in, Parquet tables and the stats out, in three jobs.

1. Scan: each byte range of each file (streamdump.core.splits) walks its records in a
   task; the driver confirms every range starts where the one before it ended and
   learns how many packets precede each range.
2. Decode: tasks extract each range's TCP segments (numbered as in the file), Spark
   repartitions them by connection and sorts them by packet, and each task decodes its
   connections with the CLI's pipeline, tracker and statistics. Rows of every table,
   and what each task found, are staged as Parquet.
3. Write: the driver merges the tasks' findings (the stats, and connection numbers as a
   whole read gives them); Spark SQL numbers the connections in the staged rows, pairs
   requests with responses and writes the tables.
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from streamdump.core.packet import Segment, parse
from streamdump.core.pcapng import Section
from streamdump.core.pipeline import ReadStats, loss_summary
from streamdump.core.splits import (
    Layout,
    Scan,
    Split,
    layout_of,
    plan,
    record_at,
    records,
    scan,
    section_at,
)
from streamdump.spark.tables import EXCHANGE_COLUMNS, Tables
from streamdump.spark.tasks import (
    COUNTED,
    SEGMENTS,
    Capture,
    Decoding,
    Found,
    Settings,
    Work,
    extract,
    notices_of,
    opener,
    scan_split,
    union_schema,
)
from streamdump.spec.registry import default_registry
from streamdump.views.stats import Partial, document

TABLES = ("frames", "messages", "exchanges", "expert", "gaps")
# Ranges no larger than this, and at least this many per core, so every core has work.
MAX_SPLIT = 64 << 20
MIN_SPLIT = 1 << 20
SPLITS_PER_CORE = 4
# Rows per Arrow batch Spark hands a Python task: a batch of full-size loopback segments
# (64 KiB each) stays within a few tens of MiB.
ARROW_BATCH_ROWS = 512


class PipelineError(Exception):
    """The run cannot go on; str() is one line."""


@dataclass(frozen=True, slots=True)
class Input:
    index: int
    path: str  # as given, or as found under a folder given
    size: int
    layout: Layout


@dataclass(slots=True)
class Outcome:
    """What a run wrote and found, for the CLI to tell."""

    out: str
    rows: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)  # per capture: what `stats --format json` prints
    summaries: dict[str, str] = field(default_factory=dict)  # per capture: its loss summary
    errors: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- files


def find_inputs(paths: list[str]) -> tuple[list[Input], list[str]]:
    """Capture files among the paths (folders searched recursively), and the folder files that are none."""
    found: list[Input] = []
    passed: list[str] = []
    for given in paths:
        try:
            fs, inner = pafs.FileSystem.from_uri(given) if "://" in given else (pafs.LocalFileSystem(), given)
            info = fs.get_file_info(inner)
        except (OSError, pa.ArrowInvalid) as exc:
            raise PipelineError(f"{given}: cannot open: {exc}") from None
        if info.type == pafs.FileType.NotFound:
            raise PipelineError(f"{given}: no such file or folder")
        if info.type == pafs.FileType.Directory:
            listed = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
            files = sorted((i for i in listed if i.type == pafs.FileType.File), key=lambda i: i.path)
            prefix = given[: len(given) - len(inner)] if "://" in given else ""
            for item in files:
                path = prefix + item.path
                layout = _layout(path)
                if layout is None:
                    passed.append(path)
                else:
                    found.append(Input(len(found), path, item.size, layout))
            continue
        # A file named on its own is read even when it is no capture: the reader says what it is.
        found.append(Input(len(found), given, info.size, _layout(given) or Layout("whole")))
    if not found:
        raise PipelineError(f"no capture files in {', '.join(paths)}")
    return found, passed


def _layout(path: str) -> Layout | None:
    try:
        with opener(path) as fh:
            return layout_of(fh.read(24))
    except OSError:
        return None


# ---------------------------------------------------------------------- the run


def run(
    spark: Any,
    files: tuple[list[Input], list[str]],
    out: str,
    settings: Settings,
    partitions: int | None = None,
    split_bytes: int | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> Outcome:
    inputs, passed = files  # find_inputs' answer: captures, and folder files that are none
    cores = spark.sparkContext.defaultParallelism
    total = sum(i.size for i in inputs)
    if split_bytes is None:
        split_bytes = max(MIN_SPLIT, min(MAX_SPLIT, total // max(1, cores * SPLITS_PER_CORE) + 1))
    splits = [s for i in inputs for s in plan(i.index, i.path, i.size, i.layout, split_bytes)]
    say(f"scanning {len(splits)} byte ranges of {len(inputs)} capture file{'s' * (len(inputs) != 1)}")
    works, captures, errors = _scan(spark, inputs, splits)
    outcome = Outcome(out, errors=errors, skipped_files=passed)
    staging = f"{out.rstrip('/')}/_staging"
    parts = partitions or max(1, cores * 2)
    tables = Tables(default_registry().get(name) for name in settings.protocols)
    union = union_schema(tables)
    files = f"{len(captures)} capture{'s' * (len(captures) != 1)}"
    say(f"decoding the connections of {files} in {parts} partitions")
    _decode(spark, works, captures, settings, union, parts, staging)
    say("merging what the tasks found; writing the tables")
    found = _found(spark, staging, captures)
    numbers = {name: _numbers(items) for name, items in found.items()}
    extra = _driver_rows(spark, tables, captures, found, numbers, outcome, settings)
    _write(spark, tables, staging, out, numbers, extra, outcome)
    _remove(staging)
    return outcome


def _scan(
    spark: Any, inputs: list[Input], splits: list[Split]
) -> tuple[list[Work], dict[int, Capture], list[str]]:
    sizes = {i.index: i.size for i in inputs}
    whole_files = {i.index for i in inputs if i.layout.kind == "whole"}

    def scan_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for idx in b.column("id").to_pylist():
                split = splits[idx]
                with opener(split.path) as fh:
                    result = scan_split(fh, split, sizes[split.capture], split.capture in whole_files)
                yield pa.RecordBatch.from_pydict({"id": [idx], "blob": [pickle.dumps(result)]})

    rows = (
        spark.range(len(splits), numPartitions=len(splits))
        .mapInArrow(scan_batches, "id long, blob binary")
        .toArrow()
    )
    scanned = {
        i: pickle.loads(b) for i, b in zip(rows["id"].to_pylist(), rows["blob"].to_pylist(), strict=True)
    }
    works: list[Work] = []
    captures: dict[int, Capture] = {}
    errors: list[str] = []
    for item in inputs:
        mine = [(n, s) for n, s in enumerate(splits) if s.capture == item.index]
        if item.index in whole_files:
            works, captures = _whole(item, mine[0][1], scanned[mine[0][0]], works, captures, errors)
            continue
        chained = _chain(item, [(split, scanned[n]["scan"]) for n, split in mine])
        if chained is None:  # damaged somewhere: read whole, as the CLI reads it, to fail as it fails
            whole = Split(item.index, item.path, 0, 0, item.size, Layout("whole"))
            result = scan_split(None, whole, item.size, True)
            works, captures = _whole(item, whole, result, works, captures, errors)
            continue
        new_works, capture = chained
        works += new_works
        captures[item.index] = capture
    return works, captures, errors


def _whole(
    item: Input,
    split: Split,
    result: dict[str, Any],
    works: list[Work],
    captures: dict[int, Capture],
    errors: list[str],
) -> tuple[list[Work], dict[int, Capture]]:
    whole = Split(item.index, item.path, 0, 0, item.size, Layout("whole"))
    works.append(Work(whole, 0, 0, whole=True))
    captures[item.index] = Capture(item.index, item.path, result["packets"], result["last_ts"])
    if result["error"]:
        errors.append(result["error"])
    return works, captures


def _chain(item: Input, scans: list[tuple[Split, Scan]]) -> tuple[list[Work], Capture] | None:
    """Each range's first record where the range before it stopped, rescanning the rare range
    whose own guess differed; None when the file is damaged (or ends mid-record)."""
    works: list[Work] = []
    described: list[tuple[int, bytes]] = []  # pcapng section and interface blocks so far
    expected = scans[0][1].first
    base = 0
    walked: list[tuple[Split, Scan, list[tuple[int, bytes]]]] = []
    with opener(item.path) as fh:
        for split, found in scans:
            if found.first != expected and expected is not None:
                found = scan(fh, split, item.size, expected)
            if found.damaged:
                return None
            section = section_at(described) if split.layout.kind == "pcapng" else None
            works.append(Work(split, found.first, base, section))
            walked.append((split, found, list(described)))
            described += found.described
            base += found.packets
            expected = found.stop
        if expected != item.size:
            return None
        last_ts = _last_ts(fh, walked)
    return works, Capture(item.index, item.path, base, last_ts)


def _last_ts(fh: BinaryIO, walked: list[tuple[Split, Scan, list[tuple[int, bytes]]]]) -> float:
    """The time of the file's last TCP segment (0.0 if it has none): what a read's end gives
    the frames of connections still open."""
    for split, found, before in reversed(walked):
        if not found.packets or found.first is None:
            continue

        def section(
            upto: int, split: Split = split, found: Scan = found, before: list = before
        ) -> Section | None:
            if split.layout.kind != "pcapng":
                return None
            return section_at([*before, *((o, b) for o, b in found.described if o < upto)])

        for offset in reversed(found.tail):
            seg = record_at(fh, split, offset, section(offset))
            if seg is not None:
                return seg.ts
        if found.packets > len(found.tail):  # more packets than the tail remembers: walk them all
            last = None
            for ts, linktype, data in records(fh, split, found.first, section(found.first)):
                if isinstance(parse(linktype, data, 0, ts), Segment):
                    last = ts
            if last is not None:
                return last
    return 0.0


def _decode(
    spark: Any,
    works: list[Work],
    captures: dict[int, Capture],
    settings: Settings,
    union: pa.Schema,
    parts: int,
    staging: str,
) -> None:
    def extract_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for idx in b.column("id").to_pylist():
                yield from extract(works[idx], opener)

    def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from Decoding(settings, captures).run(batches)

    (
        spark.range(len(works), numPartitions=len(works))
        .mapInArrow(extract_batches, spark_schema(SEGMENTS))
        .repartition(parts, "capture", "flow")
        .sortWithinPartitions("capture", "flow", "number")
        .mapInArrow(decode_batches, spark_schema(union))
        .write.mode("overwrite")
        .partitionBy("table")
        .parquet(staging)
    )


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _found(spark: Any, staging: str, captures: dict[int, Capture]) -> dict[str, list[Found]]:
    found: dict[str, list[Found]] = {c.name: [] for c in captures.values()}
    try:
        rows = spark.read.parquet(f"{staging}/table=found").select("capture", "blob").toArrow()
    except Exception as exc:  # pyspark's AnalysisException: no task found anything
        if "PATH_NOT_FOUND" not in str(exc) and "does not exist" not in str(exc):
            raise
        return found
    for name, blob in zip(rows["capture"].to_pylist(), rows["blob"].to_pylist(), strict=True):
        found.setdefault(name, []).append(pickle.loads(blob))
    return found


def _numbers(items: list[Found]) -> dict[int, int]:
    """Connection numbers as a whole read gives them: in the order of the packets that opened them."""
    return {raw: n for n, raw in enumerate(sorted(r for f in items for r in f.opened), start=1)}


def _driver_rows(
    spark: Any,
    tables: Tables,
    captures: dict[int, Capture],
    found: dict[str, list[Found]],
    numbers: dict[str, dict[int, int]],
    outcome: Outcome,
    settings: Settings,
) -> dict[str, list[pa.RecordBatch]]:
    """Merge the tasks' findings per capture: the stats, the loss summary, the conversation's
    findings and the notes about packets with no segment, as rows for the expert and gaps tables."""
    from streamdump.spark.tables import batch, empty

    expert = empty(tables.schemas["expert"])
    gaps = empty(tables.schemas["gaps"])
    for capture in captures.values():
        items = found.get(capture.name, [])
        merged = {name: Partial(subject=tables.roles[name].subject) for name in settings.protocols}
        total = Found()
        stats = ReadStats()
        for item in items:
            for name, partial in item.partials.items():
                merged[name].merge(partial)
            for counted in COUNTED:
                setattr(stats, counted, getattr(stats, counted) + item.counts.get(counted, 0))
            total.skipped.update(item.skipped)
            for skip, first in item.first_skipped.items():
                total.first_skipped[skip] = min(first, total.first_skipped.get(skip, first))
        for partial in merged.values():
            partial.renumber(numbers[capture.name])
        outcome.stats[capture.name] = document(merged)
        outcome.summaries[capture.name] = loss_summary(stats)
        for name, partial in merged.items():
            for d in partial.diagnoses:
                values = (capture.name, d.number, d.conn, name, None, "conversation")
                values += (d.severity, d.group, d.kind, d.summary, d.message, None)
                for column, value in zip(tables.schemas["expert"].names, values, strict=True):
                    expert[column].append(value)
        for notice in notices_of(total):
            Tables.gap_row(gaps, capture.name, notice)
    return {
        "expert": [batch(tables.schemas["expert"], expert)],
        "gaps": [batch(tables.schemas["gaps"], gaps)],
    }


def _write(
    spark: Any,
    tables: Tables,
    staging: str,
    out: str,
    numbers: dict[str, dict[int, int]],
    extra: dict[str, list[pa.RecordBatch]],
    outcome: Outcome,
) -> None:
    from pyspark.sql import functions as F

    mapping = spark.createDataFrame(
        pa.table(
            {
                "map_capture": pa.array([c for c, m in numbers.items() for _ in m], pa.string()),
                "raw": pa.array([r for m in numbers.values() for r in m], pa.int64()),
                "number": pa.array([n for m in numbers.values() for n in m.values()], pa.int64()),
            }
        )
    )
    for table in ("frames", "messages", "expert", "gaps"):
        schema = tables.schemas[table]
        staged = _staged(spark, staging, table, schema)
        if "connection" in schema.names:
            staged = (
                staged.join(
                    F.broadcast(mapping),
                    (staged["capture"] == mapping["map_capture"]) & (staged["connection"] == mapping["raw"]),
                    "left",
                )
                .withColumn("connection", F.col("number"))
                .select(*schema.names)
            )
        for more in extra.get(table, []):
            if more.num_rows:
                staged = staged.unionByName(spark.createDataFrame(pa.Table.from_batches([more])))
        staged.write.mode("overwrite").parquet(f"{out}/{table}")
        outcome.rows[table] = spark.read.parquet(f"{out}/{table}").count()
    frames = spark.read.parquet(f"{out}/frames")
    exchanges = frames.where(F.col("request_in").isNotNull()).select(*EXCHANGE_COLUMNS, *_roles(tables))
    exchanges.write.mode("overwrite").parquet(f"{out}/exchanges")
    outcome.rows["exchanges"] = spark.read.parquet(f"{out}/exchanges").count()


def _roles(tables: Tables) -> list[str]:
    names = {n for r in tables.roles.values() for n in (r.correlation, r.status) if n is not None}
    return sorted(names)


def _staged(spark: Any, staging: str, table: str, schema: pa.Schema) -> Any:
    try:
        return spark.read.parquet(f"{staging}/table={table}").select(*schema.names)
    except Exception as exc:  # pyspark's AnalysisException: no task wrote such rows
        if "PATH_NOT_FOUND" not in str(exc) and "does not exist" not in str(exc):
            raise
        return spark.createDataFrame(schema.empty_table())


def _remove(path: str) -> None:
    if "://" not in path:
        shutil.rmtree(path, ignore_errors=True)
        return
    fs, inner = pafs.FileSystem.from_uri(path)
    fs.delete_dir(inner)


def write_stats(outcome: Outcome) -> None:
    text = json.dumps(outcome.stats, ensure_ascii=False, indent=1) + "\n"
    if "://" not in outcome.out:
        Path(outcome.out, "stats.json").write_text(text, encoding="utf-8")
        return
    fs, inner = pafs.FileSystem.from_uri(outcome.out)
    with fs.open_output_stream(f"{inner}/stats.json") as fh:
        fh.write(text.encode())
