"""The plugin's pass without a tree agrees with its pass with one.

Where Wireshark keeps no tree (tshark without -V, a first pass) the plugin decodes a frame only
as far as the Info column, the conversation links and the expert checks need: no record items,
no message bodies, no chunk CRC. The cross-check (test_wireshark.py) compares the tree with
streamdump's JSON, and its two-pass test reads links the tree-less first pass made; this file
checks what that pass shows by itself: every packet's summary line (Info included) is the one a
tree-building run (a display filter makes tshark build one) shows, in tshark 4.0 and 4.4.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_wireshark import (
    FLAVOURS,
    RETRANSMITTED,
    _plain,
    every_capture,
    plugin_of,
    related,
    tshark_run,
)


def summary_lines(flavour: str, name: str, path: Path, tmp: Path, *, tree: bool) -> list[str]:
    files = [plugin_of(plugin) for plugin in related(name)] + [_plain(path, tmp)]
    reorder = flavour != "4.4" or path.name not in RETRANSMITTED

    def args(paths: list[str]) -> list[str]:
        out = [arg for plugin in paths[:-1] for arg in ("-X", f"lua_script:{plugin}")]
        out += ["-n", "-r", paths[-1], "-o", f"tcp.reassemble_out_of_order:{'TRUE' if reorder else 'FALSE'}"]
        return out + (["-Y", "frame"] if tree else [])

    result = tshark_run(flavour, files, args, tmp)
    assert result.returncode == 0, f"tshark failed ({result.returncode}): {result.stderr[-2000:]}"
    assert "lua error" not in (result.stdout + result.stderr).lower()
    return result.stdout.splitlines()


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("name", "path"), every_capture(), ids=lambda v: getattr(v, "name", v))
def test_summary_without_a_tree_is_the_summary_with_one(
    flavour: str, name: str, path: Path, tmp_path: Path
) -> None:
    lite = summary_lines(flavour, name, path, tmp_path, tree=False)
    full = summary_lines(flavour, name, path, tmp_path, tree=True)
    assert len(lite) == len(full)
    differ = [(a, b) for a, b in zip(lite, full, strict=True) if a != b]
    first = f"\n  no tree: {differ[0][0]}\n  tree:    {differ[0][1]}" if differ else ""
    assert not differ, f"{len(differ)} lines differ; first:{first}"
