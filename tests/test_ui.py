"""`streamdump ui`: the terminal UI driven as a person drives it.

Textual's pilot presses the keys (select, open the tree, follow a link, the filter bar with its
completion and its error, follow, stats, findings, search, marks, writing a capture read back,
help, q); snapshots pin three screens (tests/__snapshots__/test_ui/, regenerated with
`--snapshot-update`: review the SVGs); the real command runs in tmux and its screen is read back.
The index the UI draws from is checked against `read`'s own lines, and text from the wire
against the escaping every view does.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from conftest import CAPTURE_ROOT, ROOT, need
from textual.pilot import Pilot
from textual.widgets import Input

from streamdump.analysis.session import CaptureFile, CaptureStream, Options, Source
from streamdump.ui.app import StreamdumpApp
from streamdump.ui.filterbar import FilterBar, candidates, filter_names
from streamdump.ui.index import FrameIndex
from streamdump.ui.panes import PALETTE, SEVERITY_BACKGROUND, DetailTree, HexPane, PacketList
from streamdump.ui.screens import FindingsScreen, TextScreen
from streamdump.views.output import Views
from streamdump.views.safe import UNSAFE

SESSION = CAPTURE_ROOT / "rabbitmq_stream" / "session.pcap"
AUTH_FAILURE = CAPTURE_ROOT / "rabbitmq_stream" / "auth_failure.pcap"
SIZE = (160, 48)


def streamdump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, text=True, cwd=ROOT, check=False
    )


def make_app(
    source: Source | Path, filter_text: str = "", live: bool = False, **options: object
) -> StreamdumpApp:
    setup = Options(filter=filter_text or None, **options).prepare()  # type: ignore[arg-type]
    src = CaptureFile(source) if isinstance(source, Path) else source
    return StreamdumpApp(FrameIndex(setup, src), filter_text=filter_text, live=live)


async def indexed(pilot: Pilot) -> None:
    """Wait until the whole capture is indexed, a filter applied and the list drawn."""
    app = pilot.app
    assert isinstance(app, StreamdumpApp)
    for _ in range(400):
        if app.index.finished and (app.scan is None or app.scan.done):
            break
        await pilot.pause(0.02)
    app.tick()
    await pilot.pause(0.05)


async def until(pilot: Pilot, done: Callable[[], bool], seconds: float = 20) -> None:
    """Wait for what a thread of the app does (a file written, a dialogue made)."""
    end = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < end, "never done"
        await pilot.pause(0.02)


def drive(app: StreamdumpApp, scenario: Callable[[Pilot], Awaitable[None]], wait: bool = True) -> None:
    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            if wait:
                await indexed(pilot)
            await scenario(pilot)
        app.index.close()

    asyncio.run(run())


def list_lines(app: StreamdumpApp) -> list[str]:
    packets = app.query_one(PacketList)
    return [packets.render_line(y).text for y in range(packets.size.height)]


def tree_labels(app: StreamdumpApp) -> list[str]:
    tree = app.query_one(DetailTree)
    found: list[str] = []

    def walk(node) -> None:  # type: ignore[no-untyped-def]
        found.append(node.label.plain)
        for child in node.children:
            walk(child)

    walk(tree.root)
    return found


# ---------------------------------------------------------------------- the index


@pytest.mark.parametrize(
    "capture",
    [
        "rabbitmq_stream/session.pcap",
        "nats/jetstream.pcap",
        "rocketmq/send_refused.pcap",
        # cut by its snap length: incomplete frames, kept whole with what was recovered after the gaps
        "rabbitmq_stream/pathological/bulk.snaplen.pcap",
    ],
)
def test_the_index_gives_back_every_frame_as_read_shows_it(capture: str) -> None:
    """Rows decoded again from the spool say what `read` says of each frame, in its order."""
    setup = Options().prepare()
    index = FrameIndex(setup, CaptureFile(CAPTURE_ROOT / capture))
    index.start()
    assert index.done.wait(60)
    views = Views(setup.decoders)
    read = streamdump("read", str(CAPTURE_ROOT / capture)).stdout.splitlines()
    assert index.count == len(read) > 0
    for i, line in enumerate(read):
        row = index.row(i)
        frame = index.frame(i)
        assert views[frame].line(frame, "TIME").split("TIME", 1)[1].strip().endswith(row.info)
        assert line.split()[0] == str(row.number)
        assert row.command in line and (row.info in line or not row.info)
    index.close()


def test_frames_keep_what_the_tracker_linked_and_noted() -> None:
    setup = Options().prepare()
    index = FrameIndex(setup, CaptureFile(AUTH_FAILURE))
    index.start()
    assert index.done.wait(60)
    json = streamdump("read", str(AUTH_FAILURE), "-T", "jsonl").stdout.splitlines()
    import json as jsonlib

    for i, line in enumerate(json):
        want = jsonlib.loads(line)
        frame = index.frame(i)
        assert (frame.links or {}) == want["links"]
        assert [e.message for e in frame.expert] == [e["message"] for e in want["expert"]] or frame.expanded
    assert any(index.severities[i] >= 2 for i in range(index.count))  # the refused login is coloured
    index.close()


def test_two_passes_link_requests_to_their_responses() -> None:
    index = FrameIndex(Options(two_pass=True).prepare(), CaptureFile(SESSION))
    index.start()
    assert index.done.wait(60)
    import json

    want = [
        json.loads(line)["links"]
        for line in streamdump("read", "-2", str(SESSION), "-T", "jsonl").stdout.splitlines()
    ]
    assert [index.frame(i).links or {} for i in range(index.count)] == want
    assert index.frame(0).links == {"response_in": 6}
    index.close()


# ---------------------------------------------------------------------- the keys


def test_select_open_the_tree_see_the_bytes_follow_a_link_and_come_back() -> None:
    app = make_app(SESSION)

    async def scenario(pilot: Pilot) -> None:
        packets = app.query_one(PacketList)
        assert packets.selected == 0 and "PeerProperties request" in list_lines(app)[0]
        await pilot.press("down")  # packet 6: the PeerProperties response
        await pilot.pause()
        assert app.index.numbers[packets.selected] == 6
        labels = tree_labels(app)
        assert labels[0].startswith("Frame 6: 127.0.0.1:5552 → 127.0.0.1:60546")
        assert "[Request In: 4]" in labels
        # The tree: down to the correlation id; the hex pane lights its four bytes.
        tree = app.query_one(DetailTree)
        tree.focus()
        await pilot.pause()
        for _ in range(20):
            node = tree.cursor_node
            if node is not None and node.label.plain.startswith("Correlation ID"):
                break
            await pilot.press("down")
        assert tree.cursor_node is not None and tree.cursor_node.label.plain == "Correlation ID: 1"
        hexpane = app.query_one(HexPane)
        assert hexpane.mark == (8, 12) and hexpane.data[8:12] == b"\x00\x00\x00\x01"
        lit = hexpane.render_line(0)
        assert "00 00 00 01" in lit.text
        # A branch with children opens with space (made when opened).
        for _ in range(30):
            node = tree.cursor_node
            if node is not None and node.data is not None and node.data.children:
                break
            await pilot.press("down")
        node = tree.cursor_node
        assert node is not None and not node.is_expanded
        await pilot.press("space")
        assert node.is_expanded and len(node.children) == len(node.data.children)
        # g follows the link to the request; b comes back.
        await pilot.press("g")
        await pilot.pause()
        assert app.index.numbers[packets.selected] == 4
        await pilot.press("b")
        await pilot.pause()
        assert app.index.numbers[packets.selected] == 6
        # Enter on the tree's link goes there too.
        tree.focus()
        await pilot.pause()
        for _ in range(40):
            node = tree.cursor_node
            if node is not None and node.label.plain.startswith("[Request In"):
                break
            await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        assert app.index.numbers[packets.selected] == 4
        # The mouse selects a row.
        await pilot.click(PacketList, offset=(5, 3))
        await pilot.pause()
        assert packets.cursor == 3

    drive(app, scenario)


def test_the_filter_bar_completes_names_says_what_is_wrong_and_applies() -> None:
    app = make_app(SESSION)
    every = streamdump("read", str(SESSION), "-Y", 'command == "Deliver"').stdout.splitlines()

    async def scenario(pilot: Pilot) -> None:
        bar = app.query_one(FilterBar)
        await pilot.press("slash")
        assert bar.input.has_focus
        await pilot.press(*"comm")
        await pilot.pause(0.1)
        assert bar.error is not None and "unknown field 'comm'" in bar.error
        await pilot.press("tab")
        await pilot.pause()
        assert bar.input.value == "command"
        await pilot.press(*" ==")
        await pilot.pause()
        assert bar.error is not None and "end of filter" in bar.error
        await pilot.press("enter")  # refused: the list keeps every frame
        await pilot.pause()
        assert app.scan is None and len(app.query_one(PacketList).shown) == app.index.count
        await pilot.press(*' "Deliver"', "enter")
        await indexed(pilot)
        assert bar.error is None
        shown = app.query_one(PacketList).shown
        assert [str(app.index.numbers[shown[i]]) for i in range(len(shown))] == [
            line.split()[0] for line in every
        ]
        assert all("Deliver" in line for line in list_lines(app) if line.strip())
        # An empty filter shows every frame again.
        await pilot.press("slash", "ctrl+u", "enter")
        await pilot.pause()
        assert len(app.query_one(PacketList).shown) == app.index.count

    drive(app, scenario)


def test_completion_knows_every_protocol_s_names() -> None:
    setup = Options().prepare()
    names = filter_names(setup.decoders.values())
    assert {"command", "stream", "nats.subject", "rocketmq.code"} <= set(names)
    word, found = candidates(names, 'stream == "x" and rabbitmq_stream.corr')
    assert word == "rabbitmq_stream.corr" and "rabbitmq_stream.correlation_id" in found


def test_a_command_line_filter_is_the_first_and_follow_stats_help_screens() -> None:
    app = make_app(SESSION, filter_text='command == "Publish"')
    follow = streamdump("follow", str(SESSION), "--connection", "1").stdout.splitlines()
    stats = streamdump("stats", str(SESSION)).stdout.splitlines()

    async def scenario(pilot: Pilot) -> None:
        assert all("Publish" in line for line in list_lines(app) if line.strip())
        assert app.query_one(FilterBar).input.value == 'command == "Publish"'
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        assert app.screen.lines == follow  # the whole connection, as `follow` prints it
        await pilot.press("escape", "s")
        await pilot.pause(0.1)
        assert isinstance(app.screen, TextScreen)
        assert [line.rstrip() for line in app.screen.lines] == [line.rstrip() for line in stats]
        await pilot.press("escape", "question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, TextScreen) and any("quit" in line for line in app.screen.lines)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.query_one(PacketList), PacketList)

    drive(app, scenario)


def test_a_finding_jumps_to_its_frame() -> None:
    app = make_app(AUTH_FAILURE)

    async def scenario(pilot: Pilot) -> None:
        await pilot.press("e")
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, FindingsScreen) and screen.findings
        target = screen.findings[0][1]
        assert target is not None and target > app.index.numbers[0]
        await pilot.press("enter")
        await pilot.pause(0.1)
        packets = app.query_one(PacketList)
        assert not isinstance(app.screen, FindingsScreen)
        assert app.index.numbers[packets.selected] == target
        # The frame of the error is coloured by it, the others by their protocol alone.
        await pilot.press("home")
        await pilot.pause()
        errors = [i for i in range(app.index.count) if app.index.row(i).severity == "error"]
        assert errors and errors[0] != packets.cursor
        lit = next(iter(packets.render_line(errors[0] - packets.scroll_offset.y))).style
        plain = next(iter(packets.render_line(1))).style
        assert lit.bgcolor.name == SEVERITY_BACKGROUND["error"] and plain.bgcolor is None
        assert (
            lit.color.name == plain.color.name == PALETTE[app.index.protocol_names.index("rabbitmq_stream")]
        )

    drive(app, scenario)


def test_search_marks_and_writing_the_shown_and_the_marked_frames(tmp_path: Path) -> None:
    app = make_app(SESSION, filter_text='command == "Deliver" or command == "Credit"')
    shown_file, marked_file = tmp_path / "shown.pcapng", tmp_path / "marked.pcap"

    async def scenario(pilot: Pilot) -> None:
        packets = app.query_one(PacketList)
        await pilot.press("ctrl+f")
        await pilot.pause()
        await pilot.press(*"chunk=3", "enter")
        await pilot.pause(0.1)
        first = app.index.row(packets.selected)
        assert "chunk=3" in first.info
        await pilot.press("n")  # the next match, wrapping round: only one
        await pilot.pause()
        assert packets.selected == first.index
        await pilot.press("m", "down", "down", "m")
        await pilot.pause()
        assert len(packets.marks) == 2
        await pilot.press("home", "full_stop")
        await pilot.pause()
        assert packets.selected == first.index
        await pilot.press("full_stop")
        await pilot.pause()
        assert packets.selected == sorted(packets.marks)[1]
        assert "●" in list_lines(app)[packets.cursor]
        for key, path in (("w", shown_file), ("W", marked_file)):
            await pilot.press(key)
            await pilot.pause()
            answer = app.screen.query_one(Input)
            assert answer.value == ("shown.pcapng" if key == "w" else "marked.pcapng")
            answer.value = str(path)
            await pilot.press("enter")
            await until(pilot, lambda path=path: app.written == str(path))

    drive(app, scenario)
    # The shown frames' packets are what `read -w` writes with the same filter.
    reference = tmp_path / "reference.pcapng"
    streamdump(
        "read", str(SESSION), "-q", "-Y", 'command == "Deliver" or command == "Credit"', "-w", str(reference)
    )
    want = streamdump("read", str(reference)).stdout
    assert want.count("Deliver") == 6 and streamdump("read", str(shown_file)).stdout == want
    marked = streamdump("read", str(marked_file)).stdout.splitlines()
    assert len(marked) == 2 and all(("Deliver" in m or "Credit" in m) for m in marked)


def test_q_quits() -> None:
    app = make_app(SESSION)

    async def scenario(pilot: Pilot) -> None:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running

    drive(app, scenario)


# ---------------------------------------------------------------------- wire text


def test_text_from_the_wire_is_escaped_and_never_markup(tmp_path: Path) -> None:
    from test_safe_text import hostile_capture

    hostile = hostile_capture("rabbitmq_stream", tmp_path)
    markup = tmp_path / "markup.pcap"
    markup.write_bytes(SESSION.read_bytes().replace(b"streamdump-demo", b"[red]x[/red]xyz"))
    raw = set(UNSAFE)

    for path, shown in ((hostile, "\\x1b[2J\\u202e"), (markup, "[red]x[/red]xyz")):
        app = make_app(path)

        async def scenario(pilot: Pilot, app: StreamdumpApp = app, shown: str = shown) -> None:
            packets = app.query_one(PacketList)
            create = next(i for i in range(app.index.count) if "Create request" in app.index.row(i).command)
            packets.go_to_row(create)
            await pilot.pause()
            text = "\n".join(list_lines(app) + tree_labels(app))
            assert shown in text
            assert not {ch for ch in text if ch in raw and ch != "\n"}

        drive(app, scenario)


# ---------------------------------------------------------------------- live


def test_live_frames_appear_as_captured_and_the_list_follows_the_tail_until_scrolled(tmp_path: Path) -> None:
    """A capture arriving on a pipe, packet by packet, as a live capture's does."""
    written = tmp_path / "written.pcapng"
    data = SESSION.read_bytes()
    read_fd, write_fd = os.pipe()
    source = CaptureStream(os.fdopen(read_fd, "rb"), "pipe")
    app = make_app(source, live=True)
    records = _pcap_records(data)

    async def scenario(pilot: Pilot) -> None:
        packets = app.query_one(PacketList)
        os.write(write_fd, data[:24] + b"".join(records[:20]))
        await _read(pilot, app, 20)
        first = app.index.count
        assert first >= 8 and packets.cursor == len(packets.shown) - 1  # following the tail
        os.write(write_fd, b"".join(records[20:40]))
        await _read(pilot, app, 40)
        assert app.index.count > first and packets.cursor == len(packets.shown) - 1
        await pilot.press("up", "up")
        held = packets.selected
        os.write(write_fd, b"".join(records[40:]))
        os.close(write_fd)
        await indexed(pilot)
        assert app.index.count == 56 and packets.selected == held  # scrolled up: it stays
        await pilot.press("end")
        await pilot.pause()
        assert packets.cursor == 55 and packets.follow_tail
        # The packets kept aside from the pipe are written out as read -w writes them from the file.
        app.index.write(list(range(app.index.count)), written)

    drive(app, scenario, wait=False)
    reference = tmp_path / "reference.pcapng"
    streamdump("read", "-q", str(SESSION), "-w", str(reference))
    assert streamdump("read", str(written)).stdout == streamdump("read", str(reference)).stdout


