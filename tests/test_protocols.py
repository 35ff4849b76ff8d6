"""Protocols are plug-ins: the core names none, a folder of data and hooks makes one, and a
read decodes several at once, each found by its port, its magic, a guess or --decode-as."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import tomllib
from collections import Counter
from pathlib import Path

import dpkt
import pytest
from conftest import CAPTURES, ROCKETMQ_CAPTURES, ROOT, need
from typer.testing import CliRunner

from streamdump.analysis.pipeline import Dissection, ReadStats, read_frames
from streamdump.analysis.session import CaptureFile, Options, Setup
from streamdump.cli import app
from streamdump.spec.decoder import Decoder, EncodeError
from streamdump.spec.dissector import Dissector, dissector_of
from streamdump.spec.registry import Protocol, SpecError, default_registry, load_registry, load_spec
from streamdump.views.render import Renderer
from streamdump.wireshark import luagen
from tests.test_wireshark import (
    LUA_ERRORS,
    compare,
    field_types,
    flatten_streamdump,
    flatten_tshark,
    tcp_pcap,
    tshark_pdus,
)

runner = CliRunner()
REGISTRY = default_registry()
NAMES = sorted(REGISTRY.protocols)
DISSECTORS = ROOT / "dissectors"

# A protocol no package knows: little-endian, found by its magic, flags packed in words,
# a body whose layout a flag chooses, a 64-bit count. Only the core decodes it.
TOY = """
protocol: toy
title: Toy
byte_order: little
wiring:
  ports: [7000]
  framing: {length: size, counts: whole}
header:
  - magic: {type: raw, size: 4, const: "TOY1"}
  - size: uint32
  - word:
      type: uint16
      display: hex
      bits:
        answer: 0x8000
        priority: {mask: 0x0f00, enum: priority}
  - key: uint16
  - correlation_id: uint32
frame:
  key: key
  response: {field: word, mask: 0x8000}
enums:
  priority: {0: LOW, 1: HIGH}
  code: {1: OK, 2: NOPE}
structs:
  plain:
    - name: string
  tagged:
    - tag: uint8
    - name: string
commands:
  Hello:
    key: 0x0001
    request:
      - flags:
          type: uint8
          bits:
            encoding: 0x0f
            urgent: 0x80
      - body: {type: switch, by: encoding, cases: {0: plain, 1: tagged}}
      - count: uint64
    response:
      - code: {type: uint16, enum: code}
conversation:
  correlation: correlation_id
  status: {field: code, ok: [1]}
  links:
    - request_in: {type: uint32, display: request_packet}
    - response_in: {type: uint32, display: response_packet}
    - response_time: float
