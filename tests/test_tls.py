"""TLS decrypted with key logs: the real captures decode to the frames of their plaintext twins,
every suite streamdump claims opens (TLS 1.3 and 1.2, AES-GCM, ChaCha20-Poly1305, CBC with
HMAC-SHA1/SHA256/SHA384, with and without encrypt-then-MAC), key updates, resumed sessions, a
pcapng file's own secrets, TLS on any port; and bad input gets its note and loses nothing else:
no keys, a wrong key, a bad tag, a record cut by a gap, a key log with junk lines, a ClientHello
split over segments. Conversations other than the captures are made in memory by Python's ssl
(tests/tls_pairs.py), so every byte and secret is OpenSSL's own."""

from __future__ import annotations

import functools
import io
import json
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import dpkt
import pytest
from conftest import ROOT
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tls_pairs import Conversation, converse

from streamdump.analysis.pipeline import Notice
from streamdump.analysis.session import CaptureFile, OptionError, Options
from streamdump.wire.frame import Frame
from streamdump.wire.reassembly import Gap
from streamdump.wire.tls.connection import TlsConnection
from streamdump.wire.tls.keylog import KeyLog

TLS = ROOT / "captures" / "tls"
INFO = b'INFO {"server_id":"S","version":"2.9.10","proto":1,"max_payload":1048576,"tls_required":true}\r\n'
NATS_EXCHANGE = [
    (False, INFO),
    (True, b'CONNECT {"verbose":false,"pedantic":false,"tls_required":true}\r\nPING\r\n'),
    (False, b"PONG\r\n"),
    (True, b"SUB orders.> 1\r\nPUB orders.1 7\r\norder 1\r\n"),
    (False, b"MSG orders.1 1 7\r\norder 1\r\n"),
    (True, b"PUB orders.2 7\r\norder 2\r\n"),
    (False, b"MSG orders.2 1 7\r\norder 2\r\n"),
]
NATS_COMMANDS = ["Info", "Connect", "Ping", "Pong", "Subscribe", "Publish", "Message", "Publish", "Message"]


# ---------------------------------------------------------------------- helpers


def _packet(src: tuple[str, int], dst: tuple[str, int], seq: int, ack: int, flags: int, data: bytes) -> bytes:
    tcp = dpkt.tcp.TCP(sport=src[1], dport=dst[1], seq=seq, ack=ack, flags=flags, win=65535, data=data)
    ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(dst[0]), p=dpkt.ip.IP_PROTO_TCP)
    ip.data = tcp
    ip.len = 20 + len(bytes(tcp))
    eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP)
    eth.data = ip
    return bytes(eth)


