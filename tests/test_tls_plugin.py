"""The plugin over TLS: Wireshark's own TLS dissector decrypts with the key log
(`-o tls.keylog_file:`) and feeds the generated plugin (tls.port for RabbitMQ Streams' 5551, the
plaintext of a NATS connection after its upgrade); tshark 4.0 and 4.4 show the frames streamdump
shows with `--tls-keylog`, field by field, as tests/test_wireshark.py checks plaintext."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_wireshark import (
    FLAVOURS,
    LUA_ERRORS,
    UNINFLATABLE_IN,
    AmqpNames,
    compare,
    field_types,
    flatten_streamdump,
    flatten_tshark,
    plugin_of,
    related,
    tshark_pdus,
    tshark_run,
    without_uninflatable,
)

from streamdump.spec.registry import default_registry

TLS = ROOT / "captures" / "tls"
CASES = [
    ("rabbitmq_stream", "rstream_tls13", None),
    ("rabbitmq_stream", "rstream_tls12", None),
    ("nats", "nats_tls", 4443),
]


def tshark_tls(
    name: str, capture: Path, keys: Path, port: int | None, flavour: str, tmp: Path
) -> tuple[Any, str]:
    files = [plugin_of(plugin) for plugin in related(name)] + [keys, capture]

    def args(paths: list[str]) -> list[str]:
        out = [arg for plugin in paths[:-2] for arg in ("-X", f"lua_script:{plugin}")]
        out += ["-o", f"tls.keylog_file:{paths[-2]}", "-r", paths[-1], "-T", "json", "-J", f"frame {name}"]
        return out + (["-d", f"tcp.port=={port},{name}"] if port else [])

    result = tshark_run(flavour, files, args, tmp)
    assert result.returncode == 0, f"tshark failed ({result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout, object_pairs_hook=list), result.stdout + result.stderr


def streamdump_tls(name: str, capture: Path, keys: Path, port: int | None) -> list[dict[str, Any]]:
    args = [
        sys.executable,
        "-m",
        "streamdump",
        "read",
        str(capture),
        "-T",
        "jsonl",
        "--tls-keylog",
        str(keys),
    ]
    args += ["--decode-as", f"{port}={name}"] if port else []
    result = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=True)
    return [json.loads(line) for line in result.stdout.splitlines()]


def tls_differences(name: str, stem: str, port: int | None, flavour: str, tmp: Path) -> Iterator[str]:
    protocol = default_registry().get(name)
    capture, keys = TLS / f"{stem}.pcap", TLS / f"{stem}.keys"
    packets, text = tshark_tls(name, capture, keys, port, flavour, tmp)
    for marker in LUA_ERRORS:
        assert marker not in text.lower(), f"{marker!r} in tshark's output"
    theirs = tshark_pdus(packets, name)
    ours: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for frame in streamdump_tls(name, capture, keys, port):
        if frame["protocol"] == name:
            ours[frame["frame"]].append(frame)
    assert sum(map(len, ours.values())) > 20
    maps = frozenset(spec.name for spec in protocol.all_fields() if spec.type == "map")
    opaque = frozenset(s.name for s in protocol.all_fields() if s.type == "json" and not s.fields)
    amqp_names = AmqpNames.of(protocol)
    ftypes = field_types(protocol)
    for number in sorted(set(ours) | set(theirs)):
        mine, other = ours.get(number, []), theirs.get(number, [])
        if len(mine) != len(other):
            yield f"packet {number}: streamdump has {len(mine)} frames, tshark {len(other)}"
            continue
        for index, (frame, tree) in enumerate(zip(mine, other, strict=True)):
            expected = flatten_streamdump(
                frame, maps, opaque, ftypes, protocol.frame.key, protocol.key_formatter(), amqp_names
            )
            actual = flatten_tshark(tree, name)
            if any(group == "undecoded" for group, _, _ in actual.expert):
                without_uninflatable(expected, UNINFLATABLE_IN[flavour])
                actual.expert = [e for e in actual.expert if e[0] != "undecoded"]
            diff = compare(expected, actual, ftypes)
            if diff:
                yield f"packet {number} frame {index} ({frame.get('command')}):\n" + "\n".join(diff)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("name", "stem", "port"), CASES, ids=[c[1] for c in CASES])
def test_tshark_decrypts_and_the_plugin_agrees(
    name: str, stem: str, port: int | None, flavour: str, tmp_path: Path
) -> None:
    found = list(tls_differences(name, stem, port, flavour, tmp_path))
    assert not found, f"{len(found)} differences; first ones:\n" + "\n\n".join(found[:5])


def test_the_plugin_registers_the_tls_port() -> None:
    text = plugin_of("rabbitmq_stream").read_text()
    assert "tls_ports = { 5551 }," in text
    assert 'DissectorTable.get("tls.port")' in text and 'register_heuristic("tls"' in text
