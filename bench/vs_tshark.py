"""streamdump against tshark on the same captures: wall time, throughput and peak memory.

For every capture and every mode, each decoder runs in a child process with its output
thrown away (stdout to /dev/null), and the runner records the child's wall time
(perf_counter around start and wait4) and its peak resident size (ru_maxrss from wait4).
The modes, and what tshark does for each:

    one-line   streamdump read F             tshark summary lines (no tree: Wireshark's first pass)
    detail     streamdump read F -V          tshark -V (every frame's tree)
    json       streamdump read F -T jsonl    tshark -T json -J rabbitmq_stream
    messages   streamdump read F --messages  tshark -T fields: publishing id/offset/sections of every record
    stats      streamdump stats F            tshark -q -z io,stat,0,rabbitmq_stream -z expert,rabbitmq_stream

There are two references. "tshark+plugin" is tshark with the Lua dissector this project
generates (lua/streamdump.lua, every protocol), decoding what streamdump decodes. "framing-only" is
tshark with a Lua dissector of a dozen lines, written to a temp dir by this script, that
only reassembles and splits the frames and reads the key: a floor for any Lua dissector
under tshark, so a win over it is not a win over slow Lua. It is run for one-line, detail and
json. Each capture ends with the plugin's own ratios to it: without a tree (one-line) and with
-V (detail), against the targets of 3x (no tree) and, for -V, 2x items-only (below).

Without a tree (one-line) a third reference, "ids-only", frames like framing-only and then
does the least the plugin's links need: it reads every publishing id of every Publish and
PublishConfirm from one copy of the PDU's bytes and pairs each confirmed id with the frame that
sent it. ids-only/framing-only is the floor under the no-tree ratio for a dissector that keeps
those links; plugin/ids-only is what the plugin's general decode and tracker add to it.

With -V a fourth reference, "items-only", frames like framing-only and then adds as many plain
items as the plugin's tree has, in nested subtrees of a similar shape (uint32 fields over
consecutive 4-byte ranges of the PDU): what tshark spends building and printing such a tree
whatever the dissector, so plugin/items-only is the part of the -V ratio a dissector could still
win. Its count is matched per message: an untimed run of it without extra items gives the lines
every dissector prints (frame, IP, TCP, reassembly) and the messages it reads from the headers
(a Publish's or a confirm's count, a chunk's record count), and the plugin's -V lines beyond those,
over those messages, are the items it adds per message. In detail mode every tshark run's output
goes to a pipe that counts its lines (the plugin's and items-only's counts are printed, so the
match can be checked), not to /dev/null.
With --repeat N the commands run in N rounds, every command once a round (items-only joins after
the first round, when the plugin's line count is known), rather than one command N times in a row:
a machine that slows down for a minute then slows a plugin run and its reference alike. Each column
keeps its best time, and each ratio is also given round by round with the median of those, the
figure least moved by when the runs happened (seen here: the same items-only command took 32 s in
one run and 42 s in another within the hour, while the plugin's took 79 s in both).
tshark runs with -n and HOME set to an empty temp dir, so no personal plugin or
preference takes part. The capture is read once before timing (streamdump stats, which
also gives the frame count), so every timed run reads it from the page cache.

Reproduce (the captures need root and a running RabbitMQ; about 250 MB each):

    sudo python bench/make_captures.py
    python bench/vs_tshark.py [CAPTURE ...] [--repeat 3] [--modes one-line,detail] [--no-plugin]
                              [--no-streamdump] [--plugin PATH] [--crc-off] [--json-out figures.json]
                              [--chroot /var/tmp/sd-trixie]

--crc-off also times -V with the plugin's rabbitmq_stream.check_crc preference off, the part of
the -V ratio a Deliver chunk's CRC takes (items-only checks none).

--chroot ROOT runs every tshark command in the Debian 13 chroot `.ci/tshark44` makes (tshark 4.4,
Lua 5.4), as its user, over copies of the capture and scripts put in its /tmp: the same figures
for Wireshark 4.4. It needs root.

tshark+plugin takes minutes on the 250 MB captures; --no-plugin leaves it out. No test
asserts these times: they depend on the machine, and are for reading, not for CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from statistics import median

import make_captures

REPO = Path(__file__).resolve().parent.parent
PLUGIN = REPO / "lua" / "streamdump.lua"  # every protocol on one runtime, as a user installs it
MODES = ("one-line", "detail", "json", "messages", "stats")
# The plugin against the framing-only dissector, and the target for each (-V's real target is
# against items-only: ITEMS_TARGET).
PLUGIN_TARGETS = {"one-line": 3.0, "detail": 10.0}
ITEMS_TARGET = 2.0
STREAMDUMP = [sys.executable, "-m", "streamdump"]

STREAMDUMP_ARGS = {
    "one-line": ["read", "{capture}"],
    "detail": ["read", "{capture}", "-V"],
    "json": ["read", "{capture}", "-T", "jsonl"],
    "messages": ["read", "{capture}", "--messages"],
    "stats": ["stats", "{capture}"],
}
# Record-level fields, so tshark has to decode every record of every Publish and Deliver
# and print them, as streamdump --messages does; occurrence=a keeps all of a frame's.
PLUGIN_ARGS = {
    "one-line": [],
    "detail": ["-V"],
    "json": ["-T", "json", "-J", "rabbitmq_stream"],
    "messages": [
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-e",
        "frame.number",
        "-e",
        "rabbitmq_stream.publishing_id",
        "-e",
        "rabbitmq_stream.offset",
        "-e",
        "rabbitmq_stream.sections",
    ],
    "stats": ["-q", "-z", "io,stat,0,rabbitmq_stream", "-z", "expert,rabbitmq_stream"],
}

# The plugin's preference that leaves Deliver chunks' CRCs unchecked (--crc-off): in tshark 4.0's
# Lua 5.2 the CRC is most of a -V run over Deliver traffic, and items-only checks none.
CRC_OFF = ["-o", "rabbitmq_stream.check_crc:FALSE"]

FRAMING_PROTO = "rmqs_framing"
FRAMING_ARGS = {"one-line": [], "detail": ["-V"], "json": ["-T", "json", "-J", FRAMING_PROTO]}
# Both references split frames on the 4-byte size and register on the stream port alike.
REGISTER_LUA = """\
local function pdu_len(tvb, pinfo, offset)
  return tvb(offset, 4):uint() + 4
