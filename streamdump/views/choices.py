"""The ways a front end can print frames, as the command line names them.

Kept apart from `streamdump.views.output`, which draws them, so that a command's options can
be declared (and `--help` printed) without loading the views, the decoders and the registry.
"""

from __future__ import annotations

from enum import StrEnum

# Connections `stats` lists by default (the most bytes first; the others totalled on one line).
TOP = 20


class Format(StrEnum):
    text = "text"
    fields = "fields"
    json = "json"
    jsonl = "jsonl"
