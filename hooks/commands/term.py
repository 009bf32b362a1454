"""How ``bir``'s operating commands talk to a person's terminal: colour only on a TTY, never with ``NO_COLOR``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final, Literal, TextIO

from bir.core.printable import printable

Colour = Literal["red", "yellow", "green", "bold", "dim"]

_CODES: Final[Mapping[Colour, str]] = {"red": "31", "yellow": "33", "green": "32", "bold": "1", "dim": "2"}


# The escape sequences ``paint`` writes, and no other: what ``shown`` lets through with colour on.
_OWN: Final = re.compile("(\x1b\\[(?:" + "|".join(sorted({*_CODES.values(), "0"})) + ")m)")


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


def shown(text: str, colour: bool) -> str:
    """``text`` as a command prints it: no control character but newline and tab (``core.printable``),
    keeping, with ``colour``, only the colour codes ``paint`` writes (a value from a tool or a service
    can colour words at most: never clear the screen, set the title or write the clipboard)."""
    if not colour:
        return printable(text)
    return "".join(part if i % 2 else printable(part) for i, part in enumerate(_OWN.split(text)))


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
