"""The decoding proxy against a direct connection: rstream publishing and consuming as fast as it
can against the real broker, directly and through `streamdump proxy` (decoding every frame, its
one-line view written to /dev/null), in one run, alternating, best of --repeat. Prints messages per
second both ways and the ratio (the target: the proxy keeps at least 0.80 of direct throughput).

    python bench/proxy_bench.py [--messages 200000] [--repeat 3] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

BROKER = ("127.0.0.1", 5552)
STREAM = "streamdump-proxy-bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def load(port: int, messages: int, size: int) -> float:
    """Seconds to publish every message and consume them all back, through port."""
    login = {"username": "guest", "password": "guest", "load_balancer_mode": True}
    async with Producer("127.0.0.1", port=port, **login) as producer:
        await producer.create_stream(STREAM, exists_ok=True)
    body = b"x" * size
    got = 0
    done = asyncio.Event()

    async def count(_body: bytes, _context: object) -> None:
        nonlocal got
        got += 1
        if got >= messages:
            done.set()

    started = time.perf_counter()
    consumer = Consumer("127.0.0.1", port=port, **login)
    await consumer.start()
    await consumer.subscribe(
        STREAM, count, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None)
    )
    async with Producer("127.0.0.1", port=port, **login) as producer:
        for _ in range(messages):
            await producer.send(STREAM, body)
    await asyncio.wait_for(done.wait(), 600)
    seconds = time.perf_counter() - started
    await consumer.close()
    async with Producer("127.0.0.1", port=port, **login) as producer:
        await producer.delete_stream(STREAM)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=100, help="message body bytes")
    args = parser.parse_args()
    port = free_port()
    proxy = subprocess.Popen(
        [sys.executable, "-m", "streamdump", "proxy", "--listen", f"127.0.0.1:{port}",
         "--upstream", f"{BROKER[0]}:{BROKER[1]}", "-P", "rabbitmq_stream"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(2)
    best = {"direct": float("inf"), "proxy": float("inf")}
    try:
        for _ in range(args.repeat):
            for name, target in (("direct", BROKER[1]), ("proxy", port)):
                best[name] = min(best[name], asyncio.run(load(target, args.messages, args.size)))
    finally:
        proxy.send_signal(2)
        proxy.wait(60)
    print(f"{args.messages} messages of {args.size} bytes published and consumed, best of {args.repeat}")
    for name, seconds in best.items():
        print(f"  {name:<7} {seconds:8.2f} s  {args.messages / seconds:10.0f} messages/s")
    print(f"  ratio proxy/direct throughput: {best['direct'] / best['proxy']:.2f} (target: 0.80 or more)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