def packets(
    chunks: list[tuple[bool, bytes]], port: int, lost: set[int] = frozenset(), split: int = 0
) -> list[bytes]:
    """A connection's packets: handshake, a segment per chunk (the client's first cut in `split`
    pieces), the chunks whose index is in `lost` left out (their bytes a gap), FINs."""
    client, server = ("127.0.0.1", 40000), ("127.0.0.1", port)
    seq = {True: 1000, False: 5000}
    out = []

    def send(from_client: bool, flags: int, data: bytes = b"", keep: bool = True) -> None:
        src, dst = (client, server) if from_client else (server, client)
        if keep:
            out.append(_packet(src, dst, seq[from_client], seq[not from_client], flags, data))
        seq[from_client] += len(data) + (1 if flags & (dpkt.tcp.TH_SYN | dpkt.tcp.TH_FIN) else 0)

    send(True, dpkt.tcp.TH_SYN)
    send(False, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
    send(True, dpkt.tcp.TH_ACK)
    for index, (from_client, data) in enumerate(chunks):
        pieces = [data[i : i + 60000] for i in range(0, len(data), 60000)]
        if index == 0 and split:
            step = -(-len(data) // split)
            pieces = [data[i : i + step] for i in range(0, len(data), step)]
        for piece in pieces:
            send(from_client, dpkt.tcp.TH_PUSH | dpkt.tcp.TH_ACK, piece, keep=index not in lost)
    send(True, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
    send(False, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
    send(True, dpkt.tcp.TH_ACK)
    return out


def write_pcap(path: Path, frames: list[bytes]) -> Path:
    out = io.BytesIO()
    writer = dpkt.pcap.Writer(out)
    for i, frame in enumerate(frames):
        writer.writepkt(frame, ts=1_800_000_000 + i / 1000)
    path.write_bytes(out.getvalue())
    return path


def _block(kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def write_pcapng(path: Path, frames: list[bytes], secrets: bytes) -> Path:
    """A pcapng file with a Decryption Secrets Block (TLS key log) before its packets, as
    `editcap --inject-secrets tls,keys.log` writes it."""
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = _block(1, struct.pack("<HHI", 1, 0, 0))
    dsb = _block(0x0A, struct.pack("<II", 0x544C534B, len(secrets)) + secrets)
    epbs = b""
    for i, frame in enumerate(frames):
        ts = (1_800_000_000 + i) * 1_000_000
        epbs += _block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(frame), len(frame)) + frame)
    path.write_bytes(shb + idb + dsb + epbs)
    return path


def read(
    path: Path, keylogs: tuple[Path, ...] = (), decode_as: tuple[tuple[int, str], ...] = ()
) -> tuple[list[Frame], list[Notice], Any]:
    setup = Options(keylogs=keylogs, decode_as=decode_as).prepare()
    notices: list[Notice] = []
    session = setup.session(on_notice=notices.append)
    frames = []
    for frame in session.frames(CaptureFile(path)):
        setup.decoders[frame.protocol].expand(frame)
        frames.append(frame)
    return frames, notices, session


def keyfile(tmp_path: Path, conv: Conversation, name: str = "keys.log") -> Path:
    path = tmp_path / name
    path.write_bytes(conv.keylog)
    return path


def tls_notes(notices: list[Notice]) -> list[str]:
    return [n.message for n in notices if n.kind == "tls"]


def converse_with(ciphersuite: str, tmp_path: Path, exchanges: list[tuple[bool, bytes]]) -> Conversation:
    """A TLS 1.3 conversation with one suite: Python's ssl cannot choose TLS 1.3 suites, so a
    child process is given an OpenSSL configuration that does."""
    conf = tmp_path / "openssl.cnf"
    conf.write_text(
        "openssl_conf = default_conf\n[default_conf]\nssl_conf = ssl_sect\n[ssl_sect]\n"
        f"system_default = system_default_sect\n[system_default_sect]\nCiphersuites = {ciphersuite}\n"
    )
    script = (
        "import json, sys; sys.path.insert(0, 'tests'); from tls_pairs import converse; "
        "x = [(c, bytes.fromhex(d)) for c, d in json.loads(sys.stdin.read())]; c = converse(x); "
        "print(json.dumps({'chunks': [(s, d.hex()) for s, d in c.chunks], 'keylog': c.keylog.hex(), "
        "'cipher': c.cipher}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([(c, d.hex()) for c, d in exchanges]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OPENSSL_CONF": str(conf)},
        check=True,
    )
    got = json.loads(proc.stdout)
    assert got["cipher"] == ciphersuite, got["cipher"]
    return Conversation([(s, bytes.fromhex(d)) for s, d in got["chunks"]], bytes.fromhex(got["keylog"]))


def nats_read(
    tmp_path: Path, conv: Conversation, port: int = 4222, **kw: Any
) -> tuple[list[Frame], list[Notice]]:
    pcap = write_pcap(tmp_path / "c.pcap", packets(conv.chunks, port, **kw))
    frames, notices, _ = read(pcap, (keyfile(tmp_path, conv),))
    return frames, notices


# ---------------------------------------------------------------------- the real captures

# What differs between two runs of a scenario (times, ids, ports, the server's name), or between
# TLS and plaintext by design (the port advertised, INFO's tls_required).
VOLATILE = {
    "timestamp", "crc", "port", "advertised_port", "client_id", "client_ip", "server_id", "server_name",
    "nonce", "tls_required",
}  # fmt: skip
INBOX = re.compile(r"_INBOX\.[A-Za-z0-9.]+")


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, str):
        return INBOX.sub("_INBOX.*", value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if hasattr(value, "as_json"):  # what hooks decode (messages, entries), as JSON shows it
        return _stable(value.as_json())
    return value if isinstance(value, int | float | bool | type(None)) else repr(value)


def dialogues(frames: list[Frame]) -> list[list[tuple[Any, ...]]]:
    """Each direction's frames of each connection in order, as (command, kind, stable fields):
    the order between the two directions is the peers' race, not the protocol's."""
    by_side: dict[tuple[int, bool | None], list[tuple[Any, ...]]] = {}
    for frame in frames:
        by_side.setdefault((frame.conn, frame.from_client), []).append(
            (frame.command, frame.kind, json.dumps(_stable(frame.fields), sort_keys=True))
        )
    return [by_side[n] for n in sorted(by_side)]


@pytest.mark.parametrize("name", ["rstream_tls13", "rstream_tls12"])
def test_rstream_over_tls_decodes_to_the_plaintext_frames(name: str) -> None:
    frames, notices, _ = read(TLS / f"{name}.pcap", (TLS / f"{name}.keys",))
    plain, _, _ = read(TLS / "rstream_plain.pcap")
    assert len(frames) == len(plain) == 162
    assert dialogues(frames) == dialogues(plain)
    assert all(f.tls is not None and f.tls.keys == "found" for f in frames)
    version = "TLSv1.3" if name.endswith("13") else "TLSv1.2"
    assert {f.tls.version for f in frames} == {version}
    assert not tls_notes(notices)
    bodies = [
        m
        for f in frames
        if f.command == "Deliver"
        for m in json.dumps(_stable(f.fields)).split('"data": ')[1:]
    ]
    assert len(bodies) == 20


def test_nats_upgrade_decodes_to_the_plaintext_frames() -> None:
    frames, notices, _ = read(TLS / "nats_tls.pcap", (TLS / "nats_tls.keys",), ((4443, "nats"),))
    plain, _, _ = read(TLS / "nats_plain.pcap", (), ((4442, "nats"),))

    assert dialogues(frames) == dialogues(plain)
    assert frames[0].command == "Info" and frames[0].tls is None  # INFO came before TLS
    assert all(f.tls is not None and f.tls.version == "TLSv1.3" for f in frames[1:])
    assert not tls_notes(notices)


def test_real_capture_without_keys_gives_one_note_per_connection() -> None:
    frames, notices, _ = read(TLS / "rstream_tls13.pcap")
    assert frames == []
    notes = tls_notes(notices)
    logged = {
        line.split()[1] for line in (TLS / "rstream_tls13.keys").read_text().splitlines() if line[:1] != "#"
    }
    assert len(notes) == len(logged) == 6  # one per connection, naming its client random
    assert {n.rsplit(" ", 1)[1] for n in notes} == logged
    assert all("no CLIENT_TRAFFIC_SECRET_0" in n for n in notes)


# ---------------------------------------------------------------------- suites


@pytest.mark.parametrize(
    "suite", ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]
)
def test_tls13_suites(suite: str, tmp_path: Path) -> None:
    conv = converse_with(suite, tmp_path, NATS_EXCHANGE)
    frames, notices = nats_read(tmp_path, conv)
    assert [f.command for f in frames] == NATS_COMMANDS
    assert {f.tls.suite for f in frames} == {suite}
    assert not tls_notes(notices)


TLS12 = [
    ("ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0),
    ("ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 0),
    ("ECDHE-RSA-CHACHA20-POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", 0),
    ("ECDHE-RSA-AES128-SHA", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0),
    ("ECDHE-RSA-AES256-SHA", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0),
    ("AES128-SHA256", "TLS_RSA_WITH_AES_128_CBC_SHA256", 0),
    ("ECDHE-RSA-AES256-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", 0),
    # OpenSSL's SSL_OP_NO_ENCRYPT_THEN_MAC: CBC as MAC-then-encrypt
    ("ECDHE-RSA-AES128-SHA", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 1 << 19),
    ("AES256-SHA256", "TLS_RSA_WITH_AES_256_CBC_SHA256", 1 << 19),
]


@pytest.mark.parametrize(("ciphers", "suite", "options"), TLS12)
def test_tls12_suites(ciphers: str, suite: str, options: int, tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE, version=ssl.TLSVersion.TLSv1_2, ciphers=ciphers, options=options)
    frames, notices = nats_read(tmp_path, conv)
    assert [f.command for f in frames] == NATS_COMMANDS
    assert {f.tls.suite for f in frames} == {suite}
    assert {f.tls.version for f in frames} == {"TLSv1.2"}
    assert not tls_notes(notices)


def test_large_messages_span_records_and_segments(tmp_path: Path) -> None:
    payload = os.urandom(70000).hex().encode()  # 140 KB: many records, and segments cut by MAX_SEGMENT
    exchange = [*NATS_EXCHANGE[:4], (True, b"PUB big %d\r\n%s\r\n" % (len(payload), payload))]
    conv = converse(exchange)
    frames, notices = nats_read(tmp_path, conv)
    big = [f for f in frames if f.command == "Publish" and f.fields.get("subject") == "big"]
    assert len(big) == 1 and big[0].fields["data"] == payload
    assert not tls_notes(notices)


# ---------------------------------------------------------------------- key update, resumption


def _expand_label(secret: bytes, label: bytes, length: int) -> bytes:
    """RFC 8446 7.1, written out here rather than taken from streamdump."""
    full = b"tls13 " + label
    info = struct.pack("!HB", length, len(full)) + full + b"\0"
    return HKDFExpand(hashes.SHA384(), length, info).derive(secret)


def test_key_update(tmp_path: Path) -> None:
    """After the client's KeyUpdate, its records are under the next traffic secret (made here by
    RFC 8446's own recipe, from the secret the key log gives): still decrypted."""
    conv = converse(NATS_EXCHANGE)
    assert conv.cipher == "TLS_AES_256_GCM_SHA384"
    lines = [line.split() for line in conv.keylog.decode().splitlines() if line[:1] != "#"]
    secrets = {label: bytes.fromhex(secret) for label, _, secret in lines}
    secret = secrets["CLIENT_TRAFFIC_SECRET_0"]
    records = [r for r in _records(conv.stream(True)) if r[0] == 23]
    # The client's records under its application secret: Finished used the handshake secret.
    sent_after_handshake = len(records) - 1

    def seal(secret: bytes, seq: int, inner: bytes, ctype: int) -> bytes:
        key, iv = _expand_label(secret, b"key", 32), _expand_label(secret, b"iv", 12)
        plain = inner + bytes([ctype])
        header = bytes([23, 3, 3]) + struct.pack("!H", len(plain) + 16)
        nonce = (int.from_bytes(iv, "big") ^ seq).to_bytes(12, "big")
        return header + AESGCM(key).encrypt(nonce, plain, header)

    update = seal(secret, sent_after_handshake, b"\x18\x00\x00\x01\x00", 22)  # KeyUpdate, no update asked
    following = seal(_expand_label(secret, b"traffic upd", 48), 0, b"PUB after.update 2\r\nok\r\n", 23)
    chunks = [*conv.chunks, (True, update), (True, following)]
    frames, notices = nats_read(tmp_path, Conversation(chunks, conv.keylog))
    assert [f.command for f in frames][-1] == "Publish"
    assert frames[-1].fields["subject"] == "after.update"
    assert not tls_notes(notices)


def _records(stream: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at + 5 <= len(stream):
        length = struct.unpack("!H", stream[at + 3 : at + 5])[0]
        out.append((stream[at], stream[at : at + 5 + length]))
        at += 5 + length
    return out


GCM128 = "ECDHE-RSA-AES128-GCM-SHA256"


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_resumed_session(version: ssl.TLSVersion, tmp_path: Path) -> None:
    first = converse(NATS_EXCHANGE, version=version, ciphers=GCM128)
    assert first.session is not None
    again = converse(NATS_EXCHANGE, session=first.session, contexts=first.contexts)
    keys = first.keylog + again.keylog
    frames_packets = packets(first.chunks, 4222) + [
        p.replace(b"\x9c\x40", b"\x9c\x41", 1) for p in packets(again.chunks, 4222)
    ]
    pcap = write_pcap(tmp_path / "r.pcap", frames_packets)
    (tmp_path / "k.log").write_bytes(keys)
    frames, notices, _ = read(pcap, (tmp_path / "k.log",))
    assert [f.command for f in frames] == NATS_COMMANDS * 2
    resumed = [f.tls.resumed for f in frames]
    assert resumed == [False] * len(NATS_COMMANDS) + [True] * len(NATS_COMMANDS)
    assert not tls_notes(notices)
    if version is ssl.TLSVersion.TLSv1_2:
        # Without the resumed connection's line, its master secret is the first session's.
        (tmp_path / "k.log").write_bytes(first.keylog)
        frames, notices, _ = read(pcap, (tmp_path / "k.log",))
        assert [f.command for f in frames] == NATS_COMMANDS * 2


# ---------------------------------------------------------------------- where TLS is found


def test_pcapng_decryption_secrets_block(tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE)
    pcapng = write_pcapng(tmp_path / "c.pcapng", packets(conv.chunks, 4222), conv.keylog)
    frames, notices, _ = read(pcapng)  # no --tls-keylog: the file carries its secrets
    assert [f.command for f in frames] == NATS_COMMANDS
    assert not tls_notes(notices)


def test_tls_first_on_a_port_of_no_protocol(tmp_path: Path) -> None:
    """NATS's handshake_first: TLS before INFO, on a port no spec names: the decrypted bytes
    say it is NATS."""
    conv = converse(NATS_EXCHANGE)
    frames, _ = nats_read(tmp_path, conv, port=7443)
    assert [f.command for f in frames] == NATS_COMMANDS
    assert all(f.protocol == "nats" for f in frames)


def test_rabbitmq_streams_tls_port_is_5551() -> None:
    from streamdump.spec.registry import default_registry

    assert default_registry().get("rabbitmq_stream").wiring.tls_ports == (5551,)


# ---------------------------------------------------------------------- bad input


def test_no_keys_one_note_no_ciphertext_frames(tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE)
    pcap = write_pcap(tmp_path / "c.pcap", packets(conv.chunks, 4222))
    frames, notices, _ = read(pcap)
    assert frames == []
    notes = tls_notes(notices)
    client_random = conv.keylog.split()[1].decode()
    assert len(notes) == 1 and client_random in notes[0]
    assert not [n for n in notices if n.kind in ("skipped", "gap")]


def test_wrong_key(tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE)
    lines = []
    for line in conv.keylog.decode().splitlines():
        if line.startswith("#"):
            continue
        label, random, secret = line.split()
        lines.append(f"{label} {random} {bytes(b ^ 1 for b in bytes.fromhex(secret)).hex()}")
    conv.keylog = "\n".join(lines).encode()
    frames, notices = nats_read(tmp_path, conv)
    assert [f.command for f in frames] == ["Info"] * 0
    notes = tls_notes(notices)
    assert len(notes) == 2 and all("wrong key" in n for n in notes)  # one per direction


def test_bad_tag_loses_one_record(tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE)
    chunks = list(conv.chunks)
    # The client's second PUB: flip its last byte (the tag).
    index = max(i for i, (c, _) in enumerate(chunks) if c)
    chunks[index] = (True, chunks[index][1][:-1] + bytes([chunks[index][1][-1] ^ 0xFF]))
    frames, notices = nats_read(tmp_path, Conversation(chunks, conv.keylog))
    assert [f.command for f in frames] == [*NATS_COMMANDS[:-2], "Message"]
    notes = tls_notes(notices)
    assert len(notes) == 1 and "bad tag" in notes[0]


def test_record_cut_by_a_gap(tmp_path: Path) -> None:
    """A record whose segments a capture lost: a note, then the next records open again."""
    payload = b"x" * 3000
    exchange = [*NATS_EXCHANGE, (True, b"PUB lost 3000\r\n" + payload + b"\r\nPUB after 2\r\nok\r\n")]
    conv = converse(exchange)
    chunks = list(conv.chunks)
    last, data = chunks[-1]
    assert last  # the client's final write: one record of the PUBs, cut in three segments here
    chunks[-1:] = [(True, data[:1000]), (True, data[1000:2000]), (True, data[2000:])]
    frames, notices = nats_read(tmp_path, Conversation(chunks, conv.keylog), lost={len(chunks) - 2})
    assert [f.command for f in frames][: len(NATS_COMMANDS)] == NATS_COMMANDS
    notes = tls_notes(notices)
    assert any("cut by a gap" in n for n in notes), notes
    assert any(n.kind == "gap" for n in notices)


def test_record_cut_by_a_gap_then_next_record(tmp_path: Path) -> None:
    """Two client writes (two records); the first's middle is lost: the second still decodes."""
    exchange = [
        *NATS_EXCHANGE,
        (True, b"PUB lost 3000\r\n" + b"x" * 3000 + b"\r\n"),
        (True, b"PUB after 2\r\nok\r\n"),
    ]
    conv = converse(exchange)
    chunks = list(conv.chunks)
    at = len(chunks) - 2
    side, data = chunks[at]
    chunks[at : at + 1] = [(side, data[:1000]), (side, data[1000:2000]), (side, data[2000:])]
    frames, notices = nats_read(tmp_path, Conversation(chunks, conv.keylog), lost={at + 1})
    after = [f for f in frames if f.fields.get("subject") == "after"]
    assert len(after) == 1 and after[0].incomplete is None
    assert any("cut by a gap" in n for n in tls_notes(notices))


def test_junk_lines_in_the_key_log(tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE)
    conv.keylog = b"# a comment\nnot a key line\nCLIENT_RANDOM zz 00\n" + conv.keylog + b"\n\x1b[31mred\n"
    frames, notices = nats_read(tmp_path, conv)
    assert [f.command for f in frames] == NATS_COMMANDS
    notes = tls_notes(notices)
    assert len(notes) == 1 and "3 lines not understood" in notes[0]


def test_split_client_hello(tmp_path: Path) -> None:
    conv = converse(NATS_EXCHANGE, alpn=["nats"])
    frames, notices = nats_read(tmp_path, conv, split=7)
    assert [f.command for f in frames] == NATS_COMMANDS
    assert frames[0].tls.sni == "localhost" and frames[0].tls.alpn == "nats"
    assert not tls_notes(notices)


def test_missing_key_log_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="--tls-keylog"):
        Options(keylogs=(tmp_path / "none.log",)).prepare()


def test_cli_read_with_keylog_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streamdump", "read", str(TLS / "rstream_tls12.pcap"), "--tls-keylog",
         str(TLS / "rstream_tls12.keys"), "-T", "jsonl", "-c", "12"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows and all(r["tls"]["version"] == "TLSv1.2" for r in rows)
    assert rows[0]["tls"]["cipher_suite"] == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
    assert rows[0]["tls"]["keys"] == "found"


# ---------------------------------------------------------------------- hostile bytes


@functools.cache
def _keyed_conversation() -> Conversation:
    return converse(NATS_EXCHANGE)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.booleans(), st.binary(max_size=400)), max_size=12),
    st.integers(0, 2**16),
    st.integers(0, 255),
    st.booleans(),
)
def test_the_tls_layer_takes_any_bytes(garbage: list, at: int, xor: int, hello: bool) -> None:
    """Garbage, and a real conversation with a byte changed and garbage after it: notes, never
    an exception; the plaintext handed on only grows."""
    conv = _keyed_conversation()
    keylog = KeyLog()
    keylog.add(conv.keylog, "test")
    chunks = list(conv.chunks) if hello else []
    if chunks:
        index = at % len(chunks)
        side, data = chunks[index]
        pos = at % len(data)
        chunks[index] = (side, data[:pos] + bytes([data[pos] ^ (xor or 1)]) + data[pos + 1 :])
    tls = TlsConnection(keylog, "c -> s")
    position = {True: 0, False: 0}
    plain = {True: 0, False: 0}
    for side, data in chunks + garbage:
        for out in tls.data(side, position[side], data, 1):
            start = out.start if isinstance(out, Gap) else out[0]
            assert start == plain[side]
            plain[side] = out.end if isinstance(out, Gap) else out[0] + len(out[1])
        position[side] += len(data)
    for side in (True, False):
        tls.finish(side, 2)


