"""The one logging helper: one JSON object per line on stderr, with an ``event`` field.

Every process of bir (the control server, the proxies, the evaluator's workers) logs through
``log_event``. stdout is never touched: on a stdio MCP server it is the protocol channel.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, Any

# Bounds, so that a log line can never carry a body's 200,000-character error or a whole tool output.
MAX_FIELD_CHARS = 2_000
MAX_LINE_CHARS = 16_000

_lock = threading.Lock()
_stream: IO[str] | None = None


def set_stream(stream: IO[str] | None) -> None:
    """Send log lines to ``stream`` instead of stderr (tests capture them this way)."""
    global _stream
    _stream = stream


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        if len(value) > MAX_FIELD_CHARS:
            return value[:MAX_FIELD_CHARS] + f"…(+{len(value) - MAX_FIELD_CHARS} chars)"
        return value
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= 4:
        return _bounded(repr(value), depth)
    if isinstance(value, dict):
        items = list(value.items())[:50]
        return {str(k)[:200]: _bounded(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple | set | frozenset):
        return [_bounded(v, depth + 1) for v in list(value)[:50]]
    return _bounded(str(value), depth)


def format_event(event: str, fields: dict[str, Any]) -> str:
    """Render one log line (without the newline), bounded to ``MAX_LINE_CHARS``."""
    record: dict[str, Any] = {"ts": round(time.time(), 3), "event": event}
    for key, value in fields.items():
        if key not in ("ts", "event"):
            record[key] = _bounded(value)
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(line) > MAX_LINE_CHARS:
        line = json.dumps(
            {"ts": record["ts"], "event": event, "truncated": True, "head": line[: MAX_LINE_CHARS // 2]},
            ensure_ascii=False,
            separators=(",", ":"),
        )
    return line


def log_event(event: str, **fields: Any) -> None:
    """Write one ``{"event": ..., ...}`` line to stderr. Never raises."""
    try:
        line = format_event(event, fields)
        stream = _stream if _stream is not None else sys.stderr
        with _lock:
            stream.write(line + "\n")
            stream.flush()
    except Exception:  # noqa: BLE001 - logging must never take a caller down
        return