end

function p.dissector(tvb, pinfo, tree)
  dissect_tcp_pdus(tvb, tree, 4, pdu_len, pdu)
  return tvb:len()
end

DissectorTable.get("tcp.port"):add(5552, p)
"""
FRAMING_LUA = f"""\
-- Framing only: reassemble, split on the 4-byte size, read the key. Written by bench/vs_tshark.py.
local p = Proto("{FRAMING_PROTO}", "RabbitMQ Streams framing only")
local f_key = ProtoField.uint16("{FRAMING_PROTO}.key", "Key", base.HEX)
p.fields = {{ f_key }}

local function pdu(tvb, pinfo, tree)
  pinfo.cols.protocol = "RMQS"
  tree:add(p, tvb()):add(f_key, tvb(4, 2))
  pinfo.cols.info = string.format("0x%04x", tvb(4, 2):uint())
  return tvb:len()
end

{REGISTER_LUA}"""

IDS_PROTO = "rmqs_ids"
# Without a tree, what the links need at the least: every publishing id of a Publish (after
# each, its entry stepped over by its size) and of a PublishConfirm, read from one copy of the
# PDU's bytes (tvb:raw, as the plugin's loops read them), the sent ones kept by id and each
# confirmed one paired with its Publish frame, as the plugin's publish_in links pair them.
# It reads Publish version 1, the bench captures' (version 2 puts a filter value before each entry).
IDS_LUA = f"""\
-- Ids only: frame like framing-only, then pair every confirmed publishing id with the frame
-- that sent it. Written by bench/vs_tshark.py.
local p = Proto("{IDS_PROTO}", "RabbitMQ Streams ids only")
local f_key = ProtoField.uint16("{IDS_PROTO}.key", "Key", base.HEX)
p.fields = {{ f_key }}
local byte = string.byte
local flight, publish_in = {{}}, {{}}

local function id_at(s, at)
  local a, b, c, d, e, f, g, h = byte(s, at, at + 7)
  return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g) * 256 + h
end

local function pdu(tvb, pinfo, tree)
  pinfo.cols.protocol = "RMQS"
  local len = tvb:len()
  local key = tvb(4, 2):uint()
  tree:add(p, tvb()):add(f_key, tvb(4, 2))
  pinfo.cols.info = string.format("0x%04x", key)
  if pinfo.visited or (key ~= 2 and key ~= 3) or len < 13 then return len end
  local s = tvb:raw(0, len)
  local a, b, c, d = byte(s, 10, 13)  -- the count, after size, key, version and publisher id
  local at, number = 14, pinfo.number
  if key == 2 then
    for _ = 1, ((a * 256 + b) * 256 + c) * 256 + d do
      if at + 11 > len then break end
      flight[id_at(s, at)] = number
      local w, x, y, z = byte(s, at + 8, at + 11)
      if w < 128 then  -- a simple entry: its size
        at = at + 12 + ((w * 256 + x) * 256 + y) * 256 + z
      else  -- a sub-batch: its length after flags, count and uncompressed length
        w, x, y, z = byte(s, at + 15, at + 18)
        at = at + 19 + ((w * 256 + x) * 256 + y) * 256 + z
      end
    end
  else
    local links = {{}}
    for j = 1, ((a * 256 + b) * 256 + c) * 256 + d do
      if at + 7 > len then break end
      local id = id_at(s, at)
      links[j] = flight[id]
      flight[id] = nil
      at = at + 8
    end
    publish_in[number] = links
  end
  return len
