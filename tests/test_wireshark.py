"""The generated Wireshark plugin, run in real tshark 4.0 and 4.4 over every committed capture.

tshark's JSON (-T json) and streamdump's JSON Lines must agree frame by frame: the same
frames in the same packets, the same command, kind, size, key and version, the same field
values in the same order, the same conversation links and the same expert notes. The
Python side is the reference; a difference fails with a line diff of the two frames.

Differences that are allowed, each narrow and named here:
- AMQP 1.0 records: the plugin shows the record's bytes (`message`) and each value as text
  under the registry's names; compound values (lists, maps, described) are named, not
  compared, and floats are compared as numbers.
- Sub-batches compressed with codecs Wireshark's Lua API cannot inflate (snappy, lz4,
  zstd on 4.0): the plugin shows the entry and an "undecoded" note instead of the records.
  In 4.4 it inflates zstd, so there the allowance is snappy and lz4 only.
- Expert notes longer than Wireshark keeps of a text (239 bytes) are compared as cut there.
- Captures that lost bytes (pathological/*.dropped, midstream, snaplen...): Wireshark's
  TCP reassembly and streamdump's recovery differ by design, so only the absence of Lua
  errors is checked there.
- tshark 4.4 reads the two bulk captures with retransmissions inside a PDU without
  out-of-order reassembly, which stalls there in 4.4 (see RETRANSMITTED).

tshark 4.0 is the machine's; 4.4 runs in the Debian 13 chroot `.ci/tshark44` makes.
"""

from __future__ import annotations

import difflib
import functools
import gzip
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import zstandard
from streamdump.dissectors.rabbitmq_stream import osiris

from streamdump.analysis.fieldnames import entry_names, message_names
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import Protocol, default_registry
from streamdump.wire.findings import expert_entries
from streamdump.wire.limits import DEFAULT_LIMITS
from streamdump.wireshark import luagen
from tests.conftest import CAPTURE_ROOT, CAPTURES, ROOT, need
from tests.pcap_writer import tcp_pcap
from tests.spec_strategies import encode_chunk

PLUGIN = ROOT / "lua" / luagen.PLUGIN_NAME  # every protocol, on one runtime
ZLIB_LUA = ROOT / "streamdump" / "codecs" / "zlib.lua"
TOP = ("size", "key", "version")
# Every protocol's plugin, checked over the captures of its folder.
PROTOCOLS = sorted(default_registry().protocols)
MANIFEST = json.loads((CAPTURES / "pathological" / "manifest.json").read_text())
LOSSY = {
    entry["file"]
    for entry in MANIFEST
    if entry["missing"] or entry["first_seq"] or entry["pathology"] in ("snaplen", "midstream")
}
UNINFLATABLE = {2, 3, 4}  # compression codes tshark 4.0's Lua API has no codec for
# 4.4's Lua inflates zstd (TvbRange:uncompress_zstd), and the plugin does there; snappy's
# framings and lz4 stay undecoded in both.
UNINFLATABLE_IN = {"4.0": UNINFLATABLE, "4.4": UNINFLATABLE - {4}}
LUA_ERRORS = ("lua error", "internal error in the streamdump lua plugin", "_ws.lua.error")


def all_captures(folder: Path = CAPTURES) -> list[Path]:
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".pcap", ".pcapng", ".gz", ".zst"))
    return [p for p in files if "chunks" not in p.parts and "node_modules" not in p.parts]


def every_capture() -> list[tuple[str, Path]]:
    """(protocol, capture) for every protocol's captures/<protocol>/ folder."""
    return [(name, path) for name in PROTOCOLS for path in all_captures(CAPTURE_ROOT / name)]


def plugin_of(name: str) -> Path:
    """The plugin a protocol is in: the one plugin, whichever the protocol."""
    return PLUGIN


# Where Wireshark looks for a user's Lua plugins, under their home folder (Linux).
PERSONAL_PLUGINS = Path(".local") / "lib" / "wireshark" / "plugins"


def _install(plugins: list[Path], home: Path) -> None:
    """Install the plugins as `streamdump lua install` does: into the personal plugins folder."""
    folder = home / PERSONAL_PLUGINS
    folder.mkdir(parents=True, exist_ok=True)
    for plugin in dict.fromkeys(plugins):
        shutil.copyfile(plugin, folder / plugin.name)
        (folder / plugin.name).chmod(0o644)
    for part in [folder, *folder.parents]:
        if part == home:
            break
        part.chmod(0o755)


def _tshark() -> str:
    path = shutil.which("tshark")
    need(path is not None, "tshark is not installed (apt-get install tshark)")
    assert path is not None
    return path


# The cross-check runs in the machine's tshark (Debian 12: 4.0, Lua 5.2) and in Debian 13's
# tshark 4.4 (Lua 5.4) inside the chroot .ci/tshark44 makes, as its normal user: Wireshark 4.4
# turns Lua off for root without a word.
FLAVOURS = ("4.0", "4.4")
TSHARK44_ROOT = Path(os.environ.get("STREAMDUMP_TSHARK44_ROOT", "/var/tmp/sd-trixie"))
TSHARK44_USER = "streamdump"
# The MTU-1500 bulk captures with retransmissions inside a many-segment PDU. With out-of-order
# reassembly on, tshark 4.4 stops reassembling that direction there (a framing-only Lua
# dissector loses the same PDUs: it is Wireshark's TCP, not the plugin), so 4.4 reads them with
# it off; nothing in them is out of order. The other retransmission captures need it on.
RETRANSMITTED = {"bulk.duplicated.pcap", "bulk.overlap_conflict.pcap"}


def _tshark44() -> list[str]:
    """The command that runs the chroot's tshark as its normal user, in an empty environment."""
    root = TSHARK44_ROOT
    passwd = root / "etc" / "passwd"
    users = [line.split(":") for line in passwd.read_text().splitlines()] if passwd.exists() else []
    ids = next((entry[2:4] for entry in users if entry[0] == TSHARK44_USER), None)
    need(os.geteuid() == 0, "tshark 4.4 runs in a chroot: run the tests as root (after .ci/tshark44)")
    ready = ids is not None and (root / "usr/bin/tshark").exists() and (root / "proc/self").exists()
    need(ready, f"no tshark 4.4 chroot at {root}: run .ci/tshark44 as root")
    assert ids is not None
    uid, gid = ids
    return ["chroot", f"--userspec={uid}:{gid}", f"--groups={gid}", str(root), "/usr/bin/env", "-i"]


def tshark44(files: list[Path], args: Callable[[list[str]], list[str]]) -> subprocess.CompletedProcess[str]:
    """tshark 4.4 over copies of the files put in the chroot's /tmp, the Lua plugins among them
    installed in its user's personal plugins folder; args are its arguments given the other
    copies' paths there."""
    command = _tshark44()
    stage = Path(tempfile.mkdtemp(prefix="streamdump-", dir=TSHARK44_ROOT / "tmp"))
    try:
        stage.chmod(0o755)
        (stage / "home").mkdir(mode=0o777)  # empty: no personal plugins or preferences
        (stage / "home").chmod(0o777)
        _install([path for path in files if path.suffix == ".lua"], stage / "home")
        inside = []
        for path in (path for path in files if path.suffix != ".lua"):
            shutil.copyfile(path, stage / path.name)
            inside.append(f"/tmp/{stage.name}/{path.name}")
        env = ["PATH=/usr/bin:/bin", f"HOME=/tmp/{stage.name}/home"]
        return subprocess.run(
            [*command, *env, "tshark", *args(inside)], capture_output=True, text=True, timeout=600
        )
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _plain(path: Path, tmp: Path) -> Path:
    """The capture uncompressed, when it is compressed (tshark 4.0 reads no zstd)."""
    if path.suffix == ".gz":
        out = tmp / path.stem
        out.write_bytes(gzip.decompress(path.read_bytes()))
        return out
    if path.suffix == ".zst":
        out = tmp / path.stem
        out.write_bytes(zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes()))
        return out
    return path


