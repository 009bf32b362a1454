"""The proxy's only changes to relayed messages, as pure functions (spec §7.1).

* A ``tools/list`` result declares ``__bir_call_id__`` on every tool while a control server may
  inject call ids, so the host accepts the key in ``updatedInput``. ``additionalProperties`` and
  ``required`` stay as the upstream had them.
* A host ``tools/call`` carrying ``__bir_call_id__`` in its arguments has it taken out before the
  upstream sees it; the id joins the proxy's ``/proxy/step`` report to the hook's call.

Everything else about the message is left alone; only a message that changes is re-serialised.
"""

from __future__ import annotations

import json
from typing import Any, Final

from bir.hooks.api import CALL_ID_KEY

CALL_ID_SCHEMA: Final = {"type": "string", "description": "Reserved. Leave unset."}
_MAX_CALL_ID_CHARS: Final = 256


def declare_call_id(result: Any) -> bool:
    """Add the ``__bir_call_id__`` property to each tool of a ``tools/list`` result, in place.

    True when anything changed. A result that is not the expected shape is left as it is.
    """
    if not isinstance(result, dict):
        return False
    tools = result.get("tools")
    if not isinstance(tools, list):
        return False
    changed = False
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        schema = tool.get("inputSchema")
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            continue
        properties = schema.get("properties")
        if properties is None:
            properties = schema["properties"] = {}
        if not isinstance(properties, dict) or CALL_ID_KEY in properties:
            continue
        properties[CALL_ID_KEY] = dict(CALL_ID_SCHEMA)
        changed = True
    return changed


def strip_call_id(params: Any) -> tuple[bool, str | None]:
    """Take ``__bir_call_id__`` out of a ``tools/call``'s ``params.arguments``, in place.

    Returns whether the key was there, and its value when it is a usable id (a non-empty string
    of at most 256 characters; anything else is dropped all the same, never sent upstream).
    """
    if not isinstance(params, dict):
        return False, None
    arguments = params.get("arguments")
    if not isinstance(arguments, dict) or CALL_ID_KEY not in arguments:
        return False, None
    value = arguments.pop(CALL_ID_KEY)
    if isinstance(value, str) and 0 < len(value) <= _MAX_CALL_ID_CHARS:
        return True, value
    return True, None


def rewrite_tools_list_response(line: bytes) -> bytes | None:
    """The ``tools/list`` response line with the call id declared, or None if nothing changes."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or not declare_call_id(message.get("result")):
        return None
    return _dump(message)


def strip_tools_call_request(line: bytes) -> tuple[bytes, str | None, Any] | None:
    """A host ``tools/call`` line without ``__bir_call_id__``, the id, and the arguments left.

    None when the line carries no call id (forward it as it is).
    """
    if CALL_ID_KEY.encode() not in line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    found, call_id = strip_call_id(params)
    if not found:
        return None
    assert isinstance(params, dict)  # strip_call_id found the key inside it
    return _dump(message), call_id, params.get("arguments")


def _dump(message: Any) -> bytes:
    # Compact and unescaped, like the SDKs write; ids and numbers keep their JSON values.
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
