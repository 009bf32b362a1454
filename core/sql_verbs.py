"""The verbs of the statements an SQL text runs (spec §7: ``SELECT`` for ``SELECT``, never for ``DELETE``).

One linear pass over the text: string literals (``'…'`` with ``''`` or ``\\'``), quoted identifiers
(``"…"``, ````…````), dollar-quoted bodies (``$tag$…$tag$``) and comments (``--``, ``/* */``) are
skipped, so a ``;`` or a keyword inside them is neither a separator nor a verb. A statement's verb is
its first keyword, except that ``WITH … DELETE`` is a ``DELETE`` and ``EXPLAIN ANALYZE`` (which
executes its statement) keeps the verb it executes.
"""

from __future__ import annotations

import re
from typing import Final

_DML: Final = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "REPLACE", "VALUES", "TABLE"})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


def _skip_quoted(text: str, i: int, quote: str) -> int:
    """Index just past the literal opened at ``i`` (the end of the text when it never closes)."""
    j = i + 1
    n = len(text)
    while j < n:
        k = text.find(quote, j)
        if k < 0:
            return n
        # A backslash escapes the quote (MySQL); count the run of backslashes before it.
        slashes = 0
        while k - 1 - slashes >= j and text[k - 1 - slashes] == "\\":
            slashes += 1
        if slashes % 2 == 1:
            j = k + 1
            continue
        if k + 1 < n and text[k + 1] == quote:  # '' is an escaped quote
            j = k + 2
            continue
        return k + 1
    return n


def _verb(words: list[tuple[str, int]]) -> str:
    first = words[0][0]
    if first == "WITH":
        found = next((w for w, depth in words[1:] if depth == 0 and w in _DML), None)
        return found or "WITH"
    if first == "EXPLAIN":
        dml = next((w for w, _ in words[1:] if w in _DML), "")
        analyze = any(w in ("ANALYZE", "ANALYSE") for w, _ in words[1:4])
        return " ".join(part for part in ("EXPLAIN", "ANALYZE" if analyze else "", dml) if part)
    return first


def statement_verbs(sql: str) -> tuple[str, ...]:
    """The upper-case verb of each statement in ``sql``, in order; empty statements are left out.

    ``"SELECT 1; delete from t"`` → ``("SELECT", "DELETE")``.
    """
    verbs: list[str] = []
    words: list[tuple[str, int]] = []
    depth = 0
    i = 0
    n = len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            i = _skip_quoted(sql, i, c)
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == "$" and (tag := _DOLLAR_TAG.match(sql, i)) is not None:
            end = sql.find(tag.group(0), tag.end())
            i = n if end < 0 else end + len(tag.group(0))
        elif c == "(":
            depth += 1
            i += 1
        elif c == ")":
            depth = max(0, depth - 1)
            i += 1
        elif c == ";":
            if words:
                verbs.append(_verb(words))
            words = []
            depth = 0
            i += 1
        elif (word := _WORD.match(sql, i)) is not None:
            words.append((word.group(0).upper(), depth))
            i = word.end()
        else:
            i += 1
    if words:
        verbs.append(_verb(words))
    return tuple(verbs)
