"""Opening one protected record: TLS 1.3's AEAD (the inner content type after the padding),
TLS 1.2's AES-GCM (explicit nonce), ChaCha20-Poly1305 (RFC 7905) and CBC with its HMAC, MAC
then encrypt or encrypt then MAC (RFC 7366). Each direction's sequence number is the caller's:
after a gap, it tries the numbers the lost records may have used."""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import constant_time, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from streamdump.wire.tls.schedule import traffic_keys13
from streamdump.wire.tls.suites import CBC, CHACHA, HASHES, Suite

TAG = 16
_SEQ_HEAD = struct.Struct("!QBHH")


class BadRecord(Exception):
    """A record that does not open: its tag or MAC is wrong (a wrong key or damage) or its
    padding or length is impossible."""


def _aead(suite: Suite, key: bytes) -> AESGCM | ChaCha20Poly1305:
    return ChaCha20Poly1305(key) if suite.cipher == CHACHA else AESGCM(key)


class Protection:
    """One direction's keys, as one epoch of records uses them."""

    # Bytes each record adds around its plaintext (header included), to size what a gap took.
    overhead = 5 + TAG

    def open(self, header: bytes, body: bytes, seq: int) -> tuple[int, bytes]:
        """(content type, plaintext) of the record, or BadRecord."""
        raise NotImplementedError


class Aead13(Protection):
    overhead = 5 + TAG + 1

    def __init__(self, suite: Suite, secret: bytes) -> None:
        self.suite, self.secret = suite, secret
        key, iv = traffic_keys13(suite, secret)
        self.aead = _aead(suite, key)
        self.iv = int.from_bytes(iv, "big")

    def open(self, header: bytes, body: bytes, seq: int) -> tuple[int, bytes]:
        try:
            inner = self.aead.decrypt((self.iv ^ seq).to_bytes(12, "big"), body, header)
        except InvalidTag:
            raise BadRecord("authentication failed") from None
        inner = inner.rstrip(b"\0")
        if not inner:
            raise BadRecord("no content type in the record")
        return inner[-1], inner[:-1]


class Aead12(Protection):
    def __init__(self, suite: Suite, key: bytes, iv: bytes) -> None:
        self.chacha = suite.cipher == CHACHA
        self.aead = _aead(suite, key)
        self.salt = iv
        self.iv = int.from_bytes(iv, "big") if self.chacha else 0
        self.overhead = 5 + TAG + (0 if self.chacha else 8)

    def open(self, header: bytes, body: bytes, seq: int) -> tuple[int, bytes]:
        if self.chacha:
            nonce, data = (self.iv ^ seq).to_bytes(12, "big"), body
        else:
            nonce, data = self.salt + body[:8], body[8:]
        size = len(data) - TAG
        if size < 0:
            raise BadRecord("record shorter than its tag")
        aad = _SEQ_HEAD.pack(seq, header[0], (header[1] << 8) | header[2], size)
        try:
            return header[0], self.aead.decrypt(nonce, data, aad)
        except InvalidTag:
            raise BadRecord("authentication failed") from None


class Cbc12(Protection):
    def __init__(self, suite: Suite, mac_key: bytes, key: bytes, encrypt_then_mac: bool) -> None:
        assert suite.cipher == CBC and suite.mac is not None
        self.algorithm = algorithms.AES(key)
        self.mac_hash = HASHES[suite.mac]
        self.mac_key = mac_key
        self.mac_len = suite.mac_len
        self.etm = encrypt_then_mac
        self.overhead = 5 + 16 + self.mac_len + 1  # IV, MAC, at least one byte of padding

    def _mac(self, seq: int, header: bytes, data: bytes) -> bytes:
        h = hmac.HMAC(self.mac_key, self.mac_hash())
        h.update(_SEQ_HEAD.pack(seq, header[0], (header[1] << 8) | header[2], len(data)))
        h.update(data)
        return h.finalize()

    def _decrypt(self, iv_and_data: bytes) -> bytes:
        if len(iv_and_data) < 32 or len(iv_and_data) % 16:
            raise BadRecord("CBC record not a whole number of blocks")
        decryptor = Cipher(self.algorithm, modes.CBC(iv_and_data[:16])).decryptor()
        return decryptor.update(iv_and_data[16:]) + decryptor.finalize()

    @staticmethod
    def _unpad(data: bytes) -> bytes:
        pad = data[-1]
        if pad + 1 > len(data) or data[-pad - 1 :] != bytes([pad]) * (pad + 1):
            raise BadRecord("bad CBC padding")
        return data[: -pad - 1]

    def open(self, header: bytes, body: bytes, seq: int) -> tuple[int, bytes]:
        if self.etm:
            if len(body) < self.mac_len:
                raise BadRecord("record shorter than its MAC")
            sealed, mac = body[: -self.mac_len], body[-self.mac_len :]
            if not constant_time.bytes_eq(self._mac(seq, header, sealed), mac):
                raise BadRecord("MAC check failed")
            return header[0], self._unpad(self._decrypt(sealed))
        content = self._unpad(self._decrypt(body))
        if len(content) < self.mac_len:
            raise BadRecord("record shorter than its MAC")
        data, mac = content[: -self.mac_len], content[-self.mac_len :]
        if not constant_time.bytes_eq(self._mac(seq, header, data), mac):
            raise BadRecord("MAC check failed")
        return header[0], data
