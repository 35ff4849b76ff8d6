"""What every scenario is made of: a client with a stream and a publisher, confirms, subscriptions.

Owns the generic scenario plumbing: `stream_with_publisher()` (connect, Create,
DeclarePublisher, and on a clean exit DeletePublisher, Delete; always Close),
`ConfirmTracker` and `publish()` (one Publish frame, wait for its confirms), `Subscription`
(Deliver frames in, optional Credit out), `expect()` (how a scenario check fails), and
`Outputs` / `write_outputs()` for the files a scenario writes beside its capture.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker import StreamClient, connect
from rstream import AMQPMessage, OffsetType, schema
from rstream.client import Client
from system_tools import give_to_dir_owner

log = logging.getLogger("record")

DELIVERY_WAIT_S = 10.0
# Long enough for the broker to deliver a chunk it was going to deliver anyway; used to
# prove that nothing more arrives, e.g. for offset type "next".
QUIET_WAIT_S = 0.3

# Files a scenario writes besides its capture, by path relative to the output directory.
Outputs = dict[str, bytes]


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"scenario check failed: {what}")


def write_outputs(outdir: Path, outputs: Outputs) -> None:
    """Write a scenario's extra files, owned like the captures by the output directory's owner."""
    for name, content in outputs.items():
        path = outdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        for owned in (path, *path.relative_to(outdir).parents[:-1]):
            give_to_dir_owner(outdir / owned, outdir)
        log.info("%s: %d bytes", path, len(content))


async def wait_until(done: Callable[[], bool], changed: asyncio.Event) -> bool:
    """Wait until `done()`, checking again whenever `changed` is set; False after DELIVERY_WAIT_S."""

    async def _until() -> None:
        while not done():
            changed.clear()
            await changed.wait()

    try:
        await asyncio.wait_for(_until(), DELIVERY_WAIT_S)
    except TimeoutError:
        return False
    return True


def from_first() -> schema.OffsetSpec:
    """Offset specification "first": the stream from its first chunk."""
    return schema.OffsetSpec.from_params(OffsetType.FIRST, None)


class ConfirmTracker:
    """Collects PublishConfirm ids so the scenario can wait for specific publishing ids."""

    def __init__(self, client: Client, publisher_id: int) -> None:
        self._publisher_id = publisher_id
        self._confirmed: set[int] = set()
        self._errors: list[schema.PublishError] = []
        self._changed = asyncio.Event()
        client.add_handler(schema.PublishConfirm, self._on_confirm, name=f"confirm-{publisher_id}")
        client.add_handler(schema.PublishError, self._on_error, name=f"error-{publisher_id}")

    def _on_confirm(self, frame: schema.PublishConfirm) -> None:
        if frame.publisher_id == self._publisher_id:
            self._confirmed.update(frame.publishing_ids)
            self._changed.set()

    def _on_error(self, frame: schema.PublishError) -> None:
        # Raising here would only be logged by rstream's frame listener; wait() reports it.
        if frame.publisher_id == self._publisher_id:
            self._errors.append(frame)
            self._changed.set()

    async def wait(self, ids: set[int]) -> None:
        if not await wait_until(lambda: ids <= self._confirmed or bool(self._errors), self._changed):
            raise RuntimeError(f"no confirm for {sorted(ids - self._confirmed)}")
        if self._errors:
            raise RuntimeError(f"broker rejected publish: {self._errors}")


@contextlib.asynccontextmanager
async def stream_with_publisher(
    connection_name: str,
    stream: str,
    publisher_id: int,
    reference: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[StreamClient, ConfirmTracker]]:
    """One connection that creates `stream` and declares a publisher on it, for the block.

    Frames: Create, DeclarePublisher, then the block's, then DeletePublisher and Delete
    when the block ends normally (not when it raises), and Close in every case.
    """
    client = await connect(connection_name)
    try:
        await client.create_stream(stream, arguments=arguments)
        await client.declare_publisher(stream, reference=reference, publisher_id=publisher_id)
        yield client, ConfirmTracker(client, publisher_id)
        await client.delete_publisher(publisher_id)
        await client.delete_stream(stream)
    finally:
        await client.close()


async def publish(
    client: Client,
    tracker: ConfirmTracker,
    publisher_id: int,
    batch: list[tuple[int, AMQPMessage | bytes]],
) -> None:
    """Send one Publish frame holding `batch` and wait until every id in it is confirmed.

    A message given as bytes goes out as it is: a record that is not AMQP.
    """
    messages = [schema.Message(publishing_id=pid, filter_value=None, data=bytes(msg)) for pid, msg in batch]
    await client.publish(messages, publisher_id=publisher_id)
    await tracker.wait({pid for pid, _ in batch})


@dataclass
class Subscription:
    """One subscription on a low-level client: Deliver frames in, optional Credit out."""

    client: Client
    subscription_id: int
    credit_each_chunk: bool
    offsets: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    chunks: int = 0
    chunk_entries: list[int] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    async def start(
        self,
        stream: str,
        offset_spec: schema.OffsetSpec,
        initial_credit: int,
        properties: dict[str, str] | None = None,
    ) -> None:
        # rstream routes Deliver frames to a per-subscription queue keyed by int(name).
        name = str(self.subscription_id)
        self.client.add_handler(schema.Deliver, self._on_deliver, name=name)
        await self.client.run_queue_listener_task(self.subscription_id, self._on_deliver)
        await self.client.subscribe(
            stream,
            subscription_id=self.subscription_id,
            offset_spec=offset_spec,
            initial_credit=initial_credit,
            properties=properties,
        )

    async def _on_deliver(self, frame: schema.Deliver) -> None:
        # Every registered Deliver handler sees every chunk, whatever its subscription.
        if frame.subscription_id != self.subscription_id:
            return
        self.chunks += 1
        self.chunk_entries.append(frame.num_entries)
        for i, message in enumerate(frame.get_messages()):
            self.offsets.append(frame.chunk_first_offset + i)
            self.bodies.append(bytes(message))
        if self.credit_each_chunk:
            # Same policy as rstream's Consumer: one chunk consumed, one chunk of credit back.
            await self.client.credit(self.subscription_id, 1)
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        def wrong_count() -> RuntimeError:
            return RuntimeError(
                f"subscription {self.subscription_id}: expected {count} messages, got {self.offsets}"
            )

        if not await wait_until(lambda: len(self.offsets) >= count, self._changed):
            raise wrong_count()
        # Anything past `count` would make the capture differ from run to run.
        await asyncio.sleep(QUIET_WAIT_S)
        if len(self.offsets) != count:
            raise wrong_count()

    async def stop(self) -> None:
        await self.client.unsubscribe(self.subscription_id)
        await self.client.stop_queue_listener_task(self.subscription_id)
        self.client.remove_handler(schema.Deliver, name=str(self.subscription_id))
