"""Shared fixtures: the shipped registry, its decoder, and the CI rule for real services."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import Protocol, default_registry
from streamdump.wire.capture import Segment
from streamdump.wire.reassembly import TCP_ACK, TCP_SYN

ROOT = Path(__file__).resolve().parent.parent
CAPTURE_ROOT = ROOT / "captures"
# Each protocol's recordings and the scripts that made them, in captures/<protocol>/.
CAPTURES = CAPTURE_ROOT / "rabbitmq_stream"
ROCKETMQ_CAPTURES = CAPTURE_ROOT / "rocketmq"
GOLDEN = Path(__file__).resolve().parent / "golden"


def client_stream(payloads: tuple[bytes, ...], port: int) -> list[Segment]:
    """One client-to-server TCP connection (handshake seen) carrying each payload in one segment."""
    client, server = ("10.0.0.1", 40000), ("10.0.0.2", port)
    segments = [Segment(1, 0.0, client[0], server[0], client[1], server[1], 100, 0, TCP_SYN, b"", 0)]
    seq = 101
    for n, payload in enumerate(payloads, start=2):
        segments.append(
            Segment(
                n, n / 10, client[0], server[0], client[1], server[1], seq, 0, TCP_ACK, payload, len(payload)
            )
        )
        seq += len(payload)
    return segments


def merged(ranges: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Byte ranges per direction, (direction, start, end), with touching ones joined."""
    out: list[tuple[str, int, int]] = []
    for key, start, end in sorted(ranges):
        if out and out[-1][0] == key and out[-1][2] >= start:
            out[-1] = (key, out[-1][1], max(out[-1][2], end))
        else:
            out.append((key, start, end))
    return out


def need(condition: bool, why: str) -> None:
    """Skip on a laptop when a real service or tool is missing; fail in CI, where .ci/run provides it."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"required in CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def protocol() -> Protocol:
    return default_registry().get("rabbitmq_stream")


@pytest.fixture(scope="session")
def decoder(protocol: Protocol) -> Decoder:
    return Decoder(protocol)
