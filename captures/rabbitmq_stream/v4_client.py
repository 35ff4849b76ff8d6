"""Real rstream applications against RabbitMQ 4.0 (captures/rabbitmq_stream/rabbitmq4), one per run.

What the 3.10 broker cannot answer: filtering (Publish v2 with a filter value per message, a
Subscribe with filter properties) and super streams (CreateSuperStream, Partitions, a super
stream producer routing by hash, and a single active consumer the broker drives with
ConsumerUpdate). Usage: python v4_client.py filtering|super_stream PORT
"""

from __future__ import annotations

import asyncio
import sys

from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    OffsetSpecification,
    OffsetType,
    Producer,
    Properties,
    RouteType,
    SuperStreamConsumer,
    SuperStreamCreationOption,
    SuperStreamProducer,
)

HOST, USER, PASSWORD = "127.0.0.1", "guest", "guest"
FILTER_STREAM = "streamdump-v4-filter"
SUPER_STREAM = "streamdump-v4-invoices"
WAIT_S = 10.0


async def color_of(message: AMQPMessage) -> str:
    return str(message.application_properties["color"])


async def id_of(message: AMQPMessage) -> str:
    return str(message.properties.message_id)


def order(index: int, color: str) -> AMQPMessage:
    return AMQPMessage(
        body=f"order {index}".encode(),
        properties=Properties(message_id=f"order-{index}", content_type="text/plain"),
        application_properties={"color": color, "index": index},
    )


async def filtering(port: int) -> None:
    """Publish v2 with a filter value per message, then a consumer that asks only for "red"."""
    producer = Producer(
        HOST, port, username=USER, password=PASSWORD, connection_name="streamdump-v4-filter-producer",
        filter_value_extractor=color_of,
    )  # fmt: skip
    await producer.start()
    await producer.create_stream(FILTER_STREAM, exists_ok=True)
    for index, color in enumerate(["red", "blue", "red", "green", "red", "blue"]):
        await producer.send_wait(FILTER_STREAM, order(index, color))
    await producer.close()
    got: list[bytes] = []
    done = asyncio.Event()

    def on_message(message: AMQPMessage, _context: object) -> None:
        got.append(bytes(message))
        if len(got) >= 3:  # the three red orders
            done.set()

    consumer = Consumer(
        HOST, port, username=USER, password=PASSWORD, connection_name="streamdump-v4-filter-consumer"
    )
    await consumer.start()
    await consumer.subscribe(
        FILTER_STREAM, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        filter_input=FilterConfiguration(values_to_filter=["red"], match_unfiltered=False),
    )  # fmt: skip
    await asyncio.wait_for(done.wait(), WAIT_S)
    await consumer.close()


async def super_stream(port: int) -> None:
    """A super stream of three partitions: created, published to by hash routing, consumed by a
    single active consumer (the broker asks it with ConsumerUpdate)."""
    option = SuperStreamCreationOption(n_partitions=3)
    producer = SuperStreamProducer(
        HOST, port, username=USER, password=PASSWORD, super_stream=SUPER_STREAM,
        super_stream_creation_option=option, routing=RouteType.Hash,
        routing_extractor=id_of, connection_name="streamdump-v4-super-producer",
    )  # fmt: skip
    await producer.start()
    for index in range(6):
        await producer.send(order(index, "red"))
    await asyncio.sleep(0.5)  # the producer batches; let the batch go out and be confirmed
    await producer.close()
    got: list[int] = []
    done = asyncio.Event()

    def on_message(_message: AMQPMessage, _context: object) -> None:
        got.append(1)
        if len(got) >= 6:
            done.set()

    async def on_update(_active: bool, _context: object) -> OffsetSpecification:
        return OffsetSpecification(OffsetType.FIRST, 0)

    consumer = SuperStreamConsumer(
        HOST, port, username=USER, password=PASSWORD, super_stream=SUPER_STREAM,
        connection_name="streamdump-v4-super-consumer",
    )  # fmt: skip
    await consumer.start()
    await consumer.subscribe(
        on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        properties={"single-active-consumer": "true", "name": "streamdump-v4-sac"},
        consumer_update_listener=on_update,
    )  # fmt: skip
    await asyncio.wait_for(done.wait(), WAIT_S)
    await consumer.close()


SCENARIOS = {"filtering": filtering, "super_stream": super_stream}

if __name__ == "__main__":
    asyncio.run(SCENARIOS[sys.argv[1]](int(sys.argv[2])))
