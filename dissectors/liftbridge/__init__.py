"""Liftbridge envelopes, carried by NATS (found in a NATS payload by their magic).

spec.yaml is the registry entry: the envelope's header, every message type, and the API's
Message, Ack and PartitionNotification as protobuf structs. What the grammar cannot say is
here: the header length honoured and the CRC-32C checked (envelope.py, twin envelope.lua),
and what a message is for `--messages` and stats (messages.py).
"""

from __future__ import annotations

from streamdump.dissectors.liftbridge import envelope, messages

from streamdump.spec.dissector import Dissector

DISSECTOR = Dissector(
    hooks=(envelope.Envelope,), lua=("envelope.lua", "messages.lua"), messages=messages.StreamMessages
)
