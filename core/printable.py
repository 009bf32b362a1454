"""Text that is safe to print: C0 and C1 control characters out, newline and tab kept (issue 16 item 6).

A tool's output, a scenario's name or a log field can hold escape sequences: clearing the screen,
setting the window title, writing the clipboard (OSC 52), moving the cursor to overwrite what bir
printed. Wherever bir prints to a terminal or a shell (``bir replay``, ``bir logs``, the Bash delivery
of a bundle, every command's words), the text goes through ``printable`` first, so what arrives is data
and never a command to the terminal. DEL (0x7f) goes with them; a carriage return too, since it lets a
line overwrite itself. A JSON document goes through ``printable_json``, which keeps its data whole.

Standard library only.
"""

from __future__ import annotations

import re
from typing import Final

_CONTROL: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# JSON escapes C0 inside its strings but not DEL and C1 (``ensure_ascii=False``, or a service's own body),
# which a terminal may read as CSI (0x9b) or OSC (0x9d); outside a string only whitespace may stand.
_JSON_RAW: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without its C0 and C1 control characters (``\\n`` and ``\\t`` kept)."""
    return _CONTROL.sub("", text)


def printable_json(text: str) -> str:
    """A JSON document's ``text`` with every control character a terminal acts on written as its ``\\u``
    escape (the same document to a parser) and carriage returns, only whitespace there, dropped."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text).replace("\r", "")