"""


@pytest.fixture(scope="module")
def toy() -> Decoder:
    return Decoder(load_spec(Path("toy.yaml"), TOY))


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


# ---------------------------------------------------------------- the core names no protocol


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_core_imports_no_protocol_package() -> None:
    core = sorted((ROOT / "streamdump").rglob("*.py"))
    assert core, "no core modules found"
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in _imports(path) if m.startswith("streamdump.dissectors.")
        )
        for path in core
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_the_core_code_names_no_protocol() -> None:
    """Protocol names may appear in prose (docstrings, help examples), never in code."""
    names = re.compile("|".join(re.escape(n) for n in NAMES))
    found = []
    for path in sorted((ROOT / "streamdump").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in prose
                and names.search(node.value)
                and "e.g." not in node.value
                and "' or '" not in node.value
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", NAMES)
def test_every_protocol_folder_is_a_package_with_its_dissector(name: str) -> None:
    protocol = REGISTRY.get(name)
    assert protocol.package == f"streamdump.dissectors.{name}"
    dissector = dissector_of(protocol)
    assert isinstance(dissector, Dissector)
    folder = DISSECTORS / name
    lua = "\n".join(
        (folder / f).read_text(encoding="utf-8")
        if ":" not in f
        else (
            ROOT
            / "streamdump"
            / f.split(":")[0].removeprefix("streamdump.").replace(".", "/")
            / f.split(":")[1]
        ).read_text(encoding="utf-8")
        for f in dissector.lua
    )
    for hook in dissector.hooks:
        # Every Python hook has its Lua twin, registered under the spec's hook name.
        assert f"HOOKS.{hook.name}" in lua, f"{name}: hook {hook.name} has no Lua twin"
    declared = {h for h in protocol.hooks}
    assert {h.name for h in dissector.hooks} == declared


def test_every_protocol_package_ships_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = set(config["tool"]["setuptools"]["packages"])
    folders = {p.parent.name for p in DISSECTORS.glob("*/__init__.py")}
    assert folders == set(NAMES)
    assert {f"streamdump.dissectors.{name}" for name in folders} <= packages


# ---------------------------------------------------------------- a protocol of data alone


def test_a_spec_folder_without_code_is_a_protocol(tmp_path: Path) -> None:
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "spec.yaml").write_text(TOY, encoding="utf-8")
    registry = load_registry(tmp_path, package=None)
    protocol = registry.get("toy")
    assert protocol.package is None and dissector_of(protocol) == Dissector()
    assert protocol.wiring.magic == b"TOY1" and protocol.order == "<"


@pytest.mark.parametrize(
    ("fields", "expect"),
    [
        (
            {
                "priority": 1,
                "correlation_id": 7,
                "flags": 0x81,
                "body": {"tag": 9, "name": "hi"},
                "count": 2**40,
            },
            {
                "word": 0x0100,
                "answer": 0,
                "priority": 1,
                "encoding": 1,
                "urgent": 1,
                "body": {"tag": 9, "name": "hi"},
            },
        ),
        (
            {"correlation_id": 8, "encoding": 0, "urgent": 0, "body": {"name": "plain"}, "count": 3},
            {"word": 0, "flags": 0, "body": {"name": "plain"}, "count": 3},
        ),
    ],
    ids=["tagged body, flags given whole", "plain body, flags from parts"],
)
def test_toy_round_trip(toy: Decoder, fields: dict, expect: dict) -> None:
    data = toy.encode("Hello", "request", fields)
    assert data[:4] == b"TOY1"  # the constant is written without being given
    assert int.from_bytes(data[4:8], "little") == len(data)  # counts: whole
    frame = toy.decode(data)
    assert (frame.command, frame.kind, frame.version, frame.expert) == ("Hello", "request", 1, [])
    for name, value in expect.items():
        assert frame.fields[name] == value, name
    again = toy.encode("Hello", "request", {k: v for k, v in frame.fields.items() if k != "magic"})
    assert again == data


def test_toy_response_mark_sits_in_a_packed_word(toy: Decoder) -> None:
    data = toy.encode("Hello", "response", {"priority": 1, "correlation_id": 7, "code": 2})
    frame = toy.decode(data)
    assert (frame.kind, frame.fields["answer"], frame.fields["word"], frame.fields["code"]) == (
        "response",
        1,
        0x8100,
        2,
    )


def test_toy_refuses_what_it_cannot_encode(toy: Decoder) -> None:
    with pytest.raises(EncodeError, match="no case for encoding 5"):
        toy.encode("Hello", "request", {"correlation_id": 1, "flags": 5, "body": {"name": "x"}, "count": 1})


def test_toy_wrong_magic_is_an_error_note(toy: Decoder) -> None:
    data = bytearray(toy.encode("Hello", "response", {"correlation_id": 7, "code": 1}))
    data[:4] = b"TOY2"
    frame = toy.decode(bytes(data))
    assert [e.message for e in frame.expert] == ["Magic is 0x544f5932, expected 0x544f5931"]


def _pcap(path: Path, server_port: int, payloads: list[tuple[bool, bytes]]) -> Path:
    """One TCP connection to server_port (handshake, then a segment per payload), as a pcap."""
    path.write_bytes(tcp_pcap(payloads, server=("10.1.0.2", server_port), client=("10.1.0.1", 45000)))
    return path


def _toy_exchange(toy: Decoder) -> list[tuple[bool, bytes]]:
    one = toy.encode(
        "Hello", "request", {"correlation_id": 1, "flags": 0x81, "body": {"tag": 3, "name": "a"}, "count": 5}
    )
    two = toy.encode(
        "Hello", "request", {"correlation_id": 2, "flags": 0x00, "body": {"name": "bé"}, "count": 2**63}
    )
    answer = toy.encode("Hello", "response", {"correlation_id": 2, "code": 2})
    # Two requests in one segment, then a response split across two segments.
    return [(True, one + two), (False, answer[:9]), (False, answer[9:])]


def test_toy_is_found_by_its_magic_on_any_port(tmp_path: Path, toy: Decoder) -> None:
    path = _pcap(tmp_path / "toy.pcap", 31337, _toy_exchange(toy))
    stats = ReadStats()
    frames = list(read_frames(path, Dissection([toy]), None, stats))
    assert [(f.command, f.kind, f.fields.get("correlation_id")) for f in frames] == [
        ("Hello", "request", 1),
        ("Hello", "request", 2),
        ("Hello", "response", 2),
    ]
    assert all(not f.expert for f in frames)
    assert frames[1].fields["body"] == {"name": "bé"} and frames[1].fields["count"] == 2**63


def test_toy_plugin_agrees_with_python_in_tshark(tmp_path: Path, toy: Decoder) -> None:
    """The generated Lua of a spec no package knows, found by its magic in a real tshark: the
    same frames, fields, links and notes as the Python side."""
    tshark = shutil.which("tshark")
    need(tshark is not None, "tshark is not installed (apt-get install tshark)")
    assert tshark is not None
    plugin = tmp_path / "toy.lua"
    plugin.write_text(luagen.generate(toy.protocol), encoding="utf-8")
    path = _pcap(tmp_path / "toy.pcap", 31337, _toy_exchange(toy))
    args = [tshark, "-X", f"lua_script:{plugin}", "-r", str(path), "-T", "json", "-J", "frame toy"]
    args += ["-o", "tcp.reassemble_out_of_order:TRUE"]
    result = subprocess.run(
        args, capture_output=True, text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    )
    assert result.returncode == 0, result.stderr
    assert not any(e in (result.stdout + result.stderr).lower() for e in LUA_ERRORS), result.stderr
    theirs = tshark_pdus(json.loads(result.stdout, object_pairs_hook=list), "toy")
    renderer = Renderer(toy)
    setup = Setup(Options(), {toy.protocol.name: toy}, Dissection([toy]))
    frames = setup.session().frames(CaptureFile(path))
    ours = [json.loads(renderer.json_line(frame)) for frame in frames]
    assert [f["frame"] for f in ours] == [4, 4, 6] and sorted(theirs) == [4, 6]
    ftypes = field_types(toy.protocol)
    pairs = [(f, theirs[f["frame"]][i]) for i, f in enumerate(ours[:2])] + [(ours[2], theirs[6][0])]
    for frame, tree in pairs:
        diff = compare(flatten_streamdump(frame, frozenset()), flatten_tshark(tree, "toy"), ftypes)
        assert not diff, "\n".join(diff)
    assert ours[2]["links"]["request_in"] == 4
    assert [e["message"] for e in ours[2]["expert"]] == ["Hello (packet 4) failed: NOPE (0x02)"]


# A protocol whose package frames it (lines, as text protocols are): no length field in
# its header, a Python framing rule and its Lua twin.
LINES_SPEC = """
protocol: lines
title: Lines
wiring: {ports: [7001], framing: {rule: package}}
header:
  - key: {type: uint8, display: hex}