end

{REGISTER_LUA}"""

ITEMS_PROTO = "rmqs_items"
ITEMS_MARK = b"    Messages read: "
# Leaves under each subtree item: a message's items nest like the plugin's (message, entry,
# record, sections, value), a handful per level.
ITEMS_FANOUT = 3
ITEMS_LUA = f"""\
-- Items only: frame like framing-only, then add PER_MESSAGE plain items for each message the
-- headers count, nested {ITEMS_FANOUT} leaves to a subtree. Written by bench/vs_tshark.py.
local p = Proto("{ITEMS_PROTO}", "RabbitMQ Streams items only")
local f_key = ProtoField.uint16("{ITEMS_PROTO}.key", "Key", base.HEX)
local f_count = ProtoField.uint32("{ITEMS_PROTO}.messages", "{ITEMS_MARK.decode().strip()[:-1]}")
local f_item = ProtoField.uint32("{ITEMS_PROTO}.item", "Item")
p.fields = {{ f_key, f_count, f_item }}
local PER_MESSAGE = %(per_message)s
local FANOUT = {ITEMS_FANOUT}

-- Messages of a Publish or ids of a PublishConfirm (after the publisher id), records of a
-- Deliver's chunk (after the subscription id, and from version 2 the committed chunk id).
local function messages(tvb, key, len)
  local at
  if key == 0x0002 or key == 0x0003 then
    at = 9
  elseif key == 0x0008 then
    at = tvb(6, 2):uint() >= 2 and 21 or 13
  end
  if at == nil or len < at + 4 then
    return 0
  end
  return math.min(tvb(at, 4):uint(), len)
end

local function pdu(tvb, pinfo, tree)
  pinfo.cols.protocol = "RMQS"
  local len = tvb:len()
  local key = tvb(4, 2):uint()
  pinfo.cols.info = string.format("0x%%04x", key)
  local top = tree:add(p, tvb())
  top:add(f_key, tvb(4, 2))
  local n = messages(tvb, key, len)
  top:add(f_count, tvb(0, 4), n)
  local last, off, done = len - 4, 0, 0
  for i = 1, n do
    local want = math.floor(i * PER_MESSAGE) - done
    done = done + want
    local sub = top
    while want > 0 do
      sub = sub:add(f_item, tvb(off, 4))
      off = off + 4
      if off > last then off = 0 end
      want = want - 1
      for _ = 1, math.min(FANOUT, want) do
        sub:add(f_item, tvb(off, 4))
        off = off + 4
        if off > last then off = 0 end
        want = want - 1
      end
    end
  end
  return len
end

