"""Shared fixtures: the shipped registry, its decoder, and the CI rule for real services."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import Protocol, default_registry

ROOT = Path(__file__).resolve().parent.parent
CAPTURE_ROOT = ROOT / "captures"
# Each protocol's recordings and the scripts that made them, in captures/<protocol>/.
CAPTURES = CAPTURE_ROOT / "rabbitmq_stream"
ROCKETMQ_CAPTURES = CAPTURE_ROOT / "rocketmq"
GOLDEN = Path(__file__).resolve().parent / "golden"


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