commands:
  Say:
    key: 0x53
    command:
      - text: {type: raw, size: rest}
  Quit:
    key: 0x51
    command:
      - text: {type: raw, size: rest}
"""
LINES_PACKAGE = """
from streamdump.spec.framing_rules import DecodedRule
from streamdump.wire.framing import BAD
from streamdump.spec.dissector import Dissector


class LineRule(DecodedRule):
    header_len = 1

    def total(self, buf, start):
        end = buf.find(b"\\n", start)
        if end < 0:
            return BAD if len(buf) - start > 1000 else None
        return end + 1 - start

    def candidates(self, buf, start):
        return [start] + [i + 1 for i in range(start, len(buf)) if buf[i] == 10]


DISSECTOR = Dissector(framing=LineRule, lua=("framing.lua",))
"""
LINES_LUA = """
FRAMING.pdu_length = function(tvb, offset)
  for i = offset, tvb:len() - 1 do
    if tvb(i, 1):uint() == 10 then return i + 1 - offset end
  end
  return 0
end
"""


@pytest.fixture
def lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Decoder:
    folder = tmp_path / "linepkgs" / "lines"
    folder.mkdir(parents=True)
    (folder.parent / "__init__.py").write_text("", encoding="utf-8")
    (folder / "spec.yaml").write_text(LINES_SPEC, encoding="utf-8")
    (folder / "__init__.py").write_text(LINES_PACKAGE, encoding="utf-8")
    (folder / "framing.lua").write_text(LINES_LUA, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return Decoder(load_registry(folder.parent, package="linepkgs").get("lines"))


# Lines split and joined across segments, as a text protocol's are.
LINES_SEGMENTS = [(True, b"Shello\n"), (True, b"Swor"), (True, b"ld\nQbye\n")]


def test_a_package_framing_rule_cuts_text_lines(tmp_path: Path, lines: Decoder) -> None:
    path = _pcap(tmp_path / "lines.pcap", 7001, LINES_SEGMENTS)
    frames = list(read_frames(path, Dissection([lines]), None, ReadStats()))
    assert [(f.number, f.command, bytes(f.fields["text"])) for f in frames] == [
        (4, "Say", b"hello\n"),
        (6, "Say", b"world\n"),
        (6, "Quit", b"bye\n"),
    ]
    assert all(not f.expert for f in frames) and frames[0].size == 7


def test_a_spec_framed_by_its_package_needs_a_rule(tmp_path: Path) -> None:
    folder = tmp_path / "lines"
    folder.mkdir()
    (folder / "spec.yaml").write_text(LINES_SPEC, encoding="utf-8")
    decoder = Decoder(load_registry(tmp_path, package=None).get("lines"))
    with pytest.raises(SpecError, match="framing is 'rule: package', but its package has no framing rule"):
        Dissection([decoder])


def test_a_package_framing_rule_has_its_lua_twin_in_tshark(tmp_path: Path, lines: Decoder) -> None:
    tshark = shutil.which("tshark")
    need(tshark is not None, "tshark is not installed (apt-get install tshark)")
    assert tshark is not None
    plugin = tmp_path / "lines.lua"
    plugin.write_text(luagen.generate(lines.protocol), encoding="utf-8")
    path = _pcap(tmp_path / "lines.pcap", 7001, LINES_SEGMENTS)
    args = [tshark, "-X", f"lua_script:{plugin}", "-r", str(path), "-T", "json", "-J", "frame lines"]
    result = subprocess.run(
        args, capture_output=True, text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    )
    assert result.returncode == 0, result.stderr
    assert not any(e in (result.stdout + result.stderr).lower() for e in LUA_ERRORS), result.stderr
    theirs = tshark_pdus(json.loads(result.stdout, object_pairs_hook=list), "lines")
    renderer = Renderer(lines)
    ours = [
        json.loads(renderer.json_line(f)) for f in read_frames(path, Dissection([lines]), None, ReadStats())
    ]
    assert sorted(theirs) == [4, 6] and [len(theirs[4]), len(theirs[6])] == [1, 2]
    ftypes = field_types(lines.protocol)
    for frame, tree in zip(ours, [theirs[4][0], *theirs[6]], strict=True):
        diff = compare(flatten_streamdump(frame, frozenset()), flatten_tshark(tree, "lines"), ftypes)
        assert not diff, "\n".join(diff)


# ---------------------------------------------------------------- several protocols in one read


def _records(path: Path) -> list[tuple[float, bytes]]:
    with path.open("rb") as f:
        return list(dpkt.pcap.Reader(f))


def _write(path: Path, records: list[tuple[float, bytes]]) -> Path:
    with path.open("wb") as f:
        writer = dpkt.pcap.Writer(f)
        for ts, data in sorted(records, key=lambda r: r[0]):
            writer.writepkt(data, ts=ts)
    return path


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A RabbitMQ Streams session and an ali-ons session, interleaved in one capture."""
    rabbit = _records(CAPTURES / "session.pcap")
    rocket = _records(ROCKETMQ_CAPTURES / "alions.pcap")
    shift = rabbit[0][0] + 0.01 - rocket[0][0]
    path = tmp_path_factory.mktemp("mixed") / "mixed.pcap"
    return _write(path, rabbit + [(ts + shift, data) for ts, data in rocket])


