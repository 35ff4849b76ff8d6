"""The Spark pipeline's driver: captures in, Parquet tables and the stats out.

1. Scan (a job): each byte range of each file (streamdump.wire.splits) walks its
   records in a task and notes the packets that open connections; the driver confirms
   every range starts where the one before it ended, learns how many packets precede
   each range, and foresees each connection's number as a whole read gives it.
2. Decode (a job): tasks extract each range's TCP segments (numbered as in the file),
   Spark repartitions them by connection and sorts them by packet, and each task decodes
   its connections with the CLI's pipeline, tracker and statistics, writes its rows as
   Parquet parts of the tables, and hands back what it found.
3. Finish: the driver merges the tasks' findings into each capture's stats and the
   conversation's findings; where the scan could not foresee a connection, Spark SQL
   renumbers the rows; Spark SQL pairs requests with responses into `exchanges`.
"""

from __future__ import annotations

import heapq
import json
import pickle
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from msgspec import Struct, field
from msgspec.structs import replace

from streamdump.analysis.conversations import abruptly_left
from streamdump.analysis.endings import ended_together
from streamdump.analysis.pipeline import ReadStats, loss_summary
from streamdump.analysis.session import Options
from streamdump.analysis.state import Diagnosis
from streamdump.analysis.statistics import Partial, document, finding_order
from streamdump.analysis.timeline import Timeline
from streamdump.spark.tables import EXCHANGE_COLUMNS, Tables
from streamdump.spark.tasks import (
    COUNTED,
    FOUND,
    SEGMENTS,
    Capture,
    Decoding,
    Found,
    Openings,
    Parts,
    Work,
    extract,
    flow_key,
    notices_of,
    opener,
    output,
    range_openings,
    scan_split,
)
from streamdump.wire.packet import Segment, parse
from streamdump.wire.pcapng import Section
from streamdump.wire.splits import (
    Layout,
    Scan,
    Split,
    head_blocks,
    layout_of,
    plan,
    record_at,
    records,
    scan,
    section_at,
)

TABLES = ("frames", "messages", "exchanges", "expert", "gaps")
# Ranges no larger than this, and at least this many per core, so every core has work.
MAX_SPLIT = 64 << 20
MIN_SPLIT = 1 << 20
SPLITS_PER_CORE = 4
# Connections are decoded in this many partitions per core: a task's share of the connections
# varies (they are placed by hash), and more, smaller tasks even out what each core does.
PARTITIONS_PER_CORE = 4
# Rows per Arrow batch Spark hands a Python task: a batch of full-size loopback segments
# (64 KiB each) stays within a few tens of MiB.
ARROW_BATCH_ROWS = 512


class PipelineError(Exception):
    """The run cannot go on; str() is one line."""


class Input(Struct, frozen=True):
    index: int
    path: str  # as given, or as found under a folder given
    size: int
    layout: Layout


class Outcome(Struct):
    """What a run wrote and found, for the CLI to tell."""

    out: str
    rows: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)  # per capture: what `stats --format json` prints
    partials: dict[str, dict[str, Partial]] = field(default_factory=dict)  # per capture and protocol
    # Per capture: its series over time (a report's), with the protocol its stats show.
    timelines: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, str] = field(default_factory=dict)  # per capture: its loss summary
    errors: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    # Captures whose connections the scan could not foresee, renumbered after decoding.
    renumbered: list[str] = field(default_factory=list)


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
    options: Options,
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
    setup = options.prepare()
    decoders, dissection = setup.decoders, setup.dissection
    works, captures, foreseen, sizes, errors = _scan(spark, inputs, splits, frozenset(dissection.ports))
    outcome = Outcome(out, errors=errors, skipped_files=passed)
    parts = partitions or max(1, cores * PARTITIONS_PER_CORE)
    placed = _placement(spark, sizes, parts)
    tables = Tables(d.protocol for d in decoders.values())
    _prepare(out, tables)
    files = f"{len(captures)} capture{'s' * (len(captures) != 1)}"
    say(f"decoding the connections of {files} in {parts} partitions")
    found = _decode(spark, works, captures, foreseen, placed, options, parts, out, tables)
    say("merging what the tasks found; writing the tables")
    written = _renumbering(captures, foreseen, found)
    if any(written.values()):  # the scan did not foresee every connection: number them as a read does
        _renumber(spark, out, tables, written)
        outcome.renumbered = [name for name, numbers in written.items() if numbers]
    extra = _driver_rows(tables, captures, found, written, outcome, tuple(decoders))
    fs, base = output(out)
    for table, rows in extra.items():
        if rows.num_rows:
            pq.write_table(
                pa.Table.from_batches([rows]), f"{base}/{table}/part-driver.parquet", filesystem=fs
            )
    _fill(out, tables)
    _exchanges(spark, out, tables)
    outcome.rows = {table: _count(out, table) for table in TABLES}
    return outcome


