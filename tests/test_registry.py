"""The registry loader: the shipped spec is complete, and a bad spec is refused with file and entry named."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from streamdump.spec.registry import Protocol, SpecError, load_registry, load_spec, spec_dir

MINIMAL = """
protocol: demo
title: Demo
wiring: {ports: [1234], framing: {length: size}}
header:
  - size: uint32
  - key: uint16
  - version: uint16
enums:
  code: {1: OK}
structs:
  pair:
    - a: uint8
    - b: string
commands:
  Ping:
    key: 0x0001
    request:
      - correlation_id: uint32
{extra}
"""


def spec(extra: str = "", replace: tuple[str, str] | None = None) -> str:
    text = MINIMAL.replace("{extra}", textwrap.indent(textwrap.dedent(extra), "      ") if extra else "")
    if replace:
        text = text.replace(*replace)
    return text


def refuse(text: str, *fragments: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(Path("demo.yaml"), text)
    message = str(info.value)
    assert message.startswith("demo.yaml: "), message
    for fragment in fragments:
        assert fragment in message, message


def test_minimal_spec_loads() -> None:
    proto = load_spec(Path("demo.yaml"), spec("- pairs: {type: array, of: pair}"))
    assert proto.commands["Ping"].layouts["request"].fields[1].of.struct == "pair"  # type: ignore[union-attr]


def test_shipped_registry(protocol: Protocol) -> None:
    assert protocol.wiring.ports == (5552,)
    assert protocol.enums["response_code"][0x02] == "Stream does not exist"
    assert protocol.enums["offset_type"] == {
        0: "none",
        1: "first",
        2: "last",
        3: "next",
        4: "offset",
        5: "timestamp",
    }
    assert protocol.commands["Publish"].versions == (1, 2)
    assert protocol.commands["Deliver"].versions == (1, 2)
    assert protocol.layout(0x0009, True).fields[0].name == "response_code"  # type: ignore[union-attr]
    assert protocol.layout(0x0014, False).kind == "command"  # type: ignore[union-attr]
    assert protocol.layout(0x0002, True) is None
    names = {f.name for f in protocol.all_fields()}
    assert {"correlation_id", "response_code", "stream", "publisher_id", "subscription_id"} <= names


def test_responses_with_keys_of_their_own_and_keys_by_name() -> None:
    text = spec(replace=(PING, PING_PONG.replace("request: 1, response: 2", "request: PING, response: PONG")))
    text = text.replace("  - key: uint16\n", "  - key: {type: uint16, enum: keys, display: name}\n")
    text = text.replace("  code: {1: OK}\n", "  code: {1: OK}\n  keys: {1: PING, 2: PONG}\n")
    proto = load_spec(Path("demo.yaml"), text)
    assert proto.commands["Ping"].key == 1 and proto.answers == {2: 1}
    assert proto.layout(1, True).wire == 2  # type: ignore[union-attr]
    assert proto.key_formatter()(2) == "PONG"


def test_specs_are_found_where_installed() -> None:
    assert (spec_dir() / "rabbitmq_stream" / "spec.yaml").is_file()


PING = "  Ping:\n    key: 0x0001\n    request:\n      - correlation_id: uint32\n"
# Ping answered by a response with a key of its own.
PING_PONG = (
    "  Ping:\n    key: {request: 1, response: 2}\n    request:\n      - correlation_id: uint32\n"
    "    response:\n      - correlation_id: uint32\n"
)

HOOKS = """hooks:
  osiris_chunk: {adds: [{ok: {type: bool}}]}
  osiris_entry: {value: [x]}
hook_structs:
  shape:
    - flag: bool
