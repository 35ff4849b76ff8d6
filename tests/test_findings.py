"""The kinds of finding: every one the tracker makes is in the table, and every plugin registers them."""

from __future__ import annotations

import pytest

from streamdump.spec.registry import default_registry
from streamdump.wire.findings import FINDINGS, expert_entries, expert_name
from streamdump.wireshark import luagen
from tests.test_conversation import EXPECTED


def test_names_are_the_kind_with_an_unusual_severity_added() -> None:
    assert expert_name("error_response", "warn") == "error_response"
    assert expert_name("unanswered", "warn") == "unanswered"
    assert expert_name("unanswered", "note") == "unanswered.note"
    with pytest.raises(ValueError, match="never error"):
        expert_name("unanswered", "error")
    names = [name for name, *_ in expert_entries()]
    assert len(names) == len(set(names))


def test_every_finding_of_the_refusal_captures_has_an_entry() -> None:
    entries = {(kind, severity) for _, kind, _, severity in expert_entries()}
    found = {(kind, severity) for rows in EXPECTED.values() for severity, kind, *_ in rows}
    assert found and found <= entries


@pytest.mark.parametrize("name", sorted(default_registry().protocols))
def test_every_plugin_registers_every_kind(name: str) -> None:
    # One table for every protocol (the plugin holds it once and hands it to each).
    experts = luagen.experts_table()
    assert "experts" not in luagen.spec_table(default_registry().protocols[name])
    assert {entry["kind"] for entry in experts} == {k for k, f in FINDINGS.items() if f.on_frame}
    for entry in experts:
        assert entry["group"] == FINDINGS[entry["kind"]].group
        assert entry["name"] == expert_name(entry["kind"], entry["severity"])