def _scan(
    spark: Any, inputs: list[Input], splits: list[Split], ports: frozenset[int]
) -> tuple[list[Work], dict[int, Capture], dict[int, dict[int, int]], dict[tuple[int, int], int], list[str]]:
    """Scan every range in parallel; then, per file, chain the ranges, count the packets before
    each, and foresee the connections' numbers from the packets that open them."""
    sizes = {i.index: i.size for i in inputs}
    whole_files = {i.index for i in inputs if i.layout.kind == "whole"}

    def scan_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for idx in b.column("id").to_pylist():
                split = splits[idx]
                with opener(split.path) as fh:
                    result = scan_split(fh, split, sizes[split.capture], split.capture in whole_files, ports)
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
    foreseen: dict[int, dict[int, int]] = {}
    errors: list[str] = []
    # Bytes per connection, (capture, flow) -> bytes, as the scan counted them.
    sizes: dict[tuple[int, int], int] = {}
    for n, split in enumerate(splits):
        for key, (_, _, size) in (scanned[n].get("openings") or {}).items():
            flow = (split.capture, flow_key(*key))
            sizes[flow] = sizes.get(flow, 0) + size
    for item in inputs:
        mine = [(n, s) for n, s in enumerate(splits) if s.capture == item.index]
        if item.index in whole_files:
            result = scanned[mine[0][0]]
        else:
            chained = _chain(item, [(split, scanned[n]["scan"]) for n, split in mine])
            # Damaged somewhere: read whole, as the CLI reads it, to fail as it fails.
            result = scan_split(None, _whole(item), item.size, True, ports) if chained is None else None
        if result is not None:
            works.append(Work(_whole(item), 0, 0, whole=True))
            captures[item.index] = Capture(
                item.index, item.path, result["packets"], result["last_ts"], result["first_ts"]
            )
            errors += [result["error"]] if result["error"] else []
            foreseen[item.index] = _foreseen([(0, result["openings"])])
            continue
        assert chained is not None
        new_works, capture, final = chained
        works += new_works
        captures[item.index] = capture
        pairs = list(zip(new_works, mine, strict=True))
        with opener(item.path) as fh:
            for (work, (n, split)), walk in zip(pairs, final, strict=True):
                if walk.first != scanned[n]["scan"].first and work.first is not None:
                    # The driver rescanned this range: its openings too, in the range's own section.
                    scanned[n] = {
                        "scan": walk,
                        "openings": range_openings(fh, split, work.first, work.section, ports),
                    }
        # A pcapng range a task read in its file's first section, when another came before it,
        # has no openings to trust: the decode renumbers then.
        unread = any(scanned[n]["openings"] is None for _, (n, _) in pairs)
        if not unread and _head_only(item, pairs, scanned):
            foreseen[item.index] = _foreseen([(w.base, scanned[n]["openings"]) for w, (n, _) in pairs])
    return works, captures, foreseen, sizes, errors


def _head_only(item: Input, pairs: list[tuple[Work, tuple[int, Split]]], scanned: dict[int, Any]) -> bool:
    """Whether every range was scanned in the section it starts in. The scan reads a pcapng range
    past the first with the interfaces the file starts with; that is right unless a section or
    interface block past the file's head comes before the range (within a range, the reader
    follows them)."""
    if item.layout.kind != "pcapng":
        return True
    with opener(item.path) as fh:
        head = {offset for offset, _ in head_blocks(fh)}
    before_last = pairs[:-1]
    return all(offset in head for _, (n, _) in before_last for offset, _ in scanned[n]["scan"].described)


