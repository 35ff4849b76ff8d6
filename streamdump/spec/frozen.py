"""Frozen records: the registry's classes as dataclass fields, with methods written once, here.

The registry (spec/model.py) is read back from the cache at every start and built from the
specs only when they change. A frozen dataclass generates the source of six methods when its
class is made (__init__, __repr__, __eq__, __hash__, __setattr__, __delattr__) and compiles
each: for the registry's classes, FieldSpec's 33 fields among them, that cost every start
more than reading the registry back. `@frozen` keeps the dataclass fields (their defaults on
the class, dataclasses.fields and replace) and gives each class the methods of `Record`, which
do the same for any class from its fields and are compiled once into this module's bytecode.
They are slower per call than generated ones; only building the registry calls __init__.

A record pickles as the values that differ from its class's defaults and is read back in one
step, defaults first, so that a record read back is equal to, and has the same attributes
as, the one the specs made (the cache's two thousand records: most of a FieldSpec's fields
are defaults).
"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from typing import Any, NamedTuple, TypeVar

C = TypeVar("C", bound=type)


def frozen(cls: C) -> C:
    """Make a Record subclass a frozen record: a dataclass whose methods are Record's."""
    return dataclass(init=False, repr=False, eq=False)(cls)


class _Shape(NamedTuple):
    """What Record's methods read of a class's fields, found once per class."""

    names: tuple[str, ...]  # in order: the positional arguments of __init__
    defaults: dict[str, Any]  # plain defaults (those a dataclass keeps on the class)
    factories: dict[str, Any]  # default factories
    compared: tuple[str, ...]  # what __eq__ and __hash__ compare
    shown: tuple[str, ...]  # what __repr__ shows


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    found = _SHAPES.get(cls)
    if found is None:
        specs = fields(cls)
        found = _SHAPES[cls] = _Shape(
            tuple(f.name for f in specs),
            {f.name: f.default for f in specs if f.default is not MISSING},
            {f.name: f.default_factory for f in specs if f.default_factory is not MISSING},
            tuple(f.name for f in specs if (f.compare if f.hash is None else f.hash)),
            tuple(f.name for f in specs if f.repr),
        )
    return found


class Record:
    """The methods of a frozen dataclass, for any @frozen class (see the module's docstring)."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        shape = _shape(cls)
        if len(args) > len(shape.names):
            raise TypeError(f"{cls.__name__}() takes {len(shape.names)} arguments, {len(args)} given")
        given = dict(zip(shape.names, args, strict=False))
        for name, value in kwargs.items():
            if name in given or name not in shape.names:
                raise TypeError(f"{cls.__name__}() got an unexpected or repeated argument {name!r}")
            given[name] = value
        values = self.__dict__
        for name in shape.names:
            if name in given:
                values[name] = given[name]
            elif name in shape.defaults:
                values[name] = shape.defaults[name]
            elif name in shape.factories:
                values[name] = shape.factories[name]()
            else:
                raise TypeError(f"{cls.__name__}() missing argument {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _shape(type(self)).shown)
        return f"{type(self).__qualname__}({shown})"

    def _compared(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in _shape(type(self)).compared])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined, no-any-return]

    def __hash__(self) -> int:
        return hash(self._compared())

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> dict[str, Any]:
        defaults = _shape(type(self)).defaults
        return {k: v for k, v in self.__dict__.items() if k not in defaults or defaults[k] is not v}

    def __setstate__(self, state: dict[str, Any]) -> None:
        values = self.__dict__
        values.update(_shape(type(self)).defaults)
        values.update(state)
