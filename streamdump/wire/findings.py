"""The kinds of expert finding: each one's title, Wireshark expert group and severities.

Every note streamdump makes about a frame or a connection is of one kind: the decoder's
(bytes that are malformed, or that the plugin's Lua cannot decode) or one of the
conversation tracker's rules (a request that failed, a response without a request...). The
tracker files its findings by kind, and its expert group comes from here; the generated
Wireshark plugin registers one expert entry per kind and severity from this table, as
Wireshark's own dissectors register theirs, so Expert Info groups findings by what they are
and a display filter names one kind: `<protocol>.expert.error_response`. A kind
seen at another severity than its usual one (a warning that a capture which lost bytes
makes only a note) has its own entry, the severity added: `...expert.unanswered.note`.
"""

from __future__ import annotations

from collections.abc import Iterator

from msgspec import Struct


class Finding(Struct, frozen=True):
    """One kind of finding."""

    # Wireshark's expert group, as its own dissectors use them: malformed, undecoded,
    # response_code, sequence (a duplicate, a gap, an answer out of turn), checksum (content that
    # does not match its digest), protocol (anything else the protocol's rules forbid).
    group: str
    title: str  # what Expert Info calls the kind
    severities: tuple[str, ...]  # every severity it takes, its usual one first
    # Told on a frame as it goes by, so the plugin tells it too; else only the end of a read
    # finds it (an answer that never came), which the plugin has no end for.
    on_frame: bool = True
    # What bytes the capture lost may explain (a silence): on a connection that lost bytes, a
    # note, whatever its usual severity.
    doubted_by_loss: bool = False


FINDINGS: dict[str, Finding] = {
    # The decoder's notes about the bytes.
    "malformed": Finding("malformed", "Malformed or unexpected bytes", ("error", "warn", "note")),
    "undecoded": Finding("undecoded", "Not decoded by the plugin (no codec in Wireshark's Lua)", ("note",)),
    "content": Finding("protocol", "Message content that points at a client bug", ("note",)),
    "api_error": Finding("response_code", "Error answer in a message body", ("warn",)),
    "header_error": Finding("response_code", "Error answer in a message's headers", ("warn",)),
    "digest": Finding("checksum", "Content that does not match its digest", ("warn",)),
    "duplicate": Finding("sequence", "Message the server already had (not stored again)", ("note",)),
    # The conversation tracker's findings.
    "error_response": Finding("response_code", "Request failed", ("warn",)),
    "setup_refused": Finding("response_code", "Connection setup refused", ("error",)),
    "auth_failure": Finding("response_code", "Authentication failed", ("error",)),
    "routine_response": Finding("response_code", "Routine error answer", ("note",)),
    "reply_status": Finding("response_code", "Reply with an error status", ("warn",)),
    "refused_items": Finding("response_code", "Published items refused", ("warn",)),
    "duplicate_correlation": Finding("sequence", "Correlation id reused before its answer", ("warn",)),
    "mismatched_response": Finding("sequence", "Response to a request of another command", ("warn",)),
    "orphan_response": Finding("sequence", "Response without a request", ("warn", "note"), False),
    "unanswered": Finding("sequence", "Request never answered", ("warn", "note"), False),
    "no_reply": Finding("sequence", "Reply never came", ("note",), False),
    "unanswered_ping": Finding("sequence", "Keepalive never answered", ("warn", "note"), False),
    "heartbeat": Finding(
        "sequence",
        "Silence longer than the heartbeat interval",
        ("warn", "note"),
        False,
        doubted_by_loss=True,
    ),
    "heartbeat_stopped": Finding("sequence", "Heartbeats stopped", ("warn", "note"), False),
    "item_order": Finding("sequence", "Sent ids out of order", ("note",), False),
    "mixed_formats": Finding(
        "protocol", "A message of another format than its sender's others", ("note",), False
    ),
    "reused_message_id": Finding("protocol", "Message id reused by one sender", ("note",), False),
    "unknown_session": Finding("sequence", "Frame for a session never opened", ("warn",)),
    "ended_session": Finding("sequence", "Frame for a session already ended", ("note",)),
    "unconfirmed": Finding("sequence", "Published items never confirmed", ("warn", "note"), False),
    "beyond_credit": Finding("sequence", "Deliveries beyond the granted credit", ("warn", "note"), False),
    "credit_exhausted": Finding("sequence", "Deliveries stopped, credit exhausted", ("warn", "note"), False),
    "server_close": Finding("protocol", "Server closed the connection", ("error", "warn", "note")),
    "announcement": Finding("protocol", "Server announcement", ("note",)),
    "version": Finding("protocol", "Command version the peer does not support", ("warn",)),
    "frame_max": Finding("protocol", "Frame larger than the negotiated frame_max", ("error",)),
    "over_limit": Finding("protocol", "Over a limit the server announced", ("error",)),
    # How connections ended (the TCP flags against the protocol's own close): only the end tells.
    "refused": Finding("protocol", "Connection refused", ("warn",), False),
    "ended_together": Finding(
        "protocol", "A client host ended several connections at once", ("note",), False
    ),
    "cut_frame": Finding("protocol", "Connection ended in the middle of a frame", ("warn",), False),
    "abrupt_close": Finding(
        "protocol", "Connection ended without the protocol's close", ("warn", "note"), False
    ),
    "half_closed": Finding("protocol", "Connection half-closed at the capture's end", ("note",), False),
}


def expert_name(kind: str, severity: str) -> str:
    """The tail of a finding's expert abbreviation: its kind, and its severity if not the usual one."""
    finding = FINDINGS[kind]
    if severity not in finding.severities:
        raise ValueError(f"a {kind} finding is never {severity}")
    return kind if severity == finding.severities[0] else f"{kind}.{severity}"


def expert_entries() -> Iterator[tuple[str, str, Finding, str]]:
    """(abbreviation tail, kind, finding, severity) of every expert entry, in a stable order."""
    for kind, finding in FINDINGS.items():
        for severity in finding.severities:
            yield expert_name(kind, severity), kind, finding, severity
