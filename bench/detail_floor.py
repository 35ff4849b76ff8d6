"""The floor under the plugin's -V tree of a Deliver chunk, against items-only, in one run.

Issue 39 asks `tshark -V` with the plugin for at most 2x items-only (bench/vs_tshark.py's Lua
that frames and adds as many plain items as the plugin shows). Items-only reads no value and
checks nothing, so a ratio over 2x could be the tree's own price. This measures it: a Lua
dissector written here for one shape alone, a Deliver (version 1) whose chunk holds simple
entries, each one AMQP 1.0 message of one data section (what the bench captures' consumer
receives), that shows the very tree the plugin shows, item for item and text for text, and
checks the chunk's CRC-32 with the plugin's own code (streamdump/codecs/zlib.lua). It reads
each value once from one copy of the PDU's bytes, keeps no state and decodes nothing else: no
registry, no tracker, no notes, no budget. What it costs over items-only is what showing that
tree costs any Lua dissector; what the plugin costs over it is what its general decoder costs.

The capture is cut (editcap) from its first Deliver on, so every dissector sees the consumer's
traffic alone. The plugin and the floor run with their -V output read through a pipe that cuts
it into Deliver PDUs: each of the floor's must equal the plugin's, byte for byte, or it is not
a floor and the script says so (and exits 1). Items-only's count per message is matched to the
plugin's lines as vs_tshark.py matches it. CPU seconds of the child (user and system), best of
--repeat, as vs_tshark.py measures them.

    python bench/detail_floor.py [CAPTURE] [--repeat 3] [--plugin PATH]

The capture is bench/make_captures.py's 64 KiB one by default (root and a running RabbitMQ
make it); another capture needs Deliver frames of that shape.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import make_captures
import vs_tshark

from streamdump.spec.registry import Protocol, load_registry
from streamdump.wireshark import luagen

REPO = Path(__file__).resolve().parent.parent
ZLIB_LUA = REPO / "streamdump" / "codecs" / "zlib.lua"
DELIVER_HEAD = b"RabbitMQ Streams: Deliver "

FLOOR_PROTO = "rmqs_floor"
# The plugin's fields the floor shows, by their registry names. Their types, titles, bases and
# value strings come from the registry as the plugin's do (floor_fields); the label texts are
# written as the plugin writes them. Offsets below are 0-based in the PDU, s:byte's 1-based.
FLOOR_FIELDS = (
    "size", "key", "version", "subscription_id", "chunk", "magic_version", "chunk_type",
    "num_entries", "num_records", "timestamp", "epoch", "chunk_id", "crc", "data_length",
    "trailer_length", "bloom_size", "reserved", "crc_valid", "entries", "records", "entry_kind",
    "entry_size", "offset", "entry_index", "record_size", "sections", "message", "data", "command",
    "kind", "connection", "volume", "volume.stream", "volume.direction", "volume.messages",
    "volume.bytes",
)  # fmt: skip
FLOOR_LUA = """\
-- Deliver floor: the plugin's -V tree of a chunk of simple one-data-section AMQP entries,
-- written for that shape alone. Written by bench/detail_floor.py.
local p = Proto("rmqs_floor", "RabbitMQ Streams")
local function field(kind, name, title, ...) return ProtoField[kind]("rmqs_floor." .. name, title, ...) end
@FIELDS@
local list = {}
for _, v in pairs(f) do list[#list + 1] = v end
p.fields = list
local add, gen, set_text = TreeItem.add, TreeItem.set_generated, TreeItem.set_text
local byte, format = string.byte, string.format

-- The plugin's own CRC-32 (its sliced tables and its road for this Lua)
local crc32
do
  local file = assert(io.open(@ZLIB@))
  local text = file:read("*a")
  file:close()
  local env = setmetatable({}, { __index = _G })
  local CRC_T = assert(load(text .. "\\nreturn CRC_T", "=zlib.lua", "t", env))()
  local native = load(CRC_T.NATIVE, "=crc32", "t")
  local xor, make = (native or CRC_T.bitop)()
  crc32 = make(CRC_T.tables(xor))
end

local function u32(s, i)
  local a, b, c, d = byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function deliver(tvb, pinfo, root, len)
  local s = tvb:raw(0, len)
  local base = 9  -- the chunk, after size, key, version and subscription id
  local nent = byte(s, base + 3) * 256 + byte(s, base + 4)
  local nrec = u32(s, base + 5)
  local dlen = u32(s, base + 37)
  local tree = add(root, p, tvb())
  local cid = tvb(base + 24, 8)
  local chunk_id = cid:uint64()
  tree:append_text(format(": Deliver sub=%d records=%d chunk=%s", byte(s, 9), nrec, tostring(chunk_id)))
  add(tree, f.size, tvb(0, 4))
  add(tree, f.key, tvb(4, 2))
  add(tree, f.version, tvb(6, 2))
  add(tree, f.subscription_id, tvb(8, 1))
  local ch = add(tree, f.chunk, tvb(base, len - base))
  add(ch, f.magic_version, tvb(base, 1))
  -- a code as the plugin writes it (Wireshark's own label would give it in decimal)
  local ctype = byte(s, base + 2)
  set_text(add(ch, f.chunk_type, tvb(base + 1, 1)),
    format("%s: %s (0x%02x)", TITLE.chunk_type, VS.chunk_type[ctype] or "Unknown", ctype))
  add(ch, f.num_entries, tvb(base + 2, 2))
  add(ch, f.num_records, tvb(base + 4, 4))
  local tsr = tvb(base + 8, 8)
  local ms = tsr:int64()
  local msn = tonumber(tostring(ms))
  add(ch, f.timestamp, tsr, ms, format("Timestamp: %s (%s.%03d UTC)", tostring(ms),
    os.date("!%Y-%m-%d %H:%M:%S", math.floor(msn / 1000)), msn % 1000))
  add(ch, f.epoch, tvb(base + 16, 8))
  add(ch, f.chunk_id, cid)
  add(ch, f.crc, tvb(base + 32, 4))
  add(ch, f.data_length, tvb(base + 36, 4))
  add(ch, f.trailer_length, tvb(base + 40, 4))
  add(ch, f.bloom_size, tvb(base + 44, 1))
  add(ch, f.reserved, tvb(base + 45, 3))
  local data_at = base + 48
  gen(add(ch, f.crc_valid, tvb(data_at, 0), crc32(tvb:raw(data_at, dlen), dlen) == u32(s, base + 33)))
  local ents = add(ch, f.entries, tvb(data_at, dlen))
  set_text(ents, format("Entries: %d", nent))
  local pos, sizes = data_at, {}
  for i = 0, nent - 1 do
    local size = u32(s, pos + 1)
    local e = add(ents, f.entries, tvb(pos, 4 + size))
    set_text(e, format("Entry %d: Simple entry, %d bytes", i, 4 + size))
    add(e, f.entry_kind, tvb(pos, 1), 0)
    gen(add(e, f.entry_size, tvb(pos, 4), 4 + size))
    sizes[i + 1] = size
    pos = pos + 4 + size
  end
  local recs = add(ch, f.records, tvb(data_at, dlen))
  set_text(recs, format("Records: %d", nrec))
  pos = data_at
  for i = 0, nent - 1 do
    local size = sizes[i + 1]
    local at = pos + 4
    local whole = tvb(at, size)
    local r = add(recs, f.records, whole)
    local nowhere = tvb(at, 0)
    local offset = chunk_id + i
    gen(add(r, f.offset, nowhere, offset))
    gen(add(r, f.entry_index, nowhere, i))
    add(r, f.record_size, tvb(pos, 4), size)
    -- 00 53 75, then a0 and a 1-byte size or b0 and a 4-byte one
    local start = at + (byte(s, at + 4) == 0xa0 and 5 or 8)
    add(r, f.sections, whole, 117)
    add(add(r, f.message, whole), f.data, tvb(start, at + size - start))
    set_text(r, format("Record at offset %s: %d bytes, AMQP 1.0", tostring(offset), size))
    pos = at + size
  end
  local nowhere = tvb(0, 0)
  gen(add(tree, f.command, nowhere, "Deliver"))
  gen(add(tree, f.kind, nowhere, "command"))
  gen(add(tree, f.connection, nowhere, format("%s:%d \\226\\134\\146 %s:%d",
    tostring(pinfo.dst), pinfo.dst_port, tostring(pinfo.src), pinfo.src_port)))
  local volume = add(tree, f.volume, nowhere)
  gen(volume)
  set_text(volume, format("Messages: %d to stream '(unknown stream)' (deliver), %d bytes", nrec, dlen))
  gen(add(volume, f["volume.stream"], nowhere, "(unknown stream)"))
  gen(add(volume, f["volume.direction"], nowhere, "deliver"))
  gen(add(volume, f["volume.messages"], nowhere, nrec))
  gen(add(volume, f["volume.bytes"], nowhere, UInt64.new(dlen)))
end

local function pdu(tvb, pinfo, root)
  pinfo.cols.protocol = "RMQS"
  local len = tvb:len()
  if len >= 57 and tvb(4, 2):uint() == 8 and tvb(6, 2):uint() == 1 then
    deliver(tvb, pinfo, root, len)
  else
    add(root, p, tvb())
  end
  return len
end

local function pdu_len(tvb, pinfo, offset) return tvb(offset, 4):uint() + 4 end

function p.dissector(tvb, pinfo, tree)
  dissect_tcp_pdus(tvb, tree, 4, pdu_len, pdu)
  return tvb:len()
end

DissectorTable.get("tcp.port"):add(5552, p)
"""


def floor_fields(protocol: Protocol) -> str:
    """The floor's fields (Lua: TITLE, VS and f by registry name), each declared as the plugin's
    make_field declares it from luagen's entry; a field the registry no longer has is a KeyError
    naming it."""
    declared = {entry["name"]: entry for entry in luagen.field_names(protocol)}
    commands = {command.key: command.name for command in protocol.commands.values()}
    titles, tables, fields = [], [], []
    for name in FLOOR_FIELDS:
        entry = declared[name]
        key, ftype, extra = lua_string(name), entry["ftype"], ""
        titles.append(f"  [{key}] = {lua_string(entry['title'])},")
        if ftype == "string":
            extra = ", base.UNICODE"
        elif ftype in ("bytes", "bool"):
            extra = ", base.NONE"
        elif ftype != "none":
            enum = entry.get("enum")
            values = commands if enum == "commands" else protocol.enums.get(enum, {})
            extra = f", base.{'HEX' if entry.get('display') == 'hex' and ftype.startswith('u') else 'DEC'}"
            if values:
                pairs = ", ".join(f"[{code}] = {lua_string(text)}" for code, text in sorted(values.items()))
                tables.append(f"  [{key}] = {{ {pairs} }},")
                extra += f", VS[{key}]"
        fields.append(f"  [{key}] = field({lua_string(ftype)}, {key}, TITLE[{key}]{extra}),")
    return "\n".join(
        ["local TITLE = {", *titles, "}", "local VS = {", *tables, "}", "local f = {", *fields, "}"]
    )


@dataclass
class Detail:
    cpu: float
    lines: int
    delivers: list[bytes]  # each Deliver PDU's -V text, hashed
    exit_code: int
    last_stderr: str


def lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_detail(argv: list[str], env: dict[str, str]) -> Detail:
    """One -V run: the child's CPU seconds, its lines, and a digest of each Deliver PDU's lines."""
    delivers: list[bytes] = []
    lines = 0
    digest = None
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_file, env=env)
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                lines += 1
                if digest is not None and line[:1] not in (b" ", b"\t"):
                    delivers.append(digest.digest())
                    digest = None
                if line.startswith(DELIVER_HEAD):
                    digest = hashlib.sha1()
                if digest is not None:
                    digest.update(line)
        if digest is not None:
            delivers.append(digest.digest())
        _, status, usage = os.wait4(proc.pid, 0)
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    return Detail(usage.ru_utime + usage.ru_stime, lines, delivers, code, vs_tshark.last_line(err))


def best(argv: list[str], env: dict[str, str], repeat: int) -> Detail:
    runs = [run_detail(argv, env) for _ in range(repeat)]
    failed = [r for r in runs if r.exit_code != 0]
    return failed[0] if failed else min(runs, key=lambda r: r.cpu)


def first_deliver(capture: Path) -> int | None:
    """The packet number of the capture's first Deliver, as streamdump reads it."""
    argv = [*vs_tshark.STREAMDUMP, "read", str(capture), "-T", "jsonl"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if b'"command":"Deliver"' in line:
                proc.kill()
                return int(line.split(b'"frame":', 1)[1].split(b",", 1)[0])
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = make_captures.default_paths()[-1]
    parser.add_argument("capture", nargs="?", type=Path, default=default, help=f"capture (default {default})")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each dissector; the fastest counts")
    parser.add_argument("--plugin", type=Path, default=vs_tshark.PLUGIN, help="the plugin to measure")
    parser.add_argument("--tshark", default=shutil.which("tshark") or "/usr/bin/tshark", help="tshark binary")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    editcap = shutil.which("editcap")
    for need, what in ((args.capture, "capture"), (args.plugin, "plugin"), (editcap, "editcap")):
        if not need or not Path(need).exists():
            print(f"detail_floor: no {what} ({need}); see the docstring", file=sys.stderr)
            return 2
    first = first_deliver(args.capture)
    if first is None:
        print(f"detail_floor: {args.capture} holds no Deliver", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="detail_floor-") as tmp_name:
        tmp = Path(tmp_name)
        cut = tmp / "delivers.pcap"
        subprocess.run([editcap, "-r", str(args.capture), str(cut), f"{first}-{2**31 - 1}"], check=True)
        floor_lua = tmp / f"{FLOOR_PROTO}.lua"
        protocol = load_registry().get("rabbitmq_stream")
        try:
            fields = floor_fields(protocol)
        except KeyError as missing:
            print(f"detail_floor: the registry has no field {missing} the floor shows", file=sys.stderr)
            return 2
        floor_lua.write_text(
            FLOOR_LUA.replace("@ZLIB@", lua_string(str(ZLIB_LUA))).replace("@FIELDS@", fields)
        )
        home = tmp / "home"
        home.mkdir()
        env = vs_tshark.tshark_env(home)
        print(f"{args.capture.name} from packet {first} (its first Deliver) on, best of {args.repeat}")
        started = time.perf_counter()
        plugin = best(vs_tshark.tshark_argv(args.tshark, cut, args.plugin, ["-V"]), env, args.repeat)
        floor = best(vs_tshark.tshark_argv(args.tshark, cut, floor_lua, ["-V"]), env, args.repeat)
        for name, run in (("plugin", plugin), ("floor", floor)):
            if run.exit_code != 0:
                print(f"detail_floor: {name} exited {run.exit_code}: {run.last_stderr}", file=sys.stderr)
                return 1
        same = sum(a == b for a, b in zip(plugin.delivers, floor.delivers, strict=False))
        counts = f"plugin {len(plugin.delivers):,}, floor {len(floor.delivers):,}"
        print(f"  Deliver PDUs: {counts}, the same tree {same:,}", flush=True)
        if not plugin.delivers or same != len(plugin.delivers) or len(floor.delivers) != same:
            print("detail_floor: the floor's trees differ from the plugin's: no floor here", file=sys.stderr)
            return 1
        # Items-only, matched to the plugin's lines per message, as vs_tshark.py does
        vs_args = argparse.Namespace(tshark=args.tshark, repeat=args.repeat)
        counted = vs_tshark.Run(0.0, 0.0, 0, "", lines=plugin.lines)
        matched = vs_tshark.items_only(cut, vs_args, counted, tmp, env)
        if matched is None:
            print("detail_floor: items-only found no message to match", file=sys.stderr)
            return 1
        _, items, per_message = matched
        if not items.ok:
            print(f"detail_floor: items-only exited {items.exit_code}: {items.last_stderr}", file=sys.stderr)
            return 1
        print(
            f"  -V lines: plugin {plugin.lines:,}, floor {floor.lines:,}, items-only {items.lines:,}"
            f" ({per_message:.2f} items a message)"
        )
        print(
            f"  CPU seconds: plugin {plugin.cpu:.2f}, floor {floor.cpu:.2f}, items-only {items.cpu:.2f}"
            f" ({time.perf_counter() - started:.0f} s in all)"
        )
        print(f"  floor/items-only  {floor.cpu / items.cpu:.2f}x  (what this tree costs any Lua dissector)")
        print(f"  plugin/items-only {plugin.cpu / items.cpu:.2f}x  (target {vs_tshark.ITEMS_TARGET:g}x)")
        print(f"  plugin/floor      {plugin.cpu / floor.cpu:.2f}x  (what the plugin's general decoder adds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