{REGISTER_LUA}"""


@dataclass
class Run:
    seconds: float
    rss_mib: float
    exit_code: int
    last_stderr: str
    lines: int | None = None  # stdout's lines, when counted
    marks: int | None = None  # the sum of the numbers after `mark` at a line's start, when asked
    cpu: float = 0.0  # the child's CPU seconds, user and system: less moved by a busy machine than wall time
    rounds: list[float] | None = None  # every run's wall seconds, by round, when it is a column's best

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Chroot:
    """tshark inside a Debian chroot (`.ci/tshark44` makes one with tshark 4.4), run as its normal
    user, since Wireshark 4.4 turns Lua off for root. A command's capture (-r) and Lua scripts are
    copied into a stage in the chroot's /tmp the first time it names them (again when they
    change), and the command is rewritten to name the copies, with an empty HOME there."""

    USER = "streamdump"

    def __init__(self, root: Path):
        users = [line.split(":") for line in (root / "etc" / "passwd").read_text().splitlines()]
        ids = next((entry[2:4] for entry in users if entry[0] == self.USER), None)
        if ids is None:
            raise SystemExit(f"vs_tshark: no user {self.USER} in {root} (run .ci/tshark44 as root)")
        self.root, (self.uid, self.gid) = root, ids
        self.stage = Path(tempfile.mkdtemp(prefix="vs_tshark-", dir=root / "tmp"))
        self.stage.chmod(0o755)
        (self.stage / "home").mkdir()
        (self.stage / "home").chmod(0o777)
        self.copies: dict[tuple[str, int, int], str] = {}

    def inside(self, path: Path) -> str:
        found = path.stat()
        key = (str(path.resolve()), found.st_mtime_ns, found.st_size)
        if key not in self.copies:
            name = f"{len(self.copies)}-{path.name}"
            shutil.copyfile(path, self.stage / name)
            (self.stage / name).chmod(0o644)
            self.copies[key] = f"/tmp/{self.stage.name}/{name}"
        return self.copies[key]

    def wrap(self, argv: list[str]) -> list[str]:
        out, after_r = [], False
        for arg in argv[1:]:
            if after_r:
                arg = self.inside(Path(arg))
            elif arg.startswith("lua_script:"):
                arg = "lua_script:" + self.inside(Path(arg.removeprefix("lua_script:")))
            after_r = arg == "-r"
            out.append(arg)
        home = f"HOME=/tmp/{self.stage.name}/home"
        jail = ["chroot", f"--userspec={self.uid}:{self.gid}", f"--groups={self.gid}", str(self.root)]
        return [*jail, "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", home, "tshark", *out]

    def close(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)


# Set by --chroot: every tshark command (argv[0] "tshark") runs in it.
CHROOT: Chroot | None = None


def placed(argv: list[str]) -> list[str]:
    """The command as it runs: in the chroot, when --chroot gave one and it is tshark's."""
    return CHROOT.wrap(argv) if CHROOT is not None and argv[:1] == ["tshark"] else argv


def run_child(
    argv: list[str], env: dict[str, str] | None = None, count: bool = False, mark: bytes | None = None
) -> Run:
    """Wall time, CPU time and peak RSS of one child; wait4 gives the child's own rusage, which
    resource.getrusage(RUSAGE_CHILDREN) would mix with every earlier child's.

    With `count`, stdout goes to a pipe whose lines are counted (and numbers after `mark`
    summed) as they come, instead of to /dev/null."""
    argv = placed(argv)  # before the clock starts: the chroot's copies are not the run's time
    start = time.perf_counter()
    lines = marks = None
    with tempfile.TemporaryFile() as err_file, open(os.devnull, "wb") as null:
        out = subprocess.PIPE if count else null
        proc = subprocess.Popen(argv, stdout=out, stderr=err_file, env=env)
        if proc.stdout is not None:
            lines, marks = count_output(proc.stdout, mark)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        err_file.seek(0)
        err = err_file.read()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    text = last_line(err.decode(errors="replace"))
    cpu = usage.ru_utime + usage.ru_stime
    return Run(elapsed, usage.ru_maxrss / 1024, proc.returncode, text, lines, marks, cpu)


def count_output(stream, mark: bytes | None) -> tuple[int, int | None]:
    """Lines of a child's stdout, and the sum of the integers after `mark` at a line's start."""
    lines, marks, tail = 0, 0 if mark else None, b""
    with stream:
        while chunk := stream.read(1 << 20):
            lines += chunk.count(b"\n")
            if mark:
                text = tail + chunk
                cut = text.rfind(b"\n") + 1
                text, tail = text[:cut], text[cut:]
                for found in re.finditer(rb"^" + re.escape(mark) + rb"(\d+)", text, re.M):
                    marks += int(found.group(1))
    return lines, marks


def best_of(runs: list[Run]) -> Run:
    """The fastest of a column's runs (the others lost time to noise); peak RSS is the largest seen.
    A failed run is returned as it is."""
    failed = [r for r in runs if not r.ok]
    if failed:
        return failed[0]
    best = min(runs, key=lambda r: r.seconds)
    best.rss_mib = max(r.rss_mib for r in runs)
    best.cpu = min(r.cpu for r in runs)
    best.rounds = [round(r.seconds, 3) for r in runs]
    return best


def in_rounds(
    cmds: dict[str, list[str]], repeat: int, mode: str, env: dict[str, str], then=None
) -> dict[str, list[Run]]:
    """Every column's runs, one of each per round rather than a column's runs back to back, so
    a plugin run and its reference run close together in time and a machine that slows down for a
    while slows both: the ratios within a round are paired. `then(runs)`, after the first round,
    may return more columns (name -> argv, the items-only reference) for the rounds to take in."""
    runs: dict[str, list[Run]] = {column: [] for column in cmds}

    def run(columns: list[str], turn: int) -> None:
        for column in columns:
            if runs[column] and not runs[column][-1].ok:
                continue  # failed once: the failure is what gets reported
            tshark = column != "streamdump"
            print(f"  {mode:<9} {column:<15} round {turn + 1} ...", end="", flush=True)
            runs[column].append(
                run_child(cmds[column], env if tshark else None, count=tshark and mode == "detail")
            )
            print(f" {seconds(runs[column][-1])}", flush=True)

    for turn in range(repeat):
        run(list(cmds), turn)
        if turn == 0 and then is not None:
            added = then(runs) or {}
            cmds.update(added)
            runs.update({column: [] for column in added})
            run(list(added), turn)
    return runs


