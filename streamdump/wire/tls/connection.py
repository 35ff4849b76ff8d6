"""One TLS connection as the capture shows it: both directions' records, the hellos, the keys
the key log gives, and the plaintext handed on in each direction's own byte positions.

Each direction turns (position, bytes) of its TCP stream into (plain position, plaintext,
record start, record end): application data only, so the inner protocol's framer sees exactly
what the peers' TLS libraries handed their applications. Bytes lost in the TCP stream cut a
record or more: the next record that opens (its sequence number found by trying the numbers
the lost records may have used) ends the loss, which the framer is told as a gap of the plain
bytes the lost records held. What the user must hear (no key, a wrong key, a bad tag, a record
cut by a gap) is a Note, drained by the reader.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from streamdump.wire.reassembly import Gap
from streamdump.wire.tls.handshake import (
    CLIENT_HELLO,
    FINISHED,
    KEY_UPDATE,
    NEW_SESSION_TICKET,
    SERVER_HELLO,
    BadHello,
    ClientHello,
    Messages,
    ServerHello,
    client_hello,
    server_hello,
)
from streamdump.wire.tls.keylog import KeyLog
from streamdump.wire.tls.protection import Aead12, Aead13, BadRecord, Cbc12, Protection
from streamdump.wire.tls.records import (
    ALERT,
    APPLICATION_DATA,
    CHANGE_CIPHER_SPEC,
    HANDSHAKE,
    MAX_RECORD,
    NotRecords,
    Record,
    Records,
    plausible_header,
)
from streamdump.wire.tls.schedule import key_block12, next_secret13
from streamdump.wire.tls.suites import CBC, SUITES, Suite, suite_name, version_name

# After a loss, how many sequence numbers past the expected one are tried (records lost).
MAX_LOST_RECORDS = 4096
# Records tried after a loss before the direction is given up (each try may cost thousands of
# decryptions: the records a loss took are not counted).
MAX_RESYNC_RECORDS = 32
# Bytes searched for the next record after a loss before the oldest are let go.
HUNT_KEPT = 2 * (MAX_RECORD + 5)
# Sessions (TLS 1.2 session ids and tickets) remembered for resumption, per read.
SESSIONS_KEPT = 4096

Output = tuple[int, bytes, int, int] | Gap  # (plain position, plaintext, record start, record end)


class Note(Struct):
    severity: str
    message: str
    number: int


class TlsInfo(Struct):
    """What every view shows of a connection's TLS layer."""

    version: str | None = None
    suite: str | None = None
    sni: str | None = None
    alpn: str | None = None
    keys: str = "waiting"  # found, missing, wrong, waiting (no ServerHello yet)
    resumed: bool = False
    client_random: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "cipher_suite": self.suite,
            "sni": self.sni,
            "alpn": self.alpn,
            "keys": self.keys,
            "resumed": self.resumed,
            "client_random": self.client_random,
        }

    def summary(self) -> str:
        parts = [self.version or "TLS", self.suite or "suite unknown"]
        if self.sni:
            parts.append(f"SNI {self.sni}")
        if self.alpn:
            parts.append(f"ALPN {self.alpn}")
        if self.resumed:
            parts.append("resumed")
        parts.append(f"keys {self.keys}")
        return ", ".join(parts)


class Resumption:
    """TLS 1.2 master secrets by session id and ticket, so that a resumed session whose client
    random the key log lacks is still decrypted (bounded)."""

    def __init__(self) -> None:
        self.masters: dict[bytes, bytes] = {}

    def keep(self, ident: bytes, master: bytes) -> None:
        if ident:
            self.masters[ident] = master
            if len(self.masters) > SESSIONS_KEPT:
                del self.masters[next(iter(self.masters))]

    def get(self, ident: bytes) -> bytes | None:
        return self.masters.get(ident) if ident else None