def test_a_gap_across_records_is_hunted_past(tmp_path: Path) -> None:
    """A loss that takes the end of one record and the start of the next: the records after it
    are found by their headers and the sequence number the lost ones leave."""
    writes = [
        (True, b"PUB one 600\r\n" + b"1" * 600 + b"\r\n"),
        (True, b"PUB two 600\r\n" + b"2" * 600 + b"\r\n"),
    ]
    writes += [(True, b"PUB three 5\r\nthree\r\n"), (True, b"PUB four 4\r\nfour\r\n")]
    conv = converse([*NATS_EXCHANGE, *writes])
    tail = [data for side, data in conv.chunks[-4:]]
    assert all(side for side, _ in conv.chunks[-4:])
    stream = b"".join(tail)
    cut = len(tail[0]) - 100  # 100 bytes before the first record's end: a 400-byte loss crosses into the next
    pieces = [stream[:cut], stream[cut : cut + 400], stream[cut + 400 :]]
    chunks = [*conv.chunks[:-4], *((True, p) for p in pieces)]
    frames, notices = nats_read(tmp_path, Conversation(chunks, conv.keylog), lost={len(chunks) - 2})
    subjects = [f.fields.get("subject") for f in frames if f.command == "Publish"]
    assert subjects[-2:] == ["three", "four"], subjects
    assert "one" not in subjects and "two" not in subjects
    assert any("cut by a gap" in n for n in tls_notes(notices))


