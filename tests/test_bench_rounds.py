"""bench/vs_tshark.py runs its commands in rounds, every command once a round, so that a plugin run
and its reference run close together in time, and gives each ratio round by round with its median.

The commands here are shell one-liners that note their name in a file as they run, and sleep for
a set time, so the order of the runs and the ratios they give are known in advance.
"""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import vs_tshark


def noting(log, name: str, seconds: float = 0.0, fail: bool = False) -> list[str]:
    tail = "; exit 3" if fail else ""
    return ["sh", "-c", f"echo {name} >> {log}; sleep {seconds}{tail}"]


def test_every_command_runs_once_a_round_and_a_column_added_after_the_first_joins_the_rest(tmp_path):
    log = tmp_path / "order"
    cmds = {"plugin": noting(log, "plugin"), "framing": noting(log, "framing")}
    seen_first: list[dict] = []

    def then(first):
        seen_first.append({column: len(runs) for column, runs in first.items()})
        return {"items": noting(log, "items")}

    runs = vs_tshark.in_rounds(cmds, 3, "one-line", env={}, then=then)

    assert log.read_text().split() == ["plugin", "framing", "items"] * 3
    assert seen_first == [{"plugin": 1, "framing": 1}]
    assert {column: len(each) for column, each in runs.items()} == {"plugin": 3, "framing": 3, "items": 3}
    assert "items" in cmds  # the caller's table names the added column's command, for the report


def test_a_command_that_fails_is_not_run_again_and_its_failure_is_what_is_reported(tmp_path):
    log = tmp_path / "order"
    cmds = {"plugin": noting(log, "plugin", fail=True), "framing": noting(log, "framing")}
    runs = vs_tshark.in_rounds(cmds, 3, "one-line", env={})
    assert log.read_text().split() == ["plugin", "framing", "framing", "framing"]
    assert vs_tshark.best_of(runs["plugin"]).exit_code == 3
    best = vs_tshark.best_of(runs["framing"])
    assert best.ok and len(best.rounds) == 3


def test_the_ratios_are_paired_by_round_and_their_median_printed(tmp_path):
    log = tmp_path / "order"
    cmds = {"tshark_plugin": noting(log, "p", 0.2), "tshark_framing": noting(log, "f", 0.1)}
    every = vs_tshark.in_rounds(cmds, 3, "one-line", env={})
    runs = {column: vs_tshark.best_of(each) for column, each in every.items()}
    result = {"modes": {"one-line": {c: vars(r) for c, r in runs.items()}}}
    lines = vs_tshark.plugin_ratios(result)
    median = result["plugin_ratios"]["one-line_paired_median"]
    assert 1.4 < median < 2.6  # 0.2 s against 0.1 s, with a shell's start-up on both
    assert "by round" in lines[0] and f"median {median:.2f}x" in lines[0]


def test_the_median_of_an_even_count_is_the_middle_pair_s_mean():
    assert vs_tshark.median([1.0, 2.0, 4.0, 8.0]) == 3.0
    assert vs_tshark.median([1.0, 2.0, 9.0]) == 2.0


def test_in_a_chroot_a_command_names_copies_of_its_capture_and_scripts_there(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nstreamdump:x:1000:1001::/home:/bin/sh\n")
    capture, lua = tmp_path / "c.pcap", tmp_path / "p.lua"
    capture.write_bytes(b"pcap")
    lua.write_text("-- one")
    jail = vs_tshark.Chroot(root)
    try:
        argv = ["tshark", "-n", "-r", str(capture), "-X", f"lua_script:{lua}", "-J", "p.lua", "-V"]
        wrapped = jail.wrap(argv)
        stage = f"/tmp/{jail.stage.name}"
        assert wrapped[:4] == ["chroot", "--userspec=1000:1001", "--groups=1001", str(root)]
        assert wrapped[4:8] == ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", f"HOME={stage}/home"]
        copies = [f"{stage}/0-c.pcap", f"lua_script:{stage}/1-p.lua"]
        assert wrapped[8:] == ["tshark", "-n", "-r", copies[0], "-X", copies[1], "-J", "p.lua", "-V"]
        assert (jail.stage / "1-p.lua").read_text() == "-- one"
        assert jail.wrap(argv) == wrapped  # copied once
        lua.write_text("-- two, changed")
        again = jail.wrap(argv)
        assert (
            f"lua_script:{stage}/2-p.lua" in again
            and (jail.stage / "2-p.lua").read_text() == "-- two, changed"
        )
        monkeypatch.setattr(vs_tshark, "CHROOT", jail)
        assert vs_tshark.placed(argv)[0] == "chroot"
        assert vs_tshark.placed(["python", "-m", "streamdump"]) == ["python", "-m", "streamdump"]
    finally:
        jail.close()
    assert not jail.stage.exists()