async def _read(pilot: Pilot, app: StreamdumpApp, packets: int) -> None:
    """Wait until the index has read so many packets of the pipe (and no more come)."""
    for _ in range(200):
        if app.index.session.stats.packets >= packets:
            break
        await pilot.pause(0.02)
    seen = -1
    while seen != app.index.count:  # the last packet's frames analysed too
        seen = app.index.count
        await pilot.pause(0.05)
    app.tick()
    await pilot.pause(0.05)


def _pcap_records(data: bytes) -> list[bytes]:
    import struct

    out, pos = [], 24
    while pos < len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        out.append(data[pos : pos + 16 + caplen])
        pos += 16 + caplen
    return out


# ---------------------------------------------------------------------- snapshots


def _snapshot_app(path: Path = SESSION, filter_text: str = "") -> StreamdumpApp:
    return make_app(path, filter_text=filter_text)


def test_snapshot_the_main_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(
        _snapshot_app(), press=["down", "down", "down"], terminal_size=(140, 40), run_before=indexed
    )


def test_snapshot_a_filter_with_an_error(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(
        _snapshot_app(), press=["slash", *"stream == orders"], terminal_size=(140, 40), run_before=indexed
    )


def test_snapshot_the_findings(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(
        _snapshot_app(AUTH_FAILURE), press=["e", "_"], terminal_size=(140, 30), run_before=indexed
    )


# ---------------------------------------------------------------------- the real command


TMUX = shutil.which("tmux") or "/usr/bin/tmux"


class Tmux:
    """A tmux server of the test's own, running one command in a 150x40 window."""

    def __init__(self, command: str, status: Path) -> None:
        need(Path(TMUX).exists(), "tmux runs the real command (apt-get install tmux)")
        self.socket = f"streamdump-test-{os.getpid()}-{status.parent.name}"
        self.status = status
        # COLUMNS and LINES from pytest would fix the terminal's size; the window's own is wanted.
        shell = (
            f"cd {shlex.quote(str(ROOT))} && unset COLUMNS LINES && "
            f"export PYTHONPATH={shlex.quote(str(ROOT))} && {command}; "
            f"echo $? > {shlex.quote(str(status))}; sleep 30"
        )
        subprocess.run(
            [TMUX, "-L", self.socket, "new-session", "-d", "-s", "ui", "-x", "150", "-y", "40", shell],
            check=True,
        )

    def keys(self, *keys: str, literal: bool = False) -> None:
        flags = ["-l"] if literal else []
        subprocess.run([TMUX, "-L", self.socket, "send-keys", "-t", "ui", *flags, *keys], check=True)
        time.sleep(0.5)  # as a person types: each key is taken before the next

    def screen(self) -> str:
        return subprocess.run(
            [TMUX, "-L", self.socket, "capture-pane", "-p", "-t", "ui"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout

    def wait_for(self, *texts: str, seconds: float = 30) -> str:
        """The screen once it shows every text (a terminal's first size may come after the first draw)."""
        end = time.monotonic() + seconds
        screen = ""
        while time.monotonic() < end:
            screen = self.screen()
            if all(text in screen for text in texts):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{texts!r} never showed; the screen:\n{screen}")

    def quit(self) -> int:
        self.keys("q")
        for _ in range(100):
            if self.status.exists() and self.status.read_text().strip():
                break
            time.sleep(0.1)
        return int(self.status.read_text())

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], check=False)


UI = f"{shlex.quote(sys.executable)} -m streamdump ui"


def test_the_real_command_in_tmux(tmp_path: Path) -> None:
    tmux = Tmux(f"{UI} captures/rabbitmq_stream/session.pcap", tmp_path / "status")
    try:
        tmux.wait_for("56 frames", "PeerProperties request", "No.", "Info", "Frame 4: 127.0.0.1:60546")
        tmux.keys("Down", "Down", "Down")
        tmux.wait_for("Frame 9: 127.0.0.1:5552", "[Request In: 8]", "0000  00 00 00 1f 80 12")
        tmux.keys("/")
        tmux.keys("command == Open", literal=True)
        tmux.wait_for("column 12")  # a bare word is no value: said as it is typed
        tmux.keys("Escape")  # a lone ESC is told from the start of a sequence by waiting
        assert tmux.quit() == 0
    finally:
        tmux.close()


def test_tls_decrypted_with_the_key_log_in_tmux(tmp_path: Path) -> None:
    """--tls-keylog carries over as every read option does: the rows and the tree are the
    decrypted protocol's, and the tree shows the TLS layer."""
    tls = "captures/tls/rstream_tls13"
    tmux = Tmux(f"{UI} {tls}.pcap --tls-keylog {tls}.keys", tmp_path / "status")
    try:
        tmux.wait_for("162 frames", "PeerProperties request", "SaslHandshake request")
        tmux.wait_for("Transport Layer Security: TLSv1.3, TLS_AES_256_GCM_SHA384, keys found")
        assert tmux.quit() == 0
    finally:
        tmux.close()


def test_a_capture_on_standard_input_with_the_keys_from_the_terminal(tmp_path: Path) -> None:
    tmux = Tmux(f"cat captures/nats/pubsub.pcap | {UI} -", tmp_path / "status")
    try:
        lines = streamdump("read", str(CAPTURE_ROOT / "nats" / "pubsub.pcap")).stdout.splitlines()
        tmux.wait_for(f"{len(lines)} frames", "Connect command", "Frame ")
        tmux.keys("End")
        tmux.wait_for(f"Frame {lines[-1].split()[0]}: ")
        assert tmux.quit() == 0
    finally:
        tmux.close()


@pytest.mark.live
@pytest.mark.nats
def test_live_in_tmux_frames_appear_as_the_client_sends_them(tmp_path: Path) -> None:
    from test_live_capture import need_capture, traffic

    need_capture()
    tmux = Tmux(f"{UI} --live -P nats", tmp_path / "status")
    try:
        tmux.wait_for("0 frames", "capturing")  # said once the capture is open
        traffic(5)
        tmux.wait_for("Publish command PUB", "subject=live.x", "Message command MSG")
        # The newest frame selected (the list follows the tail): its tree is drawn after the
        # rows, so it is waited for as they are, not looked for on the rows' screen.
        tmux.wait_for("Frame ")
        assert tmux.quit() == 0
    finally:
        tmux.close()


def test_without_textual_one_line_names_the_extra() -> None:
    # Textual hidden from the import system: the command says what to install, in one line.
    code = (
        "import importlib.util, sys; real = importlib.util.find_spec; "
        "importlib.util.find_spec = lambda n, *a: None if n == 'textual' else real(n, *a); "
        "sys.argv = ['streamdump', 'ui', 'captures/rabbitmq_stream/session.pcap']; "
        "from streamdump.cli import main; main()"
    )
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "streamdump: error: the terminal UI needs Textual: pip install 'streamdump[ui]'"
    )
