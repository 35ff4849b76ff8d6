"""Keyed objects to a struct's fields: values already of their type taken as they come, the
others converted, leftover keys to the rest map, even when two members read the same key."""

from __future__ import annotations

from streamdump.spec.keyed import MASKED, Keyed
from streamdump.spec.model import FieldSpec

KEYED = Keyed({"mode": {1: "fast", 2: "slow"}})


def spec(name: str, kind: str, **extra: object) -> FieldSpec:
    return FieldSpec(name=name, type=kind, **extra)  # type: ignore[arg-type]


MEMBERS = (
    spec("port", "uint32"),
    spec("verbose", "bool"),
    spec("name", "string"),
    spec("pass", "string", secret=True),
    spec("mode", "uint8", enum="mode", display="name"),
    spec("other", "map", key=spec("k", "string"), value=spec("v", "string"), rest=True),
)


def test_values_of_their_type_and_values_converted() -> None:
    notes: list[str] = []
    obj = {"port": 4222, "verbose": "true", "name": "a", "pass": "s3cret", "mode": "slow"}
    assert KEYED.fields(MEMBERS, obj, notes) == {
        "port": 4222,
        "verbose": True,
        "name": "a",
        "pass": MASKED,
        "mode": 2,
    }
    assert notes == []


def test_a_bool_is_no_integer_and_a_number_no_string() -> None:
    notes: list[str] = []
    out = KEYED.fields(MEMBERS, {"port": True, "name": 7, "verbose": None}, notes)
    assert out == {"port": True, "name": "7", "verbose": None}
    assert notes == ["port: True is not a number"]


def test_leftover_keys_go_to_the_rest_map() -> None:
    notes: list[str] = []
    out = KEYED.fields(MEMBERS, {"port": 1, "x": "y", "z": 2}, notes)
    assert out == {"port": 1, "other": {"x": "y", "z": "2"}}


def test_two_members_of_one_key_still_leave_the_others_over() -> None:
    members = (spec("a", "uint32"), spec("b", "uint32", entry="a"))
    notes: list[str] = []
    assert KEYED.fields(members, {"a": 1, "c": 2}, notes) == {"a": 1, "b": 1}
    assert notes == ["keys no field names: c"]
