"""The streamdump command line: thin typer commands that parse options, prepare an analysis
session and pick a view. Each command lives in the module of its kind; this one runs them.

Exit codes: 0 the input was read (whatever it holds), 1 the input cannot be read (a missing or
damaged capture, bad hex, a spec that does not load), 2 usage errors (typer's too), 3 findings
that reach --fail-on's level, 70 internal errors. Errors are one line on stderr; frames decoded
before an error are already printed.
"""

from __future__ import annotations

import gc
import importlib
import struct
import sys

import typer

from streamdump.cli.base import EXIT_INTERNAL, app

# Each module registers its commands; --help lists them in this order.
for _module in ("reading", "traffic", "ui", "pipeline", "report", "plugin", "docs"):
    importlib.import_module(f"streamdump.cli.{_module}")

__all__ = ["app", "main"]


def _usage_error(exc: typer.TyperException) -> int:
    """Tell a command line typer refused on one line (with where help is); its exit status."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":
        return 2  # no arguments at all: the help, which typer printed, is the answer
    said = " ".join(str(getattr(exc, "format_message", exc.__str__)()).split())
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    print(f"streamdump: error: {said}{where}", file=sys.stderr)
    return int(getattr(exc, "exit_code", 2))


def main() -> None:
    """Entry point: run the app with one-line errors and no tracebacks."""
    # Decoding allocates many short-lived containers and few cycles: collect the youngest
    # generation every 10,000 allocations, not every 700 (a fifth of a read's time otherwise).
    gc.set_threshold(10_000, 10, 10)
    # Text a peer sent may hold what UTF-8 cannot encode (a lone surrogate from a JSON escape):
    # it is written escaped, not refused.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        # Not standalone: a usage error comes back here to be told on one line, not in a box.
        code = app(prog_name="streamdump", standalone_mode=False)
    except typer.TyperException as exc:  # a usage error (typer's click): one line, not a box
        sys.exit(_usage_error(exc))
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except (struct.error, ValueError, TypeError, OSError, RuntimeError, KeyError, IndexError) as exc:
        print(f"streamdump: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    if isinstance(code, int) and code:
        sys.exit(code)
