"""The plugin in Wireshark's own window (Debian's Qt GUI) under Xvfb, installed as a user installs
it: the capture opens, the packet list is drawn, and no Lua error dialog stands in front of it.

A Lua error while Wireshark loads its plugins shows a modal dialog titled "Wireshark" before any
capture opens; the window's title names the capture only once it is read. So the window's titles
tell both, with no OCR; the second test checks that a broken plugin beside it is seen that way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import CAPTURE_ROOT, need
from tests.test_wireshark import LUA_ERRORS, PLUGIN, tshark_run
from tests.wireshark_window import Window, missing_tools, screenshot

CAPTURE = CAPTURE_ROOT / "liftbridge" / "session.pcap"  # NATS carrying Liftbridge: two protocols


def _window(tmp_path: Path, **others: str) -> Window:
    missing = missing_tools()
    need(not missing, f"missing {', '.join(missing)} (apt-get install wireshark-qt xvfb xdotool imagemagick)")
    # A broken plugin never lets the capture open: no need to wait the full minute for it.
    return screenshot(
        CAPTURE, tmp_path / "window.png", packet=10, others=others, timeout=15 if others else 60
    )


def test_wireshark_shows_the_capture_with_no_lua_error(tmp_path: Path) -> None:
    window = _window(tmp_path)
    assert window.shown, f"no window showed {CAPTURE.name}: {window.titles}"
    assert [title for title in window.titles if title] == [CAPTURE.name], window.titles
    assert window.screenshot.stat().st_size > 10_000
    # What its packet list holds, read by tshark from the same plugin installed the same way:
    # both protocols' names in the Protocol column.
    result = tshark_run(
        "4.0", [PLUGIN, CAPTURE], lambda p: ["-r", p[-1], "-T", "fields", "-e", "_ws.col.Protocol"], tmp_path
    )
    assert result.returncode == 0 and not any(m in result.stdout.lower() for m in LUA_ERRORS)
    assert {"NATS", "Liftbridge"} <= set(result.stdout.split()), set(result.stdout.split())


def test_a_lua_error_dialog_is_seen(tmp_path: Path) -> None:
    """The check above can fail: a plugin that raises while loading leaves its dialog up."""
    window = _window(tmp_path, **{"broken.lua": "local nothing = nil\nnothing.field = 1\n"})
    assert not window.shown
    assert "Wireshark" in window.titles, window.titles
    converted = subprocess.run(["identify", str(window.screenshot)], capture_output=True, text=True)
    assert converted.returncode == 0 and "PNG" in converted.stdout
