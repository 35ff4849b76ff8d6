"""Every fuzz target (streamdump.fuzzing) in the normal test run, with hypothesis: committed
frames, streams and captures damaged as attackers and real captures damage them, and bytes
from nowhere. No input may raise, take long, or allocate far beyond its own size.

bench/fuzz.py runs the same targets for millions of inputs under a coverage-guided fuzzer;
what it finds is kept in FINDINGS below, each input fixed and run here for good.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdump.fuzzing import Target, damage, segments_of, targets

TARGETS = targets()
SEEDS = {name: target.seeds() for name, target in TARGETS.items()}
# An input may take this long; a decoder that loops without bound does not stop at all.
PATIENCE_S = 10.0
# Memory an input may make the decoder hold at once, beyond a multiple of its own size: a
# decoder that allocates what a length field claims would need far more.
MEMORY_FLOOR = 32 << 20
MEMORY_PER_BYTE = 200
FINDINGS = Path(__file__).resolve().parent / "hostile"


def bounded(target: Target, data: bytes) -> None:
    tracemalloc.start()
    start = time.perf_counter()
    try:
        target.run(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - start
    assert took < PATIENCE_S, f"{target.name}: {len(data)} bytes took {took:.1f} s"
    assert peak < MEMORY_FLOOR + MEMORY_PER_BYTE * len(data), f"{target.name}: peak {peak >> 20} MiB"


def test_every_protocol_has_its_targets() -> None:
    assert {
        "capture",
        "rabbitmq_stream.decode",
        "rabbitmq_stream.stream",
        "liftbridge.decode",
    } <= TARGETS.keys()
    assert all(SEEDS[name] for name in TARGETS), [name for name in TARGETS if not SEEDS[name]]


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_seeds(name: str, data: st.DataObject) -> None:
    seeds = SEEDS[name]
    seed = seeds[data.draw(st.integers(0, len(seeds) - 1), label="seed")]
    rng = random.Random(data.draw(st.integers(0, 2**32), label="damage"))
    damaged = damage(seed, rng)
    for _ in range(data.draw(st.integers(0, 2), label="more damage")):
        damaged = damage(damaged, rng)
    bounded(TARGETS[name], damaged[:65536])


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=15, deadline=None)
@given(st.binary(max_size=2048))
def test_bytes_from_nowhere(name: str, data: bytes) -> None:
    bounded(TARGETS[name], data)


def test_what_the_fuzzer_found() -> None:
    """Each kept finding (finding.<target>.<name>, the target's own dots included) runs clean."""
    for path in sorted(FINDINGS.glob("finding.*")):
        name = max((n for n in TARGETS if path.name.startswith(f"finding.{n}.")), key=len)
        bounded(TARGETS[name], path.read_bytes())


def test_a_stream_input_makes_a_connection_with_losses() -> None:
    segments = segments_of(bytes(4) + bytes(range(256)) * 200, 5552)
    assert segments[0].payload == b"" and segments[1].payload == b""
    assert sum(len(s.payload) for s in segments) < 256 * 200  # some were lost
    assert {s.dport for s in segments} == {5552, 40000}