class Direction(Struct):
    from_client: bool
    records: Records = field(default_factory=Records)
    messages: Messages = field(default_factory=Messages)  # plaintext handshake
    inner: Messages = field(default_factory=Messages)  # protected handshake (TLS 1.3)
    protection: Protection | None = None
    pending: Protection | None = None  # TLS 1.2: in force after this side's ChangeCipherSpec
    secret: bytes | None = None  # TLS 1.3: the traffic secret in force
    app_secret: bytes | None = None  # TLS 1.3: the first application secret, after Finished
    seq: int = 0
    plain: int = 0  # plain bytes handed on
    opened: int = 0
    skipped: int = 0  # protected records not decrypted (no key)
    failed: bool = False  # the keys do not open its records: given up
    dead: bool = False  # not TLS records any more
    # A loss: (stream position from which bytes are lost, the gap) until a record opens again.
    lost: tuple[int, Gap] | None = None
    skip_to: int | None = None  # the next record starts here (a gap cut the one before)
    hunt: bytearray | None = None  # after a loss with no record boundary known: bytes searched
    hunt_pos: int = 0
    resync_tries: int = 0  # records tried since the loss
    hunt_scan: int = 0  # where in hunt the search for a record goes on

    @property
    def name(self) -> str:
        return "client" if self.from_client else "server"


