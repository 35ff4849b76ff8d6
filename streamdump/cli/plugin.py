"""`streamdump lua`: the Wireshark plugin generated from the registry, written, installed, listed."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads these
# signatures whenever it builds a command, and every string annotation costs it an eval.
from pathlib import Path
from typing import Annotated

import typer

from streamdump.cli.base import PLAIN_HELP, app, fail

lua_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=PLAIN_HELP,
    help="The Wireshark plugin generated from the registry: write it, install it, list its fields.",
)
app.add_typer(lua_app, name="lua")


@lua_app.command("generate")
def lua_generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the plugins into.")] = Path("lua"),
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a plugin there is not current.")
    ] = False,
) -> None:
    """Write the Wireshark Lua plugin: every spec in the registry on one runtime (lua/ in the repository)."""
    from streamdump.spec.registry import default_registry
    from streamdump.wireshark import luagen

    protocols = list(default_registry().protocols.values())
    if check:
        path = out / luagen.PLUGIN_NAME
        stale = (
            [path.name]
            if not path.is_file() or path.read_text(encoding="utf-8") != luagen.bundle(protocols)
            else []
        )
        stale += [p.name for p in luagen.superseded(out, protocols)]
        if stale:
            raise fail(f"stale in {out}: {', '.join(stale)} (run `streamdump lua generate`)")
        print(f"{out}: current")
        return
    try:
        written = luagen.write(protocols, out)
        for old in luagen.superseded(out, protocols):
            old.unlink()
            print(f"removed {old} (its protocol is in {luagen.PLUGIN_NAME} now)")
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror or exc}") from None
    for path in written:
        print(path)


@lua_app.command("install")
def lua_install(
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="Plugins folder (default: Wireshark's personal Lua plugins folder)."),
    ] = None,
) -> None:
    """Install the plugin into Wireshark's personal plugins folder and say where."""
    from streamdump.spec.registry import default_registry
    from streamdump.wireshark import luagen

    target = folder or luagen.personal_plugins_folder()
    try:
        protocols = list(default_registry().protocols.values())
        written = luagen.write(protocols, target)
        # An earlier streamdump's one plugin per protocol would register each protocol twice.
        removed = luagen.superseded(target, protocols)
        for old in removed:
            old.unlink()
    except OSError as exc:
        raise fail(f"cannot write {target}: {exc.strerror or exc}") from None
    for path in written:
        print(f"installed {path}")
    for old in removed:
        print(f"removed {old} (its protocol is in {luagen.PLUGIN_NAME} now)")
    print("Wireshark loads it when it starts (Analyze > Reload Lua Plugins in a running one).")


@lua_app.command("fields")
def lua_fields(
    protocol: Annotated[
        str | None, typer.Option("--protocol", help="Only this protocol's (default: every protocol's).")
    ] = None,
) -> None:
    """List the plugins' display-filter fields and expert entries: abbreviation, type, title.

    Without its protocol's prefix, a field's name is the one --filter takes."""
    from streamdump.spec.registry import default_registry
    from streamdump.wireshark import luagen

    registry = default_registry()
    if protocol is not None and protocol not in registry.protocols:
        raise fail(f"no protocol {protocol!r} (known: {', '.join(sorted(registry.protocols))})")
    for name in sorted(registry.protocols):
        if protocol in (None, name):
            for abbreviation, ftype, title in luagen.glossary(registry.protocols[name]):
                print(f"{abbreviation}\t{ftype}\t{title}")
