"""The spec syntax of fields: how the registry reads a field list (types, sizes, prefixes, packed
bits, switches, conditions, constants) into FieldSpecs, and refuses what does not fit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from streamdump.spec.model import (
    DEFAULT_PREFIX,
    DISPLAYS,
    FIELD_ATTRS,
    FRAME_NAMES,
    HOOK_OUTPUT_TYPES,
    INT_TYPES,
    PROTOBUF_SCALARS,
    SNAKE,
    UNSIGNED,
    FieldSpec,
    flat_fields,
)


class FieldSyntax:
    """The field-reading half of the registry's builder (registry._Builder uses it)."""

    @contextmanager
    def _hook_output(self) -> Iterator[None]:
        """Fields built meanwhile describe what code adds (hooks, links), so hook-only types apply."""
        saved, self.in_hook_output = self.in_hook_output, True
        try:
            yield
        finally:
            self.in_hook_output = saved

    def _fields(self, raw: Any, where: str, *, allow_conditions: bool) -> tuple[FieldSpec, ...]:
        if not isinstance(raw, list):
            raise self.fail(where, "must be a list of fields")
        fields: list[FieldSpec] = []
        names: set[str] = set()
        for item in raw:
            if not isinstance(item, Mapping) or len(item) != 1:
                raise self.fail(where, f"field {item!r} must be a one-entry mapping 'name: type'")
            ((name, body),) = item.items()
            if name in names:
                raise self.fail(f"{where}.{name}", "duplicate field name")
            spec = self._field(str(name), body, f"{where}.{name}", siblings=fields)
            if not allow_conditions and (spec.when or spec.optional):
                raise self.fail(f"{where}.{name}", "conditions are not allowed here")
            names.add(spec.name)
            fields.append(spec)
        return tuple(fields)

    def _field(
        self, name: str, body: Any, where: str, siblings: list[FieldSpec], *, element: bool = False
    ) -> FieldSpec:
        if not SNAKE.match(name):
            raise self.fail(where, f"field name {name!r} must be snake_case")
        attrs: Mapping[str, Any] = {"type": body} if isinstance(body, str) else body
        if not isinstance(attrs, Mapping) or "type" not in attrs:
            raise self.fail(where, "needs a type")
        self._only(attrs, FIELD_ATTRS, where)
        type_name = attrs["type"]
        kw: dict[str, Any] = {}
        sibling_by_name = {s.name: s for s in flat_fields(tuple(siblings))}
        if type_name in INT_TYPES:
            if "bits" in attrs:
                kw["bits"] = self._bits(attrs["bits"], type_name, where)
        elif type_name == "array":
            if "of" not in attrs:
                raise self.fail(where, "an array needs 'of'")
            kw["of"] = self._field(name, attrs["of"], f"{where}.of", siblings=[], element=True)
        elif type_name == "map":
            if "key" not in attrs or "value" not in attrs:
                raise self.fail(where, "a map needs 'key' and 'value'")
            kw["key"] = self._field("key", attrs["key"], f"{where}.key", siblings=[], element=True)
            kw["value"] = self._field("value", attrs["value"], f"{where}.value", siblings=[], element=True)
        elif type_name in ("raw", "json", "switch", "words", "protobuf"):
            if type_name in ("raw", "words", "protobuf") and "size" not in attrs:
                raise self.fail(where, "raw needs 'size': a byte count, an earlier integer field, or rest")
            if "size" in attrs:
                kw["size"] = self._size(attrs["size"], sibling_by_name, where)
            if type_name in ("json", "words", "protobuf") and attrs.get("of") is not None:
                kw["struct"] = str(attrs["of"])
                kw["fields"] = self._struct(kw["struct"], where)
            if type_name == "words":
                self._words(kw.get("fields", ()), where)
            if type_name == "protobuf":
                if "struct" not in kw:
                    raise self.fail(where, "protobuf needs 'of': the struct naming the message's fields")
                self._protobuf(kw["struct"], kw["fields"], where, set())
            if type_name == "switch":
                kw |= self._switch(name, attrs, sibling_by_name, where)
        elif type_name in ("string", "bytes", "bool", "ipv4", "ipv6"):
            if type_name == "string" and "size" in attrs:
                if "prefix" in attrs:
                    raise self.fail(where, "a string has a 'size' or a 'prefix', not both")
                kw["size"] = self._size(attrs["size"], sibling_by_name, where)
        elif type_name == "pairs":
            separators = attrs.get("separators")
            if (
                not isinstance(separators, list)
                or len(separators) != 2
                or not all(isinstance(s, str) and s for s in separators)
            ):
                raise self.fail(where, "pairs needs 'separators': [between pairs, between key and value]")
            if "of" not in attrs:
                raise self.fail(where, "pairs needs 'of': the struct naming its keys")
            kw |= {"separators": tuple(separators), "struct": str(attrs["of"])}
            kw["fields"] = self._struct(kw["struct"], where)
        elif type_name in HOOK_OUTPUT_TYPES:
            if not self.in_hook_output:
                raise self.fail(where, f"type {type_name!r} only describes what a hook adds")
            if type_name == "amqp" and attrs.get("of") is not None:
                # An AMQP message whose sections the spec names, so views can reach inside it.
                kw["struct"] = str(attrs["of"])
                kw["fields"] = self._struct(kw["struct"], where)
        elif type_name == "hook":
            if "hook" not in attrs:
                raise self.fail(where, "a hook field needs 'hook: name'")
            hook_body = self.raw_hooks.get(attrs["hook"])
            value_struct = hook_body.get("value") if isinstance(hook_body, Mapping) else None
            if value_struct is not None and not isinstance(value_struct, str):
                raise self.fail(f"hooks.{attrs['hook']}.value", "must name a struct under hook_structs")
            if value_struct is not None:
                # The shape of the value the hook reads, so its names are the registry's too.
                with self._hook_output():
                    kw["fields"] = self._struct(value_struct, f"hooks.{attrs['hook']}.value")
                kw["struct"] = value_struct
        elif isinstance(type_name, str):
            kw["fields"] = self._struct(type_name, where)
            kw["struct"] = type_name
            type_name = "struct"
        else:
            raise self.fail(where, f"unknown type {type_name!r}")
        if "size" in attrs and attrs["type"] not in ("raw", "json", "switch", "string", "words", "protobuf"):
            raise self.fail(
                where, "'size' applies to raw, json, switch, string, words and protobuf fields only"
            )
        if "of" in attrs and type_name not in ("array", "json", "pairs", "words", "protobuf", "amqp"):
            raise self.fail(where, "'of' applies to array, json, pairs, words, protobuf and amqp fields only")
        tag = attrs.get("tag")
        if tag is not None and (not isinstance(tag, int) or isinstance(tag, bool) or not 1 <= tag < 1 << 29):
            raise self.fail(where, "'tag' is a protobuf field number (1 to 2^29 - 1)")
        if "size" not in kw:
            kw |= self._prefix(attrs, type_name, where)
        enum = attrs.get("enum")
        for attr in ("enum", "response_enum"):
            named = attrs.get(attr)
            if named is None:
                continue
            if named not in self.enums and not (attr == "enum" and named == "commands"):
                raise self.fail(where, f"unknown enum {named!r}")
            if type_name not in INT_TYPES:
                raise self.fail(where, "an enum needs an integer field")
        display = attrs.get("display")
        if display is not None and display not in DISPLAYS:
            raise self.fail(where, f"unknown display {display!r} (known: {sorted(DISPLAYS)})")
        when = attrs.get("when")
        if when is not None:
            when = self._when(when, sibling_by_name, where)
        hook = attrs.get("hook")
        if hook is not None and element:
            raise self.fail(where, "hooks apply to named fields, not to array elements or map entries")
        if hook is not None:
            if type_name not in ("raw", "hook", "bytes", "string", "json"):
                raise self.fail(where, "'hook' applies to raw, bytes, string, json and hook fields only")
            if hook not in self.raw_hooks:
                raise self.fail(where, f"unknown hook {hook!r} (declare it under hooks:)")
        increasing = attrs.get("increasing", False)
        if increasing is not False and (increasing is not True or type_name not in INT_TYPES):
            raise self.fail(where, "'increasing: true' applies to integer fields only")
        since = attrs.get("since", 1)
        if not isinstance(since, int) or since < 1:
            raise self.fail(where, f"since {since!r} must be a positive integer")
        const = attrs.get("const")
        if const is not None:
            const = self._const(const, type_name, attrs, where)
        entry = attrs.get("entry")
        if entry is not None and not isinstance(entry, str):
            raise self.fail(where, "'entry' must be the key's text")
        inline = bool(attrs.get("inline", False))
        if inline and not (
            type_name in ("struct", "switch", "words")
            or (type_name in ("json", "protobuf", "hook") and "struct" in kw)
        ):
            raise self.fail(
                where, "'inline' applies to structs, switches, words, and json, protobuf and hooks with 'of'"
            )
        rest = bool(attrs.get("rest", False))
        if rest and type_name != "map":
            raise self.fail(where, "'rest' applies to maps only")
        length_of = bool(attrs.get("length_of", False))
        if length_of and type_name not in INT_TYPES:
            raise self.fail(where, "'length_of' applies to integer fields only")
        secret = attrs.get("secret", False)
        if secret is not False and (secret is not True or type_name != "string"):
            raise self.fail(where, "'secret: true' applies to string fields only")
        spec = FieldSpec(
            name=name,
            type=type_name,
            enum=enum,
            doc=attrs.get("doc"),
            info=attrs.get("info"),
            display=display,
            since=since,
            when=when,
            optional=bool(attrs.get("optional", False)),
            increasing=increasing,
            hook=hook,
            entry=entry,
            const=const,
            inline=inline,
            rest=rest,
            response_enum=attrs.get("response_enum"),
            length_of=length_of,
            secret=secret,
            tag=tag,
            mask=attrs.get("mask"),
            **kw,
        )
        if not element:
            self._check_consistent_name(spec, where)
        return spec

    def _protobuf(self, name: str, fields: tuple[FieldSpec, ...], where: str, seen: set[str]) -> None:
        """A struct a protobuf field decodes: every member numbered (but one map gathering the
        rest), of a type protobuf has; nested messages are such structs too."""
        if name in seen:
            return
        seen.add(name)
        for spec in fields:
            at = f"{where} (struct {name}, member {spec.name})"
            if spec.rest:
                continue
            if spec.tag is None:
                raise self.fail(at, "a protobuf member needs 'tag': its field number")
            element = spec.of if spec.type == "array" and spec.of is not None else spec
            if spec.type == "map":
                parts = (spec.key, spec.value)
                if not all(p is not None and p.type in PROTOBUF_SCALARS for p in parts):
                    raise self.fail(at, "a protobuf map's key and value are scalars")
            elif element.type == "struct":
                assert element.struct is not None
                self._protobuf(element.struct, element.fields, where, seen)
            elif element.type not in PROTOBUF_SCALARS:
                raise self.fail(at, f"protobuf has no type {element.type!r}")

    def _words(self, fields: tuple[FieldSpec, ...], where: str) -> None:
        if not fields:
            raise self.fail(where, "words needs 'of': the struct naming the words in order")
        for spec in fields:
            if spec.type != "string" and spec.type not in INT_TYPES:
                raise self.fail(where, f"word {spec.name}: a word is a string or an integer, not {spec.type}")
            if spec.size is not None or spec.when:
                raise self.fail(where, f"word {spec.name}: a word has no 'size' or 'when' (its place says)")

    def _size(self, size: Any, siblings: Mapping[str, FieldSpec], where: str) -> int | str:
        if size in ("rest", "line", "word"):
            return size
        if isinstance(size, str):
            ref = siblings.get(size)
            if ref is None:
                # What a hook of an earlier field adds (a size it computes) may size a later field.
                ref = next(
                    (
                        adds[size]
                        for s in siblings.values()
                        if s.hook is not None and size in (adds := self.hook_adds.get(s.hook, {}))
                    ),
                    None,
                )
            if ref is None or ref.type not in INT_TYPES:
                raise self.fail(
                    where,
                    f"size refers to {size!r}, which is not an earlier integer field (or one its hook adds)",
                )
            return size
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise self.fail(
                where, "'size' must be a byte count, an earlier integer field, rest, line or word"
            )
        return size

    def _prefix(self, attrs: Mapping[str, Any], type_name: str, where: str) -> dict[str, Any]:
        """The length or count prefix of string, bytes, pairs, array and map fields."""
        prefix = attrs.get("prefix")
        if prefix is None:
            return {"prefix": DEFAULT_PREFIX[type_name]} if type_name in DEFAULT_PREFIX else {}
        if type_name not in DEFAULT_PREFIX:
            raise self.fail(where, "'prefix' applies to string, bytes, pairs, array and map fields only")
        counts = "items"
        if isinstance(prefix, Mapping):
            if set(prefix) != {"type", "counts"} or prefix["counts"] not in ("items", "bytes"):
                raise self.fail(
                    where, "'prefix' must be an integer type, none, or {type, counts: items|bytes}"
                )
            prefix, counts = prefix["type"], prefix["counts"]
        if prefix == "none":
            if type_name not in ("array", "map"):
                raise self.fail(where, "only arrays and maps may have no prefix (they run to the end)")
        elif prefix not in INT_TYPES:
            raise self.fail(where, f"prefix {prefix!r} is not an integer type")
        if counts == "bytes" and type_name not in ("array", "map"):
            raise self.fail(where, "a prefix counting bytes applies to arrays and maps")
        return {"prefix": prefix, "prefix_counts": counts}

    def _bits(self, raw: Any, word_type: str, where: str) -> tuple[FieldSpec, ...]:
        """The parts of a packed integer: name -> {mask, enum, display, doc}."""
        if not isinstance(raw, Mapping) or not raw:
            raise self.fail(f"{where}.bits", "must map part names to {mask: bits, ...}")
        width = INT_TYPES[word_type][1] * 8
        parts: list[FieldSpec] = []
        for part, body in raw.items():
            at = f"{where}.bits.{part}"
            body = {"mask": body} if isinstance(body, int) else body
            if not isinstance(body, Mapping) or not isinstance(body.get("mask"), int):
                raise self.fail(at, "needs 'mask'")
            mask = body["mask"]
            if not 0 < mask < 1 << width:
                raise self.fail(at, f"mask 0x{mask:x} does not fit a {word_type}")
            self._only(body, {"mask", "enum", "display", "doc", "info"}, at)
            spec = self._field(str(part), {"type": UNSIGNED[word_type], **body}, at, siblings=[])
            parts.append(spec)
        return tuple(parts)

    def _switch(
        self, name: str, attrs: Mapping[str, Any], siblings: Mapping[str, FieldSpec], where: str
    ) -> dict[str, Any]:
        on = attrs.get("by")  # not "on": YAML 1.1 reads that key as true
        ref = siblings.get(on) if isinstance(on, str) else None
        if ref is None or ref.type not in INT_TYPES:
            raise self.fail(where, f"'by' refers to {on!r}, which is not an earlier integer field")
        cases = attrs.get("cases")
        if not isinstance(cases, Mapping) or not cases or not all(isinstance(k, int) for k in cases):
            raise self.fail(where, "'cases' must map selector values to types")
        built = {
            int(k): self._field(name, body, f"{where}.cases.{k}", siblings=[], element=True)
            for k, body in cases.items()
        }
        default = attrs.get("default")
        out: dict[str, Any] = {"on": on, "cases": built}
        if default is not None:
            out["default"] = self._field(name, default, f"{where}.default", siblings=[], element=True)
        if attrs.get("inline"):
            for k, case in (*built.items(), ("default", out.get("default"))):
                if case is not None and not case.fields:
                    raise self.fail(f"{where}.cases.{k}", "an inline switch's cases must be structs")
        return out

    def _when(
        self, when: Any, siblings: Mapping[str, FieldSpec], where: str
    ) -> tuple[str, tuple[int, ...], int | None]:
        if not isinstance(when, Mapping) or len(when) != 1:
            raise self.fail(where, "'when' must be {sibling_field: [values]} or {sibling_field: {mask, is}}")
        ((ref_name, values),) = when.items()
        ref = siblings.get(ref_name)
        if ref is None or ref.type not in INT_TYPES:
            raise self.fail(where, f"'when' refers to {ref_name!r}, which is not an earlier integer field")
        mask = None
        if isinstance(values, Mapping):
            if set(values) != {"mask", "is"} or not isinstance(values["mask"], int):
                raise self.fail(where, "'when' with a mask must be {mask: bits, is: [values]}")
            mask, values = values["mask"], values["is"]
        if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
            raise self.fail(where, "'when' values must be a list of integers")
        return (str(ref_name), tuple(values), mask)

    def _const(self, const: Any, type_name: str, attrs: Mapping[str, Any], where: str) -> int | bytes:
        if type_name in INT_TYPES:
            if not isinstance(const, int) or isinstance(const, bool):
                raise self.fail(where, "the 'const' of an integer field must be an integer")
            return const
        if type_name == "raw" and isinstance(attrs.get("size"), int):
            value = const.encode("latin-1") if isinstance(const, str) else None
            if value is None or len(value) != attrs["size"]:
                raise self.fail(where, f"'const' must be text of exactly {attrs['size']} bytes")
            return value
        raise self.fail(where, "'const' applies to integer fields and raw fields of a fixed size")

    def _check_consistent_name(self, spec: FieldSpec, where: str) -> None:
        if spec.name in FRAME_NAMES:
            raise self.fail(where, f"field name {spec.name!r} is taken by the frame itself (JSON, filters)")
        # Filters and the Wireshark plugin use one flat name per field
        # ("rabbitmq_stream.offset"), so a name must mean one type everywhere.
        signature = spec.type if spec.type != "struct" else f"struct {spec.struct}"
        if spec.of is not None:
            signature += f" of {spec.of.type if spec.of.type != 'struct' else spec.of.struct}"
        if spec.key is not None and spec.value is not None:
            signature += f" {spec.key.type}->{spec.value.type}"
        known = self.field_types.get(spec.name)
        if known is None:
            self.field_types[spec.name] = (signature, where)
        elif known[0] != signature:
            raise self.fail(where, f"field {spec.name!r} is {signature} here but {known[0]} at {known[1]}")
