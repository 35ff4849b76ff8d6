"""Recovering whole elements behind a gap: the cheap look at each start's increasing field, and
stepping over candidates by their sizes, pick exactly the chains a decode at every start would.

Islands are cut from real Publish frames (the session capture's) and from hypothesis' frames,
with bounds around, inside and beyond their publishing ids; `_island` with the rule's probe must
give what it gives without one.
"""

from __future__ import annotations

from conftest import CAPTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from streamdump.dissectors.rabbitmq_stream.osiris import read_entry

from streamdump.analysis import tail
from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.spec.layout import BadValue, Short
from streamdump.spec.registry import default_registry

DECODER = Decoder(default_registry().get("rabbitmq_stream"))
PUBLISH = [
    f.data
    for f in read_frames(CAPTURES / "bulk.pcap", DECODER, None, ReadStats())
    if f.command == "Publish" and len(f.data) > 200
]
RULES = [rule for _, ops in DECODER.compiled.values() if (rule := tail.tail_rule(ops)) is not None]
RULE = next(rule for rule in RULES if rule.array == "messages")


def test_the_publish_rule_has_a_probe_and_steps() -> None:
    assert RULE.probe is not None
    assert RULE.probe[2:] == (0, 8, "big")  # publishing_id, the element's first 8 bytes
    assert RULE.steps is not None and RULE.steps[0] == 8  # then the entry hook's skip


@given(st.binary(max_size=40), st.binary(max_size=12), st.integers(0, 16))
def test_an_entry_is_skipped_to_where_it_is_read_to(head: bytes, body: bytes, pos: int) -> None:
    entry = RULE.element.ops[1].hook
    data = head + body
    pos = min(pos, len(data))
    try:
        _, read_end = read_entry(memoryview(data), pos, len(data), "entry")
    except (Short, BadValue):
        read_end = None
    assert entry.skip(data, pos, len(data)) == read_end
    # The general step-by-step walk: a publishing id's 8 bytes, then the entry.
    padded = bytes(8) + data
    assert tail._stepped(RULE.steps, padded, pos) == (None if read_end is None else read_end + 8)


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    st.one_of(st.none(), st.integers(-5, 2000)),
    st.one_of(st.none(), st.integers(-5, 2000)),
    st.booleans(),
)
def test_the_probe_keeps_the_chains_a_decode_everywhere_finds(
    data: st.DataObject, floor: int | None, ceiling: int | None, exact: bool
) -> None:
    frame = data.draw(st.sampled_from(PUBLISH))
    start = data.draw(st.integers(0, len(frame) - 1))
    stop = data.draw(st.integers(start, min(len(frame), start + 3000)))
    island = frame[start:stop]
    everywhere = replace(RULE, probe=None, steps=None)
    assert tail._island(RULE, island, floor, ceiling, exact_end=exact) == tail._island(
        everywhere, island, floor, ceiling, exact_end=exact
    )


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.sampled_from(["big", "little"]))
def test_common_bytes_are_shared_by_every_value_between(a: int, b: int, order: str) -> None:
    lo, hi = min(a, b), max(a, b)
    common = tail._common_bytes(lo, hi, 8, order)
    for value in {lo, hi, (lo + hi) // 2}:
        encoded = value.to_bytes(8, order)  # type: ignore[arg-type]
        assert encoded.startswith(common) if order == "big" else encoded.endswith(common)