def _foreseen(per_range: list[tuple[int, Openings]]) -> dict[int, int]:
    """Connection numbers by the packet that opens each, as a reader numbers them: a connection
    opens at its first segment that can open it, and again at each client SYN of a new sequence.
    per_range: each range's openings, numbered within it, and the packets before it."""
    firsts: dict[tuple[str, int, str, int], int] = {}
    syns: dict[tuple[str, int, str, int], list[tuple[int, int]]] = {}
    for base, found in per_range:
        for key, (first, seen, _size) in found.items():
            if first is not None and key not in firsts:
                firsts[key] = base + first
            syns.setdefault(key, []).extend((base + number, seq) for number, seq in seen)
    opened: list[int] = []
    for key, first in firsts.items():
        opened.append(first)
        last = next((seq for number, seq in syns[key] if number == first), None)
        for number, seq in syns[key]:
            if number > first and seq != last:
                opened.append(number)
                last = seq
    return {packet: n for n, packet in enumerate(sorted(opened), start=1)}


def _whole(item: Input) -> Split:
    """The file as one range, read from its start by the CLI's reader."""
    return Split(item.index, item.path, 0, 0, item.size, Layout("whole"))


def _chain(item: Input, scans: list[tuple[Split, Scan]]) -> tuple[list[Work], Capture, list[Scan]] | None:
    """Each range's first record where the range before it stopped, rescanning the rare range
    whose own guess differed (the scans as they stand then); None when the file is damaged (or
    ends mid-record)."""
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
        first_ts = _first_ts(fh, walked)
    return works, Capture(item.index, item.path, base, last_ts, first_ts), [found for _, found, _ in walked]


def _first_ts(fh: BinaryIO, walked: list[tuple[Split, Scan, list[tuple[int, bytes]]]]) -> float | None:
    """The time of the file's first packet, of any kind (None if it has none)."""
    for split, found, before in walked:
        if not found.packets or found.first is None:
            continue
        section = (
            section_at([*before, *((o, b) for o, b in found.described if o < found.first)])
            if split.layout.kind == "pcapng"
            else None
        )
        for ts, _, _ in records(fh, split, found.first, section):
            return ts
    return None


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


def _placement(spark: Any, sizes: dict[tuple[int, int], int], parts: int) -> dict[int, dict[int, int]]:
    """Connections spread over the partitions by their bytes, largest first onto the least
    loaded (hashing alone leaves one task with several large connections and another idle):
    capture -> flow -> a value Spark's hash places in the chosen partition."""
    from pyspark.sql import functions as F

    if not sizes:
        return {}
    lands: dict[int, int] = {}
    probe = spark.range(parts * 64).select("id", F.expr(f"pmod(hash(id), {parts})").alias("p")).toArrow()
    for value, part in zip(probe["id"].to_pylist(), probe["p"].to_pylist(), strict=True):
        lands.setdefault(part, value)
    loads = [(0, part) for part in sorted(lands)]
    heapq.heapify(loads)
    placed: dict[int, dict[int, int]] = {}
    for (capture, flow), size in sorted(sizes.items(), key=lambda item: -item[1]):
        load, part = heapq.heappop(loads)
        placed.setdefault(capture, {})[flow] = lands[part]
        heapq.heappush(loads, (load + size, part))
    return placed


def _prepare(out: str, tables: Tables) -> None:
    """The output folder with an empty folder per table (a run into it before leaves no rows)."""
    fs, base = output(out)
    for table in TABLES:
        fs.delete_dir_contents(f"{base}/{table}", missing_dir_ok=True)
        fs.create_dir(f"{base}/{table}")