class TlsConnection:
    """One connection's TLS state, both directions."""

    def __init__(self, keylog: KeyLog, where: str = "", sessions: Resumption | None = None) -> None:
        self.keylog = keylog
        self.where = where  # "client -> server", for notes
        self.sessions = sessions if sessions is not None else Resumption()
        self.info = TlsInfo()
        self.client = Direction(True)
        self.server = Direction(False)
        self.notes: list[Note] = []
        self.hello: ClientHello | None = None
        self.shello: ServerHello | None = None
        self.suite: Suite | None = None
        self.tls13 = False
        self.master: bytes | None = None

    # ------------------------------------------------------------------ input

    def data(self, from_client: bool, pos: int, data: bytes, number: int) -> list[Output]:
        d = self.client if from_client else self.server
        out: list[Output] = []
        if d.dead:
            return out
        if d.skip_to is not None:
            if pos + len(data) <= d.skip_to:
                return out
            data, pos = data[max(0, d.skip_to - pos) :], max(pos, d.skip_to)
            d.skip_to = None
            d.records.reset(pos)
        if d.hunt is not None:
            self._hunting(d, pos, data, number, out)
            return out
        try:
            for record in d.records.feed(pos, data):
                self._record(d, record, number, out)
        except NotRecords as exc:
            d.dead = True
            self._note("warn", number, f"{self._side(d)}: {exc}; the rest is not read as TLS")
        return out

    def gap(self, from_client: bool, gap: Gap) -> list[Output]:
        """Bytes of the TCP stream lost: the record they cut and any they took are lost too."""
        d = self.client if from_client else self.server
        if d.dead:
            return []
        if d.protection is None and d.pending is None:
            d.dead = True  # the handshake, or a direction not decrypted anyway
            if self.info.keys in ("found", "waiting") and not d.failed:
                self._note(
                    "warn",
                    gap.number,
                    f"{self._side(d)}: {gap.length} bytes of the TLS handshake lost in a gap; "
                    "the rest of this direction is not decrypted",
                )
            return []
        begun = d.records.pending()
        if d.lost is None:
            start = begun[0] if begun is not None else gap.start
            d.lost = (start, gap)
        if begun is not None:
            self._note(
                "warn",
                gap.number,
                f"{self._side(d)}: TLS record at stream byte {begun[0]} cut by a gap "
                f"({gap.length} bytes missing); its plaintext is lost",
            )
        if d.hunt is None and begun is not None and begun[1] > 0 and begun[0] + begun[1] > gap.end:
            d.skip_to = begun[0] + begun[1]  # the cut record's length says where the next starts
            d.records.reset(d.skip_to)
        elif d.hunt is None and begun is None:
            d.records.reset(gap.end)  # a gap between records: the next starts where it ends
        else:
            d.skip_to = None
            d.hunt, d.hunt_pos, d.hunt_scan = bytearray(), gap.end, 0
        return []

    def finish(self, from_client: bool, number: int) -> list[Output]:
        """The stream ended: a loss no record closed is handed on as a gap to the end."""
        d = self.client if from_client else self.server
        out: list[Output] = []
        if d.lost is not None and not d.dead:
            start, gap = d.lost
            end = d.hunt_pos + len(d.hunt) if d.hunt is not None else max(gap.end, d.records.pos)
            lost = max(1, end - start)
            out.append(Gap(d.plain, d.plain + lost, gap.number, gap.cause))
            d.plain += lost
            d.lost = None
        if d.protection is not None and d.records.held():
            held = d.records.held()
            self._note(
                "warn",
                number,
                f"{self._side(d)}: the connection ended inside a TLS record ({held} bytes held)",
            )
        return out

    def midstream(self, number: int) -> None:
        """The capture starts inside the connection, after its handshake: nothing can be decrypted."""
        self.info.keys = "missing"
        self._note(
            "note",
            number,
            f"{self.where}: the capture starts inside a TLS connection; without its handshake "
            "(the client random) it cannot be decrypted",
        )
        for d in (self.client, self.server):
            d.dead = True

    def held(self) -> int:
        return sum(d.records.held() + len(d.hunt or b"") for d in (self.client, self.server))

    # ------------------------------------------------------------------ records

    def _record(self, d: Direction, record: Record, number: int, out: list[Output]) -> None:
        kind = record.type
        if kind == CHANGE_CIPHER_SPEC:
            if not self.tls13 and d.pending is not None:
                d.protection, d.pending, d.seq = d.pending, None, 0
            return
        if d.protection is None:
            if d.failed:
                return
            if kind == HANDSHAKE and not (self.tls13 and self.shello is not None):
                for message, body in d.messages.feed(record.body):
                    self._handshake(d, message, body, number)
            elif kind == ALERT and len(record.body) == 2 and not self.tls13:
                self._alert(d, record.body, number)
            else:
                d.skipped += 1
            return
        self._open(d, record, number, out)

    def _open(self, d: Direction, record: Record, number: int, out: list[Output]) -> None:
        assert d.protection is not None
        # After a loss, the records it took used the sequence numbers in between (each at least
        # a header, a tag and a byte long).
        tries = 1 if d.lost is None else min(MAX_LOST_RECORDS, (record.pos - d.lost[0]) // 22 + 2)
        opened = self._try(d, record, d.seq, tries)
        if opened is None:
            if d.opened == 0 and d.lost is None:
                d.failed, d.protection = True, None
                self.info.keys = "wrong"
                self._note(
                    "warn",
                    number,
                    f"{self._side(d)}: TLS record does not open with the key log's secrets for "
                    f"client random {self.info.client_random} (authentication failed): a wrong key; "
                    "this direction is not decrypted",
                )
                return
            if d.lost is not None:
                self._still_lost(d, number)  # a record further on may open
                return
            self._note(
                "warn",
                number,
                f"{self._side(d)}: TLS record at stream byte {record.pos} ({len(record.body)} bytes) "
                "failed authentication: a bad tag (damaged bytes); its plaintext is lost",
            )
            size = max(1, len(record.body) + 5 - d.protection.overhead)
            out.append(Gap(d.plain, d.plain + size, number, "TLS record failed authentication"))
            d.plain += size
            d.seq += 1
            return
        inner, plain, seq = opened
        if d.lost is not None:
            start, gap = d.lost
            d.resync_tries = 0
            lost_records = max(0, seq - d.seq)
            size = max(1, record.pos - start - lost_records * d.protection.overhead)
            out.append(Gap(d.plain, d.plain + size, gap.number, gap.cause))
            d.plain += size
            d.lost = None
        d.seq = seq + 1
        d.opened += 1
        if inner == APPLICATION_DATA:
            if plain:
                out.append((d.plain, plain, record.pos, record.end))
                d.plain += len(plain)
        elif inner == HANDSHAKE:
            for message, body in d.inner.feed(plain):
                self._handshake(d, message, body, number)
        elif inner == ALERT and len(plain) == 2:
            self._alert(d, plain, number)

    def _try(self, d: Direction, record: Record, seq: int, tries: int) -> tuple[int, bytes, int] | None:
        """(content type, plaintext, sequence number) of the record under the keys in force (or
        the next ones TLS 1.3 may have moved to), trying `tries` sequence numbers from seq."""
        protection = d.protection
        assert protection is not None
        for n in range(seq, seq + tries):
            try:
                inner, plain = protection.open(record.header, record.body, n)
                return inner, plain, n
            except BadRecord:
                continue
        if self.tls13 and self.suite is not None:
            # A Finished or KeyUpdate this direction sent may have been lost or not read.
            for secret in (d.app_secret, d.secret and next_secret13(self.suite, d.secret)):
                if secret is None or secret == d.secret:
                    continue
                candidate = Aead13(self.suite, secret)
                for n in range(0, tries):
                    try:
                        inner, plain = candidate.open(record.header, record.body, n)
                    except BadRecord:
                        continue
                    d.protection, d.secret, d.seq = candidate, secret, 0
                    if secret == d.app_secret:
                        d.app_secret = None
                    return inner, plain, n
        return None

    def _still_lost(self, d: Direction, number: int) -> None:
        d.resync_tries += 1
        if d.resync_tries >= MAX_RESYNC_RECORDS and not d.dead:
            d.dead = True
            self._note(
                "warn",
                number,
                f"{self._side(d)}: no TLS record opened in the {d.resync_tries} after a loss; "
                "the rest of this direction is not decrypted",
            )

    def _hunting(self, d: Direction, pos: int, data: bytes, number: int, out: list[Output]) -> None:
        """After a loss with no record boundary known: find a record that opens. Offsets before
        d.hunt_scan were tried (or hold no header); a candidate whose record is not whole yet
        waits for more bytes."""
        assert d.hunt is not None
        buf = d.hunt
        buf += data
        for i in range(d.hunt_scan, len(buf) - 4):
            if not plausible_header(buf, i):
                continue
            end = i + 5 + ((buf[i + 3] << 8) | buf[i + 4])
            if end > len(buf):
                d.hunt_scan = i
                break
            record = Record(d.hunt_pos + i, bytes(buf[i : i + 5]), bytes(buf[i + 5 : end]))
            start = d.lost[0] if d.lost is not None else record.pos
            tries = min(MAX_LOST_RECORDS, (record.pos - start) // 22 + 2)
            if d.protection is not None and self._try(d, record, d.seq, tries) is not None:
                rest = bytes(buf[i:])
                d.hunt, d.hunt_scan = None, 0
                d.records.reset(d.hunt_pos + i)
                try:
                    for found in d.records.feed(d.hunt_pos + i, rest):
                        self._open(d, found, number, out)
                except NotRecords as exc:
                    d.dead = True
                    self._note("warn", number, f"{self._side(d)}: {exc}; the rest is not read as TLS")
                return
            self._still_lost(d, number)
            if d.dead:
                return
        else:
            d.hunt_scan = max(0, len(buf) - 4)
        if len(buf) > HUNT_KEPT:
            drop = min(len(buf) - HUNT_KEPT, d.hunt_scan)
            del buf[:drop]
            d.hunt_pos += drop
            d.hunt_scan -= drop

    # ------------------------------------------------------------------ handshake

    def _handshake(self, d: Direction, message: int, body: bytes, number: int) -> None:
        try:
            if message == CLIENT_HELLO and d.from_client and self.hello is None:
                self._client_hello(client_hello(body))
            elif message == SERVER_HELLO and not d.from_client:
                hello = server_hello(body)
                if not hello.retry:
                    self._server_hello(hello, number)
            elif message == FINISHED and self.tls13 and d.app_secret is not None and self.suite:
                d.secret, d.app_secret = d.app_secret, None
                d.protection, d.seq = Aead13(self.suite, d.secret), 0
            elif message == KEY_UPDATE and self.tls13 and d.secret is not None and self.suite:
                d.secret = next_secret13(self.suite, d.secret)
                d.protection, d.seq = Aead13(self.suite, d.secret), 0
            elif message == NEW_SESSION_TICKET and not self.tls13 and len(body) > 6 and self.master:
                self.sessions.keep(body[6:], self.master)
        except BadHello as exc:
            self._note("warn", number, f"{self._side(d)}: TLS hello not read: {exc}")

    def _client_hello(self, hello: ClientHello) -> None:
        self.hello = hello
        self.info.client_random = hello.random.hex()
        self.info.sni = hello.sni
        if hello.alpn:
            self.info.alpn = ",".join(hello.alpn)

    def _server_hello(self, hello: ServerHello, number: int) -> None:
        self.shello = hello
        self.info.version = version_name(hello.version)
        self.info.suite = suite_name(hello.suite)
        if hello.alpn:
            self.info.alpn = hello.alpn
        client = self.hello
        if client is None:
            self.info.keys = "missing"
            self._note("note", number, f"{self.where}: TLS ServerHello without a ClientHello; not decrypted")
            return
        self.tls13 = hello.version == 0x0304
        suite = SUITES.get(hello.suite)
        if suite is None or suite.tls13 != self.tls13 or hello.version not in (0x0303, 0x0304):
            self.info.keys = "unsupported"
            self._note(
                "note",
                number,
                f"{self.where}: TLS {self.info.version} with {self.info.suite} is not decrypted "
                "(streamdump decrypts TLS 1.2 and 1.3 with AES-GCM, ChaCha20-Poly1305 and, in 1.2, AES-CBC)",
            )
            return
        self.suite = suite
        secrets = self.keylog.get(client.random)
        if self.tls13:
            self.info.resumed = hello.psk
            self._keys13(suite, secrets, client, number)
        else:
            self.info.resumed = bool(hello.session_id) and hello.session_id == client.session_id
            self._keys12(suite, secrets, client, hello, number)

    def _keys13(self, suite: Suite, secrets: dict[str, bytes], client: ClientHello, number: int) -> None:
        pairs = (
            (self.client, "CLIENT_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0"),
            (self.server, "SERVER_HANDSHAKE_TRAFFIC_SECRET", "SERVER_TRAFFIC_SECRET_0"),
        )
        found = False
        for d, hs, app in pairs:
            d.app_secret = secrets.get(app)
            d.secret = secrets.get(hs) or d.app_secret
            if d.secret == d.app_secret:
                d.app_secret = None
            if d.secret is not None:
                d.protection, d.seq = Aead13(suite, d.secret), 0
                found = True
        self.info.keys = "found" if found else "missing"
        if not found:
            self._missing(number, "CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0 (TLS 1.3)")

    def _keys12(
        self, suite: Suite, secrets: dict[str, bytes], client: ClientHello, hello: ServerHello, number: int
    ) -> None:
        master = secrets.get("CLIENT_RANDOM")
        if master is None and self.info.resumed:
            master = self.sessions.get(client.ticket) or self.sessions.get(hello.session_id)
        if master is None:
            self.info.keys = "missing"
            self._missing(number, "CLIENT_RANDOM (TLS 1.2)")
            return
        self.master = master
        self.sessions.keep(hello.session_id, master)
        mine, theirs = key_block12(suite, master, client.random, hello.random)
        for d, (mac_key, key, iv) in ((self.client, mine), (self.server, theirs)):
            if suite.cipher == CBC:
                d.pending = Cbc12(suite, mac_key, key, hello.encrypt_then_mac)
            else:
                d.pending = Aead12(suite, key, iv)
        self.info.keys = "found"

    def _missing(self, number: int, labels: str) -> None:
        self._note(
            "note",
            number,
            f"{self.where}: TLS not decrypted: no {labels} in the key log for client random "
            f"{self.info.client_random}",
        )

    def _alert(self, d: Direction, body: bytes, number: int) -> None:
        level, description = body[0], body[1]
        if description != 0:  # close_notify is the normal end
            severity = "warn" if level == 2 else "note"
            what = "fatal" if level == 2 else "warning"
            self._note(severity, number, f"{self._side(d)}: TLS alert {description} ({what})")

    def _side(self, d: Direction) -> str:
        return f"{self.where} ({d.name})"

    def _note(self, severity: str, number: int, message: str) -> None:
        self.notes.append(Note(severity, message, number))