def _moved(path: Path, out: Path, ports: dict[int, int]) -> Path:
    records = []
    for ts, data in _records(path):
        eth = dpkt.ethernet.Ethernet(data)
        tcp = eth.data.data
        tcp.sport, tcp.dport = ports.get(tcp.sport, tcp.sport), ports.get(tcp.dport, tcp.dport)
        tcp.sum = 0
        records.append((ts, bytes(eth)))
    return _write(out, records)


def _jsonl(*args: str) -> list[dict]:
    code, out, err = run("read", *args, "-T", "jsonl")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _essence(frame: dict) -> tuple:
    """What a frame says, without where it sits in its capture (packet numbers differ)."""
    notes = [re.sub(r"packet \d+", "packet N", e["message"]) for e in frame["expert"]]
    return frame["command"], frame["kind"], frame["fields"], notes


def test_a_read_decodes_every_protocol_by_its_ports(mixed: Path) -> None:
    frames = _jsonl(str(mixed))
    assert Counter(f["protocol"] for f in frames) == {"rabbitmq_stream": 56, "rocketmq": 85}
    # Interleaving changes nothing in either protocol's frames.
    for name, alone in (
        ("rabbitmq_stream", CAPTURES / "session.pcap"),
        ("rocketmq", ROCKETMQ_CAPTURES / "alions.pcap"),
    ):
        ours = [_essence(f) for f in frames if f["protocol"] == name]
        theirs = [_essence(f) for f in _jsonl(str(alone))]
        assert ours == theirs, name


