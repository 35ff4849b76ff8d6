#!/usr/bin/env python3
"""PyPI `rocketmq` 0.4.4 (Apache rocketmq-client-cpp inside) producer against the stand-in.

    python3 client_rocketmq.py [--topic TopicTest] [--count 4] [--batch]
                               [--timeout-ms 3000] [--expect-fail] [--pause-ms 500]
                               [--log-dir DIR]

Sends --count messages with keys, tags and two user properties through send_sync
(request code 10 SEND_MESSAGE; this C++ client has no SEND_MESSAGE_V2), with --batch
one more send_batch of two messages (also code 10, header "batch":"1", body = the
encoded batch; not 320 SEND_BATCH_MESSAGE), then shuts the producer down, which sends
UNREGISTER_CLIENT.

The library's own HEART_BEAT timer fires 10 ms after start() and then every 30 s: the
pause after the first send (--pause-ms) lets that first heartbeat reach the broker,
and the run stays under the 3 s after which the library would query the route again.

With --expect-fail, a failing send is the expected outcome (exit 0) and nothing more
is sent.

Note: the binding's method is Producer.set_namesrv_addr (there is no
set_name_server_address in 0.4.4).
"""

import argparse
import os
import sys
import time

from rocketmq.client import Message, Producer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topic", default="TopicTest")
    p.add_argument("--count", type=int, default=4)
    p.add_argument("--batch", action="store_true")
    p.add_argument("--timeout-ms", type=int, default=3000)
    p.add_argument("--expect-fail", action="store_true")
    p.add_argument(
        "--pause-ms",
        type=int,
        default=500,
        help="pause after the first send, so that the heartbeat the library sends "
        "10 ms after start() (once it knows a broker) falls inside the run",
    )
    p.add_argument(
        "--log-dir",
        default=None,
        help="the C++ library's log files go to DIR/logs/rocketmq-cpp/ instead of ~/logs/rocketmq-cpp/",
    )
    a = p.parse_args()

    if a.log_dir:
        # The library logs to $HOME/logs/rocketmq-cpp/ (SetProducerLogPath is a no-op in this
        # build, "Todo" in CProducer.cpp), so point HOME elsewhere before it starts logging.
        os.makedirs(a.log_dir, exist_ok=True)
        os.environ["HOME"] = os.path.abspath(a.log_dir)
    producer = Producer("PID_streamdump_cpp", timeout=a.timeout_ms)
    producer.set_namesrv_addr("127.0.0.1:9876")
    producer.start()
    status = 0
    try:
        for i in range(a.count):
            msg = Message(a.topic)
            msg.set_keys(f"cpp-key-{i}")
            msg.set_tags("TagC" if i % 2 == 0 else "TagD")
            msg.set_property("origin", "rocketmq-client-cpp")
            msg.set_property("seq", str(i))
            msg.set_body(f"hello streamdump {i} from the C++ client")
            try:
                res = producer.send_sync(msg)
            except Exception as exc:  # the binding raises ProducerSendSyncFailed & co.
                print(f"[client_rocketmq] send #{i} failed: {type(exc).__name__}: {exc}", flush=True)
                status = 0 if a.expect_fail else 1
                break
            print(
                f"[client_rocketmq] sent #{i} {res.status.name} msg_id={res.msg_id} offset={res.offset}",
                flush=True,
            )
            if a.expect_fail:
                status = 1
            if i == 0 and a.pause_ms > 0:
                time.sleep(a.pause_ms / 1000.0)
        else:
            if a.batch:
                msgs = []
                for j in range(2):
                    m = Message(a.topic)
                    m.set_keys(f"cpp-batch-{j}")
                    m.set_tags("TagBatch")
                    m.set_body(f"batched message {j}")
                    msgs.append(m)
                res = producer.send_batch(msgs)
                print(
                    f"[client_rocketmq] batch {res.status.name} msg_id={res.msg_id} offset={res.offset}",
                    flush=True,
                )
    finally:
        producer.shutdown()
    print(f"[client_rocketmq] done, exit {status}", flush=True)
    sys.stdout.flush()
    # the C++ library's threads can outlive shutdown(); leave without waiting on them
    os._exit(status)


if __name__ == "__main__":
    main()