def round_ratios(ours: dict, reference: dict) -> list[float]:
    """The ratio of each round's two runs."""
    a, b = ours.get("rounds") or [], reference.get("rounds") or []
    return [x / y for x, y in zip(a, b, strict=False) if y > 0]


def median_paired(ours: dict, reference: dict) -> float | None:
    """The median of the rounds' ratios, when there are two rounds or more."""
    ratios = round_ratios(ours, reference)
    return round(median(ratios), 2) if len(ratios) >= 2 else None


def paired(ours: dict, reference: dict) -> str:
    """Each round's ratio and their median: the figure least moved by when the runs happened."""
    middle = median_paired(ours, reference)
    if middle is None:
        return ""
    each = ", ".join(f"{r:.2f}x" for r in round_ratios(ours, reference))
    return f"; by round {each}, median {middle:.2f}x"


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def count_frames(capture: Path) -> int | str:
    """RabbitMQ Streams frames in the capture, or why streamdump could not count them.

    This pass also puts the file in the page cache, so no timed run pays for the disk."""
    done = subprocess.run(
        [*STREAMDUMP, "stats", str(capture), "-T", "json"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"streamdump stats exited {done.returncode}: {last_line(done.stderr)}"
    frames = json.loads(done.stdout).get("frames")
    if isinstance(frames, int):
        return frames
    # Changed stats output: one line per frame is the same count.
    done = subprocess.run([*STREAMDUMP, "read", str(capture)], capture_output=True, check=False)
    if done.returncode != 0:
        return f"streamdump read exited {done.returncode}: {last_line(done.stderr.decode(errors='replace'))}"
    return done.stdout.count(b"\n")


def tshark_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home))
    # These would point Wireshark at a personal configuration despite the fresh HOME.
    for name in ("XDG_CONFIG_HOME", "WIRESHARK_CONFIG_DIR", "WIRESHARK_PLUGIN_DIR"):
        env.pop(name, None)
    return env


def tshark_argv(tshark: str, capture: Path, lua: Path, extra: list[str]) -> list[str]:
    base = [tshark, "-n", "-r", str(capture), "-X", f"lua_script:{lua}"]
    return [*base, "-o", "tcp.reassemble_out_of_order:TRUE", *extra]


def commands(
    capture: Path,
    mode: str,
    tshark: str,
    framing_lua: Path,
    plugin: bool,
    streamdump: bool = True,
    plugin_lua: Path = PLUGIN,
    ids_lua: Path | None = None,
    crc_off: bool = False,
) -> dict[str, list[str]]:
    """The command lines measured for one mode, by column name."""
    cmds = {}
    if streamdump:
        cmds["streamdump"] = [*STREAMDUMP, *(a.format(capture=capture) for a in STREAMDUMP_ARGS[mode])]
    if plugin:
        cmds["tshark_plugin"] = tshark_argv(tshark, capture, plugin_lua, PLUGIN_ARGS[mode])
    if plugin and crc_off and mode == "detail":
        cmds["tshark_plugin_nocrc"] = tshark_argv(tshark, capture, plugin_lua, [*CRC_OFF, *PLUGIN_ARGS[mode]])
    if mode in FRAMING_ARGS:
        cmds["tshark_framing"] = tshark_argv(tshark, capture, framing_lua, FRAMING_ARGS[mode])
    if mode == "one-line" and plugin and ids_lua is not None:
        cmds["tshark_ids"] = tshark_argv(tshark, capture, ids_lua, [])
    return cmds


def machine(tshark: str, env: dict[str, str]) -> dict[str, str | int | None]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    version = subprocess.run(placed([tshark, "-v"]), capture_output=True, text=True, env=env, check=False)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tshark": (version.stdout.splitlines() or ["unknown"])[0],
    }


def ratio(reference: Run | None, ours: Run) -> str:
    if reference is None:
        return "-"
    if not (reference.ok and ours.ok):
        return "failed"
    if reference.seconds >= ours.seconds:
        return f"{reference.seconds / ours.seconds:.1f}x faster"
    return f"{ours.seconds / reference.seconds:.1f}x slower"


