"""Keys from secrets: TLS 1.3's HKDF-Expand-Label (RFC 8446 7.1, 7.2, 7.3) and TLS 1.2's PRF
and key block (RFC 5246 5, 6.3)."""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import hmac
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from streamdump.wire.tls.suites import CBC, HASHES, Suite


def expand_label(hash_name: str, secret: bytes, label: str, context: bytes, length: int) -> bytes:
    full = b"tls13 " + label.encode()
    info = struct.pack("!HB", length, len(full)) + full + bytes([len(context)]) + context
    return HKDFExpand(HASHES[hash_name](), length, info).derive(secret)


def traffic_keys13(suite: Suite, secret: bytes) -> tuple[bytes, bytes]:
    """(key, iv) of a TLS 1.3 traffic secret."""
    return (
        expand_label(suite.prf, secret, "key", b"", suite.key_len),
        expand_label(suite.prf, secret, "iv", b"", 12),
    )


def next_secret13(suite: Suite, secret: bytes) -> bytes:
    """The traffic secret after a KeyUpdate."""
    return expand_label(suite.prf, secret, "traffic upd", b"", len(secret))


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    h = hmac.HMAC(key, HASHES[hash_name]())
    h.update(data)
    return h.finalize()


def prf12(hash_name: str, secret: bytes, label: bytes, seed: bytes, length: int) -> bytes:
    """TLS 1.2's PRF: P_hash(secret, label + seed)."""
    seed = label + seed
    out = bytearray()
    a = seed
    while len(out) < length:
        a = _hmac(hash_name, secret, a)
        out += _hmac(hash_name, secret, a + seed)
    return bytes(out[:length])


def key_block12(
    suite: Suite, master: bytes, client_random: bytes, server_random: bytes
) -> tuple[tuple[bytes, bytes, bytes], tuple[bytes, bytes, bytes]]:
    """((MAC key, key, IV) of the client, (the same) of the server) from the master secret."""
    mac, key, iv = suite.mac_len if suite.cipher == CBC else 0, suite.key_len, suite.fixed_iv_len
    block = prf12(suite.prf, master, b"key expansion", server_random + client_random, 2 * (mac + key + iv))
    parts = []
    pos = 0
    for size in (mac, mac, key, key, iv, iv):
        parts.append(block[pos : pos + size])
        pos += size
    return (parts[0], parts[2], parts[4]), (parts[1], parts[3], parts[5])
