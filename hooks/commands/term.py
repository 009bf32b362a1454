"""How ``bir``'s operating commands talk to a person's terminal: colour only on a TTY, never with ``NO_COLOR``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, Literal, TextIO

Colour = Literal["red", "yellow", "green", "bold", "dim"]

_CODES: Final[Mapping[Colour, str]] = {"red": "31", "yellow": "33", "green": "32", "bold": "1", "dim": "2"}


def wants_colour(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what goes to ``stream``: a TTY, ``NO_COLOR`` unset (any value turns colour off,
    https://no-color.org), and a terminal that is not ``dumb``."""
    env = os.environ if env is None else env
    if "NO_COLOR" in env or env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, colour: Colour, on: bool) -> str:
    """``text`` in ``colour`` when ``on``, else unchanged."""
    return f"\x1b[{_CODES[colour]}m{text}\x1b[0m" if on else text


def ago(ms: int) -> str:
    """A duration in words a person reads at a glance: ``4 s``, ``12 min``, ``3 h 5 min``, ``2 d``."""
    seconds = max(0, ms) // 1000
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        rest = minutes % 60
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    return f"{hours // 24} d"
