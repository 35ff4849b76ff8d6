"""Wireshark's own window (the Qt GUI) with the installed plugin, under a virtual X server.

Starts Xvfb, installs the plugin the way `streamdump lua install` does (into the personal
plugins folder of an empty home), opens a capture in `wireshark -r`, waits until the window
shows the capture, and takes a screenshot of the screen (ImageMagick's `import`). It also lists
the windows open then, so a Lua error dialog (Wireshark titles it "Lua: Error ...") is seen.

    python tests/wireshark_window.py captures/rabbitmq_stream/session.pcap docs/images/wireshark.png

needs: apt-get install wireshark-qt xvfb xdotool imagemagick
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "lua" / "streamdump.lua"
TOOLS = ("wireshark", "Xvfb", "xdotool", "import")
SCREEN = "1400x900x24"


@dataclass
class Window:
    """What the screen showed: every visible window's title, and the screenshot's path."""

    titles: list[str]
    screenshot: Path
    shown: bool  # whether a window showed the capture before the time was up


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _titles(env: dict[str, str]) -> list[str]:
    found = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", ""], capture_output=True, text=True, env=env
    )
    titles = []
    for window in found.stdout.split():
        name = subprocess.run(["xdotool", "getwindowname", window], capture_output=True, text=True, env=env)
        titles.append(name.stdout.strip())
    return titles


def _free_display() -> int:
    for number in range(90, 140):
        if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
            return number
    raise RuntimeError("no free X display between :90 and :139")


def screenshot(
    capture: Path,
    out: Path,
    *,
    packet: int | None = None,
    others: dict[str, str] | None = None,
    timeout: float = 90.0,
    settle: float = 4.0,
) -> Window:
    """Open the capture in Wireshark with the plugin installed (and others: name -> Lua text,
    beside it), packet selected; screenshot once the window shows the capture."""
    home = Path(tempfile.mkdtemp(prefix="streamdump-wireshark-"))
    plugins = home / ".local" / "lib" / "wireshark" / "plugins"
    plugins.mkdir(parents=True)
    shutil.copyfile(PLUGIN, plugins / PLUGIN.name)
    for name, text in (others or {}).items():
        (plugins / name).write_text(text, encoding="utf-8")
    # A first start's dialogs and an update check would stand between the window and the shot.
    profile = home / ".config" / "wireshark"
    profile.mkdir(parents=True)
    (profile / "recent_common").write_text("privs.warn_if_elevated: FALSE\nprivs.warn_if_no_npf: FALSE\n")
    (profile / "preferences").write_text("gui.update.enabled: FALSE\ngui.ask_unsaved: FALSE\n")
    display = _free_display()
    env = dict(os.environ, HOME=str(home), DISPLAY=f":{display}", QT_QPA_PLATFORM="xcb")
    env.pop("WAYLAND_DISPLAY", None)
    xvfb = subprocess.Popen(
        ["Xvfb", f":{display}", "-screen", "0", SCREEN, "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wireshark = None
    try:
        deadline = time.monotonic() + 20
        while not Path(f"/tmp/.X11-unix/X{display}").exists():
            if time.monotonic() > deadline or xvfb.poll() is not None:
                raise RuntimeError("Xvfb did not start")
            time.sleep(0.1)
        wireshark = subprocess.Popen(
            ["wireshark", "-r", str(capture), *(["-g", str(packet)] if packet else [])],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        shown = False
        while time.monotonic() < deadline and not shown:
            shown = any(capture.name in title for title in _titles(env))
            if wireshark.poll() is not None:
                raise RuntimeError(f"wireshark exited ({wireshark.returncode}) before showing {capture.name}")
            time.sleep(0.5)
        time.sleep(settle)  # the packet list drawn, and any dialog the plugin's loading raised
        # Maximised, the packet list and the detail pane show more than the default geometry.
        for window in subprocess.run(
            ["xdotool", "search", "--onlyvisible", "--name", capture.name],
            capture_output=True,
            text=True,
            env=env,
        ).stdout.split():
            subprocess.run(["xdotool", "windowsize", window, "100%", "100%"], env=env, check=False)
            subprocess.run(["xdotool", "windowmove", window, "0", "0"], env=env, check=False)
        time.sleep(1.5)
        titles = _titles(env)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["import", "-window", "root", str(out)], env=env, check=True, capture_output=True)
        return Window(titles, out, shown)
    finally:
        for process in (wireshark, xvfb):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("out", type=Path, help="the screenshot (PNG)")
    parser.add_argument("--packet", type=int, help="the packet to select")
    args = parser.parse_args()
    if missing := missing_tools():
        print(f"wireshark_window: missing {', '.join(missing)}", file=sys.stderr)
        return 1
    window = screenshot(args.capture.resolve(), args.out, packet=args.packet)
    for title in window.titles:
        print(f"window: {title}")
    print(f"screenshot: {window.screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
