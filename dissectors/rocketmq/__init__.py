"""RocketMQ remoting (name server 9876, broker 10911, 10909, 10912).

spec.yaml is the registry entry: the length and header words, the header in JSON or in
the binary encoding, every request and response code, the request and response headers'
fields as entries of the header's extFields, message properties, stored messages, the
name server's route. What the grammar cannot say is here: where a frame may start after a
loss (framing.py), message bodies' CRC and compression (bodies.py, with its Lua twin
bodies.lua), and what a message is for `--messages` and stats (messages.py); and the
conversation's own rules: pulls the broker may hold (held_pulls.py) and what a failed
request's code means for it (hints.py).
"""

from __future__ import annotations

from streamdump.dissectors.rocketmq import bodies, framing, held_pulls, hints, messages

from streamdump.spec.dissector import Dissector

DISSECTOR = Dissector(
    hooks=(bodies.MessageBody,),
    lua=("streamdump.codecs:zlib.lua", "bodies.lua", "hints.lua", "messages.lua"),
    lua_prefs=("prefs.lua",),
    framing=framing.RemotingRule,
    messages=messages.RemotingMessages,
    rules=(held_pulls.HeldPulls, hints.Hints),
)
