"""RabbitMQ Streams (TCP 5552): the spec, the Osiris hooks, and what a message is.

spec.yaml is the registry entry. Frames are a u32 size and a key/version header, so the
spec's length word frames them; what the grammar cannot say is here: Osiris entries and
chunks (osiris.py, with its Lua twin osiris.lua; AMQP 1.0 records through the shared
codec), the records of Publish and Deliver as messages (messages.py), and the user name
of a PLAIN authentication (sasl.py, sasl.lua); and the conversation's own rules: the
negotiated frame size and heartbeat (tune.py), command versions (versions.py), a refused
authentication (sasl.py), publish confirms and what a publisher's messages say of its
content (confirms.py), flow-control credit (credit.py) and the broker's announcements about
streams (announcements.py).
"""

from __future__ import annotations

from streamdump.dissectors.rabbitmq_stream import (
    announcements,
    confirms,
    credit,
    messages,
    osiris,
    sasl,
    tune,
    versions,
)

from streamdump.spec.dissector import Dissector

DISSECTOR = Dissector(
    hooks=(osiris.EntryHook, osiris.ChunkHook, osiris.TrailerHook, sasl.PlainSecret),
    lua=(
        "streamdump.codecs:zlib.lua",
        "streamdump.codecs:amqp.lua",
        "osiris.lua",
        "sasl.lua",
        "tune.lua",
        "versions.lua",
        "confirms.lua",
        "credit.lua",
        "announcements.lua",
        "messages.lua",
    ),
    lua_prefs=("prefs.lua",),
    messages=messages.StreamMessages,
    rules=(
        tune.Tune,
        versions.Versions,
        sasl.Authentication,
        confirms.Confirms,
        credit.Flow,
        announcements.Announcements,
    ),
)
