"""A protocol's own conversation rules live in its package: the engine calls them, the spec's
section is the rule's to parse, and the plugin has a twin of every rule that tells on a frame.

A toy package made here (not shipped) adds a rule of its own, and shows what a new protocol
needs: its folder with a spec, a package declaring the rule, and nothing in the core.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT

from streamdump.analysis.pipeline import Dissection
from streamdump.analysis.rules import Rule
from streamdump.analysis.session import CaptureFile, Options, Setup
from streamdump.analysis.tracker import Tracker
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import SpecError, default_registry, load_spec

REGISTRY = default_registry()


@pytest.mark.parametrize("name", sorted(REGISTRY.protocols))
def test_every_rule_that_tells_on_a_frame_has_its_lua_twin(name: str) -> None:
    protocol = REGISTRY.get(name)
    dissector = dissector_of(protocol)
    lua = "\n".join(
        (ROOT / "dissectors" / name / file).read_text(encoding="utf-8")
        for file in dissector.lua
        if ":" not in file
    )
    used = [cls for cls in dissector.rules if cls.key in protocol.conversation.rules]
    assert {cls.key for cls in used} == set(protocol.conversation.rules)
    for cls in used:
        twin = f"CONV_RULES.{cls.key} =" in lua
        tells = cls.lua(protocol.conversation.rules[cls.key], protocol) is not None
        assert twin == tells, f"{name}: rule {cls.key}: twin {twin}, tells on a frame {tells}"


def test_the_engine_keeps_no_key_only_one_protocol_uses() -> None:
    """A conversation key the engine reads serves several protocols (or none yet); what one
    protocol alone uses is a rule of its package."""
    from streamdump.spec.model import CONVERSATION_ATTRS

    generic = {"links", "codes", "server", "advertises", "close_hints", "ending", "peer_properties"}
    for key in CONVERSATION_ATTRS - generic:
        users = [n for n, p in REGISTRY.protocols.items() if _uses(p.conversation, key)]
        assert len(users) != 1, f"conversation.{key} serves {users[0]} alone: make it a rule of its package"


def _uses(conversation: object, key: str) -> bool:
    name = {"close": "closes", "status": "status"}.get(key, key)
    value = getattr(conversation, name, None)
    return bool(value)


# ---------------------------------------------------------------- a toy package with a rule of its own

TOY = """
protocol: toyrules
title: Toy with rules
short: ToyRules
wiring:
  ports: [7001]
  framing: {length: size, counts: after}
header:
  - size: uint32
  - key: uint16
  - correlation_id: uint32
frame:
  key: key
  response: {field: key, mask: 0x8000}
commands:
  Echo:
    key: 0x0001
    request:
      - text: string
    response:
      - text: string
conversation:
  correlation: correlation_id
  shouting: {command: Echo, field: text}
  links:
    - request_in: {type: uint32, display: request_packet}
    - response_in: {type: uint32, display: response_packet}
    - response_time: float