def run_tshark(
    path: Path,
    tmp: Path,
    *,
    two_pass: bool = False,
    name: str = "rabbitmq_stream",
    flavour: str = "4.0",
    display_filter: str | None = None,
) -> tuple[list[Any], str]:
    """tshark's JSON for the capture (objects as lists of pairs: keys repeat) and all it printed."""
    # A carried protocol comes with its carrier, and the other way.
    files = [plugin_of(plugin) for plugin in related(name)] + [_plain(path, tmp)]

    def args(paths: list[str]) -> list[str]:
        out = [arg for plugin in paths[:-1] for arg in ("-X", f"lua_script:{plugin}")]
        out += ["-r", paths[-1], "-T", "json", "-J", f"frame {name}"]
        out += ["-Y", display_filter] if display_filter is not None else []
        reorder = flavour != "4.4" or path.name not in RETRANSMITTED
        out += ["-o", f"tcp.reassemble_out_of_order:{'TRUE' if reorder else 'FALSE'}"]
        return out + (["-2"] if two_pass else [])

    result = tshark_run(flavour, files, args, tmp)
    text = result.stdout + result.stderr
    assert result.returncode == 0, f"tshark failed ({result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout, object_pairs_hook=list), text


def tshark_run(
    flavour: str, files: list[Path], args: Callable[[list[str]], list[str]], tmp: Path
) -> subprocess.CompletedProcess[str]:
    """The flavour's tshark over the files: the Lua plugins among them installed as a user installs
    them (in the personal plugins folder of an empty home), args its arguments given the paths of
    the others there."""
    if flavour == "4.4":
        return tshark44(files, args)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    _install([path for path in files if path.suffix == ".lua"], home)
    env = dict(os.environ, HOME=str(home))  # no personal plugins or preferences of the machine
    command = [_tshark(), *args([str(f) for f in files if f.suffix != ".lua"])]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def related(name: str) -> list[str]:
    """The protocol, its carrier and the protocols it carries: the plugins one read loads."""
    protocols = default_registry().protocols
    carrier = protocols[name].wiring.carried_by
    out = [name] + ([carrier[0]] if carrier else [])
    return out + [
        p for p, spec in protocols.items() if spec.wiring.carried_by and spec.wiring.carried_by[0] == name
    ]


def run_streamdump(path: Path, *, two_pass: bool = False, name: str | None = None) -> list[dict[str, Any]]:
    stat = path.stat()
    text = _streamdump_jsonl(path, (stat.st_mtime_ns, stat.st_size), two_pass, name)
    return [json.loads(line) for line in text.splitlines()]