commands:"""

BAD_SPECS = [
    (spec("- x: {type: uint8, secret: true}"), ["'secret: true' applies to string fields only"]),
    (
        spec(replace=("    key: 0x0001\n", "    key: {request: 1, answer: 2}\n")),
        ["commands.Ping.key", "must be a key"],
    ),
    (
        spec(replace=("    key: 0x0001\n", "    key: {request: 1, response: 2}\n")),
        ["names a response key but"],
    ),
    (
        spec(replace=(PING, "  Pong:\n    key: 2\n    command: []\n" + PING_PONG)),
        ["commands.Ping.key", "key 0x0002 is already used"],
    ),
    (spec() + "conversation:\n  identity: {product: Ping.nothing}\n", ["Ping.nothing", "no such field"]),
    (spec() + "conversation:\n  close: [{command: Ping, says: x, colour: red}]\n", ["conversation.close"]),
    (spec(replace=("    key: 0x0001\n", "    key: 0x0001\n    key: 0x0002\n")), ["duplicate key 'key'"]),
    (spec("- x: float32"), ["commands.Ping.request.x", "unknown type 'float32'"]),
    (spec("- x: {type: raw, size: nope}"), ["commands.Ping.request.x", "size refers to 'nope'"]),
    (spec("- x: {type: uint8, when: {missing: [1]}}"), ["'when' refers to 'missing'"]),
    (spec("- x: {type: uint8, enum: colour}"), ["unknown enum 'colour'"]),
    (spec("- x: {type: string, enum: code}"), ["an enum needs an integer field"]),
    (spec("- x: {type: uint8, colour: red}"), ["unknown attribute(s) ['colour']"]),
    (spec("- x: {type: uint8, since: 2}"), ["since 2 is not a version"]),
    (spec("- correlation_id: uint8"), ["duplicate field name"]),
    (spec("- b: uint8"), ["field 'b' is uint8 here but string at structs.pair.b"]),
    (spec("- x: {type: array}"), ["an array needs 'of'"]),
    (spec("- BadName: uint8"), ["must be snake_case"]),
    (
        spec(replace=("  Ping:\n", "  Pong:\n    key: 0x0001\n    command: []\n  Ping:\n")),
        ["already used by Pong"],
    ),
    (spec(replace=("    - b: string\n", "    - b: pair\n")), ["struct 'pair' contains itself"]),
    (spec(replace=("protocol: demo", "protocol: Demo")), ["must be snake_case"]),
    (spec(replace=("header:", "headers:")), ["missing 'header'"]),
    (spec("- x: {type: raw, size: 2, hook: nothing}"), ["unknown hook 'nothing'"]),
    (
        spec("- x: {type: uint8, hook: osiris_chunk}", replace=("commands:", HOOKS)),
        ["applies to raw, bytes, string, json and hook"],
    ),
    (
        spec(
            "- x: {type: array, of: {type: raw, size: 1, hook: osiris_chunk}}", replace=("commands:", HOOKS)
        ),
        ["array elements"],
    ),
    (spec("- x: {type: hook, hook: osiris_entry}", replace=("commands:", HOOKS)), ["must name a struct"]),
    (spec("- x: shape", replace=("commands:", HOOKS)), ["unknown type 'shape'"]),
    (spec("- x: float"), ["only describes what a hook adds"]),
    (spec("- kind: uint8"), ["field name 'kind' is taken by the frame itself"]),
    (spec("- links: uint8"), ["field name 'links' is taken by the frame itself"]),
    (spec("- x: {type: uint32, display: colour}"), ["unknown display 'colour'"]),
    (
        spec(replace=("commands:", "conversation:\n  correlation: correlation_id\ncommands:")),
        ["conversation.links", "correlation links frames by request_in, response_in, response_time"],
    ),
    ("protocol: [unclosed", ["not valid YAML"]),
    ("- just a list", ["top level must be a mapping"]),
]


@pytest.mark.parametrize(("text", "fragments"), BAD_SPECS, ids=[f[0] for _, f in BAD_SPECS])
def test_bad_specs_are_refused(text: str, fragments: list[str]) -> None:
    refuse(text, *fragments)


def test_registry_finds_protocol_folders_named_as_their_protocol(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "spec.yaml").write_text(spec())
    (tmp_path / "loose.yaml").write_text(spec())  # not in a protocol folder: not a protocol
    registry = load_registry(tmp_path, package=None)
    assert list(registry.protocols) == ["demo"] and registry.get("demo").package is None
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "spec.yaml").write_text(spec())
    with pytest.raises(SpecError, match=r"other/spec.yaml: protocol 'demo' must live in a folder"):
        load_registry(tmp_path, package=None)
    with pytest.raises(SpecError, match="no protocol specs"):
        load_registry(tmp_path / "nowhere")


def test_amqp_section_names_are_the_amqp_hooks(protocol: Protocol) -> None:
    """The registry's section enum (filters, the plugin) and the AMQP decoder name sections alike."""
    from streamdump.codecs import amqp

    assert dict(protocol.enums["amqp_section"]) == amqp.SECTION_NAMES


def test_the_frame_names_agree() -> None:
    """What filters, the registry and the plugin call the frame's own names are one set."""
    from streamdump.analysis import fieldnames
    from streamdump.spec import registry
    from streamdump.wireshark import luagen

    header = {"key", "version", "size"}  # the frame's header: fields of every frame, not reserved
    assert set(fieldnames.FRAME_NAMES) - header <= registry.FRAME_NAMES
    assert {name for name, _, _ in luagen.FRAME_FIELDS} - header <= registry.FRAME_NAMES