"""

PACKAGE = '''
from typing import Any
from streamdump.analysis.rules import Rule
from streamdump.spec.dissector import Dissector


class Shouting(Rule):
    """Text in capitals is shouting: told on the frame, and counted to the end."""

    key = "shouting"

    @classmethod
    def parse(cls, raw: Any, check: Any) -> Any:
        if not isinstance(raw, dict) or set(raw) != {"command", "field"}:
            raise check.fail("conversation.shouting", "must be {command, field}")
        return check.ref(f"{raw['command']}.{raw['field']}", "conversation.shouting")

    def feed(self, conn: Any, frame: Any) -> None:
        text = frame.fields.get(self.spec.path[0])
        if frame.command == self.spec.command and isinstance(text, str) and text.isupper():
            self.state(conn, list).append(frame.number)
            self.tracker.note(conn, frame, "note", "content", "shouting", f"{text!r} is shouted")

    def finish(self, conn: Any) -> None:
        shouted = conn.rules.get(self.key) or []
        if len(shouted) > 1:
            told = f"{len(shouted)} shouts"
            self.tracker.diagnose_at(conn, shouted[0], "note", "content", "shouting", told)


DISSECTOR = Dissector(rules=(Shouting,))
'''


@pytest.fixture()
def toy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "toyrules"
    folder.mkdir()
    (folder / "__init__.py").write_text(PACKAGE, encoding="utf-8")
    (folder / "spec.yaml").write_text(TOY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield folder
    sys.modules.pop("toyrules", None)


def test_a_package_adds_a_rule_the_core_knows_nothing_of(toy_package: Path) -> None:
    protocol = load_spec(toy_package / "spec.yaml", package="toyrules")
    assert str(protocol.conversation.rules["shouting"]) == "Echo.text"
    decoder = Decoder(protocol)
    tracker = Tracker(protocol)
    frames = []
    for number, (text, kind, corr) in enumerate(
        [("hello", "request", 1), ("hello", "response", 1), ("HEY", "request", 2), ("YOU", "request", 3)], 1
    ):
        frame = decoder.decode(decoder.encode("Echo", kind, {"correlation_id": corr, "text": text}))
        frame.number, frame.ts, frame.conn, frame.from_client = number, number / 10, 1, kind == "request"
        tracker.feed(frame)
        frames.append(frame)
    tracker.finish()
    assert [e.message for e in frames[2].expert] == ["'HEY' is shouted"]
    assert frames[1].links is not None and frames[1].links["request_in"] == 1  # the engine pairs as before
    told = [(d.kind, d.message) for d in tracker.diagnoses if d.summary == "shouting"]
    assert ("content", "2 shouts") in told
    assert [d.kind for d in tracker.diagnoses].count("unanswered") == 2  # HEY and YOU


def test_a_rule_parses_its_section_and_the_registry_names_the_file(toy_package: Path) -> None:
    bad = TOY.replace("shouting: {command: Echo, field: text}", "shouting: {command: Echo}")
    with pytest.raises(SpecError, match=r"toyrules.*conversation\.shouting: must be \{command, field\}"):
        load_spec(Path("toyrules.yaml"), bad, package="toyrules")
    unknown = TOY.replace("shouting:", "whispering:")
    with pytest.raises(SpecError, match=r"conversation\.whispering: unknown key .*shouting"):
        load_spec(Path("toyrules.yaml"), unknown, package="toyrules")
    # A spec without a package has no rules to offer.
    with pytest.raises(SpecError, match=r"conversation\.shouting: unknown key"):
        load_spec(Path("toyrules.yaml"), TOY)


def test_a_rule_reads_frames_a_session_analyses(toy_package: Path, tmp_path: Path) -> None:
    from pcap_writer import tcp_pcap

    protocol = load_spec(toy_package / "spec.yaml", package="toyrules")
    decoder = Decoder(protocol)
    shout = decoder.encode("Echo", "request", {"correlation_id": 1, "text": "LOUD"})
    answer = decoder.encode("Echo", "response", {"correlation_id": 1, "text": "ok"})
    path = tmp_path / "toy.pcap"
    path.write_bytes(
        tcp_pcap([(True, shout), (False, answer)], server=("10.1.0.2", 7001), client=("10.1.0.1", 45000))
    )
    setup = Setup(Options(), {protocol.name: decoder}, Dissection([decoder]))
    session = setup.session()
    frames = list(session.frames(CaptureFile(path)))
    assert [e.message for e in frames[0].expert] == ["'LOUD' is shouted"]
    assert frames[1].links and frames[1].links["request_in"] == frames[0].number


def test_every_declared_rule_is_a_rule_with_a_key() -> None:
    keys = []
    for protocol in REGISTRY.protocols.values():
        for cls in dissector_of(protocol).rules:
            assert issubclass(cls, Rule) and cls.key, cls
            keys.append((protocol.name, cls.key))
    assert len(keys) == len(set(keys))