def _decode(
    spark: Any,
    works: list[Work],
    captures: dict[int, Capture],
    foreseen: dict[int, dict[int, int]],
    placed: dict[int, dict[int, int]],
    options: Options,
    parts: int,
    out: str,
    tables: Tables,
) -> dict[str, list[Found]]:
    numbers = spark.sparkContext.broadcast(foreseen)
    places = spark.sparkContext.broadcast(placed)
    schemas = tables.schemas

    def extract_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for idx in b.column("id").to_pylist():
                work = works[idx]
                yield from extract(work, opener, places.value.get(work.split.capture))

    def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        part, attempt = (task.partitionId(), task.attemptNumber()) if task is not None else (0, 0)
        yield from Decoding(options, captures, numbers.value, Parts(out, schemas, part, attempt)).run(batches)

    rows = (
        spark.range(len(works), numPartitions=len(works))
        .mapInArrow(extract_batches, spark_schema(SEGMENTS))
        .repartition(parts, "part")
        .sortWithinPartitions("capture", "flow", "number")
        .mapInArrow(decode_batches, spark_schema(FOUND))
        .toArrow()
    )
    found: dict[str, list[Found]] = {c.name: [] for c in captures.values()}
    for name, blob in zip(rows["capture"].to_pylist(), rows["blob"].to_pylist(), strict=True):
        found[name].append(pickle.loads(blob))
    return found


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _renumbering(
    captures: dict[int, Capture], foreseen: dict[int, dict[int, int]], found: dict[str, list[Found]]
) -> dict[str, dict[int, int]]:
    """Per capture, the numbers rows were written with that a read of the whole capture does not
    give (empty when the scan foresaw every connection): written -> right."""
    out: dict[str, dict[int, int]] = {}
    for capture in captures.values():
        items = found.get(capture.name, [])
        opened = sorted(p for f in items for p in f.opened)
        expected = foreseen.get(capture.index)
        if expected is not None and not any(f.unforeseen for f in items) and opened == sorted(expected):
            out[capture.name] = {}
            continue
        right = {packet: n for n, packet in enumerate(opened, start=1)}
        by_number = {n: packet for packet, n in (expected or {}).items()}
        written = {-packet: right[packet] for packet in opened}  # provisional numbers
        written |= {n: right[packet] for n, packet in by_number.items() if packet in right}
        out[capture.name] = written
    return out


def _renumber(spark: Any, out: str, tables: Tables, written: dict[str, dict[int, int]]) -> None:
    """Rewrite the tables' connection numbers where tasks wrote provisional ones."""
    from pyspark.sql import functions as F

    pairs = [(c, w, r) for c, m in written.items() for w, r in m.items()]
    mapping = spark.createDataFrame(
        pa.table(
            {
                "map_capture": pa.array([c for c, _, _ in pairs], pa.string()),
                "written": pa.array([w for _, w, _ in pairs], pa.int64()),
                "right": pa.array([r for _, _, r in pairs], pa.int64()),
            }
        )
    )
    fs, base = output(out)
    for table in ("frames", "messages", "expert"):
        if not _count(out, table):
            continue
        names = tables.schemas[table].names
        rows = spark.read.parquet(f"{out}/{table}")
        fixed = (
            rows.join(
                F.broadcast(mapping),
                (rows["capture"] == mapping["map_capture"]) & (rows["connection"] == mapping["written"]),
                "left",
            )
            .withColumn("connection", F.coalesce(F.col("right"), F.col("connection")))
            .select(*names)
        )
        fixed.write.mode("overwrite").parquet(f"{out}/_{table}.renumbered")
        fs.delete_dir(f"{base}/{table}")
        fs.move(f"{base}/_{table}.renumbered", f"{base}/{table}")


def _exchanges(spark: Any, out: str, tables: Tables) -> None:
    """Responses paired with their requests, from the frames table, by Spark SQL."""
    frames = spark.read.parquet(f"{out}/frames")
    frames.createOrReplaceTempView("frames")
    roles = ", ".join(_roles(tables))
    spark.sql(
        f"SELECT {', '.join(EXCHANGE_COLUMNS)}, {roles} FROM frames WHERE request_in IS NOT NULL"
    ).write.mode("overwrite").parquet(f"{out}/exchanges")


