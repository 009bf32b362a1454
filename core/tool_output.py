"""The text a step's ``toolOutputLogic`` reads for a live call's output: one rule, one cap, every source.

The recorder stores a step's output as ``serializeCapped(redact(output))`` (spec §7.2), so logic written
against a recording reads the same text at replay whoever produced it: a proxy's ``CallToolResult``, the
host's ``tool_response``, a direct step's answer. The cap is the recorder's, so a replay never reads more
than a recording could hold.

An MCP tool's output has one shape whoever saw the call: the ``CallToolResult`` object reduced to what every
source can give, ``{"content": [...], "isError": ...}``. A wrapped server's proxy reports the whole object;
for a server that is not wrapped, the host's hook gives only the content array, which is rebuilt into it.
``structuredContent`` is left out on every side (issue 17): the host never shows it, so a body written
against it would fail whenever the server is not wrapped. Nothing is lost from a tool that follows MCP,
which asks a tool with structured content to send the same JSON as a text block; rebuilding it from that
block instead would double every JSON answer against the recorder's cap and still differ from the proxy's
for a tool whose text is not its structured content.
"""

from __future__ import annotations

from typing import Final

from bir.core.redact import redact
from bir.core.truncate import DEFAULT_MAX_CHARS, serialize_capped
from bir.core.types import parse_qualified_name

MAX_OUTPUT_CHARS: Final = DEFAULT_MAX_CHARS


def call_result(output: object) -> object:
    """An MCP call's output as its canonical ``CallToolResult``, ``{"content", "isError"}`` only: from a
    proxy's result (the object), a hook's ``tool_response`` (the bare content array) or a recording made
    before this rule (which may carry ``structuredContent``). Anything else (an error report) comes back as
    is."""
    if isinstance(output, list):
        return {"content": output, "isError": False}
    if isinstance(output, dict) and isinstance(output.get("content"), list):
        return {"content": output["content"], "isError": output.get("isError") is True}
    return output


def output_text(output: object) -> str:
    """``output`` redacted and serialized as compact JSON, at most ``MAX_OUTPUT_CHARS`` characters."""
    return serialize_capped(redact(output), MAX_OUTPUT_CHARS)


def step_output_text(tool_name: str, output: object) -> str:
    """The text a step of ``tool_name`` records and threads: an MCP tool's output in its canonical shape."""
    return output_text(call_result(output) if parse_qualified_name(tool_name) is not None else output)
