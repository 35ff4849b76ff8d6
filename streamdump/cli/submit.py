"""spark-submit's entry point: `spark-submit [spark options] submit.py INPUT... --out DIR`, the
arguments of `streamdump spark`; the session is the one spark-submit started."""

from __future__ import annotations

from streamdump.cli import app

if __name__ == "__main__":
    import sys

    app(["spark", *sys.argv[1:]], prog_name="streamdump spark")
