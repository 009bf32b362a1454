"""The one progress line a long command shows on a terminal: what it is doing now, on stderr.

Only a terminal sees it (stderr a TTY, and not ``--json``): a pipe, a log file or a program reading
``--json`` gets nothing from here. The line is redrawn in place (carriage return, erase to the end of
the line), cut to the terminal's width so it never wraps, and erased when the command is done, so the
command's own account starts on a clean line.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from types import TracebackType
from typing import Final, TextIO

from bir.hooks.commands.term import paint, wants_colour

_ERASE: Final = "\r\x1b[K"
# A redraw at most this often: a bench that reports every call must not spend its time on the terminal.
MIN_REDRAW_S: Final = 0.1


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """``progress("step 1 of 2: …")`` redraws the line; ``clear()`` (or leaving the ``with`` block) erases it.

    ``enabled`` None: only when ``stream`` is a terminal. A disabled one does nothing at all.
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None, prefix: str = "") -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self._stream) if enabled is None else enabled
        self._prefix = prefix
        self._colour = self.enabled and wants_colour(self._stream)
        self._shown = False
        self._last = 0.0

    def __call__(self, text: str, *, force: bool = True) -> None:
        """Show ``text``; ``force`` False skips the redraw when the last one was under ``MIN_REDRAW_S`` ago."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < MIN_REDRAW_S:
            return
        self._last = now
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        line = " ".join(f"{self._prefix}{text}".split())
        if len(line) > width:
            line = line[: width - 1] + "…"
        self._write(_ERASE + paint(line, "dim", self._colour))
        self._shown = True

    def clear(self) -> None:
        """Erase the line (a no-op when nothing is shown)."""
        if self._shown:
            self._write(_ERASE)
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.clear()


def for_command(args: argparse.Namespace) -> Progress:
    """The progress line of the command ``args`` runs: named after it, and off with ``--json``."""
    name = getattr(args, "command_name", "bir")
    return Progress(enabled=False if getattr(args, "json", False) else None, prefix=f"{name}: ")
