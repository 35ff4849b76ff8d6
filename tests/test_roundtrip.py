"""Encode then decode every command, direction and version of the registry, with generated values."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_strategies import comparable, struct_strategy

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

PROTOCOL = default_registry().get("rabbitmq_stream")
ENTRIES = [
    (command.name, kind, version)
    for command in PROTOCOL.commands.values()
    for kind in command.layouts
    for version in command.versions
]


def test_every_reference_command_is_in_the_registry() -> None:
    keys = {c.key for c in PROTOCOL.commands.values()}
    assert keys == set(range(0x0001, 0x001F))
    # 21 request/response pairs, Credit and Tune (one-way plus response), 5 one-way
    # commands, and version 2 of Publish and Deliver.
    assert len(ENTRIES) == 21 * 2 + 2 * 2 + 5 + 2 + 2


@pytest.mark.parametrize(("command", "kind", "version"), ENTRIES, ids=lambda v: str(v))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(decoder: Decoder, command: str, kind: str, version: int, data: st.DataObject) -> None:
    layout = PROTOCOL.commands[command].layouts[kind]
    values = data.draw(struct_strategy(layout.fields, version))
    wire = decoder.encode(command, kind, values, version=version)
    frame = decoder.decode(wire)
    assert frame.expert == []
    assert (frame.command, frame.kind, frame.version, frame.key) == (command, kind, version, layout.key)
    assert comparable(frame.fields) == values
    assert decoder.encode(command, kind, frame.fields, version=version) == wire
    # What hooks find below the headers (entries, decompressed sub-batches) is consistent too;
    # generated records may happen to look like broken AMQP, which is only a warning.
    expanded = decoder.expand(decoder.decode(wire))
    assert [e for e in expanded.expert if e.severity == "error"] == []
