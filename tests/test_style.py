"""The code base stays ruff clean (checked here so CI enforces it)."""

from __future__ import annotations

import shutil
import subprocess

from conftest import ROOT, need


def test_ruff_check() -> None:
    need(shutil.which("ruff") is not None, "ruff is not installed (pip install -e '.[test]')")
    proc = subprocess.run(["ruff", "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# A class past this many lines is several things under one name: split it by what each part owns.
MAX_CLASS_LINES = 600


def test_no_class_is_over_600_lines() -> None:
    import ast

    long = []
    for path in sorted([*(ROOT / "streamdump").rglob("*.py"), *(ROOT / "dissectors").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
                )
    assert not long, "\n".join(long)