def test_capture_starting_inside_a_tls_connection(tmp_path: Path) -> None:
    """No handshake, no SYN: the records are not decoded as frames, and one note says why."""
    conv = converse(NATS_EXCHANGE)
    every = packets(conv.chunks, 4222)
    pcap = write_pcap(tmp_path / "m.pcap", every[3 + 6 :])  # from the client's second write on
    frames, notices, _ = read(pcap, (keyfile(tmp_path, conv),))
    assert frames == []
    notes = tls_notes(notices)
    assert len(notes) == 1 and "starts inside a TLS connection" in notes[0]
    assert not [n for n in notices if n.kind == "skipped"]


def test_a_key_log_still_being_written_is_read_on(tmp_path: Path) -> None:
    """A live capture starts before the client writes its secrets: a client random not found is
    looked for again in what the file gained since."""
    first, second = converse(NATS_EXCHANGE), converse(NATS_EXCHANGE)
    log = tmp_path / "keys.log"
    log.write_bytes(first.keylog + second.keylog[:40])  # the second's lines not yet (a line cut short)
    keylog = KeyLog()
    keylog.load(log)
    random = bytes.fromhex(second.keylog.decode().split("\n")[-2].split()[1])
    log.write_bytes(first.keylog + second.keylog)
    assert keylog.get(random)
    assert keylog.junk == 0


