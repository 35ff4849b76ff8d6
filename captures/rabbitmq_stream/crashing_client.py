"""A consumer application that crashes while handling its first delivery (run as a child process).

It is what the client_crash recording records: rstream's Producer publishes messages (one
of them with an application property the application set to None, which the client writes
as AMQP null), then rstream's Consumer subscribes from the first offset, and the message
handler ends the process at once, as an uncaught crash in native code or os._exit would:
no Close, no Unsubscribe, no stored offset. The kernel then closes every socket the process
had open. Usage: python crashing_client.py STREAM
"""

from __future__ import annotations

import asyncio
import os
import sys

from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer, Properties

HOST, PORT, USER, PASSWORD = "127.0.0.1", 5552, "guest", "guest"
MESSAGES = 30
EXIT_CODE = 3  # what the recording expects the crash to exit with


def message(index: int) -> AMQPMessage:
    props = {"color": "red", "i": None} if index == 0 else {"color": "blue", "i": index}
    return AMQPMessage(
        body=f'{{"order": {index}}}'.encode(),
        properties=Properties(message_id=f"order-{index}", content_type="application/json"),
        application_properties=props,
    )


async def main(stream: str) -> None:
    producer = Producer(HOST, PORT, username=USER, password=PASSWORD)
    await producer.start()
    await producer.create_stream(stream, exists_ok=True)
    for index in range(MESSAGES):
        await producer.send_wait(stream, message(index))

    def crash(_msg: object, _context: object) -> None:
        os._exit(EXIT_CODE)

    consumer = Consumer(HOST, PORT, username=USER, password=PASSWORD)
    await consumer.start()
    await consumer.subscribe(
        stream, crash, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None)
    )
    await consumer.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
