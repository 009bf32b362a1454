"""The one logging helper: one JSON object per line, with an ``event`` field.

Every process of bir (the control server, the proxies, the evaluator's workers) logs through
``log_event``: to stderr by default (where a host captures it), or to a file under
``<BIR_HOME>/logs/`` once ``log_to_file`` was called (a detached server, a command that talks to a
person). stdout is never touched: on a stdio MCP server it is the protocol channel.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Protocol

from bir.core.home_files import open_private, private_dir
from bir.core.secret_values import redact_values
from bir.core.truncate import cut_counted
from bir.core.urls import hide_userinfo

if TYPE_CHECKING:
    import asyncio

# Bounds, so that a log line can never carry a body's 200,000-character error or a whole tool output.
MAX_FIELD_CHARS = 2_000
MAX_LINE_CHARS = 16_000

# A log file is rotated past this size, keeping one older copy: at most twice this on disk per file.
MAX_FILE_BYTES: Final = 5 * 1024 * 1024


class _Sink(Protocol):
    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


_lock = threading.Lock()
_stream: _Sink | None = None


class _RotatingFile:
    """Appends lines to ``path`` (0600), moving it to ``path.1`` once it passes ``max_bytes``."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self._max = max_bytes
        # Logs live in <BIR_HOME>/logs: both folders are checked (bir.core.home_files).
        private_dir(path.parent.parent, path.parent.name)
        self._handle = self._open()

    def _open(self) -> IO[str]:
        return os.fdopen(open_private(self.path, "append"), "a", encoding="utf-8")

    def write(self, text: str) -> int:
        written = self._handle.write(text)
        if self._handle.tell() > self._max:
            self._handle.close()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            self._handle = self._open()
        return written

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def set_stream(stream: IO[str] | _Sink | None) -> None:
    """Send log lines to ``stream`` instead of stderr (tests capture them this way)."""
    global _stream
    previous = _stream
    _stream = stream
    if isinstance(previous, _RotatingFile) and previous is not stream:
        previous.close()


def log_to_file(path: Path, max_bytes: int = MAX_FILE_BYTES) -> Path:
    """Send every later log line to ``path`` (``<BIR_HOME>/logs/<name>``, created 0600, rotated past
    ``max_bytes``) and return it.

    Raises:
        OSError: the file or its folder cannot be created, or is not one bir can trust (``HomeError``).
    """
    set_stream(_RotatingFile(path, max_bytes))
    return path


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Log lines go back where they went before the block, wherever the block sent them (a file is reopened).

    A command restores, never resets to stderr: a thread it started (the embedding model's load) may log
    after it returned, and that line belongs in the command's log file, not on the person's terminal.
    """
    previous = _stream
    previous_path = previous.path if isinstance(previous, _RotatingFile) else None
    try:
        yield
    finally:
        if previous_path is not None:
            try:
                log_to_file(previous_path)
            except OSError:
                set_stream(None)
        else:
            set_stream(previous)


@contextlib.contextmanager
def logging_to(path: Path) -> Iterator[Path]:
    """Log lines go to ``path`` for the block, then back where they went before (a file is reopened).

    Raises:
        OSError: the file or its folder cannot be created.
    """
    with restored():
        log_to_file(path)
        yield path


def logs_dir(home: Path) -> Path:
    """``<BIR_HOME>/logs``: where servers and commands keep their JSON lines."""
    return home / "logs"


def _more_chars(count: int) -> str:
    return f"…(+{count} chars)"


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return cut_counted(value, MAX_FIELD_CHARS, _more_chars)
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
    # No known secret and no URL's userinfo is ever written down, whoever logged it.
    line = hide_userinfo(redact_values(json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)))
    if len(line) > MAX_LINE_CHARS:
        line = json.dumps(
            {"ts": record["ts"], "event": event, "truncated": True, "head": line[: MAX_LINE_CHARS // 2]},
            ensure_ascii=False,
            separators=(",", ":"),
        )
    return line


def log_event(event: str, **fields: Any) -> None:
    """Write one ``{"event": ..., ...}`` line to stderr, or to the file ``log_to_file`` chose. Never raises."""
    try:
        line = format_event(event, fields)
        stream = _stream if _stream is not None else sys.stderr
        with _lock:
            stream.write(line + "\n")
            stream.flush()
    except Exception:  # noqa: BLE001 - logging must never take a caller down
        return


def log_task_failure(task: asyncio.Task[Any]) -> None:
    """A background task's done-callback: its failure as one ``control.task_failed`` line (a cancel says nothing)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log_event("control.task_failed", error=f"{type(exc).__name__}: {exc}"[:500])