def seconds(run: Run | None) -> str:
    if run is None:
        return "-"
    return f"{run.seconds:.2f}" if run.ok else f"exit {run.exit_code}"


HEADER = (
    f"{'mode':<9} {'streamdump s':>12} {'MB/s':>7} {'frames/s':>10} {'RSS MiB':>8}"
    f" {'tshark+plugin s':>15} {'vs plugin':>13} {'framing-only s':>14} {'vs framing':>13}"
    f" {'items-only s':>12} {'ids-only s':>10}"
)


def table_row(mode: str, runs: dict[str, Run], size: int, frames: int) -> str:
    sd = runs.get("streamdump")
    plugin, framing = runs.get("tshark_plugin"), runs.get("tshark_framing")
    items = f" {seconds(runs.get('tshark_items')):>12} {seconds(runs.get('tshark_ids')):>10}"
    if sd is None:
        head = f"{mode:<9} {'-':>12} {'-':>7} {'-':>10} {'-':>8}"
        return f"{head} {seconds(plugin):>15} {'-':>13} {seconds(framing):>14} {'-':>13}{items}"
    rate = f"{size / 1e6 / sd.seconds:7.1f} {frames / sd.seconds:10,.0f}" if sd.ok else f"{'-':>7} {'-':>10}"
    return (
        f"{mode:<9} {seconds(sd):>12} {rate} {sd.rss_mib:8.1f}"
        f" {seconds(plugin):>15} {ratio(plugin, sd):>13} {seconds(framing):>14} {ratio(framing, sd):>13}"
        f"{items}"
    )


def cpu_ratio(ours: dict, reference: dict) -> str:
    """The same ratio in CPU seconds (user and system), which a busy machine moves less."""
    if not (ours.get("cpu") and reference.get("cpu")):
        return ""
    return f"; CPU {ours['cpu']:.2f} s / {reference['cpu']:.2f} s = {ours['cpu'] / reference['cpu']:.1f}x"


def plugin_ratios(result: dict) -> list[str]:
    """The plugin's time over the framing-only dissector's, per mode that has both, with the target;
    with -V, also over items-only's, the floor of any dissector showing as many items. Each in wall
    time, the targets' measure, and in CPU time beside it."""
    lines = []
    for mode, target in PLUGIN_TARGETS.items():
        columns = result["modes"].get(mode, {})
        plugin, framing = columns.get("tshark_plugin"), columns.get("tshark_framing")
        if not (plugin and framing and plugin["exit_code"] == 0 and framing["exit_code"] == 0):
            continue
        times = plugin["seconds"] / framing["seconds"]
        verdict = "within" if times <= target else "over"
        what = "no tree" if mode == "one-line" else "-V"
        lines.append(
            f"  plugin/framing-only, {what} ({mode}): {plugin['seconds']:.2f} s / {framing['seconds']:.2f} s"
            f" = {times:.1f}x ({verdict} the {target:g}x target){cpu_ratio(plugin, framing)}"
            f"{paired(plugin, framing)}"
        )
        result.setdefault("plugin_ratios", {})[mode] = round(times, 2)
        if median_paired(plugin, framing) is not None:
            result["plugin_ratios"][f"{mode}_paired_median"] = median_paired(plugin, framing)
        if plugin.get("cpu") and framing.get("cpu"):
            result["plugin_ratios"][f"{mode}_cpu"] = round(plugin["cpu"] / framing["cpu"], 2)
        ids = columns.get("tshark_ids")
        if ids and ids["exit_code"] == 0:
            floor = ids["seconds"] / framing["seconds"]
            lines.append(
                f"  ids-only/framing-only, {what}: {ids['seconds']:.2f} s / {framing['seconds']:.2f} s"
                f" = {floor:.1f}x (the floor for keeping the confirm links){cpu_ratio(ids, framing)};"
                f" plugin/ids-only {plugin['seconds'] / ids['seconds']:.1f}x"
            )
            result["plugin_ratios"]["ids_vs_framing"] = round(floor, 2)
        items = columns.get("tshark_items")
        if not (items and items["exit_code"] == 0):
            continue
        floor = items["seconds"] / framing["seconds"]
        over = plugin["seconds"] / items["seconds"]
        lines.append(
            f"  items-only/framing-only, {what}: {items['seconds']:.2f} s / {framing['seconds']:.2f} s"
            f" = {floor:.1f}x (the floor for a tree of this size; -V lines: plugin {plugin['lines']:,},"
            f" items-only {items['lines']:,}, {result.get('items_per_message', 0):.2f} items a message)"
            f"{cpu_ratio(items, framing)}"
        )
        lines.append(
            f"  plugin/items-only, {what}: {plugin['seconds']:.2f} s / {items['seconds']:.2f} s = {over:.1f}x"
            f" ({'within' if over <= ITEMS_TARGET else 'over'} the {ITEMS_TARGET:g}x target)"
            f"{cpu_ratio(plugin, items)}{paired(plugin, items)}"
        )
        result["plugin_ratios"]["detail_vs_items"] = round(over, 2)
        if median_paired(plugin, items) is not None:
            result["plugin_ratios"]["detail_vs_items_paired_median"] = median_paired(plugin, items)
        nocrc = columns.get("tshark_plugin_nocrc")
        if nocrc and nocrc["exit_code"] == 0:
            unchecked = nocrc["seconds"] / items["seconds"]
            lines.append(
                f"  plugin with chunk CRCs unchecked/items-only, {what}: {nocrc['seconds']:.2f} s"
                f" / {items['seconds']:.2f} s = {unchecked:.1f}x{cpu_ratio(nocrc, items)}"
            )
            result["plugin_ratios"]["detail_nocrc_vs_items"] = round(unchecked, 2)
        if plugin.get("cpu") and items.get("cpu"):
            result["plugin_ratios"]["detail_vs_items_cpu"] = round(plugin["cpu"] / items["cpu"], 2)
        result["plugin_ratios"]["items_vs_framing"] = round(floor, 2)
    return lines


