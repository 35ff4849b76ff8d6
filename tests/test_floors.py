"""The floors: streamdump's sub-packages are stacked, and an import only ever goes down.

From the bottom: the wire (capture files, packets, reassembly, framing, frames, limits), the
codecs (pure: they import nothing else of streamdump), the spec (registry, layouts, decoder,
encoder), the analysis (pipeline, tracker, session), the front ends (views, wireshark, live,
spark, ...) and the command line on top. An import that climbs a floor, or two sub-packages
on one floor importing each other, fails here; imports under TYPE_CHECKING are for type
checkers only and are left out. A new sub-package must be given its floor here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ROOT

FLOORS = {
    "wire": 1,
    "codecs": 2,
    "spec": 3,
    "analysis": 4,
    "views": 5,
    "wireshark": 5,
    "live": 5,
    "spark": 5,
    "report": 5,
    "ui": 5,
    "fuzzing": 5,
    "cli": 6,
    "__main__": 6,
    "__init__": 0,
}
# The protocol packages stand beside the floors: they use everything below the front ends, and
# the spec floor finds them by name (importlib), never by an import statement.
PROTOCOLS_MAY_USE = {"wire", "codecs", "spec", "analysis"}


def _unit(module: str) -> str | None:
    """The sub-package (or top-level module) a streamdump module belongs to."""
    parts = module.split(".")
    if parts[0] != "streamdump":
        return None
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "dissectors":
        parts.insert(0, "streamdump")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import outside `if TYPE_CHECKING:`, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            if base == "streamdump":  # `from streamdump import spark` names a sub-package
                found += [
                    (node.lineno, f"streamdump.{alias.name}" if _is_unit(alias.name) else "streamdump")
                    for alias in node.names
                ]
            else:
                found.append((node.lineno, base))
    return found


def _is_unit(name: str) -> bool:
    """Whether streamdump.<name> is a sub-package or module (not a name of streamdump/__init__.py)."""
    return (ROOT / "streamdump" / name).is_dir() or (ROOT / "streamdump" / f"{name}.py").is_file()


def _sources() -> list[Path]:
    return sorted((ROOT / "streamdump").rglob("*.py"))


def test_every_sub_package_has_its_floor() -> None:
    units = {_unit(_module_name(p)) for p in _sources()}
    assert units - FLOORS.keys() == set(), "give the new sub-package its floor in FLOORS"


def test_no_import_climbs_a_floor() -> None:
    climbing = []
    for path in _sources():
        mine = _unit(_module_name(path))
        for line, module in _imports(path):
            theirs = _unit(module)
            if theirs is None or theirs == mine:
                continue
            if theirs == "dissectors" or FLOORS[theirs] > FLOORS[mine]:
                climbing.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {module} ({theirs})")
    assert not climbing, "\n".join(climbing)


def test_codecs_import_nothing_else_of_streamdump() -> None:
    others = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "streamdump" / "codecs").rglob("*.py"))
        for line, module in _imports(path)
        if module.startswith("streamdump.") and _unit(module) != "codecs"
    ]
    assert not others, "\n".join(others)


def test_sub_packages_on_one_floor_do_not_import_each_other_in_a_circle() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in _sources():
        mine = _unit(_module_name(path))
        for _, module in _imports(path):
            theirs = _unit(module)
            if theirs is not None and theirs != mine:
                edges[mine].add(theirs)  # type: ignore[index]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for step in edges.get(start, ()):
            if step == goal or (step not in seen and reaches(step, goal, seen | {step})):
                return True
        return False

    circles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if reaches(b, a, {b}))
    assert not circles, circles


@pytest.mark.parametrize("folder", sorted(p.name for p in (ROOT / "dissectors").iterdir() if p.is_dir()))
def test_protocol_packages_use_only_the_floors_below_the_front_ends(folder: str) -> None:
    beyond = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "dissectors" / folder).glob("*.py"))
        for line, module in _imports(path)
        if _unit(module) not in (None, "dissectors", *PROTOCOLS_MAY_USE)
    ]
    assert not beyond, "\n".join(beyond)


def test_every_folder_opens_with_a_docstring_saying_what_it_owns() -> None:
    for init in sorted((ROOT / "streamdump").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 80, f"{init.relative_to(ROOT)}: say what the folder owns"


def test_every_package_ships_in_the_wheel() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    folders = {_module_name(init) for init in (ROOT / "streamdump").rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
