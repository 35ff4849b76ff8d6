"""A spec file's YAML, parsed by libyaml when PyYAML was built with it, duplicate keys refused.

Imported only when the specs themselves are read: a start that finds the compiled registry in
the cache (spec/cache.py) loads no YAML parser at all.
"""

from __future__ import annotations

from typing import Any

import yaml

from streamdump.spec.model import SpecError

_SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise SpecError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse(text: str, source: str) -> Any:
    """The document in text; a SpecError naming source (and the line) when it is not valid."""
    try:
        return yaml.load(text, _UniqueKeyLoader)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}".replace("\n", " ")) from None
