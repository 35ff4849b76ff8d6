"""Apache EventMesh TCP (port 10000).

spec.yaml is the registry entry: the frame's magic, lengths and JSON header, every
command with its request and response names, the bodies (UserAgent, Subscription,
RedirectInfo, message packages) and the conversation rules. What the grammar cannot say
is here: where a frame ends when its length means two things (framing.py, with its Lua
twin framing.lua), which convention a frame used and what a message package holds
(packages.py, twin packages.lua), and what a message is for `--messages` and stats
(messages.py); and heartbeats that stop, the conversation's own rule (heartbeats.py).
"""

from __future__ import annotations

from streamdump.dissectors.eventmesh import framing, heartbeats, messages, packages

from streamdump.spec.dissector import Dissector

DISSECTOR = Dissector(
    hooks=(packages.LengthConvention, packages.MessagePackage),
    lua=("framing.lua", "packages.lua", "messages.lua"),
    framing=framing.EventMeshRule,
    messages=messages.PackageMessages,
    rules=(heartbeats.Heartbeats,),
)
