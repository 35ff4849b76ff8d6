"""Floor 1, the wire: what crossed it and how it is cut, knowing no protocol.

Capture files (pcap, pcapng, compressed, in byte ranges for parallel readers), packets and
their TCP segments, reassembly of each direction's byte stream with its gaps, how each
connection opened and ended, the framing engine that cuts a stream into PDUs by a rule a
protocol gives it, frames and their expert notes, the kinds of finding, decoded values' JSON
and preview forms, and the limits every size from the wire is bounded by. Nothing here
imports another floor of streamdump.
"""
