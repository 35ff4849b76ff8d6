"""The hostile corpus (tests/hostile/, made by its make.py) read by streamdump and by tshark with
the generated plugins: no traceback, no Lua error, no crash, no hang, at most a one-line error.

"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_wireshark import FLAVOURS, LUA_ERRORS, plugin_of, tshark_run

from streamdump.spec.registry import default_registry

HOSTILE = ROOT / "tests" / "hostile"
CORPUS = sorted(p for p in HOSTILE.iterdir() if p.suffix in (".pcap", ".pcapng"))
# Seconds any one read may take: the slowest file reads in about 1 s here.
PATIENCE = 60
# What each file is expected to be: read to the end, or refused by the reader with one line.
REFUSED = {
    "reader.absurd_caplen.pcap",
    "reader.empty.pcap",
    "reader.garbage.pcap",
    "reader.runs_past_end.pcap",
}


def test_the_corpus_is_what_make_writes(tmp_path: Path) -> None:
    """The committed files are what make.py writes today (a stale corpus would test old damage)."""
    made = subprocess.run(
        [sys.executable, str(HOSTILE / "make.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    fresh = sorted(p.name for p in tmp_path.iterdir())
    assert fresh == [p.name for p in CORPUS]
    stale = [name for name in fresh if (tmp_path / name).read_bytes() != (HOSTILE / name).read_bytes()]
    assert not stale, f"run python tests/hostile/make.py: {stale}"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
@pytest.mark.parametrize("view", [["-V"], ["-T", "jsonl"], ["-m"]], ids=["tree", "json", "messages"])
def test_streamdump_reads_it_without_a_traceback(path: Path, view: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streamdump", "read", str(path), *view],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("streamdump: error:")]
    if path.name in REFUSED:
        assert result.returncode == 1 and len(errors) == 1, result.stderr[-2000:]
    else:
        assert result.returncode == 0 and not errors, result.stderr[-2000:]
    # A tool failure or a finding, each telling which it is by how it starts.
    assert all(
        line.startswith(("streamdump: ", "[note] ", "[warn] ", "[error] "))
        for line in result.stderr.splitlines()
    ), result.stderr[-2000:]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_tshark_with_every_plugin_reads_it(path: Path, flavour: str, tmp_path: Path) -> None:
    plugins = [plugin_of(name) for name in sorted(default_registry().protocols)]

    def args(paths: list[str]) -> list[str]:
        return [a for plugin in paths[:-1] for a in ("-X", f"lua_script:{plugin}")] + ["-r", paths[-1], "-V"]

    result = tshark_run(flavour, [*plugins, path], args, tmp_path)
    text = (result.stdout + result.stderr).lower()
    assert result.returncode >= 0, (
        f"tshark {flavour} crashed (signal {-result.returncode}): {result.stderr[-1000:]}"
    )
    assert not any(error in text for error in LUA_ERRORS), result.stdout[-3000:]
    if path.name in REFUSED or path.name.startswith("reader."):
        return  # tshark says what it thinks of the file; the plugins were loaded without error
    assert result.returncode == 0, result.stderr[-2000:]
    protocol = path.name.split(".")[0]
    assert default_registry().get(protocol).title.lower() in text  # the plugin decoded frames
