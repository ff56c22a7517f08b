"""Every text the daemon sends, made safe for a terminal before anything prints it.

A NIC name, a hostname, a drain reason or a verdict's detail may hold escape sequences (from a
state file, a hostile job's report, a compromised daemon): printed raw, an ESC or OSC sequence
rewrites the operator's screen, sets the window title, or writes to the clipboard. So every
string of every answer is rewritten once, in the client, with each non-printable character
shown as Python shows it in a repr (\\x1b, \\u200b), and the renderers never see a raw one.
"""
from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


def printable(text: str, keep: str = "") -> str:
    """`text` with every non-printable character (but those in `keep`) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def defang(message: Message, keep: str = "") -> Message:
    """Escape, in place, every string field of `message` and of the messages in it."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if _is_map(field):
                _defang_map(getattr(message, field.name), field, keep)
            elif field.is_repeated:
                for item in value:
                    defang(item, keep)
            else:
                defang(value, keep)
        elif field.type == FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                value[:] = [printable(v, keep) for v in value]
            else:
                setattr(message, field.name, printable(value, keep))
    return message


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _defang_map(mapping: Any, field: FieldDescriptor, keep: str) -> None:
    value_field = field.message_type.fields_by_name["value"]
    items = list(mapping.items())
    for key, _ in items:
        del mapping[key]
    for key, value in items:
        safe_key = printable(key, keep) if isinstance(key, str) else key
        if value_field.type == FieldDescriptor.TYPE_MESSAGE:
            mapping[safe_key].CopyFrom(defang(value, keep))
        else:
            mapping[safe_key] = printable(value, keep) if isinstance(value, str) else value
