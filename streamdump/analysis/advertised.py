"""Where a server tells its clients to connect next, as its spec says it does (conversation.advertises):
a broker list's hosts and ports, a map's advertised host and port, "host:port" texts. The proxy
says so when such an address is not its own, since the client will leave it there."""

from __future__ import annotations

from typing import Any

from streamdump.spec.registry import AdvertiseSpec, Protocol
from streamdump.wire.frame import Frame
from streamdump.wire.paths import path_values


def addresses(protocol: Protocol, frame: Frame) -> list[tuple[str, int]]:
    """The addresses a frame tells its client to connect to."""
    out: list[tuple[str, int]] = []
    for spec in protocol.conversation.advertises:
        if frame.command == spec.command and frame.kind != "request":
            out += _found(spec, frame.fields)
    return out


def _found(spec: AdvertiseSpec, fields: dict[str, Any]) -> list[tuple[str, int]]:
    if spec.entries is not None:
        entries = fields.get(spec.entries)
        if not isinstance(entries, dict) or spec.host is None or spec.port is None:
            return []
        host, port = entries.get(spec.host[0]), entries.get(spec.port[0])
        return [(host, int(port))] if isinstance(host, str) and str(port).isdigit() else []
    if spec.address is not None:
        found = []
        for text in _walk(fields, spec.address):
            host, _, port = str(text).rpartition(":")
            if host and port.isdigit():
                found.append((host.strip("[]"), int(port)))
        return found
    assert spec.host is not None and spec.port is not None
    hosts, ports = _walk(fields, spec.host), _walk(fields, spec.port)
    return [(h, p) for h, p in zip(hosts, ports, strict=False) if isinstance(h, str) and isinstance(p, int)]


def _walk(fields: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    """Every value a path names, a map's values for a map."""
    out: list[Any] = []
    for value in path_values(fields, path):
        out.extend(value.values() if isinstance(value, dict) else [value])
    return out
