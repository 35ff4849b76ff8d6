"""The spec syntax of the conversation section: what the tracker engine reads itself (correlation,
status, sessions, closes, endings, identity) and, for any other key, the rule of the protocol's
package that parses it (analysis/rules.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from streamdump.spec.model import (
    CLOSE_ABOUT,
    CONVERSATION_ATTRS,
    INT_TYPES,
    SESSION_ATTRS,
    TRACKER_LINKS,
    AdvertiseSpec,
    CloseSpec,
    Command,
    Conversation,
    EndingSpec,
    FieldSpec,
    Ref,
    SessionSpec,
    SpecError,
    _about_hint,
    by_name,
    field_at,
    flat_fields,
)


class ConversationSyntax:
    """The conversation-reading half of the registry's builder (registry._Builder uses it)."""

    def _conversation(self, raw: Any, commands: Mapping[str, Command]) -> Conversation:
        where = "conversation"
        if not isinstance(raw, Mapping):
            raise self.fail(where, "must be a mapping")
        if not raw:
            return Conversation()
        kw: dict[str, Any] = {}
        correlation = raw.get("correlation")
        if correlation is not None:
            if not any(f.name == correlation for f in self._layout_fields(commands)):
                raise self.fail(f"{where}.correlation", f"no layout or header has a field {correlation!r}")
            kw["correlation"] = correlation
        status = raw.get("status")
        if status is not None:
            if (
                not isinstance(status, Mapping)
                or "field" not in status
                or set(status) - {"field", "ok", "routine", "text"}
            ):
                raise self.fail(
                    f"{where}.status", "must be {field: name, ok: [codes], routine: [codes], text: name}"
                )
            fields = list(self._layout_fields(commands))
            if not any(f.name == status["field"] and f.type in INT_TYPES for f in fields):
                raise self.fail(f"{where}.status", f"no layout has an integer field {status['field']!r}")
            if status.get("text") is not None:
                if not any(f.name == status["text"] and f.type == "string" for f in fields):
                    raise self.fail(
                        f"{where}.status.text", f"no layout has a string field {status['text']!r}"
                    )
                kw["status_text"] = status["text"]
            codes = {}
            for name in ("ok", "routine"):
                values = status.get(name) or []
                if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
                    raise self.fail(f"{where}.status.{name}", "must be a list of integers")
                codes[name] = frozenset(values)
            kw |= {"status": status["field"], **codes}
        kw["closes"] = self._closes(raw.get("close"), commands)
        codes = raw.get("codes", "hex")
        if codes not in ("hex", "dec"):
            raise self.fail(f"{where}.codes", "must be hex or dec")
        kw["codes"] = codes
        if raw.get("server") is not None:
            kw["server"] = str(raw["server"])
        identity = raw.get("identity") or {}
        # A property may come from several commands: each peer's own (NATS's CONNECT and INFO).
        identity = {
            k: v if isinstance(v, list) else [v]
            for k, v in (identity.items() if isinstance(identity, Mapping) else ())
        }
        if not isinstance(raw.get("identity") or {}, Mapping) or not all(
            isinstance(name, str) and ("." in name or len(names) == 1)
            for names in identity.values()
            for name in names
        ):
            raise self.fail(
                f"{where}.identity",
                "must map property names to header fields, or to Command.field (or a list of them)",
            )
        for names in identity.values():
            for name in names:
                if "." in name:  # a field of the frame that introduces the peer (EventMesh's Hello)
                    self._ref(name, f"{where}.identity", commands)
                elif name != "version" and by_name(self.header, name) is None:
                    raise self.fail(f"{where}.identity", f"{name!r} is not a header field")
        kw["identity"] = {k: tuple(v) for k, v in identity.items()}
        hints = raw.get("close_hints") or {}
        if not isinstance(hints, Mapping) or not all(
            isinstance(k, int) and (isinstance(v, str) or _about_hint(v)) for k, v in hints.items()
        ):
            raise self.fail(
                f"{where}.close_hints",
                "must map closing codes to text, or to {hint: text, about: " + " or ".join(CLOSE_ABOUT) + "}",
            )
        kw["close_hints"] = {k: v if isinstance(v, str) else v["hint"] for k, v in hints.items()}
        kw["close_about"] = {k: v["about"] for k, v in hints.items() if not isinstance(v, str)}
        ending = raw.get("ending")
        if ending is not None:
            hints_after = ending.get("hints") or {} if isinstance(ending, Mapping) else None
            if (
                not isinstance(ending, Mapping)
                or set(ending) - {"close", "hints"}
                or not isinstance(ending.get("close"), str)
                or not isinstance(hints_after, Mapping)
                or not all(isinstance(v, str) for v in hints_after.values())
            ):
                raise self.fail(f"{where}.ending", "must be {close: Command, hints: {Command: text}}")
            for name in (ending["close"], *hints_after):
                self._command(name, f"{where}.ending", commands)
            kw["ending"] = EndingSpec(ending["close"], dict(hints_after))
        setup = raw.get("setup") or []
        for name in setup:
            self._command(name, f"{where}.setup", commands)
        kw["setup"] = frozenset(setup)
        if raw.get("peer_properties") is not None:
            kw["peer_properties"] = self._ref(raw["peer_properties"], f"{where}.peer_properties", commands)
        sessions: dict[str, SessionSpec] = {}
        for name, body in (raw.get("sessions") or {}).items():
            at = f"{where}.sessions.{name}"
            if not isinstance(body, Mapping) or not {"id", "open", "used_by"} <= set(body):
                raise self.fail(at, "needs id, open and used_by")
            self._only(body, SESSION_ATTRS, at)
            users = tuple(body["used_by"])
            for command in (body["open"], *([body["close"]] if body.get("close") else []), *users):
                self._ref(f"{command}.{body['id']}", at, commands)
            raw_keep = body.get("keep") or ()
            # keep: fields of the open request, or {link name: field} to give them other names.
            pairs = list(raw_keep.items()) if isinstance(raw_keep, Mapping) else [(k, k) for k in raw_keep]
            for _, kept in pairs:
                self._ref(f"{body['open']}.{kept}", at, commands)
            close_after = body.get("close_after")
            if close_after is not None:
                if not body.get("close"):
                    raise self.fail(at, "close_after names a field of the close command: give close")
                self._ref(f"{body['close']}.{close_after}", at, commands, int_only=True)
            sessions[name] = SessionSpec(
                name,
                body["id"],
                body["open"],
                body.get("close"),
                tuple(str(f) for _, f in pairs),
                users,
                tuple(str(k) for k, _ in pairs),
                close_after,
                bool(body.get("unknown", False)),
            )
        kw["sessions"] = sessions
        advertises = []
        for body in raw.get("advertises") or []:
            at = f"{where}.advertises"
            keys = set(body) if isinstance(body, Mapping) else set()
            if "command" not in keys or not (keys - {"command"}) <= {"host", "port", "address", "entries"}:
                raise self.fail(
                    at,
                    "each must be {command, host, port}, {command, address} "
                    "or {command, entries, host, port}",
                )
            command = str(body["command"])
            if "entries" in body:
                self._ref(f"{command}.{body['entries']}", at, commands)
                spec = AdvertiseSpec(
                    command, (str(body["host"]),), (str(body["port"]),), entries=str(body["entries"])
                )
            elif "address" in body:
                spec = AdvertiseSpec(
                    command, address=self._ref(f"{command}.{body['address']}", at, commands).path
                )
            else:
                host = self._ref(f"{command}.{body['host']}", at, commands).path
                port = self._ref(f"{command}.{body['port']}", at, commands, int_only=True).path
                spec = AdvertiseSpec(command, host, port)
            advertises.append(spec)
        kw["advertises"] = tuple(advertises)
        with self._hook_output():
            kw["links"] = self._fields(raw.get("links") or [], f"{where}.links", allow_conditions=False)
        rules = self._rules(raw, commands, sessions)
        kw["rules"] = {key: parsed for key, (_, parsed) in rules.items()}
        # The tracker links frames by these names; the spec gives them types and docs.
        declared = {spec.name for spec in kw["links"]}
        wanted = [(feature, names) for feature, names in TRACKER_LINKS.items() if kw.get(feature)]
        wanted += [(key, cls.links) for key, (cls, _) in rules.items()]
        for feature, names in wanted:
            missing = [n for n in names if n not in declared]
            if missing:
                raise self.fail(
                    f"{where}.links", f"{feature} links frames by {', '.join(missing)}: declare them"
                )
        return Conversation(**kw)

    def _rules(
        self, raw: Mapping[str, Any], commands: Mapping[str, Command], sessions: Mapping[str, SessionSpec]
    ) -> dict[str, tuple[Any, Any]]:
        """The conversation keys the package's rules take: key -> (rule, its parsed section)."""
        keys = [key for key in raw if key not in CONVERSATION_ATTRS]
        if not keys:
            return {}
        offered = {cls.key: cls for cls in self._package_rules()}
        check = _RuleCheck(self, commands, sessions)
        out = {}
        for key in keys:
            cls = offered.get(key)
            if cls is None:
                known = ", ".join(sorted({*CONVERSATION_ATTRS, *offered}))
                raise self.fail(f"conversation.{key}", f"unknown key (known: {known})")
            out[key] = (cls, cls.parse(raw[key], check))
        return out

    def _package_rules(self) -> tuple[Any, ...]:
        """The rules the protocol's package declares (none without a package)."""
        if self.package is None:
            return ()
        from streamdump.spec.dissector import dissector_named

        return tuple(dissector_named(self.package, self.source).rules)

    def _field_names(self, commands: Mapping[str, Command]) -> set[str]:
        """Every name a frame of these commands may have a value for (what hooks add included)."""
        return {f.name for c in commands.values() for f in self._all_layout_fields(c)}

    def _all_layout_fields(self, command: Command) -> Iterator[FieldSpec]:
        """A command's fields, its inline members' and what its fields' hooks add."""
        for layout in command.layouts.values():
            for spec in flat_fields(layout.fields):
                yield spec
                if spec.hook is not None:
                    yield from self.hook_adds.get(spec.hook, {}).values()

    def _layout_fields(self, commands: Mapping[str, Command]) -> Iterator[FieldSpec]:
        """The fields every frame's layout has, the header's included."""
        yield from flat_fields(self.header)
        for command in commands.values():
            for layout in command.layouts.values():
                yield from layout.fields

    def _closes(self, raw: Any, commands: Mapping[str, Command]) -> tuple[CloseSpec, ...]:
        """conversation.close: one {command, code, reason, says} or a list of them."""
        where = "conversation.close"
        if raw is None:
            return ()
        out = []
        for body in raw if isinstance(raw, list) else [raw]:
            if (
                not isinstance(body, Mapping)
                or "command" not in body
                or set(body) - {"command", "code", "reason", "says", "severity"}
                or body.get("severity", "note") not in ("note", "warn", "error")
            ):
                raise self.fail(where, "must be {command, code, reason, says, severity} or a list of them")
            code = body.get("code")
            enum = None
            if code is not None:
                ref = self._ref(f"{body['command']}.{code}", where, commands, int_only=True)
                spec = field_at(commands, self.header, ref)
                enum = spec.enum if spec is not None else None
            reason = body.get("reason") or []
            reason = [reason] if isinstance(reason, str) else reason
            for name in reason:
                self._ref(f"{body['command']}.{name}", where, commands)
            out.append(
                CloseSpec(
                    str(body["command"]),
                    code,
                    tuple(reason),
                    str(body.get("says", "closed the connection")),
                    enum,
                    str(body.get("severity", "note")),
                )
            )
        return tuple(out)


class _RuleCheck:
    """What a rule's parse asks of the registry (analysis/rules.py's SpecCheck)."""

    def __init__(
        self, builder: Any, commands: Mapping[str, Command], sessions: Mapping[str, SessionSpec]
    ) -> None:
        self.builder, self.commands, self.known_sessions = builder, commands, sessions

    def fail(self, where: str, message: str) -> SpecError:
        return self.builder.fail(where, message)

    def command(self, name: Any, where: str) -> Command:
        return self.builder._command(name, where, self.commands)

    def ref(self, text: Any, where: str, *, int_only: bool = False) -> Ref:
        return self.builder._ref(text, where, self.commands, int_only=int_only)

    def field_names(self) -> set[str]:
        return self.builder._field_names(self.commands)

    def sessions(self) -> Mapping[str, SessionSpec]:
        return self.known_sessions
