"""The cipher suites streamdump decrypts, and what each needs: its cipher, key and IV sizes,
its MAC and the hash of its key schedule (TLS 1.3) or PRF (TLS 1.2)."""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from msgspec import Struct

GCM = "gcm"
CHACHA = "chacha20-poly1305"
CBC = "cbc"

HASHES = {"sha1": hashes.SHA1, "sha256": hashes.SHA256, "sha384": hashes.SHA384}


class Suite(Struct, frozen=True):
    ident: int
    name: str
    tls13: bool
    cipher: str  # GCM, CHACHA or CBC
    key_len: int
    prf: str  # the key schedule's or the PRF's hash
    mac: str | None = None  # CBC's HMAC hash

    @property
    def mac_len(self) -> int:
        return HASHES[self.mac].digest_size if self.mac else 0

    @property
    def fixed_iv_len(self) -> int:
        """TLS 1.2's implicit IV from the key block (GCM's salt, ChaCha20's whole nonce)."""
        if self.tls13 or self.cipher == CHACHA:
            return 12
        return 4 if self.cipher == GCM else 0


def _suites(*rows: tuple) -> dict[int, Suite]:
    return {row[0]: Suite(*row) for row in rows}


SUITES = _suites(
    (0x1301, "TLS_AES_128_GCM_SHA256", True, GCM, 16, "sha256"),
    (0x1302, "TLS_AES_256_GCM_SHA384", True, GCM, 32, "sha384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256", True, CHACHA, 32, "sha256"),
    (0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    (0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    (0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    (0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    (0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    (0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    (0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    (0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    (0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", False, CHACHA, 32, "sha256"),
    (0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", False, CHACHA, 32, "sha256"),
    (0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", False, CHACHA, 32, "sha256"),
    (0xC013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1"),
    (0xC014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1"),
    (0xC009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1"),
    (0xC00A, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1"),
    (0x002F, "TLS_RSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1"),
    (0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1"),
    (0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1"),
    (0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1"),
    (0x003C, "TLS_RSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256"),
    (0x003D, "TLS_RSA_WITH_AES_256_CBC_SHA256", False, CBC, 32, "sha256", "sha256"),
    (0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256"),
    (0x006B, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", False, CBC, 32, "sha256", "sha256"),
    (0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256"),
    (0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256"),
    (0xC028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", False, CBC, 32, "sha384", "sha384"),
    (0xC024, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384", False, CBC, 32, "sha384", "sha384"),
)


def suite_name(ident: int) -> str:
    suite = SUITES.get(ident)
    return suite.name if suite is not None else f"0x{ident:04x}"


VERSIONS = {0x0300: "SSLv3", 0x0301: "TLSv1.0", 0x0302: "TLSv1.1", 0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}


def version_name(version: int) -> str:
    return VERSIONS.get(version, f"0x{version:04x}")