@functools.lru_cache(maxsize=4)
def _streamdump_jsonl(path: Path, stamp: tuple[int, int], two_pass: bool, name: str | None) -> str:
    """streamdump's JSON Lines for the capture as it is (stamp: its mtime and size): the tshark
    flavours of one capture run one after the other and share one read."""
    args = [sys.executable, "-m", "streamdump", "read", str(path), "-T", "jsonl"]
    args += ["--protocol", name] if name else []
    result = subprocess.run(args + (["--two-pass"] if two_pass else []), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


# ---------------------------------------------------------------- tshark's side


def tshark_pdus(packets: list[Any], name: str = "rabbitmq_stream") -> dict[int, list[list[Any]]]:
    """Per packet number, each tree of the protocol (a list of pairs) in order."""
    out: dict[int, list[list[Any]]] = defaultdict(list)
    for packet in packets:
        layers = dict(packet)["_source"]
        layers = dict(layers)["layers"]
        number = None
        for key, value in layers:
            if key == "frame":
                number = int(dict(value)["frame.number"])
            elif key == name:
                assert number is not None
                out[number].append(value)
    return out


class Flat:
    """One frame as flat, ordered lists: fields, links and expert notes."""

    def __init__(self) -> None:
        self.top: dict[str, Any] = {}
        self.fields: list[tuple[str, Any]] = []
        self.links: list[tuple[str, Any]] = []
        self.expert: list[tuple[str, str, str]] = []

    def lines(self) -> list[str]:
        out = [f"{k} = {v}" for k, v in sorted(self.top.items())]
        out += [f"{k} = {v}" for k, v in self.fields]
        out += [f"links.{k} = {v}" for k, v in self.links]
        out += [f"expert {g}/{s}: {m}" for g, s, m in sorted(self.expert)]
        return out


# Each expert entry's abbreviation tail -> (group, severity), and Wireshark's codes of them.
EXPERTS = {name: (finding.group, severity) for name, _, finding, severity in expert_entries()}
WS_GROUPS = {
    0x01000000: "checksum",
    0x02000000: "sequence",
    0x03000000: "response_code",
    0x05000000: "undecoded",
}
WS_GROUPS |= {0x07000000: "malformed", 0x09000000: "protocol"}
WS_SEVERITIES = {0x00200000: "chat", 0x00400000: "note", 0x00600000: "warn", 0x00800000: "error"}


def flatten_tshark(tree: list[Any], name: str = "rabbitmq_stream") -> Flat:
    flat = Flat()
    prefix = f"{name}."

    def walk(pairs: list[Any], into: list[tuple[str, Any]]) -> None:
        for key, value in pairs:
            if key == "_ws.expert":
                notes = dict(value)
                abbr = next(k for k, _ in value if k.startswith(prefix + "expert."))
                # One entry per kind of finding and severity: what it says of both must be
                # what Wireshark recorded of the note.
                group, severity = EXPERTS[abbr[len(prefix + "expert.") :]]
                group_code, severity_code = int(notes["_ws.expert.group"]), int(notes["_ws.expert.severity"])
                said = WS_GROUPS[group_code], WS_SEVERITIES[severity_code]
                assert said == (group, severity), f"{abbr} is {group} {severity}; Wireshark says {said}"
                flat.expert.append((group, severity, notes["_ws.expert.message"]))
            elif "lua" in key and "error" in key.lower():
                raise AssertionError(f"Lua error in tshark: {value}")
            elif key == "_ws.lua.text":
                if isinstance(value, list):
                    walk(value, into)
            elif key in (prefix + "connection", prefix + "volume", prefix + "volume_tree"):
                # the connection's name and what the frame moves, which stats give, not frames
                continue
            elif key == prefix + "links":
                walk(value, flat.links)
            elif key.startswith(prefix):
                field = key[len(prefix) :]
                if field.endswith("_tree"):
                    walk(value, into)
                elif field in ("command", "kind") or (
                    field in TOP and into is flat.fields and field not in flat.top
                ):
                    flat.top[field] = value
                elif isinstance(value, list):
                    into.append((field, ""))
                    walk(value, into)
                else:
                    into.append((field, value))

    walk(tree, flat.fields)
    flat.links.sort(key=lambda item: item[0])
    return flat


# ---------------------------------------------------------------- streamdump's side


def flatten_streamdump(
    frame: dict[str, Any],
    maps: frozenset[str],
    opaque: frozenset[str] = frozenset(),
    ftypes: dict[str, str] | None = None,
    key_field: str | None = None,
    key_text: Callable[[Any], str] | None = None,
    amqp: AmqpNames | None = None,
) -> Flat:
    """opaque: fields whose values only the Python side decodes (JSON of no declared shape).
    amqp: how AMQP messages' JSON keys become the registry's names, and which of those hold
    AMQP values of any type (the plugin shows their text; compounds are named, not compared).
    ftypes: the plugin's field types, to leave out values a typed field cannot hold (a number
    field given text: the plugin shows them as text items). key_field: the header field with
    the command key, whose text names an unknown command when it is not a key."""
    flat = Flat()
    flat.top = {name: frame[name] for name in (*TOP, "command", "kind") if frame.get(name) is not None}
    if frame.get("command") is None:
        key = frame.get("key")
        wire = frame["fields"].get(key_field) if key_field else None
        flat.top["command"] = (
            f"Unknown({key_text(key) if key_text else f'0x{key:04x}'})"
            if isinstance(key, int)
            else f"Unknown({key})"  # a text key as the protocol reads it (NATS folds case)
            if isinstance(key, str)
            else f"Unknown({wire})"
            if isinstance(wire, str)
            else "Unknown(?)"
        )
    numeric = {n for n, t in (ftypes or {}).items() if t.startswith(("int", "uint")) or t == "bool"}

    def walk(name: str, value: Any, into: list[tuple[str, Any]]) -> None:
        if value is None:
            return  # absent in Wireshark, which shows a null as text
        if name in numeric and not isinstance(value, int | bool | list):
            return  # text a number field cannot hold: a text item in Wireshark
        if name in opaque:
            into.append((name, ANY))
        elif isinstance(value, list):
            for item in value:
                walk(name, item, into)
        elif isinstance(value, dict) and name == "message":
            into.append((name, ANY))  # the record's bytes; its sections' values follow
            renamed = (amqp.renames if amqp else {}).get(name, {})
            for section, section_value in value.items():
                walk_amqp(renamed.get(section, section), section_value, into)
        elif isinstance(value, dict) and name in maps:
            into.append((name, ""))
            for k, v in value.items():
                into.append((f"{name}.key", k))
                walk(f"{name}.value", v, into)
        elif isinstance(value, dict):
            into.append((name, ""))
            for k, v in value.items():
                walk(k, v, into)
        else:
            into.append((name, value))

    def walk_amqp(name: str, value: Any, into: list[tuple[str, Any]]) -> None:
        texts = amqp.texts if amqp else frozenset()
        if value is None:
            return
        if name in maps and isinstance(value, dict):
            into.append((name, ""))
            for k, v in value.items():
                into.append((f"{name}.key", k))
                if v is not None:
                    into.append((f"{name}.value", amqp_text(v)))
        elif isinstance(value, dict):
            into.append((name, ""))
            renamed = (amqp.renames if amqp else {}).get(name, {})
            for k, v in value.items():
                walk_amqp(renamed.get(k, k), v, into)
        elif isinstance(value, list):
            for item in value:
                walk_amqp(name, item, into)
        elif name in texts:
            into.append((name, amqp_text(value)))
        else:
            walk(name, value, into)

    for name, value in frame["fields"].items():
        walk(name, value, flat.fields)
    for name, value in (frame.get("links") or {}).items():
        walk(name, value, flat.links)
    flat.links.sort(key=lambda item: item[0])
    flat.expert = [(e["group"], e["severity"], wireshark_text(e["message"])) for e in frame["expert"]]
    return flat


class AmqpNames(NamedTuple):
    """The registry's names inside AMQP messages, for reading the JSON the way the plugin shows it."""

    renames: dict[str, dict[str, str]]  # holder -> {JSON key: registry name}
    texts: frozenset[str]  # names holding AMQP values of any type: the plugin shows their text

    @classmethod
    def of(cls, protocol: Protocol) -> AmqpNames:
        texts: set[str] = set()
        for spec in protocol.all_fields():
            leaf = spec.type == "amqp" and not spec.fields
            if leaf or (spec.type == "array" and spec.of is not None and spec.of.type == "amqp"):
                texts.add(spec.name)
            elif spec.type == "map" and spec.key is not None and spec.value is not None:
                texts |= {f"{spec.name}.{p.name}" for p in (spec.key, spec.value) if p.type == "amqp"}
        return cls(entry_names(protocol), frozenset(texts))


def amqp_text(value: Any) -> Any:
    """An AMQP value of any type as the plugin's text item holds it; a compound as ANY."""
    if isinstance(value, dict | list):
        return ANY  # the plugin names a compound's kind and size (covered by its own test)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return value  # compared as a number: Lua and Python write some doubles differently
    return str(value)


# Wireshark keeps at most this many bytes of an item's or expert note's text (ITEM_LABEL_LENGTH - 1).
LABEL_BYTES = 239


def wireshark_text(text: str) -> str:
    """A note as Wireshark can show it: cut at LABEL_BYTES bytes, never inside a character."""
    return text.encode("utf-8")[:LABEL_BYTES].decode("utf-8", "ignore")


class _Any:
    def __repr__(self) -> str:
        return "<any>"


ANY = _Any()


def without_uninflatable(flat: Flat, codes: set[int] = UNINFLATABLE) -> None:
    """Drop what the plugin cannot show: records of sub-batches compressed with codes (see above)."""
    items, out = flat.fields, []
    entries = -1  # index of the chunk entry being read
    hidden: set[int] = set()  # chunk entries whose records the plugin cannot show
    hide_publish = False  # the Publish message being read has such an entry
    i = 0
    while i < len(items):
        name = items[i][0]
        j = i + 1
        members = {"entry": ENTRY_NAMES, "entries": ENTRY_NAMES, "records": RECORD_NAMES}.get(name, set())
        while j < len(items) and items[j][0] in members:
            j += 1
        block = items[i:j]
        if name in ("entry", "entries"):
            entries += name == "entries"
            uninflatable = dict(block[1:]).get("compression") in codes
            if uninflatable:
                block = [item for item in block if item[0] != "framing"]
                hidden |= {entries} if name == "entries" else set()
            if name == "entry":
                hide_publish = uninflatable
        elif name == "records":
            index = dict(block[1:]).get("entry_index")
            if (index in hidden) if index is not None else hide_publish:
                block = []
        out += block
        i = j
    flat.fields = out


ENTRY_NAMES = {
    "entry_kind", "entry_size", "compression", "record_count", "uncompressed_length", "length", "framing",
}  # fmt: skip
RECORD_NAMES = {
    "offset", "entry_index", "record_size", "sections", "message", "bytes",
    "tracking", "tracking_type", "id", "chunk_id", "value",
}  # fmt: skip
# A record's AMQP message: every name the registry declares inside it.
RECORD_NAMES |= message_names(default_registry().protocols["rabbitmq_stream"])


# ---------------------------------------------------------------- comparing


def same(name: str, expected: Any, actual: Any, ftypes: dict[str, str]) -> bool:
    if expected is ANY:
        return True
    if expected is None:
        return False
    ftype = ftypes.get(name.split(".", 1)[0] if name not in ftypes else name, "")
    if isinstance(expected, bool):
        return actual == ("1" if expected else "0")
    if isinstance(expected, int):
        try:
            return int(actual, 0) == expected
        except (TypeError, ValueError):
            return False
    if isinstance(expected, float):
        try:
            return abs(float(actual) - expected) <= 2e-6
        except (TypeError, ValueError):
            return False
    if ftype == "bytes":
        return isinstance(actual, str) and actual.replace(":", "") == expected
    if ftype == "none" and actual == "" and isinstance(expected, str):
        return True  # a holder of members given bytes that did not decode: Wireshark's item has no value
    return actual == expected


def compare(expected: Flat, actual: Flat, ftypes: dict[str, str]) -> list[str]:
    """The lines that differ, as a unified diff; empty when the frames agree."""
    ok = set(expected.top) == set(actual.top) and all(
        same(k, expected.top[k], actual.top[k], ftypes) for k in expected.top
    )
    for mine, theirs in ((expected.fields, actual.fields), (expected.links, actual.links)):
        ok = ok and len(mine) == len(theirs)
        ok = ok and all(
            a[0] == b[0] and same(a[0], a[1], b[1], ftypes) for a, b in zip(mine, theirs, strict=False)
        )
    ok = ok and sorted(expected.expert) == sorted(actual.expert)
    if ok:
        return []
    # Show tshark's values in streamdump's spelling where they agree, so the diff shows only what differs.
    shown = Flat()
    shown.top = {
        k: expected.top[k] if same(k, expected.top.get(k), v, ftypes) else v for k, v in actual.top.items()
    }
    for mine, theirs, into in (
        (expected.fields, actual.fields, shown.fields),
        (expected.links, actual.links, shown.links),
    ):
        for index, (name, value) in enumerate(theirs):
            if index < len(mine) and mine[index][0] == name and same(name, mine[index][1], value, ftypes):
                value = mine[index][1]
            into.append((name, value))
    shown.expert = actual.expert
    return list(difflib.unified_diff(expected.lines(), shown.lines(), "streamdump", "tshark", lineterm=""))


def field_types(protocol: Protocol) -> dict[str, str]:
    return {entry["name"]: entry["ftype"] for entry in luagen.field_names(protocol)}


def differences(
    path: Path, tmp: Path, protocol: Protocol, *, two_pass: bool = False, flavour: str = "4.0"
) -> Iterator[str]:
    packets, _ = run_tshark(path, tmp, two_pass=two_pass, name=protocol.name, flavour=flavour)
    theirs = tshark_pdus(packets, protocol.name)
    ours: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for frame in run_streamdump(path, two_pass=two_pass, name=protocol.name):
        # A carried protocol's read shows its carrier's frames too; Wireshark shows no PDU that the
        # capture never completed (a connection closed or reset in the middle of one).
        why = frame.get("incomplete") or ""
        ended = "the connection closed" in why or "the connection was reset" in why
        if frame["protocol"] == protocol.name and not ended:
            ours[frame["frame"]].append(frame)
    maps = frozenset(spec.name for spec in protocol.all_fields() if spec.type == "map")
    opaque = frozenset(s.name for s in protocol.all_fields() if s.type == "json" and not s.fields)
    amqp_names = AmqpNames.of(protocol)
    ftypes = field_types(protocol)
    for number in sorted(set(ours) | set(theirs)):
        mine, other = ours.get(number, []), theirs.get(number, [])
        if len(mine) != len(other):
            yield (
                f"packet {number}: streamdump has {len(mine)} frames "
                f"({', '.join(str(f.get('command')) for f in mine)}), tshark {len(other)}"
            )
            continue
        for index, (frame, tree) in enumerate(zip(mine, other, strict=True)):
            expected = flatten_streamdump(
                frame, maps, opaque, ftypes, protocol.frame.key, protocol.key_formatter(), amqp_names
            )
            actual = flatten_tshark(tree, protocol.name)
            if any(group == "undecoded" for group, _, _ in actual.expert):
                without_uninflatable(expected, UNINFLATABLE_IN[flavour])
                actual.expert = [e for e in actual.expert if e[0] != "undecoded"]
            diff = compare(expected, actual, ftypes)
            if diff:
                yield f"packet {number} frame {index} ({frame.get('command')}):\n" + "\n".join(diff)


# ---------------------------------------------------------------- a capture of damage


def damage_frames(decoder: Decoder) -> list[tuple[bool, bytes]]:
    """Tracking chunks cut from the broker's own segment files, and frames damaged on purpose."""
    frames: list[tuple[bool, bytes]] = []
    for name in ("user_with_trailer.bin", "tracking_delta.bin", "tracking_snapshot.bin"):
        stored = (CAPTURES / "chunks" / name).read_bytes()
        frames.append((False, _deliver(stored)))
    stored = bytearray((CAPTURES / "chunks" / "user_with_trailer.bin").read_bytes())
    flipped = bytearray(stored)
    flipped[60] ^= 0xFF  # inside the data: the CRC no longer matches
    frames.append((False, _deliver(bytes(flipped)[:105])))
    more = bytearray(stored[:105])
    more[3] += 1  # one entry more than the data holds
    frames.append((False, _deliver(bytes(more))))
    # One segment with two frames: a key nobody knows, and a response Publish has no layout for.
    frames.append((False, _frame(0x0077, b"\x00\x01\x02") + _frame(0x8002, b"\x01")))
    publish = decoder.encode("Publish", "command", {"publisher_id": 1, "messages": []})
    frames.append((True, _resize(publish + b"\xde\xad")))  # bytes after the last field
    create = decoder.encode("Create", "request", {"correlation_id": 9, "stream": "s", "arguments": {}})
    frames.append((True, _resize(create[:-4] + struct.pack(">i", -5))))  # a negative map count
    declare = decoder.encode(
        "DeclarePublisher", "request",
        {"correlation_id": 10, "publisher_id": 2, "publisher_reference": "", "stream": "s\u00e9"},
    )  # fmt: skip
    frames.append((True, declare.replace(b"s\xc3\xa9", b"s\xff\xfe")))  # not UTF-8
    message = {"publishing_id": 1, "entry": osiris.simple_entry(b"\x00\x53\x75\xa0\x01x")}
    one = decoder.encode("Publish", "command", {"publisher_id": 1, "messages": [message]})
    frames.append((True, one[:9] + struct.pack(">i", 5) + one[13:]))  # 5 messages declared, 1 sent
    metadata = decoder.encode("Metadata", "request", {"correlation_id": 11, "streams": ["s"]})
    metadata = metadata[:6] + struct.pack(">H", 9) + metadata[8:]  # a version the registry lacks
    frames += [(True, metadata[:5]), (True, metadata[5:])]  # and split across two segments
    return frames


def _frame(key: int, body: bytes) -> bytes:
    return struct.pack(">IHH", len(body) + 4, key, 1) + body


def _resize(frame: bytes) -> bytes:
    return struct.pack(">I", len(frame) - 4) + frame[4:]


def _deliver(stored_chunk: bytes) -> bytes:
    return _frame(0x0008, b"\x01" + stored_chunk)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_tshark_and_streamdump_agree_on_damage(flavour: str, tmp_path: Path, protocol: Protocol) -> None:
    """Tracking chunks, trailers and malformed frames: the same fields and the same notes."""
    path = tmp_path / "damage.pcap"
    path.write_bytes(tcp_pcap(damage_frames(Decoder(protocol))))
    found = list(differences(path, tmp_path, protocol, flavour=flavour))
    assert not found, f"{len(found)} differences; first ones:\n" + "\n\n".join(found[:5])
    frames = run_streamdump(path)
    assert [frame["command"] for frame in frames].count("Deliver") == 5
    notes = " | ".join(e["message"] for frame in frames for e in frame["expert"])
    for meant in (
        "chunk CRC mismatch",
        "chunk declares 4 entries but its data holds 3",
        "unknown command key 0x0077",
        "Publish has no response layout",
        "2 bytes after the last field",
        "arguments has negative count -5",
        "stream is not valid UTF-8",
        "frame too short: Messages (5 entries)",
        "Metadata version 9 is not in the registry",
    ):
        assert meant in notes, f"the damage capture lacks {meant!r}: {notes}"
    records = [r for frame in frames for r in frame["fields"].get("chunk", {}).get("records", [])]
    tracking = [r for r in records if "tracking" in r]
    shared = [n for n in {f["frame"] for f in frames} if sum(f["frame"] == n for f in frames) == 2]
    assert len(shared) == 1, "one segment carries two frames"
    shown = f"frame.number == {shared[0]}"
    lines = tshark_run(flavour, [PLUGIN, path], lambda p: ["-r", p[-1], "-Y", shown], tmp_path).stdout
    # Both frames in Info, their notes in Expert Info only (Info repeats no expert text).
    assert "RMQS 74 Unknown(0x0077); Publish response\n" in lines
    assert len(tracking) == 2 and any(f["fields"]["chunk"].get("trailer_tracking") for f in frames[:1])


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_chunk_crc_is_a_preference(flavour: str, tmp_path: Path, protocol: Protocol) -> None:
    """rabbitmq_stream.check_crc off: no CRC worked out, so neither the flipped chunk's mismatch
    nor any [CRC Valid] item; the other checks of the same chunks still speak. On by default."""
    path = tmp_path / "damage.pcap"
    path.write_bytes(tcp_pcap(damage_frames(Decoder(protocol))))

    def detail(*prefs: str) -> str:
        run = tshark_run(flavour, [PLUGIN, path], lambda p: ["-n", "-r", p[-1], "-V", *prefs], tmp_path)
        assert run.returncode == 0 and "lua error" not in run.stdout.lower(), run.stderr[-2000:]
        return run.stdout

    checked, unchecked = detail(), detail("-o", "rabbitmq_stream.check_crc:FALSE")
    assert "chunk CRC mismatch" in checked and checked.count("[CRC Valid: ") == 5  # five Delivers
    assert "chunk CRC mismatch" not in unchecked and "[CRC Valid: " not in unchecked
    assert "chunk declares 4 entries but its data holds 3" in unchecked


def test_the_records_budget_stops_the_plugin_where_it_stops_streamdump(
    tmp_path: Path, protocol: Protocol
) -> None:
    """A frame may expand to so many records: a Publish of one message more, each a simple entry,
    and a chunk whose simple entries follow a full sub-batch (a chunk has at most 65,535 entries)
    go past it on the paths that read a simple entry's record with no list of it. The plugin
    decodes as many records as streamdump and says where it stopped, in the same words."""
    limit = DEFAULT_LIMITS.records
    empty = osiris.simple_entry(b"")
    messages = [{"publishing_id": i, "entry": empty} for i in range(limit + 1)]
    publish = Decoder(protocol).encode("Publish", "command", {"publisher_id": 1, "messages": messages})
    full = osiris.sub_batch_entry([b""] * 65535, 0, osiris.records_body([b""] * 65535))
    chunk = encode_chunk([full] + [empty] * (limit + 1 - 65535))
    path = tmp_path / "budget.pcap"
    path.write_bytes(tcp_pcap([(True, publish), (False, _deliver(chunk))]))
    said = f"1 records not decoded; expanding this frame stops at 64 MiB decompressed and {limit} records"
    said += " (the expanded and records limits: streamdump --limit raises them)"
    ours = [
        [e["message"] for e in f["expert"] if "records not decoded" in e["message"]]
        for f in run_streamdump(path)
    ]
    assert ours == [
        [f"message {limit}: {said}"],
        [f"entry {limit + 1 - 65535}: {said}"],
    ]
    fields = ["-e", "rabbitmq_stream.record_size", "-e", "_ws.expert.message", "-E", "occurrence=a"]
    run = tshark_run("4.0", [PLUGIN, path], lambda p: ["-n", "-r", p[-1], "-T", "fields", *fields], tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    # (the packets with records: the handshake's and the segments' rows have none)
    rows = [line.split("\t") for line in run.stdout.splitlines() if line.split("\t")[0]]
    assert [len(sizes.split(",")) for sizes, _ in rows] == [limit, limit]
    assert [[m for m in notes.split(",") if "records not decoded" in m] for _, notes in rows] == ours


def variant_runs(
    variants: dict[str, str], path: Path, tmp_path: Path, modes: dict[str, list[str]]
) -> dict[tuple[str, str], tuple[str, str]]:
    """Each variant of the plugin's text installed in a folder of its own and run by tshark 4.0 on
    path in each mode: its stdout (with the time PDML's head says it was written taken out) and
    stderr, by variant and mode."""
    runs = {}
    for name, lua in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        plugin = folder / PLUGIN.name
        plugin.write_text(lua, encoding="utf-8")
        for mode, args in modes.items():
            run = tshark_run("4.0", [plugin, path], lambda p, a=args: ["-n", "-r", p[-1], *a], folder)
            assert run.returncode == 0, run.stderr[-2000:]
            out = re.sub(r'^(<pdml [^>]*) time="[^"]*"', r"\1", run.stdout, flags=re.M)
            runs[name, mode] = (out, run.stderr)
    return runs


def test_a_plain_chunk_shows_what_the_general_path_shows(tmp_path: Path) -> None:
    """A user chunk of simple entries, each one data section (a0 and b0 binaries), is shown from
    one copy of its data (osiris.lua's OSIRIS.plain_chunk): the same tree, item for item, text, value and
    bytes, as with that path taken out. Chunks it must leave to the general path (a message with
    properties, a record count the entries do not hold, a byte after the last entry, a tracking
    chunk) are left to it."""

    def data(body: bytes) -> bytes:
        if len(body) < 256:
            return b"\x00\x53\x75\xa0" + bytes([len(body)]) + body
        return b"\x00\x53\x75\xb0" + struct.pack(">I", len(body)) + body

    plain = [osiris.simple_entry(data(b"m%d" % i * (i + 1) * 9)) for i in range(40)]
    with_properties = osiris.simple_entry(b"\x00\x53\x73\x45" + data(b"body"))
    miscounted = bytearray(encode_chunk(plain[:3], chunk_id=900))
    miscounted[4:8] = struct.pack(">I", 4)  # num_records (the CRC covers the data alone)
    tail = bytearray(encode_chunk(plain[:2], chunk_id=300) + b"\x00")  # a byte after the last entry
    struct.pack_into(">II", tail, 32, zlib.crc32(tail[48:]), len(tail) - 48)  # CRC, data length
    chunks = [
        encode_chunk(plain, chunk_id=100),  # plain
        encode_chunk([*plain[:5], with_properties], chunk_id=200),
        bytes(miscounted),
        bytes(tail),
        encode_chunk(plain[:2], chunk_id=400, chunk_type=1),  # tracking
        encode_chunk(plain[5:9], chunk_id=500),  # plain
        # plain, the offsets' thousands carried within the chunk (999999, 1000000: "1000" "000")
        encode_chunk(plain[5:9], chunk_id=999_998),
        encode_chunk(plain[5:9], chunk_id=2**53 + 5),  # plain, an id no number holds exactly
    ]
    path = tmp_path / "chunks.pcap"
    path.write_bytes(tcp_pcap([(False, _deliver(chunk)) for chunk in chunks]))
    text = PLUGIN.read_text(encoding="utf-8")
    call = "OSIRIS.plain_chunk(data, len, num_entries, siblings.num_records, ctx)"
    start = "function OSIRIS.show_plain_chunk(tree, tvb, pos, len, data, num_entries, chunk_id, "
    start += "data_field, ctx, number_id)\n"
    assert text.count(call) == 1 and text.count(start) == 1
    variants = {
        "probed": text.replace(start, start + '  io.stderr:write("plain chunk\\n")\n'),
        "general": text.replace(call, "false"),
    }
    # (PDML: each item's text and value, and the bytes it covers, which -V does not print)
    runs = variant_runs(variants, path, tmp_path, {"pdml": ["-T", "pdml"]})
    probed, said = runs["probed", "pdml"]
    assert said.count("plain chunk") == 4
    assert probed.count('showname="Record at offset') == 40 + 6 + 3 + 2 + 2 + 4 + 4 + 4
    for offset in (999_999, 1_000_000, 1_000_001, 2**53 + 8):
        assert f'showname="Record at offset {offset}: ' in probed
    assert probed == runs["general", "pdml"][0]


def test_plain_publish_messages_show_what_the_general_path_shows(tmp_path: Path, protocol: Protocol) -> None:
    """A Publish's leading messages that are each a simple entry of one data section (a0 and b0
    binaries) are shown from one copy of their bytes (osiris.lua's LITE.shown.published_message):
    the same tree, item for item, text, value and bytes, and the same links, as with that path
    taken out. It stops at the first message it must leave to the general path (one with
    properties, a sub-batch, an id a number does not hold exactly, one past the frame's end),
    and takes no frame of version 2 (a filter value per message)."""

    def data(body: bytes) -> bytes:
        if len(body) < 256:
            return b"\x00\x53\x75\xa0" + bytes([len(body)]) + body
        return b"\x00\x53\x75\xb0" + struct.pack(">I", len(body)) + body

    def message(pid: int, record: bytes) -> dict[str, Any]:
        return {"publishing_id": pid, "entry": osiris.simple_entry(record), "filter_value": "f"}

    plain = [data(b"p%d" % i * (i + 1) * 9) for i in range(30)]
    with_properties = b"\x00\x53\x73\x45" + data(b"body")
    batch = osiris.sub_batch_entry([plain[0], plain[1]], 0, osiris.records_body([plain[0], plain[1]]))
    decoder = Decoder(protocol)

    def publish(messages: list[dict[str, Any]], version: int = 1) -> bytes:
        return decoder.encode("Publish", "command", {"publisher_id": 1, "messages": messages}, version)

    cut = bytearray(publish([message(100 + i, plain[i]) for i in range(3)]))
    cut[9:13] = struct.pack(">I", 5)  # messages: 5 declared, 3 there
    frames = [
        publish([message(i, plain[i]) for i in range(30)]),  # all 30
        publish([*(message(30 + i, plain[i]) for i in range(4)), message(34, with_properties),
                 *(message(35 + i, plain[i]) for i in range(3))]),  # the first 4
        publish([{"publishing_id": 40, "entry": batch}, message(41, plain[2])]),  # none
        publish([message(50 + i, plain[i]) for i in range(3)], version=2),  # none
        publish([message(60, plain[0]), message(61, plain[1]), message(2**50, plain[2]),
                 message(62, plain[3])]),  # the first 2
        bytes(cut),  # the 3 there
    ]  # fmt: skip
    confirmed = {"publisher_id": 1, "publishing_ids": [0, 1, 31, 61]}
    confirm = decoder.encode("PublishConfirm", "command", confirmed)
    path = tmp_path / "publish.pcap"
    path.write_bytes(tcp_pcap([*((True, frame) for frame in frames), (False, confirm)]))
    text = PLUGIN.read_text(encoding="utf-8")
    defined = "LITE.shown.published_message = function("
    defined += "holder, tvb, pos, limit, count, items, version, ctx, name)\n"
    taken = "  if plain == 0 then return 0, pos end\n"
    assert text.count(defined) == 1 and text.count(taken) == 1
    variants = {
        "probed": text.replace(taken, taken + '  io.stderr:write("plain " .. plain .. "\\n")\n'),
        "general": text.replace(defined, defined.replace("published_message", "unused")),
    }
    # PDML: each item's text and value, and the bytes it covers, which -V does not print;
    # -2 -V: the links a second pass shows (the confirm's to the frames that sent its ids)
    runs = variant_runs(variants, path, tmp_path, {"pdml": ["-T", "pdml"], "two": ["-2", "-V"]})
    (probed, said), (two, _) = runs["probed", "pdml"], runs["probed", "two"]
    assert re.findall(r"plain (\d+)", said) == ["30", "4", "2", "3"]
    assert probed.count('showname="Record: ') == 30 + 8 + 3 + 3 + 4 + 3
    assert "frame too short" in two
    for mode, shown in (("pdml", probed), ("two", two)):
        assert shown == runs["general", mode][0], mode


def test_tshark_and_streamdump_agree_on_rocketmq_bodies(tmp_path: Path) -> None:
    """Stored bodies in a pull answer: a bad CRC, a zlib body, and zlib bombs the frame's
    expansion budget stops, in the plugin as in Python."""
    rocketmq = default_registry().get("rocketmq")
    decoder = Decoder(rocketmq)
    bomb = zlib.compress(b"\0" * (40 << 20), 9)
    body = b"streamdump " * 20

    def stored(data: bytes, sys_flag: int = 0, crc: int | None = None) -> dict[str, Any]:
        return {
            "magic_code": 0xDAA320A7, "body_crc": zlib.crc32(data) & 0x7FFFFFFF if crc is None else crc,
            "queue_id": 0, "message_flag": 0, "queue_offset": 0, "physical_offset": 0, "sys_flag": sys_flag,
            "born_timestamp": 0, "born_host": "127.0.0.1", "born_port": 1, "store_timestamp": 0,
            "store_host": "127.0.0.1", "store_port": 2, "reconsume_times": 0,
            "prepared_transaction_offset": 0, "message_body": data, "topic": "T", "properties": {},
        }  # fmt: skip

    header = {"serialize_type": 0, "language": 0, "opaque": 1}
    ask = decoder.encode("PULL_MESSAGE", "request", header | {"consumer_group": "G", "topic": "T"})
    messages = [stored(b"x", crc=7), stored(zlib.compress(body), 0x1), stored(bomb, 0x1), stored(bomb, 0x1)]
    answer = decoder.encode("PULL_MESSAGE", "response", header | {"code": 0, "messages": messages})
    path = tmp_path / "bodies.pcap"
    pieces = [(False, answer[at : at + 60000]) for at in range(0, len(answer), 60000)]  # IP's 64 KiB
    path.write_bytes(tcp_pcap([(True, ask), *pieces], server=("127.0.0.1", 10911)))
    found = list(differences(path, tmp_path, rocketmq))
    assert not found, f"{len(found)} differences; first ones:\n" + "\n\n".join(found[:5])
    (pulled,) = [f for f in run_streamdump(path) if f["kind"] == "response"]
    notes = [e["message"] for e in pulled["expert"]]
    assert notes[0].startswith("message body CRC mismatch: header says 0x00000007")
    assert "expanding this frame stops at 64 MiB decompressed" in notes[1] and len(notes) == 2

    # rocketmq.check_crc off: the bad CRC goes unsaid, the rest is read as before
    def detail(*prefs: str) -> str:
        return tshark_run("4.0", [PLUGIN, path], lambda p: ["-n", "-r", p[-1], "-V", *prefs], tmp_path).stdout

    checked, unchecked = detail(), detail("-o", "rocketmq.check_crc:FALSE")
    assert "body CRC mismatch" in checked and checked.count("[Body CRC Valid: ") == 4
    assert "body CRC mismatch" not in unchecked and "[Body CRC Valid: " not in unchecked
    assert "expanding this frame stops at 64 MiB decompressed" in unchecked
    assert [("uncompressed_body" in m) for m in pulled["fields"]["messages"]] == [False, True, True, False]


def test_plugin_is_current() -> None:
    """The committed plugin is what `streamdump lua generate` writes today, and it is all lua/ holds."""
    registry = default_registry()
    assert PLUGIN.read_text(encoding="utf-8") == luagen.bundle(registry.protocols.values()), (
        "lua/ is stale: run `streamdump lua generate`"
    )
    assert sorted(p.name for p in PLUGIN.parent.iterdir()) == [PLUGIN.name]


def test_plugin_says_it_is_generated() -> None:
    first = PLUGIN.read_text(encoding="utf-8").splitlines()[0]
    sources = ", ".join(f"dissectors/{name}/spec.yaml" for name in PROTOCOLS)
    assert first == f"-- Generated by `streamdump lua generate` from {sources}; do not edit."


def test_the_runtime_is_in_the_plugin_once() -> None:
    """The interpreter, the wiring and each package's Lua twins appear once, whatever the number
    of protocols; the protocols are data handed to it. lua/ stays under 12,000 lines."""
    text = PLUGIN.read_text(encoding="utf-8")
    assert text.count("local P = Proto(SPEC.name, SPEC.title)") == 1
    # zlib.lua, which RabbitMQ Streams' and RocketMQ's twins both carry
    assert text.count("local function inflate(") == 1
    assert text.count("function P.dissector(") == 1
    assert len(text.splitlines()) <= 12_000


# A Lua script run after the plugin: which protocols' decoders exist, as the plugin loads and after
# the last packet, found by the upvalues of the functions Wireshark keeps (P.dissector: live and
# decoder; decoder's SPEC). Printed as "load nats=false,..." and "end ...".
DECODERS_PROBE = """
local function made()
  local found, seen = {}, {}
  local function upvalues(fn)
    local up = {}
    for i = 1, 255 do
      local name, value = debug.getupvalue(fn, i)
      if name == nil then break end
      up[name] = { value }
    end
    return up
  end
  local function visit(value, depth)
    if seen[value] or depth > 4 then return end
    seen[value] = true
    if type(value) == "function" then
      local up = upvalues(value)
      if up.live and up.decoder then found[upvalues(up.decoder[1]).SPEC[1].name] = up.live[1] ~= nil end
    elseif type(value) == "table" then
      for k, v in pairs(value) do visit(k, depth + 1) visit(v, depth + 1) end
    end
  end
  visit(debug.getregistry(), 0)
  local names = {}
  for name, is in pairs(found) do names[#names + 1] = name .. "=" .. tostring(is) end
  table.sort(names)
  return table.concat(names, ",")
end
io.write("load ", made(), "\\n")
local tap = Listener.new("frame")
function tap.draw() io.write("end ", made(), "\\n") end
"""


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("capture", "used"),
    [
        ("nats/pubsub.pcap", {"nats"}),
        ("liftbridge/session.pcap", {"nats", "liftbridge"}),  # Liftbridge is carried by NATS
        ("rocketmq/alions.pcap", {"rocketmq"}),
    ],
)
def test_a_protocol_decoder_is_made_on_its_first_packet(
    flavour: str, capture: str, used: set[str], tmp_path: Path
) -> None:
    """The plugin loads with every protocol registered and no decoder made; a capture makes the
    decoders of the protocols in it, and no other (the other protocols' layouts and closures are
    never on Lua's heap)."""
    probe = tmp_path / "decoders.probe"
    probe.write_text(DECODERS_PROBE)
    files = [PLUGIN, probe, CAPTURE_ROOT / capture]
    result = tshark_run(
        flavour, files, lambda paths: ["-X", f"lua_script:{paths[0]}", "-q", "-r", paths[1]], tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    said = [line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(("load ", "end "))]
    lines = dict(said)
    names = sorted(default_registry().protocols)
    assert lines["load"] == ",".join(f"{name}=false" for name in names)
    assert lines["end"] == ",".join(f"{name}={str(name in used).lower()}" for name in names)


@pytest.mark.parametrize("luac", ["luac5.2", "luac5.4"])
def test_plugin_compiles_under_lua_5_2_and_5_4(luac: str) -> None:
    """Wireshark 4.0 embeds Lua 5.2, 4.4 and later 5.4: the plugin must parse under both (5.2 has
    no integer division or bit operators, so parsing there refuses them)."""
    path = shutil.which(luac)
    need(path is not None, f"{luac} is not installed (apt-get install lua5.2 lua5.4)")
    assert path is not None
    result = subprocess.run([path, "-p", str(PLUGIN)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("road", ["bitop", "native"])
def test_the_crc_twin_is_zlibs_by_either_road(road: str, tmp_path: Path) -> None:
    """The plugin's CRC-32 is zlib.crc32 by either road: Wireshark's bit library in tshark 4.0
    (Lua 5.2), and the bit operators compiled from text where they parse (Lua 5.4); odd lengths
    and offsets exercise the tail after the loop's sixteen bytes a step."""
    data = random.Random(7).randbytes(5000)  # (a new Random a byte would give one byte 5,000 times)
    cases = [(0, 0), (0, 1), (3, 7), (1, 8), (5, 9), (0, 15), (4, 16), (2, 17), (7, 31), (0, 4096)]
    cases += [(11, 4989), (0, 5000)]
    harness = (ZLIB_LUA.read_text(encoding="utf-8") + "\n"
        + f"local data = {lua_string(data)}\n"
        + "local tvb = { raw = function(self, pos, n) return data:sub(pos + 1, pos + n) end }\n"
        + "".join(f"print(crc32(tvb, {pos}, {n}))\n" for pos, n in cases)
        + "print(CRC_T.road)\n")  # fmt: skip
    if road == "native":
        path = shutil.which("lua5.4")
        need(path is not None, "lua5.4 is not installed (apt-get install lua5.4)")
        assert path is not None
        result = subprocess.run([path, "-"], input=harness, capture_output=True, text=True)
    else:
        # Wireshark's bit library is tshark's own: the harness runs as a script there, on load.
        script = tmp_path / "crc.lua"
        script.write_text(harness, encoding="utf-8")
        capture = CAPTURES / "bulk.pcap"
        args = ["-n", "-q", "-X", f"lua_script:{script}", "-r", str(capture), "-c", "1"]
        result = tshark_run("4.0", [capture], lambda _: args, tmp_path)
    assert result.returncode == 0, result.stderr
    *crcs, taken = result.stdout.split()
    assert [int(c) for c in crcs] == [zlib.crc32(data[pos : pos + n]) for pos, n in cases]
    assert taken == road


def lua_string(data: bytes) -> str:
    """data as a Lua string literal (decimal escapes: valid in 5.2 and 5.4)."""
    return '"' + "".join(f"\\{b:03d}" for b in data) + '"'


TOP_LOCAL = re.compile(r"^local (?:function )?([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)", re.MULTILINE)


def test_no_lua_file_shadows_a_local_of_the_runtime() -> None:
    """A protocol's Lua twins run inside the runtime, after it: a top-level local of a twin named
    as one the runtime (or an earlier twin) declares hides that one from everything after it, the
    runtime's own register.lua included, and Lua says nothing. Each name is declared once."""
    found = []
    for protocol, files in luagen.runtime_files(default_registry().protocols.values()).items():
        first: dict[str, str] = {}
        for package, file in files:
            for match in TOP_LOCAL.finditer(luagen.lua_source(package, file)):
                for name in (part.strip() for part in match.group(1).split(",")):
                    if name in first:
                        found.append(f"{protocol}: {file} declares {name}, already {first[name]}'s")
                    first.setdefault(name, file)
    assert not found, "\n".join(found)


def test_plugin_relies_on_no_bit32() -> None:
    """bit32 is gone from Lua 5.4 (FACTS.md): arithmetic stands in for bit operations, except in
    the CRC-32, whose road without bit operators takes Wireshark's own bit library (BitOp, which
    every Wireshark before 4.4 bundles): `bit.` appears in that function alone."""
    text = PLUGIN.read_text(encoding="utf-8")
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    assert "bit32" not in code
    start = code.index("CRC_T.bitop = function()")
    end = code.index("\nend\n", start)
    assert "bit." not in code[:start] + code[end:] and "bit.bxor" in code[start:end]


def test_lua_generate_writes_the_committed_plugin(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "streamdump", "lua"]
    result = subprocess.run([*run, "generate", "--out", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / PLUGIN.name).read_bytes() == PLUGIN.read_bytes()
    checking = [*run, "generate", "--check", "--out", str(tmp_path)]
    check = subprocess.run(checking, capture_output=True, text=True)
    assert check.returncode == 0 and "current" in check.stdout
    (tmp_path / PLUGIN.name).write_text("-- edited by hand\n", encoding="utf-8")
    stale = subprocess.run(checking, capture_output=True, text=True)
    assert stale.returncode == 1
    assert stale.stderr == (
        f"streamdump: error: stale in {tmp_path}: {PLUGIN.name} (run `streamdump lua generate`)\n"
    )


def test_what_a_wireshark_user_reads(tmp_path: Path) -> None:
    """The columns and tree say what streamdump says, spelled alike: a short Protocol column,
    a code spelled as the tree and the expert text spell it, no expert text in Info, derived
    values generated; each finding under the expert entry of its kind."""
    env = dict(os.environ, HOME=str(tmp_path))

    def out(*args: str) -> str:
        return subprocess.run(args, capture_output=True, text=True, env=env).stdout

    path = CAPTURES / "deleted_stream.pcap"
    tshark = (_tshark(), "-X", f"lua_script:{PLUGIN}", "-r", str(path))
    ours = out(sys.executable, "-m", "streamdump", "read", str(path), "-Y", "frame == 36")
    assert 'DeclarePublisher response 0x8001 corr=8 code="Stream does not exist" [warn: ' in ours
    listed = out(*tshark, "-Y", "frame.number == 36").rstrip()
    assert listed.endswith(' RMQS 80 DeclarePublisher response corr=8 code="Stream does not exist"')
    tree = out(*tshark, "-Y", "frame.number == 36", "-V")
    assert "    Response Code: Stream does not exist (0x02)\n" in tree
    note = next(e["message"] for f in run_streamdump(path) if f["frame"] == 36 for e in f["expert"])
    assert "failed: Stream does not exist (0x02)" in note and f"[{note}]" in tree
    failed = "rabbitmq_stream.expert.error_response or rabbitmq_stream.expert.refused_items"
    kinds = out(*tshark, "-Y", failed)
    assert [line.split()[0] for line in kinds.splitlines()] == ["33", "36"]
    deliver = out(
        _tshark(), "-X", f"lua_script:{PLUGIN}", "-r", str(CAPTURES / "compression.pcap"), "-V", "-c", "60",
        "-Y", 'rabbitmq_stream.command == "Deliver"',
    )  # fmt: skip
    assert "[Offset: 0]" in deliver and "[Entry Index: 0]" in deliver and "[CRC Valid: True]" in deliver
    assert (
        "Simple entry, 318 bytes" in deliver
        and "[Entry Size: 318]" in deliver
        and "Record Size: 314" in deliver
    )


def test_lua_install_says_where(tmp_path: Path) -> None:
    target = tmp_path / "plugins"
    run = [sys.executable, "-m", "streamdump", "lua", "install", "--dir", str(target)]
    result = subprocess.run(run, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("installed ")] == [f"installed {target / PLUGIN.name}"]
    assert (target / PLUGIN.name).read_bytes() == PLUGIN.read_bytes()
    # The plugins an earlier streamdump installed, one per protocol, would register each
    # protocol twice: installing removes them (and nothing it did not write).
    old = "-- Generated by `streamdump lua generate` from dissectors/nats/spec.yaml; do not edit.\n"
    (target / "nats.lua").write_text(old)
    (target / "mine.lua").write_text("-- a user's own plugin\n")
    again = subprocess.run(run, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"removed {target / 'nats.lua'} (its protocol is in {PLUGIN.name} now)" in again.stdout
    assert sorted(p.name for p in target.iterdir()) == ["mine.lua", PLUGIN.name]
    blocked = tmp_path / "file"
    blocked.write_text("")
    bad = subprocess.run([*run[:-1], str(blocked / "sub")], capture_output=True, text=True)
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1 and "cannot write" in bad.stderr


def test_lua_install_defaults_to_wiresharks_personal_folder(tmp_path: Path) -> None:
    """Without --dir: the folder tshark names as its personal Lua plugins folder."""
    _tshark()
    env = dict(os.environ, HOME=str(tmp_path))
    run = [sys.executable, "-m", "streamdump", "lua", "install"]
    result = subprocess.run(run, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    installed = tmp_path / ".local" / "lib" / "wireshark" / "plugins" / PLUGIN.name
    assert f"installed {installed}" in result.stdout.splitlines()
    # tshark now loads it by itself, with no -X option.
    check = subprocess.run(
        [_tshark(), "-r", str(CAPTURES / "session.pcap"), "-Y", "rabbitmq_stream.correlation_id == 7"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert "QueryPublisherSequence request corr=7" in check.stdout
    assert "QueryPublisherSequence response corr=7 code=OK seq=0" in check.stdout
    # tshark's glossary lists its fields and expert entries, as `streamdump lua fields` does.
    glossary = subprocess.run([_tshark(), "-G", "fields"], capture_output=True, text=True, env=env)
    rows = [line.split("\t") for line in glossary.stdout.splitlines()]
    listed = {row[2] for row in rows if row[0] == "F" and row[2].startswith("rabbitmq_stream.")}
    ours = subprocess.run(
        [sys.executable, "-m", "streamdump", "lua", "fields", "--protocol", "rabbitmq_stream"],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert listed == {line.split("\t")[0] for line in ours.splitlines()}
    assert "rabbitmq_stream.expert.error_response" in listed


@pytest.mark.parametrize(
    ("flavour", "name", "path"),
    # 4.4 over the captures the cross-check leaves out; over the others, it checks 4.4 fully.
    [("4.0", n, p) for n, p in every_capture()]
    + [("4.4", n, p) for n, p in every_capture() if p.name in LOSSY],
    ids=lambda v: str(v.relative_to(CAPTURE_ROOT)) if isinstance(v, Path) else v,
)
def test_tshark_runs_the_plugin_without_lua_errors(
    flavour: str, name: str, path: Path, tmp_path: Path
) -> None:
    packets, text = run_tshark(path, tmp_path, name=name, flavour=flavour)
    lowered = text.lower()
    for marker in LUA_ERRORS:
        assert marker not in lowered, f"{marker!r} in tshark's output for {path.name}"
    if path.name not in LOSSY:
        assert tshark_pdus(packets, name), "the plugin decoded no frame"


@pytest.mark.parametrize("flavour", FLAVOURS)  # the outer loop: one streamdump read serves both
@pytest.mark.parametrize(
    ("name", "path"),
    [(n, p) for n, p in every_capture() if p.name not in LOSSY],
    ids=lambda v: str(v.relative_to(CAPTURE_ROOT)) if isinstance(v, Path) else v,
)
def test_tshark_and_streamdump_agree(flavour: str, name: str, path: Path, tmp_path: Path) -> None:
    found = list(differences(path, tmp_path, default_registry().get(name), flavour=flavour))
    assert not found, f"{len(found)} differences; first ones:\n" + "\n\n".join(found[:5])


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", ["session.pcap", "deleted_stream.pcap", "credit_exhausted.pcap"])
def test_two_pass_links_agree(name: str, flavour: str, tmp_path: Path, protocol: Protocol) -> None:
    """`tshark -2` and `streamdump read --two-pass` both point requests at their responses."""
    found = list(differences(CAPTURES / name, tmp_path, protocol, two_pass=True, flavour=flavour))
    assert not found, "\n\n".join(found[:5])


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", ["natsjs_jetstream.pcap", "natspy_store.pcap", "request_reply.pcap"])
def test_two_pass_links_agree_for_nats(name: str, flavour: str, tmp_path: Path) -> None:
    """NATS requests (reply subjects, JetStream pulls) point at their replies in both, with two passes."""
    path = CAPTURE_ROOT / "nats" / name
    found = list(differences(path, tmp_path, default_registry().get("nats"), two_pass=True, flavour=flavour))
    assert not found, "\n\n".join(found[:5])


# A filter on AMQP message fields, as streamdump and tshark spell it: the same frames must match.
MESSAGE_FILTERS = (
    ('message_id == "cmp-1"', 'rabbitmq_stream.message_id == "cmp-1"'),
    ("message_correlation_id == 123456789", 'rabbitmq_stream.message_correlation_id == "123456789"'),
    ('subject == "order.created"', 'rabbitmq_stream.subject == "order.created"'),
    ('content_type == "text/plain"', 'rabbitmq_stream.content_type == "text/plain"'),
    (
        'application_properties.key == "variant" and application_properties.value == "gzip"',
        'rabbitmq_stream.application_properties.key == "variant"'
        ' and rabbitmq_stream.application_properties.value == "gzip"',
    ),
    ('data contains "fox"', 'rabbitmq_stream.data contains "fox"'),
    ("group_sequence == 7", "rabbitmq_stream.group_sequence == 7"),
)


def _numbers(frames: list[dict[str, Any]]) -> set[int]:
    return {frame["frame"] for frame in frames}


def _uninflatable(frame: dict[str, Any], flavour: str) -> bool:
    """Whether the plugin cannot show some of the frame's records in this tshark (UNINFLATABLE_IN)."""
    fields = frame["fields"]
    entries = [m.get("entry") or {} for m in fields.get("messages") or []]
    entries += (fields.get("chunk") or {}).get("entries") or []
    codes = UNINFLATABLE_IN[flavour]
    return any(e.get("compression") in codes for e in entries if e.get("entry_kind", 1))


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("ours", "theirs"), MESSAGE_FILTERS)
def test_message_field_filters_select_the_same_frames(
    flavour: str, ours: str, theirs: str, tmp_path: Path
) -> None:
    capture = CAPTURES / "compression.pcap"
    everything = run_streamdump(capture)
    hidden = _numbers([f for f in everything if _uninflatable(f, flavour)])
    args = [sys.executable, "-m", "streamdump", "read", str(capture), "-T", "jsonl", "--filter", ours]
    result = subprocess.run(args, capture_output=True, text=True, check=True)
    mine = _numbers([json.loads(line) for line in result.stdout.splitlines()])
    packets, _ = run_tshark(capture, tmp_path, flavour=flavour, display_filter=theirs)
    tshark = {int(dict(dict(dict(dict(p)["_source"])["layers"])["frame"])["frame.number"]) for p in packets}
    assert mine, "the filter selects frames"
    assert mine - hidden == tshark - hidden
