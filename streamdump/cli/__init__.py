"""The streamdump command line: thin typer commands that parse options, prepare an analysis
session and pick a view. Each command lives in the module of its kind; this one runs them,
importing only the module of the command a line names (COMMANDS).

Exit codes: 0 the input was read (whatever it holds), 1 the input cannot be read (a missing or
damaged capture, bad hex, a spec that does not load), 2 usage errors (typer's too), 3 findings
that reach --fail-on's level, 70 internal errors. Errors are one line on stderr; frames decoded
before an error are already printed.
"""

from __future__ import annotations

import copy
import gc
import importlib
import struct
import sys
from typing import Any

import typer

from streamdump.cli import base
from streamdump.cli.base import EXIT_INTERNAL

# The module that declares each command, in the order --help lists them. A command line naming
# one imports only that module, and typer builds only that command: typer reads every command's
# signature and evaluates its annotations when it builds one, and building all of them for a
# small read cost more than the read's own decoding.
COMMANDS = {
    "read": "reading",
    "stats": "reading",
    "follow": "reading",
    "decode": "reading",
    "live": "traffic",
    "proxy": "traffic",
    "ui": "ui",
    "spark": "pipeline",
    "report": "report",
    "lua": "plugin",
    "docs": "docs",
}

__all__ = ["COMMANDS", "app", "app_for", "main", "whole_app"]


def whole_app() -> typer.Typer:
    """The app with every command: for --help, a name that is no command, and the man pages."""
    for module in dict.fromkeys(COMMANDS.values()):
        importlib.import_module(f"streamdump.cli.{module}")
    # In COMMANDS' order, whichever module a command line imported first (`docs generate`).
    order = {name: n for n, name in enumerate(COMMANDS)}
    base.app.registered_commands.sort(key=lambda c: order.get(command_name(c), len(order)))
    base.app.registered_groups.sort(key=lambda g: order.get(g.name, len(order)))
    return base.app


def command_name(info: Any) -> str:
    """The name typer gives a registered command (its function's name, dashed, unless named)."""
    return str(info.name or info.callback.__name__.lower().replace("_", "-"))


def app_for(args: list[str]) -> typer.Typer:
    """The app a command line needs: the named command alone (its help, options and errors are
    the same as in the whole app), or the whole app when the line names none."""
    # The top level's options take no value: the first word that is not one names the command.
    name = next((arg for arg in args if not arg.startswith("-")), None)
    module = COMMANDS.get(name) if name is not None else None
    if module is None:
        return whole_app()
    importlib.import_module(f"streamdump.cli.{module}")
    lean = copy.copy(base.app)  # the same callback, help and settings; its own command lists
    lean.registered_commands = [c for c in base.app.registered_commands if command_name(c) == name]
    lean.registered_groups = [g for g in base.app.registered_groups if g.name == name]
    return lean


def __getattr__(name: str) -> Any:
    # `from streamdump.cli import app`, as the tests and spark-submit's entry take it: the whole app.
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        code = app_for(sys.argv[1:])(prog_name="streamdump", standalone_mode=False)
    except typer.TyperException as exc:  # a usage error (typer's click): one line, not a box
        sys.exit(_usage_error(exc))
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except (struct.error, ValueError, TypeError, OSError, RuntimeError, KeyError, IndexError) as exc:
        print(f"streamdump: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    if isinstance(code, int) and code:
        sys.exit(code)
