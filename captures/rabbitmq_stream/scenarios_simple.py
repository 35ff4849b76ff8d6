"""The plain scenarios: session, subscribe_missing_stream, offset_specs, bulk, auth_failure.

Each is one connection of rstream's low-level client with its frames in a fixed order, and
checks what the broker answered. `session` is also what `session_any` and `session_sll`
run; `bulk` is the one recorded with lo at MTU 1500. None of them writes files besides its
capture.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker import (
    BULK_STREAM,
    MISSING_STREAM,
    OFFSETS_STREAM,
    SESSION_STREAM,
    USERNAME,
    VHOST,
    WRONG_PASSWORD,
    StreamClient,
    connect,
)
from rstream import AMQPMessage, OffsetType, Properties, schema
from rstream.exceptions import AuthenticationFailure, StreamDoesNotExist
from scenario_tools import (
    QUIET_WAIT_S,
    Subscription,
    expect,
    from_first,
    publish,
    stream_with_publisher,
)

log = logging.getLogger("record")

PUBLISHER_REFERENCE = "streamdump-publisher"
CONSUMER_REFERENCE = "streamdump-consumer"


def amqp_message(index: int, text: str) -> AMQPMessage:
    """Fixed AMQP 1.0 message; even indexes also carry properties and application properties."""
    body = f"{text} {index}".encode()
    if index % 2:
        return AMQPMessage(body=body)
    return AMQPMessage(
        body=body,
        properties=Properties(message_id=f"msg-{index}", content_type="text/plain"),
        application_properties={"index": index, "source": "streamdump"},
    )


async def scenario_session() -> None:
    """One connection doing the whole publish/consume life cycle of a stream."""
    publisher_id = 1
    subscription_id = 2
    async with stream_with_publisher(
        "streamdump-session",
        SESSION_STREAM,
        publisher_id,
        reference=PUBLISHER_REFERENCE,
        arguments={"max-length-bytes": 100_000_000},
    ) as (client, tracker):
        sequence = await client.query_publisher_sequence(SESSION_STREAM, PUBLISHER_REFERENCE)
        expect(sequence == 0, f"fresh stream has publisher sequence 0, got {sequence}")

        # Publishing ids continue from the stored sequence, as rstream's Producer does.
        messages = [(sequence + 1 + i, amqp_message(i, "hello streamdump")) for i in range(10)]
        # Five single-message frames (send_wait style: each waits for its confirm, so each
        # becomes its own chunk), then one frame with five messages (one multi-entry chunk).
        for item in messages[:5]:
            await publish(client, tracker, publisher_id, [item])
        await publish(client, tracker, publisher_id, messages[5:])

        leader, replicas = await client.query_leader_and_replicas(SESSION_STREAM)
        log.info("metadata: leader %s:%d, %d replicas", leader.host, leader.port, len(replicas))

        sub = Subscription(client, subscription_id, credit_each_chunk=True)
        await sub.start(
            SESSION_STREAM, from_first(), initial_credit=1, properties={"name": CONSUMER_REFERENCE}
        )
        await sub.wait_for(len(messages))
        expect(sub.offsets == list(range(10)), f"offsets 0..9 delivered, got {sub.offsets}")
        expect(sub.chunks == 6, f"5 single-message chunks + 1 five-message chunk, got {sub.chunks}")
        expect(sub.bodies == [bytes(m) for _, m in messages], "delivered bodies equal published bodies")

        last_offset = sub.offsets[-1]
        await client.store_offset(SESSION_STREAM, CONSUMER_REFERENCE, last_offset)
        # StoreOffset has no response; the broker applies it asynchronously.
        await asyncio.sleep(0.5)
        stored = await client.query_offset(SESSION_STREAM, CONSUMER_REFERENCE)
        expect(stored == last_offset, f"stored offset {last_offset}, queried {stored}")

        await sub.stop()


async def scenario_subscribe_missing_stream() -> None:
    client = await connect("streamdump-missing")
    try:
        try:
            await client.subscribe(
                MISSING_STREAM, subscription_id=0, offset_spec=from_first(), initial_credit=10
            )
        except StreamDoesNotExist:
            log.info("subscribe to %s failed as expected (0x02)", MISSING_STREAM)
        else:
            raise RuntimeError(f"subscribe to {MISSING_STREAM} unexpectedly succeeded")
    finally:
        await client.close()


async def scenario_offset_specs() -> None:
    """Subscribe once per OffsetType (1..5) to one stream, unsubscribing after each."""
    publisher_id = 0
    # No reference: the other publisher flavour (deduplication off) next to session's.
    async with stream_with_publisher("streamdump-offsets", OFFSETS_STREAM, publisher_id) as (
        client,
        tracker,
    ):
        # One message per frame and per confirm, so offset n is chunk n and counts below
        # do not depend on how the broker batches.
        for i in range(5):
            await publish(client, tracker, publisher_id, [(i, amqp_message(i, "offset spec"))])
        # Gap on both sides of the timestamp so chunk timestamps (ms) cannot tie with it.
        await asyncio.sleep(0.05)
        timestamp_ms = time.time_ns() // 1_000_000
        await asyncio.sleep(0.05)
        for i in range(5, 8):
            await publish(client, tracker, publisher_id, [(i, amqp_message(i, "offset spec"))])

        spec = schema.OffsetSpec.from_params

        async def consume(
            subscription_id: int, offset_spec: schema.OffsetSpec, what: str, want: list[int]
        ) -> None:
            """Subscribe, wait for exactly the offsets `want`, unsubscribe."""
            sub = Subscription(client, subscription_id, credit_each_chunk=False)
            await sub.start(OFFSETS_STREAM, offset_spec, initial_credit=10)
            await sub.wait_for(len(want))
            expect(sub.offsets == want, f"{what}: {sub.offsets}")
            await sub.stop()

        await consume(1, from_first(), "first", list(range(8)))
        await consume(2, spec(OffsetType.LAST, None), "last", [7])

        # "next" delivers nothing that already exists, so publish one more message while
        # subscribed to show what it does deliver.
        nxt = Subscription(client, 3, credit_each_chunk=False)
        await nxt.start(OFFSETS_STREAM, spec(OffsetType.NEXT, None), initial_credit=10)
        await asyncio.sleep(QUIET_WAIT_S)
        expect(nxt.offsets == [], f"next before publishing: {nxt.offsets}")
        await publish(client, tracker, publisher_id, [(8, amqp_message(8, "offset spec"))])
        await nxt.wait_for(1)
        expect(nxt.offsets == [8], f"next: {nxt.offsets}")
        await nxt.stop()

        await consume(4, spec(OffsetType.OFFSET, 3), "offset 3", list(range(3, 9)))
        await consume(5, spec(OffsetType.TIMESTAMP, timestamp_ms), "timestamp", list(range(5, 9)))


# Body sizes for `bulk`, cycled: mostly small with a few large ones up to 4 KB, so that
# Publish/Deliver frames are tens of KB while the whole file stays around 300 KB.
BULK_SIZES = (
    *(100, 4096, 100, 110, 120, 130, 140, 150, 170, 190),
    *(210, 230, 1448, 260, 290, 320, 360, 400, 450, 500),
)
BULK_MESSAGES = 300
BULK_BATCH = 50


def bulk_body(index: int) -> bytes:
    """`bulk NNN size S ` then letters that shift with the index, S bytes in all."""
    size = BULK_SIZES[index % len(BULK_SIZES)]
    head = f"bulk {index:03d} size {size} ".encode()
    # A filler that differs per message makes a wrongly spliced reassembly visible.
    filler = bytes(0x61 + (index + k) % 26 for k in range(size - len(head)))
    return head + filler


async def scenario_bulk() -> None:
    """Large Publish and Deliver frames; recorded at MTU 1500 so each spans many segments."""
    publisher_id = 0
    subscription_id = 1
    async with stream_with_publisher("streamdump-bulk", BULK_STREAM, publisher_id) as (client, tracker):
        messages = [(i, AMQPMessage(body=bulk_body(i))) for i in range(BULK_MESSAGES)]
        # Waiting for each batch's confirm keeps the batches apart. The broker still cuts a
        # 50-message batch into chunks of its own choosing (mostly 32 + 18, once 20 + 30),
        # so the chunk layout is logged, not checked.
        for start in range(0, BULK_MESSAGES, BULK_BATCH):
            await publish(client, tracker, publisher_id, messages[start : start + BULK_BATCH])

        sub = Subscription(client, subscription_id, credit_each_chunk=False)
        # Credit is counted in chunks; one per message is enough whatever the chunk layout,
        # so no Credit frames are needed and the broker sends the Deliver frames back to back.
        await sub.start(BULK_STREAM, from_first(), initial_credit=BULK_MESSAGES)
        await sub.wait_for(BULK_MESSAGES)
        expect(sub.offsets == list(range(BULK_MESSAGES)), f"offsets 0..299 delivered, got {sub.offsets}")
        log.info("bulk chunk layout: %s", sub.chunk_entries)
        expect(sub.bodies == [bytes(m) for _, m in messages], "delivered bodies equal published bodies")
        for i, body in enumerate(sub.bodies):
            expect(body.endswith(bulk_body(i)), f"message {i} carries bulk body {i}")

        await sub.stop()


async def scenario_auth_failure() -> None:
    client = StreamClient("streamdump-auth-failure")
    await client.start()
    try:
        await client.authenticate(vhost=VHOST, username=USERNAME, password=WRONG_PASSWORD)
    except AuthenticationFailure:
        log.info("authentication failed as expected (0x08)")
    else:
        raise RuntimeError("authentication with a wrong password unexpectedly succeeded")
    finally:
        await client.close()
