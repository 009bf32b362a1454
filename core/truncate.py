"""Bounded text: a value serialized as compact JSON under a character cap, and a plain cut.

Everything bir hands on (a recorded output, a log field, a hand-over note) is bounded on every
path. The marker says how much was cut, and the marker itself counts against the cap, so a result
never exceeds ``max_chars``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Final

DEFAULT_MAX_CHARS: Final = 100_000
_MAX_DEPTH: Final = 200


def cut(text: str, max_chars: int, marker: str = "…") -> str:
    """``text`` if it fits in ``max_chars``, else its head followed by ``marker``, ``max_chars`` in all.

    When even the marker does not fit, the head of the text alone is returned: what remains of the
    content is worth more than the sign that some is missing.

    Raises:
        ValueError: ``max_chars`` is negative.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars}")
    if len(text) <= max_chars:
        return text
    if len(marker) >= max_chars:
        return text[:max_chars]
    return text[: max_chars - len(marker)] + marker


def one_line(text: str, max_chars: int) -> str:
    """``text`` with every run of whitespace (line breaks included) as one space, then ``cut``."""
    return cut(" ".join(text.split()), max_chars)


def _truncation_marker(cut_chars: int) -> str:
    return f"…[truncated {cut_chars} chars]"


def cut_counted(text: str, max_chars: int, marker: Callable[[int], str] = _truncation_marker) -> str:
    """Like :func:`cut`, with a marker that says how many characters were cut (``marker(count)``, by
    default ``…[truncated N chars]``). The marker counts against ``max_chars``.

    Raises:
        ValueError: ``max_chars`` is negative.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars}")
    if len(text) <= max_chars:
        return text
    # The count depends on the marker's length and the other way round: size the marker for the
    # largest count it could show, so that the true count always fits in the room left for it.
    keep = max_chars - len(marker(len(text)))
    if keep < 0:
        return text[:max_chars]
    return text[:keep] + marker(len(text) - keep)


def _jsonable(value: object, depth: int, seen: set[int]) -> object:
    """A copy of ``value`` that ``json.dumps`` accepts: NaN/infinity as null (as JavaScript's
    ``JSON.stringify`` writes them), cycles and very deep nesting as text, anything else via ``str``.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= _MAX_DEPTH:
        return "[nested too deeply]"
    if isinstance(value, Mapping | list | tuple):
        if id(value) in seen:
            return "[circular]"
        seen.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {_key(k): _jsonable(v, depth + 1, seen) for k, v in value.items()}
            return [_jsonable(v, depth + 1, seen) for v in value]
        finally:
            seen.discard(id(value))
    return str(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    return str(key)


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)


def serialize_capped(value: object, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """``value`` as compact JSON text (``ensure_ascii=False``), at most ``max_chars`` characters.

    Values JSON cannot hold are written via ``str``; NaN and infinities become ``null``; a text that
    is too long is cut and ends with ``…[truncated N chars]``.

    Raises:
        ValueError: ``max_chars`` is less than 1.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    try:
        text = _dumps(value)
    except (ValueError, TypeError, RecursionError):
        # A NaN, a cycle, a non-string key or nesting too deep: serialize a cleaned copy instead.
        text = _dumps(_jsonable(value, 0, set()))
    return cut_counted(text, max_chars)