def test_protocol_option_limits_the_read(mixed: Path) -> None:
    only = _jsonl(str(mixed), "--protocol", "rocketmq")
    assert {f["protocol"] for f in only} == {"rocketmq"} and len(only) == 85
    both = _jsonl(str(mixed), "-P", "rocketmq", "-P", "rabbitmq_stream")
    assert len(both) == 141
    code, _, err = run("read", str(mixed), "--protocol", "kafka")
    assert code == 2 and err.strip() == (
        "streamdump: error: --protocol kafka: unknown protocol "
        "(known: eventmesh, liftbridge, nats, rabbitmq_stream, rocketmq)"
    )


@pytest.mark.parametrize(
    ("expression", "count"),
    [
        ("rocketmq", 85),
        ("rabbitmq_stream", 56),
        ("rocketmq.code == 105", 5),
        ('rocketmq.topic == "TopicTest"', None),
        ('command == "Publish"', 6),
        ('rabbitmq_stream.stream == "streamdump-demo" or rocketmq.code == 105', None),
    ],
)
def test_filters_name_fields_by_protocol(mixed: Path, expression: str, count: int | None) -> None:
    frames = _jsonl(str(mixed), "-Y", expression)
    if count is not None:
        assert len(frames) == count
    else:
        assert frames
    if expression.startswith("rocketmq."):
        assert {f["protocol"] for f in frames} == {"rocketmq"}


