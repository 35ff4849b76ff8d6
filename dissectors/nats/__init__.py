"""NATS client protocol (port 4222).

spec.yaml is the registry entry: every operation, the words of its line, INFO and CONNECT as
JSON, and the conversation rules. What the grammar cannot say is here: where a frame ends
(framing.py, twin framing.lua), the headers of HPUB and HMSG and what a payload holds
(payloads.py, twin payloads.lua), and what a message is for `--messages` and stats
(messages.py); and the conversation's own rules: the max_payload INFO announces (limits.py),
request and reply through reply subjects (replies.py), PINGs and their PONGs (pings.py), an
object store's chunks and their metadata (objects.py).
"""

from __future__ import annotations

from streamdump.dissectors.nats import framing, limits, messages, objects, payloads, pings, replies

from streamdump.spec.dissector import Dissector

DISSECTOR = Dissector(
    hooks=(payloads.HeaderBlock, payloads.Payload),
    lua=(
        "framing.lua",
        "payloads.lua",
        "limits.lua",
        "replies.lua",
        "pings.lua",
        "objects.lua",
        "messages.lua",
    ),
    framing=framing.NatsRule,
    messages=messages.SubjectMessages,
    rules=(limits.Limits, replies.Replies, pings.Pings, objects.Objects),
)
