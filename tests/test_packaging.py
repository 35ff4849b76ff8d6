"""The wheel ships the specs: an installed streamdump decodes without the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT


def test_wheel_contains_specs_and_works_installed(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("streamdump-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every protocol folder ships whole: its spec, its package and its Lua twins.
    for folder in sorted(p for p in (ROOT / "dissectors").iterdir() if (p / "spec.yaml").is_file()):
        shipped = {
            f"streamdump/dissectors/{folder.name}/{f.name}"
            for f in folder.iterdir()
            if f.suffix in (".yaml", ".py", ".lua")
        }
        assert f"streamdump/dissectors/{folder.name}/spec.yaml" in shipped
        assert shipped <= names, sorted(shipped - names)
    assert {"streamdump/wireshark/dissector.lua", "streamdump/codecs/amqp.lua"} <= names
    # The Spark pipeline, its quiet logging for the JVM and spark-submit's entry point.
    assert {
        "streamdump/spark/log4j2.properties",
        "streamdump/cli/submit.py",
        "streamdump/wire/splits.py",
    } <= names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = (
        "import streamdump.spec.registry as r, sys; print(r.spec_dir()); "
        "sys.argv=['streamdump','decode','00000009000600010000000701','--brief']; "
        "import streamdump.cli as c; c.main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr
    spec_path, line = proc.stdout.splitlines()
    assert Path(spec_path).is_relative_to(target)
    assert "DeletePublisher request 0x0006 corr=7 pub=1" in line
    plugin = subprocess.run(
        [sys.executable, "-m", "streamdump", "lua", "generate", "--out", str(tmp_path / "lua")],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert plugin.returncode == 0, plugin.stderr
    generated = (tmp_path / "lua" / "streamdump.lua").read_bytes()
    assert generated == (ROOT / "lua" / "streamdump.lua").read_bytes()
