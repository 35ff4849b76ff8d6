"""A source checkout runs as it is: `python -m streamdump` from a fresh clone with only the
dependencies installed, and `streamdump spark` started from inside a clone, whose Spark workers
put the clone's folder first on their path.

The clone is the files of this checkout git would commit (tracked, and new ones not
ignored), copied; "not installed" is Python without its site-packages processing (`-S`: no
.pth file, so no editable install of this checkout either) and the dependencies on PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT, need


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        source = ROOT / os.fsdecode(name)
        if source.is_file():  # a file the working tree deleted is no part of the clone
            (target / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / os.fsdecode(name))
    return target


def _dependencies() -> str:
    paths = sysconfig.get_paths()
    return os.pathsep.join(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def test_python_m_runs_from_a_fresh_clone(clone: Path) -> None:
    env = {**os.environ, "PYTHONPATH": _dependencies()}
    env.pop("PYTHONSAFEPATH", None)
    where = subprocess.run(
        [sys.executable, "-S", "-c", "import streamdump.dissectors.nats as n; print(n.__file__)"],
        cwd=clone, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(clone)  # the clone's protocols, no other's
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "streamdump", "read", "captures/nats/pubsub.pcap"],
        cwd=clone, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Connect command name=orders-service" in proc.stdout


def test_spark_runs_from_inside_a_clone_after_pip_install(clone: Path, tmp_path: Path) -> None:
    from streamdump import spark

    need(spark.missing() is None, f"Spark cannot run here: {spark.missing()}")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q",
         "--target", str(site), str(clone)],
        check=True, capture_output=True,
    )  # fmt: skip
    # Workers run without site-packages processing too, so only what pip put in site and the
    # dependencies are there: the clone's folder, first on a worker's path, is what it finds.
    worker = tmp_path / "python"
    worker.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    worker.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), _dependencies()]),
        "PYSPARK_PYTHON": str(worker),
    }
    env.pop("PYTHONSAFEPATH", None)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-S", str(site / "bin" / "streamdump"), "spark", "captures/nats/pubsub.pcap",
         "--out", str(out), "--master", "local[1]", "--partitions", "1"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "stats.json").is_file()
    assert "captures/nats/pubsub.pcap: " in proc.stdout
