"""streamdump: a protocol analyzer for messaging wire protocols, driven by the specs in dissectors/.

The protocols live at the top of a source checkout (dissectors/) and inside the wheel as the
package streamdump.dissectors. A checkout run as it is (`python -m streamdump` from a fresh
clone, or Spark's workers, which put their working folder first on the path) imports this
folder's streamdump, which has no dissectors inside it: the finder below hands over the
checkout's own dissectors/ under that name. An installed streamdump has them inside and never
asks it.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path

__version__ = "0.1.0"

_PROTOCOLS = f"{__name__}.dissectors"


class _CheckoutProtocols(MetaPathFinder):
    """Finds streamdump.dissectors in the checkout this streamdump folder belongs to."""

    def __init__(self, package: Path) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if fullname != _PROTOCOLS or (self.package / "dissectors").exists():
            return None
        folder = self.package.parent / "dissectors"
        if not (folder / "__init__.py").is_file() or not (self.package.parent / "pyproject.toml").is_file():
            return None
        return spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


# First in line: an editable install elsewhere must not hand this checkout another's protocols.
if not any(isinstance(f, _CheckoutProtocols) for f in sys.meta_path):
    sys.meta_path.insert(0, _CheckoutProtocols(Path(__file__).resolve().parent))
