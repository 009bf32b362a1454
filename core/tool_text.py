"""A tool's answer as text: what the model would have read had it made the call itself.

A wrapped MCP step's output is stored as the whole ``CallToolResult`` serialized (the shape the
recording holds and ``toolOutputLogic`` reads, spec §7.2). Shown to the model in a bundle, that JSON
would escape the tool's own text inside another JSON string; the model reads the content's text
instead, exactly as the host would have put it in a ``tool_result``.
"""

from __future__ import annotations

import json
from typing import Final

ERROR_PREFIX: Final = "(the tool reported an error) "


def content_parts(output: str) -> tuple[list[str], bool] | None:
    """The text of each content item of a serialized ``CallToolResult`` and its ``isError``, or ``None``
    when ``output`` is not one. Content that is not text is named (``[image content]``)."""
    if output.lstrip()[:1] != "{":
        return None
    try:
        value = json.loads(output)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("content"), list):
        return None
    if not all(isinstance(item, dict) for item in value["content"]):
        return None
    parts: list[str] = []
    for item in value["content"]:
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        else:
            parts.append(f"[{item.get('type', 'content')} content]")
    return parts, value.get("isError") is True


def model_text(output: str) -> str:
    """``output`` as the model reads a tool's answer: a ``CallToolResult``'s text, anything else as is."""
    found = content_parts(output)
    if found is None:
        return output
    parts, is_error = found
    text = "\n".join(parts)
    return ERROR_PREFIX + text if is_error else text