def items_only(
    capture: Path, args: argparse.Namespace, plugin: Run, tmp: Path, env: dict[str, str]
) -> tuple[list[str], float] | None:
    """The items-only dissector's command line and items per message, matched to the plugin's -V
    lines; None without the plugin's count or any message in the headers."""
    if plugin.lines is None or not plugin.ok:
        return None
    bare = tmp / f"{ITEMS_PROTO}_bare.lua"
    bare.write_text(ITEMS_LUA % {"per_message": 0})
    base = run_child(tshark_argv(args.tshark, capture, bare, ["-V"]), env, count=True, mark=ITEMS_MARK)
    if not (base.ok and base.lines is not None and base.marks):
        return None
    per_message = max(0.0, (plugin.lines - base.lines) / base.marks)
    lua = tmp / f"{ITEMS_PROTO}.lua"
    lua.write_text(ITEMS_LUA % {"per_message": repr(per_message)})
    return tshark_argv(args.tshark, capture, lua, ["-V"]), per_message


def with_items(
    capture: Path,
    args: argparse.Namespace,
    tmp: Path,
    env: dict[str, str],
    matched: dict,
    first: dict[str, list[Run]],
) -> dict[str, list[str]] | None:
    """After -V's first round: the items-only column, matched to the plugin's first run (its
    items per message also go to `matched`)."""
    if "tshark_plugin" not in first:
        return None
    found = items_only(capture, args, first["tshark_plugin"][0], tmp, env)
    if found is None:
        print(f"  detail    {'tshark_items':<15} skipped (no line count, or no message counted)")
        return None
    matched["per_message"] = found[1]
    print(f"  detail    {'tshark_items':<15} {found[1]:.2f} items a message", flush=True)
    return {"tshark_items": found[0]}


def bench_capture(
    capture: Path, modes: list[str], args: argparse.Namespace, tmp: Path, env: dict[str, str]
) -> dict:
    framing_lua = tmp / f"{FRAMING_PROTO}.lua"
    size = capture.stat().st_size
    frames = count_frames(capture)
    if isinstance(frames, str):
        # Every streamdump mode would fail the same way; the other captures may still run.
        print(f"\nvs_tshark: {capture}: skipped, {frames}", file=sys.stderr, flush=True)
        return {"capture": str(capture), "bytes": size, "error": frames, "modes": {}}
    print(f"\n{capture}: {size:,} bytes, {frames:,} RabbitMQ Streams frames", flush=True)
    result: dict = {"capture": str(capture), "bytes": size, "frames": frames, "modes": {}}
    rows = []
    for mode in modes:
        plugin, streamdump, lua = not args.no_plugin, not args.no_streamdump, args.plugin
        cmds = commands(
            capture,
            mode,
            args.tshark,
            framing_lua,
            plugin=plugin,
            streamdump=streamdump,
            plugin_lua=lua,
            ids_lua=tmp / f"{IDS_PROTO}.lua",
            crc_off=args.crc_off,
        )
        matched: dict = {}
        then = partial(with_items, capture, args, tmp, env, matched) if mode == "detail" else None
        every = in_rounds(cmds, args.repeat, mode, env, then=then)
        runs = {column: best_of(column_runs) for column, column_runs in every.items()}
        for column, run in runs.items():
            report_failure(cmds[column], run)
        if matched:
            result["items_per_message"] = round(matched["per_message"], 3)
        rows.append(table_row(mode, runs, size, frames))
        result["modes"][mode] = {
            column: {**asdict(run), "argv": cmds[column]} for column, run in runs.items()
        }
    print(f"\n{capture.name} ({size / 1e6:.1f} MB, {frames:,} frames, best of {args.repeat})")
    print(HEADER)
    print("\n".join(rows))
    print("\n".join(plugin_ratios(result)))
    return result


