"""The broker side of a recording: where it listens, its stream plugin, the client, the cleanup.

Owns the connection settings (127.0.0.1:5552, guest/guest, vhost /), the names of every
stream the recordings (and bench/record_flood.py) create, the check that the stream plugin
listens (enabling it when it does not), `StreamClient` (rstream's low-level client plus the
Close exchange rstream skips), and the cleanup connection that deletes leftover streams
before tcpdump starts.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import time

import rstream
from rstream import schema
from rstream.client import Client
from rstream.exceptions import StreamDoesNotExist
from system_tools import find_program

log = logging.getLogger("record")

HOST = "127.0.0.1"
PORT = 5552
VHOST = "/"
USERNAME = "guest"
PASSWORD = "guest"
WRONG_PASSWORD = "not-the-password"

SESSION_STREAM = "streamdump-demo"
OFFSETS_STREAM = "streamdump-offsets"
MISSING_STREAM = "streamdump-missing"
BULK_STREAM = "streamdump-bulk"
COMPRESSION_STREAM = "streamdump-compression"
TRACKING_STREAM = "streamdump-tracking"
# scenarios_refusals.py: deleted_stream deletes its stream itself, the others delete theirs
# at the end; a failed run leaves them behind.
DELETED_STREAM = "streamdump-deleted"
CREDIT_STREAM = "streamdump-credit"
LARGE_STREAM = "streamdump-large"
# RabbitMQ 4.0 (./rabbitmq4): its stream port, and the raw v2 scenario's stream.
V4_PORT = 5562
V4_STREAM = "streamdump-v4-frames"
# v4_client.py's stream and super stream (its names are its own: it runs on its own).
V4_FILTER_STREAM = "streamdump-v4-filter"
V4_SUPER_STREAM = "streamdump-v4-invoices"
V4_STREAMS = (V4_STREAM, V4_FILTER_STREAM)
# The ending scenarios' streams (scenarios_endings.py).
CRASH_STREAM = "streamdump-crash"
RESET_STREAM = "streamdump-reset"
# bench/record_flood.py's stream: listed here so an aborted flood (500k messages) does not
# stay on the broker until someone notices.
FLOOD_STREAM = "streamdump-flood"
ALL_STREAMS = (
    SESSION_STREAM,
    OFFSETS_STREAM,
    MISSING_STREAM,
    BULK_STREAM,
    COMPRESSION_STREAM,
    TRACKING_STREAM,
    DELETED_STREAM,
    CREDIT_STREAM,
    LARGE_STREAM,
    CRASH_STREAM,
    RESET_STREAM,
    FLOOD_STREAM,
)

# Matches rstream's own default so the client's Tune answer looks like a stock client's.
FRAME_MAX = 1024 * 1024
HEARTBEAT = 60

PLUGIN_WAIT_S = 60.0


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_stream_plugin() -> None:
    """Enable rabbitmq_stream when 5552 is closed; CI starts from a broker without it."""
    if port_open(HOST, PORT):
        return
    log.info("port %d closed: enabling rabbitmq_stream", PORT)
    plugins = find_program("rabbitmq-plugins") or "/usr/sbin/rabbitmq-plugins"
    subprocess.run([plugins, "enable", "rabbitmq_stream"], check=True)
    deadline = time.monotonic() + PLUGIN_WAIT_S
    while time.monotonic() < deadline:
        if port_open(HOST, PORT):
            return
        time.sleep(1.0)
    raise RuntimeError(f"{HOST}:{PORT} still closed {PLUGIN_WAIT_S:.0f} s after enabling the plugin")


class StreamClient(Client):
    """rstream's low-level Client, plus the Close frame its close() never sends.

    rstream 1.1.1's Client.close() stops the heartbeat task before BaseClient.close()
    checks `is_started` (which looks for that very task), so the Close/CloseResponse
    exchange is skipped and the connection just ends with a TCP FIN.
    """

    def __init__(self, connection_name: str, port: int = PORT) -> None:
        super().__init__(
            HOST,
            port,
            frame_max=FRAME_MAX,
            heartbeat=HEARTBEAT,
            connection_name=connection_name,
            # Without a handler rstream logs a traceback whenever the broker ends the
            # socket first, which it does after Close and after a failed authentication.
            connection_closed_handler=_ignore_close,
        )

    async def close(self) -> None:
        if self.is_started and self.is_connection_alive():
            await self.sync_request(
                schema.Close(self._corr_id_seq.next(), code=1, reason="OK"),
                resp_schema=schema.CloseResponse,
            )
        await super().close()
        # When the broker ended the socket first, rstream marks the connection broken and
        # never closes its StreamWriter, which leaks the transport (ResourceWarning).
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def _ignore_close(info: rstream.OnClosedErrorInfo) -> None:
    log.debug("connection closed by the broker: %s", info)


async def connect(connection_name: str, port: int = PORT) -> StreamClient:
    client = StreamClient(connection_name, port)
    await client.start()
    await client.authenticate(vhost=VHOST, username=USERNAME, password=PASSWORD)
    return client


async def delete_leftover_streams(port: int = PORT) -> None:
    client = await connect("streamdump-cleanup", port)
    try:
        for stream in ALL_STREAMS if port == PORT else V4_STREAMS:
            with contextlib.suppress(StreamDoesNotExist):
                await client.delete_stream(stream)
                log.info("deleted leftover stream %s", stream)
        if port == V4_PORT:
            with contextlib.suppress(StreamDoesNotExist):
                await client.delete_super_stream(V4_SUPER_STREAM)
                log.info("deleted leftover super stream %s", V4_SUPER_STREAM)
    finally:
        await client.close()
