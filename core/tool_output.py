"""The text a step's ``toolOutputLogic`` reads for a live call's output: one rule, one cap, every source.

The recorder stores a step's output as ``serializeCapped(redact(output))`` (spec §7.2), so logic written
against a recording reads the same text at replay whoever produced it: a proxy's ``CallToolResult``, the
host's ``tool_response``, a direct step's answer. The cap is the recorder's, so a replay never reads more
than a recording could hold.

An MCP tool's output has one shape whoever saw the call (logic-contract.md): the ``CallToolResult`` object,
``{"content": [...], "isError": ...}`` plus ``structuredContent`` when the tool sent it. A wrapped server's
proxy reports that object; for a server that is not wrapped, the host's hook gives only the content array,
which is rebuilt into the same object (its ``structuredContent``, if any, the host never shows).
"""

from __future__ import annotations

from typing import Any, Final

from bir.core.redact import redact
from bir.core.truncate import DEFAULT_MAX_CHARS, serialize_capped
from bir.core.types import parse_qualified_name

MAX_OUTPUT_CHARS: Final = DEFAULT_MAX_CHARS


def call_result(output: object) -> object:
    """An MCP call's output as its canonical ``CallToolResult``: from a proxy's result (the object) or a
    hook's ``tool_response`` (the bare content array). Anything else (an error report) comes back as is."""
    if isinstance(output, list):
        return {"content": output, "isError": False}
    if isinstance(output, dict) and isinstance(output.get("content"), list):
        canonical: dict[str, Any] = {"content": output["content"], "isError": output.get("isError") is True}
        if "structuredContent" in output:
            canonical["structuredContent"] = output["structuredContent"]
        return canonical
    return output


def output_text(output: object) -> str:
    """``output`` redacted and serialized as compact JSON, at most ``MAX_OUTPUT_CHARS`` characters."""
    return serialize_capped(redact(output), MAX_OUTPUT_CHARS)


def step_output_text(tool_name: str, output: object) -> str:
    """The text a step of ``tool_name`` records and threads: an MCP tool's output in its canonical shape."""
    return output_text(call_result(output) if parse_qualified_name(tool_name) is not None else output)