def test_nats_upgrade_on_a_port_of_no_protocol() -> None:
    """Without --decode-as: the plaintext INFO before TLS waits with the decrypted bytes until
    they show the protocol, and nothing is lost."""
    keys = (TLS / "nats_tls.keys",)
    named, _, _ = read(TLS / "nats_tls.pcap", keys, ((4443, "nats"),))
    found, notices, _ = read(TLS / "nats_tls.pcap", keys)
    assert dialogues(found) == dialogues(named)
    assert found[0].command == "Info" and found[0].tls is None
    assert not tls_notes(notices)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["read", "-V", "-c", "9"],
            "Transport Layer Security: TLSv1.3, TLS_AES_256_GCM_SHA384, keys found",
        ),
        (["read", "-c", "9"], "PeerProperties request 0x0011 corr=1 [TLSv1.3]"),
        (["follow", "--connection", "1"], "decrypted from TLS: TLSv1.3, TLS_AES_256_GCM_SHA384"),
        (["stats"], "127.0.0.1:5551 (TLSv1.3)"),  # the connections table's server column
        (["stats", "-T", "json"], '"tls": "TLSv1.3, TLS_AES_256_GCM_SHA384, keys found"'),
    ],
)
def test_every_view_shows_the_tls_layer(command: list[str], expected: str) -> None:
    args = [*command, str(TLS / "rstream_tls13.pcap"), "--tls-keylog", str(TLS / "rstream_tls13.keys")]
    proc = subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout
