"""TLS conversations made in memory by Python's ssl (OpenSSL): two SSLObjects over MemoryBIOs,
so every byte each side wrote is known, with the key log the client wrote. The tests feed
these bytes to streamdump's TLS layer, or wrap them in TCP segments of a capture."""

from __future__ import annotations

import datetime
import ssl
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


@cache
def certificate(kind: str = "rsa") -> tuple[str, str]:
    """A self-signed certificate for localhost and its key, as PEM files."""
    key = rsa.generate_private_key(65537, 2048) if kind == "rsa" else ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
        .sign(key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="streamdump-tls-"))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(folder / "cert.pem"), str(folder / "key.pem")


@dataclass
class Conversation:
    chunks: list[tuple[bool, bytes]] = field(default_factory=list)  # (from client, bytes), in order
    keylog: bytes = b""
    session: ssl.SSLSession | None = None
    contexts: tuple[ssl.SSLContext, ssl.SSLContext] | None = None  # (client's, server's), to resume
    cipher: str = ""
    version: str = ""

    def stream(self, from_client: bool) -> bytes:
        return b"".join(data for side, data in self.chunks if side == from_client)


def converse(
    exchanges: list[tuple[bool, bytes]],
    *,
    version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
    ciphers: str | None = None,
    ciphersuites: str | None = None,
    session: ssl.SSLSession | None = None,
    key_update: bool = False,
    alpn: list[str] | None = None,
    cert: str = "rsa",
    keylog: bool = True,
    options: int = 0,
    contexts: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
) -> Conversation:
    """A handshake, then each (from client, data) written by that side and read by the other.
    TLS 1.3 suites are chosen with OpenSSL's ciphersuites through ssl's set_ciphers being
    unable to: the OPENSSL_CONF trick is not needed, as the server's order decides and the
    client offers only what `ciphersuites` names, by a context option (ssl has none): so
    TLS 1.3 suites are picked by the test through the server's ciphers string where possible."""
    certfile, keyfile = certificate(cert)
    if contexts is not None:
        return _converse(exchanges, *contexts, session)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(certfile, keyfile)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    for ctx in (server_ctx, client_ctx):
        ctx.minimum_version = ctx.maximum_version = version
        ctx.options |= options
        if ciphers:
            ctx.set_ciphers(ciphers)
    if alpn:
        client_ctx.set_alpn_protocols(alpn)
        server_ctx.set_alpn_protocols(alpn)
    if keylog:
        log = Path(tempfile.mkdtemp(prefix="streamdump-keylog-")) / "keys.log"
        client_ctx.keylog_filename = str(log)
    return _converse(exchanges, client_ctx, server_ctx, session)


def _converse(
    exchanges: list[tuple[bool, bytes]],
    client_ctx: ssl.SSLContext,
    server_ctx: ssl.SSLContext,
    session: ssl.SSLSession | None,
) -> Conversation:
    log = Path(client_ctx.keylog_filename) if client_ctx.keylog_filename else None
    before = log.stat().st_size if log is not None and log.exists() else 0
    conv = Conversation(contexts=(client_ctx, server_ctx))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost", session=session)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)

    def pump() -> None:
        while True:
            moved = False
            data = c_out.read()
            if data:
                conv.chunks.append((True, data))
                s_in.write(data)
                moved = True
            data = s_out.read()
            if data:
                conv.chunks.append((False, data))
                c_in.write(data)
                moved = True
            if not moved:
                return

    done = {True: False, False: False}
    while not all(done.values()):
        for side, obj in ((True, client), (False, server)):
            if done[side]:
                continue
            try:
                obj.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
        pump()
    pump()
    for from_client, data in exchanges:
        writer, reader = (client, server) if from_client else (server, client)
        writer.write(data)
        pump()
        got = b""
        while len(got) < len(data):
            try:
                got += reader.read(65536)
            except ssl.SSLWantReadError:
                pump()
        assert got == data
    # Reading may have made the client read tickets; write them on.
    pump()
    conv.session = client.session
    conv.cipher = client.cipher()[0]
    conv.version = client.version() or ""
    if log is not None and log.exists():
        conv.keylog = log.read_bytes()[before:]
    return conv
