"""The text a step's ``toolOutputLogic`` reads for a live call's output: one rule, one cap, every source.

The recorder stores a step's output as ``serializeCapped(redact(output))`` (spec §7.2), so logic written
against a recording reads the same text at replay whoever produced it: a proxy's ``CallToolResult``, the
host's ``tool_response``, a direct step's answer. The cap is the recorder's, so a replay never reads more
than a recording could hold.
"""

from __future__ import annotations

from typing import Final

from bir.core.redact import redact
from bir.core.truncate import DEFAULT_MAX_CHARS, serialize_capped

MAX_OUTPUT_CHARS: Final = DEFAULT_MAX_CHARS


def output_text(output: object) -> str:
    """``output`` redacted and serialized as compact JSON, at most ``MAX_OUTPUT_CHARS`` characters."""
    return serialize_capped(redact(output), MAX_OUTPUT_CHARS)