def report_failure(argv: list[str], run: Run) -> None:
    if not run.ok:
        print(f"    {shlex.join(argv)}\n    exited {run.exit_code}: {run.last_stderr}", file=sys.stderr)


def print_commands(results: list[dict]) -> None:
    print(
        "\nCommands (tshark with HOME=<empty temp dir>; framing-only, ids-only and items-only Lua written"
        " by this script, items-only after an untimed run of it with no items that matches its count):"
    )
    for result in results:
        for mode, columns in result["modes"].items():
            for column, figures in columns.items():
                print(f"  [{mode} {column}] {shlex.join(figures['argv'])}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "captures", nargs="*", type=Path, default=make_captures.default_paths(), help="capture files"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every command; best times kept, ratios also per round",
    )
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--no-plugin", action="store_true", help="skip the slow tshark+plugin reference")
    parser.add_argument(
        "--no-streamdump", action="store_true", help="time tshark only (the plugin's ratios to framing-only)"
    )
    parser.add_argument("--json-out", type=Path, help="also write every figure to this JSON file")
    parser.add_argument(
        "--plugin", type=Path, default=PLUGIN, help="the plugin to time (say, an earlier one)"
    )
    parser.add_argument(
        "--crc-off",
        action="store_true",
        help="with -V, also time the plugin with chunk CRCs unchecked (rabbitmq_stream.check_crc:FALSE)",
    )
    parser.add_argument("--tshark", default=shutil.which("tshark") or "/usr/bin/tshark", help="tshark binary")
    parser.add_argument(
        "--chroot",
        type=Path,
        help="run tshark in this Debian chroot as its user streamdump (.ci/tshark44 makes one); root",
    )
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown or not args.modes:
        parser.error(
            f"--modes: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}"
        )
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def check_inputs(args: argparse.Namespace) -> None:
    if args.chroot is not None:
        if os.geteuid() != 0:
            raise SystemExit("vs_tshark: --chroot runs tshark with chroot, which needs root")
        if not (args.chroot / "usr" / "bin" / "tshark").is_file():
            raise SystemExit(f"vs_tshark: no tshark in {args.chroot} (run .ci/tshark44 as root)")
        args.tshark = "tshark"
    elif not (os.path.isfile(args.tshark) and os.access(args.tshark, os.X_OK)):
        raise SystemExit(f"vs_tshark: tshark not found at {args.tshark} (apt-get install tshark)")
    if not args.no_plugin and not args.plugin.is_file():
        raise SystemExit(f"vs_tshark: {args.plugin} missing (streamdump lua generate)")
    for capture in args.captures:
        if not capture.is_file():
            raise SystemExit(
                f"vs_tshark: {capture}: no such capture (make it: python bench/make_captures.py)"
            )


def main(argv: list[str] | None = None) -> int:
    global CHROOT
    args = parse_args(argv)
    check_inputs(args)
    CHROOT = Chroot(args.chroot) if args.chroot is not None else None
    try:
        return run(args)
    finally:
        if CHROOT is not None:
            CHROOT.close()


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="vs_tshark-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        framing_lua = Path(tmp) / f"{FRAMING_PROTO}.lua"
        framing_lua.write_text(FRAMING_LUA)
        (Path(tmp) / f"{IDS_PROTO}.lua").write_text(IDS_LUA)
        env = tshark_env(home)
        host = machine(args.tshark, env)
        print(
            f"machine: {host['cpu']}, {host['cores']} cores; python {host['python']}; {host['tshark']}",
            flush=True,
        )
        results = [bench_capture(c, args.modes, args, Path(tmp), env) for c in args.captures]
    print_commands(results)
    if args.json_out:
        args.json_out.write_text(json.dumps({"machine": host, "captures": results}, indent=2) + "\n")
        print(f"\nfigures written to {args.json_out}")
    failed = any("error" in result for result in results) or any(
        figures["exit_code"] != 0
        for result in results
        for columns in result["modes"].values()
        for figures in columns.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
