"""The machine's programs and files: finding admin programs, running them, handing files back.

tcpdump, ip, ethtool, rabbitmq-plugins and rabbitmqctl live in sbin directories that a
non-login PATH (sudo, CI steps) often lacks, and files written as root (tcpdump's output,
the pcapng copy, the sidecars) are given to the owner of the directory they land in, so that
developers can overwrite them without root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def find_program(name: str) -> str | None:
    """Path of the program `name`, looked up in PATH, /usr/sbin and /sbin; None when missing."""
    # /usr/sbin and /sbin are often missing from a non-login PATH (sudo, CI steps).
    candidates = (shutil.which(name), f"/usr/sbin/{name}", f"/sbin/{name}")
    return next((p for p in candidates if p and os.access(p, os.X_OK)), None)


def run(cmd: list[str]) -> str:
    """The standard output of `cmd`; a non-zero exit status raises, with its standard error."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def give_to_dir_owner(path: Path, directory: Path | None = None) -> None:
    """When running as root, give `path` to the owner of `directory` (default: the one it is in)."""
    if os.geteuid() == 0:
        st = (directory or path.parent).stat()
        os.chown(path, st.st_uid, st.st_gid)