def _fill(out: str, tables: Tables) -> None:
    """A table no row went to still opens, with its columns: an empty part."""
    fs, base = output(out)
    for table in ("frames", "messages", "expert", "gaps"):
        listed = fs.get_file_info(pafs.FileSelector(f"{base}/{table}"))
        if not any(i.path.endswith(".parquet") for i in listed):
            empty = tables.schemas[table].empty_table()
            pq.write_table(empty, f"{base}/{table}/part-empty.parquet", filesystem=fs)


def _count(out: str, table: str) -> int:
    fs, base = output(out)
    listed = fs.get_file_info(pafs.FileSelector(f"{base}/{table}"))
    return sum(
        pq.ParquetFile(i.path, filesystem=fs).metadata.num_rows
        for i in listed
        if i.path.endswith(".parquet") and not i.base_name.startswith((".", "_"))
    )


def _driver_rows(
    tables: Tables,
    captures: dict[int, Capture],
    found: dict[str, list[Found]],
    written: dict[str, dict[int, int]],
    outcome: Outcome,
    protocols: tuple[str, ...],
) -> dict[str, pa.RecordBatch]:
    """Merge the tasks' findings per capture: the stats, the loss summary, the conversation's
    findings and the notes about packets with no segment, as rows for the expert and gaps tables."""
    from streamdump.spark.tables import batch

    expert: list[tuple[Any, ...]] = []
    gaps: list[tuple[Any, ...]] = []
    for capture in captures.values():
        items = found.get(capture.name, [])
        merged = {name: Partial(subject=tables.roles[name].subject) for name in protocols}
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
        numbers = written.get(capture.name, {})
        for partial in merged.values():
            partial.renumber(numbers)
        _ended_together(merged, items, numbers)
        outcome.stats[capture.name] = document(merged)
        outcome.partials[capture.name] = merged
        timeline = Timeline()
        for item in items:
            if item.timeline is not None:
                timeline.merge(item.timeline)
        shown = [name for name, p in merged.items() if p.connections] or list(merged)[:1]
        outcome.timelines[capture.name] = timeline.result() | {
            "protocol": shown[0] if shown else "",
            "origin": capture.first_ts,
        }
        outcome.summaries[capture.name] = loss_summary(stats)
        for name, partial in merged.items():
            for d in partial.diagnoses:
                where = (capture.name, d.number, d.conn, name, None, "conversation")
                expert.append((*where, d.severity, d.group, d.kind, d.summary, d.message, None))
        gaps += [Tables.gap_row(capture.name, notice) for notice in notices_of(total)]
    return {"expert": batch(tables.schemas["expert"], expert), "gaps": batch(tables.schemas["gaps"], gaps)}


def _ended_together(merged: dict[str, Partial], items: list[Found], numbers: dict[int, int]) -> None:
    """The findings about a client host ending several connections at once: they span the
    connections of several tasks, so the driver makes them, as Conversations.finish does."""
    lives = {}
    for item in items:
        for number, life in item.lives.items():
            final = numbers.get(number, number)
            lives[final] = replace(life, conn=final)
    told = [d for partial in merged.values() for d in partial.diagnoses]
    for conn, found in ended_together(lives, abruptly_left(told)):
        partial = merged.get(lives[conn].protocol)
        if partial is not None:
            partial.diagnoses.append(
                Diagnosis(found.severity, found.kind, found.summary, found.message, found.number, conn)
            )
            partial.diagnoses.sort(key=finding_order)


def _roles(tables: Tables) -> list[str]:
    names = {n for r in tables.roles.values() for n in (r.correlation, r.status) if n is not None}
    return sorted(names)


def write_stats(outcome: Outcome) -> None:
    """stats.json (each capture's `stats --format json`) and timeline.json (each capture's
    series over time, what `streamdump report --from-spark` draws)."""
    fs, base = output(outcome.out)
    for name, written in (("stats.json", outcome.stats), ("timeline.json", outcome.timelines)):
        with fs.open_output_stream(f"{base}/{name}") as fh:
            fh.write((json.dumps(written, ensure_ascii=False, indent=1) + "\n").encode())
