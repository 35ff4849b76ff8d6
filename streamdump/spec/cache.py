"""What a start keeps for the next one: the compiled registry, pickled in the user's cache folder,
and the code objects of the decoders generated from it (`compiled`).

Reading the specs (YAML) and compiling them into the registry's objects is a large part of a
small capture's read. The compiled form is kept in $STREAMDUMP_CACHE, else
$XDG_CACHE_HOME/streamdump, else ~/.cache/streamdump, under a name made from a digest of what
it was built from: the specs' content and the code that compiles them (its files' sizes and
times). A change to either makes a new name, so a stale copy is never read. A copy that cannot
be read (damaged, written by other code) is rebuilt from the specs, and a folder that cannot be
written only means the next start compiles again. STREAMDUMP_CACHE=off keeps nothing. Each
installed copy or checkout keeps its own copy (`place`): a newer one replaces only its own.

The folder is the user's own, as their installed packages are: what is read back from it is
trusted as the code itself is.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType
from typing import TypeVar

try:
    # CPython's own BLAKE2: hashlib would load OpenSSL at every start (12 million instructions).
    from _blake2 import blake2b as _blake2b
except ImportError:  # another Python
    from hashlib import blake2b as _blake2b

T = TypeVar("T")
OFF = "off"
# Errors a damaged or foreign pickle raises while loading: it is rebuilt, never trusted half way.
_UNREADABLE = (
    OSError,
    EOFError,
    pickle.UnpicklingError,
    AttributeError,
    ImportError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
)


def folder() -> Path | None:
    """Where kept things go; None when the environment says to keep nothing."""
    chosen = os.environ.get("STREAMDUMP_CACHE")
    if chosen == OFF:
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "streamdump"


def digest(contents: Iterable[Path], stamps: Iterable[str], version: str) -> str:
    """A name for what these files make: contents hashed whole, the rest by their stamps
    (python_stamps)."""
    h = _blake2b(f"{version}\0{sys.version}\0{pickle.HIGHEST_PROTOCOL}\0".encode())
    for path in contents:
        h.update(str(path).encode() + b"\0")
        h.update(path.read_bytes())
    h.update("\0".join(stamps).encode())
    return h.hexdigest()[:32]


def place(path: Path) -> str:
    """A short name for a folder, to keep one copy of a kind for each place it is made from."""
    return _blake2b(str(path).encode()).hexdigest()[:8]


def python_stamps(*roots: Path) -> list[str]:
    """Every .py file under the roots with its size and time, in a stable order (no __pycache__).
    From the folders' entries: one walk, no stat call a file."""
    found: list[str] = []
    stack = [str(root) for root in roots]
    while stack:
        root = stack.pop()
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    stack.append(entry.path)
            elif entry.name.endswith(".py"):
                st = entry.stat()
                found.append(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}")
    return sorted(found)


def kept(kind: str, key: str, make: Callable[[], T], expect: type[T]) -> T:
    """The object kept under kind and key, or make() (kept for next time when the folder allows).
    A kept object that is not an `expect` was written by something else: it is made again."""
    where = folder()
    if where is None:
        return make()
    path = where / f"{kind}-{key}.pickle"
    try:
        with path.open("rb") as fh:
            found = pickle.load(fh)  # the user's own cache folder: see the docstring
        if isinstance(found, expect):
            return found
    except FileNotFoundError:
        pass
    except _UNREADABLE:
        pass  # damaged or foreign: made again below, and replaced
    made = make()
    _keep(where, kind, path, made)
    return made


def _keep(where: Path, kind: str, path: Path, made: object) -> None:
    """Write made and drop older copies of kind."""
    try:
        _write(where, path, pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL))
        for old in where.glob(f"{kind}-*.pickle"):
            if old != path:
                old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
        pass  # an unwritable folder (or an object that cannot be kept): the next start compiles again


def _write(where: Path, path: Path, data: bytes) -> None:
    """data as path's content, atomically: a reader never sees half a file."""
    import tempfile  # only when writing: a start that reads the cache back needs none of it

    where.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=where, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


# Generated code kept between starts: (digest of the file name and source) -> marshalled code.
# Started over past this many entries (sources of code since changed pile up otherwise).
CODE_KEPT = 2048
_codes: dict[bytes, bytes] | None = None


def compiled(source: str, filename: str) -> CodeType:
    """compile(source, filename, "exec"), kept in the cache folder for the next start.

    The decoders generated from the registry (spec/specialise.py) are the same source every
    start, and compiling them was about 4% of a small capture's read; a code object read back
    with marshal costs a fraction of that. An entry is found by a digest of its file
    name and whole source, so it is only ever the code of that very source; the store is kept
    per Python version, whose bytecode it is. Unreadable or unwritable: compiled as before."""
    global _codes
    key = _blake2b(f"{filename}\0{source}".encode(), digest_size=20).digest()
    where = folder()
    if _codes is None:
        _codes = _read_codes(where)
    kept = _codes.get(key)
    if kept is not None:
        try:
            code = marshal.loads(kept)
            if isinstance(code, CodeType):
                return code
        except (EOFError, ValueError, TypeError):
            pass  # damaged: compiled again, and replaced
    code = compile(source, filename, "exec")
    if where is not None:
        if len(_codes) >= CODE_KEPT:
            _codes.clear()
        _codes[key] = marshal.dumps(code)
        # Written whole (a start that compiles something new is rare); unwritable: compiled again.
        with contextlib.suppress(OSError, ValueError):
            _write(where, _codes_path(where), marshal.dumps(_codes))
    return code


def _codes_path(where: Path) -> Path:
    return where / f"code-{place(Path(__file__).resolve().parent)}-{sys.implementation.cache_tag}.marshal"


def _read_codes(where: Path | None) -> dict[bytes, bytes]:
    if where is None:
        return {}
    try:
        with _codes_path(where).open("rb") as fh:
            found = marshal.load(fh)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(found, dict) or not all(
        type(k) is bytes and type(v) is bytes for k, v in found.items()
    ):
        return {}
    return found
