"""The terminal UI (`streamdump ui`): a capture or a live capture looked at in three panes, on Textual.

Textual is an optional extra (`pip install 'streamdump[ui]'`): `missing()` says so in one line
when it is not installed, before anything here imports it.
"""

from __future__ import annotations

import importlib.util


def missing() -> str | None:
    """Why the UI cannot run here (Textual not installed), or None."""
    if importlib.util.find_spec("textual") is None:
        return "the terminal UI needs Textual: pip install 'streamdump[ui]'"
    return None