def test_stats_have_a_section_per_protocol(mixed: Path) -> None:
    code, out, err = run("stats", str(mixed))
    assert code == 0, err
    assert "== RabbitMQ Streams ==" in out and "== RocketMQ Remoting ==" in out
    code, out, err = run("stats", str(mixed), "-T", "json")
    assert code == 0, err
    sections = json.loads(out)["protocols"]
    assert set(sections) == {"rabbitmq_stream", "rocketmq"}
    assert sections["rocketmq"]["frames"] == 85 and sections["rabbitmq_stream"]["frames"] == 56
    code, out, _ = run("stats", str(mixed), "-P", "rocketmq", "-T", "json")
    assert "protocols" not in json.loads(out) and json.loads(out)["frames"] == 85


MOVED = {9876: 19876, 10911: 20911}


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _moved(ROCKETMQ_CAPTURES / "alions.pcap", tmp_path_factory.mktemp("moved") / "moved.pcap", MOVED)


def test_moved_ports_decode_as_told(moved: Path) -> None:
    want = [(f["command"], f["kind"], f["fields"]) for f in _jsonl(str(ROCKETMQ_CAPTURES / "alions.pcap"))]
    assert _jsonl(str(moved)) == []
    told = _jsonl(str(moved), "--decode-as", "19876=rocketmq", "--decode-as", "20911=rocketmq")
    assert [(f["command"], f["kind"], f["fields"]) for f in told] == want
    # A port named with one protocol is that protocol's.
    named = _jsonl(str(moved), "-P", "rocketmq", "--port", "19876", "--port", "20911")
    assert [(f["command"], f["kind"], f["fields"]) for f in named] == want
    # Ports named without a protocol: each connection's first frame says which one it speaks.
    guessed = _jsonl(str(moved), "--port", "19876", "--port", "20911")
    assert {f["protocol"] for f in guessed} == {"rocketmq"}
    assert [(f["command"], f["kind"], f["fields"]) for f in guessed] == want


def test_an_unread_capture_says_which_ports_were_read(moved: Path) -> None:
    code, out, err = run("read", str(moved))
    assert code == 0 and out == ""
    assert "--decode-as" in err or "--port" in err, err


def test_decode_as_refuses_bad_values() -> None:
    path = str(ROCKETMQ_CAPTURES / "alions.pcap")
    for bad, says in (
        ("19876", "--decode-as takes PORT=PROTOCOL"),
        ("70000=rocketmq", "--decode-as takes PORT=PROTOCOL"),
        ("19876=kafka", "unknown protocol 'kafka'"),
    ):
        code, out, err = run("read", path, "--decode-as", bad)
        assert code == 2 and out == "", bad
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("streamdump: error: ") and says in lines[0], err


def test_decode_picks_the_protocol_the_bytes_are(toy: Decoder) -> None:
    rocket = REGISTRY.get("rocketmq")
    data = Decoder(rocket).encode(
        "GET_ROUTEINTO_BY_TOPIC", "request", {"serialize_type": 0, "language": 0, "opaque": 3, "topic": "T"}
    )
    code, out, err = run("decode", data.hex(), "--brief")
    assert code == 0, err
    assert "GET_ROUTEINTO_BY_TOPIC request" in out and "topic=T" in out
    code, out, err = run("decode", data.hex(), "--brief", "--protocol", "rabbitmq_stream")
    assert "GET_ROUTEINTO_BY_TOPIC" not in out


def test_protocols_registry_lists_every_shipped_protocol() -> None:
    assert NAMES == ["eventmesh", "liftbridge", "nats", "rabbitmq_stream", "rocketmq"]
    for name in NAMES:
        protocol: Protocol = REGISTRY.get(name)
        assert protocol.source == f"{name}/spec.yaml"
