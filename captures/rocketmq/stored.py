"""PULL_MESSAGE answers' bodies: stored messages back to back, built by streamdump's own encoder.

The stand-in broker keeps what producers sent and hands it to consumers as a real broker
does; the bytes of each stored message come from the `stored_message` struct of
dissectors/rocketmq/spec.yaml through streamdump's encoder, so the captures also check
that encoder against real clients' decoders (ali-ons and the C++ client read these
bodies). The CRC is the broker's: CRC-32 of the body masked to 31 bits.

Each message is a mapping: queue_id, flag, queue_offset, physical_offset, sys_flag,
born_timestamp, born_host (ip, port), store_timestamp, store_host (ip, port),
reconsume_times, prepared_transaction_offset, body, topic, properties (a dict of
strings, in order), and optionally body_crc.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

MAGIC_V1 = 0xDAA320A7
_ENCODER = Decoder(default_registry().get("rocketmq"))


def encode_stored_messages(messages: Iterable[Mapping[str, Any]]) -> bytes:
    out = bytearray()
    for m in messages:
        body = bytes(m["body"])
        crc = m.get("body_crc")
        born_ip, born_port = m["born_host"]
        store_ip, store_port = m["store_host"]
        out += _ENCODER.encode_struct(
            "stored_message",
            {
                "magic_code": MAGIC_V1,
                "body_crc": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc,
                "queue_id": m["queue_id"],
                "message_flag": m["flag"],
                "queue_offset": m["queue_offset"],
                "physical_offset": m["physical_offset"],
                "sys_flag": m["sys_flag"],
                "born_timestamp": m["born_timestamp"],
                "born_host": born_ip,
                "born_port": born_port,
                "store_timestamp": m["store_timestamp"],
                "store_host": store_ip,
                "store_port": store_port,
                "reconsume_times": m["reconsume_times"],
                "prepared_transaction_offset": m["prepared_transaction_offset"],
                "message_body": body,
                "topic": m["topic"],
                # Properties as the producer wrote them: name \x01 value \x02, in order.
                "properties": "".join(f"{k}\x01{v}\x02" for k, v in m["properties"].items()),
            },
        )
    return bytes(out)
