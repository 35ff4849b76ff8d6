"""The code base stays ruff clean (checked here so CI enforces it)."""

from __future__ import annotations

import shutil
import subprocess

from conftest import ROOT, need


def test_ruff_check() -> None:
    need(shutil.which("ruff") is not None, "ruff is not installed (pip install -e '.[test]')")
    proc = subprocess.run(["ruff", "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
